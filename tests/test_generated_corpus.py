"""The generated corpus: in sync with its generator, big enough, every taxonomy class and
every known bug class covered, every case loadable, and every y_ case parsed by the
reference to its expectation, whole and one character per delta."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from entry_points import K2CONFORM
from k2conform.case import generate
from k2conform.case.corpus import load_corpus
from k2conform.case.sources import load_sources
from k2conform.reference.parser import ReferenceParser, parse

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "corpus" / "generated"
TAXONOMY = ROOT / "docs" / "taxonomy.md"
CORPUS = load_corpus(GENERATED)
CLASSES = load_sources().classes
Y_CASES = [c for c in CORPUS.completions if c.verdict == "y"]


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in (root / "corpus" / "generated").rglob("*")
        if p.is_file()
    }
    files["docs/taxonomy.md"] = (root / "docs" / "taxonomy.md").read_bytes()
    return files


def test_checked_in_corpus_is_exactly_what_the_generator_writes(tmp_path):
    generate.write_generated(tmp_path)
    fresh, checked_in = _tree(tmp_path), _tree(ROOT)
    assert sorted(fresh) == sorted(checked_in), "run: python -m k2conform.case.generate"
    changed = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not changed, (
        f"differ from the generator (run python -m k2conform.case.generate): {changed[:10]}"
    )


def test_generation_is_deterministic_and_seeded_per_case():
    first, second = generate.generate_cases(), generate.generate_cases()
    assert [c.to_json() for c in first] == [c.to_json() for c in second]
    other = generate.generate_cases(seed=1)
    assert any(a.to_json() != b.to_json() for a, b in zip(first, other)), "the seed must matter"
    for case in first:
        assert case.generator["class"] in CLASSES
        assert case.generator["base_seed"] == generate.DEFAULT_SEED
        assert case.generator["seed"] == generate._derive(
            generate.DEFAULT_SEED, case.generator["class"], case.id
        )


def test_at_least_300_generated_completion_cases():
    assert len(CORPUS.completions) >= 300
    assert {c.verdict for c in CORPUS.completions} == {"y", "n", "i"}


def test_every_case_sits_in_its_class_group_with_class_tag_and_source():
    for case in CORPUS.completions + CORPUS.prompts:
        klass = case.tags[0]
        assert klass in CLASSES, case.id
        assert Path(case.path).parent.name == klass.split(".")[0].lower(), case.path
        assert case.source.startswith(("known bug class", "k2conform taxonomy")), case.id
    for case in CORPUS.completions:
        assert case.generator is not None and case.generator["class"] == case.tags[0]


def _taxonomy_classes() -> list[str]:
    return re.findall(
        r"^### `([A-Z0-9]+\.[a-z0-9.\-]+)`$",
        TAXONOMY.read_text(encoding="utf-8"),
        flags=re.MULTILINE,
    )


def test_every_taxonomy_class_has_a_tagged_case():
    classes = _taxonomy_classes()
    assert set(classes) == set(CLASSES)
    required = {
        "ID.dotted-name",
        "ID.hyphenated-name",
        "ID.non-ascii-name",
        "ID.long-name",
        "ID.colon-in-name",
        "ID.bare-counter",
        "ID.call-prefix",
        "ID.toolu-prefix",
        "ID.missing-index",
        "ID.non-numeric-index",
        "ID.index-not-from-zero",
        "ID.repeated-index",
        "ID.mangled",
        "PAR.same-function",
        "PAR.different-functions",
        "JSON.truncated",
        "JSON.trailing-comma",
        "JSON.single-quotes",
        "JSON.raw-newline",
        "JSON.nan",
        "JSON.duplicate-keys",
        "JSON.deep-nesting",
        "JSON.huge-number",
        "JSON.lone-surrogate",
        "JSON.non-object",
        "JSON.empty",
        "JSON.double-encoded",
        "JSON.pretty-printed",
        "MARKER.in-json-string",
        "WS.around-marker",
        "WS.in-header",
        "STRUCT.missing-call-end",
        "STRUCT.missing-section-end",
        "STRUCT.several-sections",
        "STRUCT.text-before",
        "STRUCT.text-between",
        "STRUCT.text-after",
        "STRUCT.noise-in-section",
        "STRUCT.singular-section-markers",
        "THINK.on",
        "THINK.off",
        "THINK.unclosed-with-calls",
        "SPECIAL.im-end-in-content",
        "SPECIAL.other-specials-in-content",
        "UTF8.split-multibyte",
        "SPLIT.marker",
        "LONG.arguments",
    }
    assert required <= set(classes), sorted(required - set(classes))
    tagged = {tag for case in CORPUS.completions + CORPUS.prompts for tag in case.tags}
    assert set(classes) <= tagged, sorted(set(classes) - tagged)


def test_every_known_bug_class_maps_to_existing_cases():
    rows = {}
    for line in TAXONOMY.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| (\d+) \| (.*) \| (.*) \| (.*) \|$", line)
        if m:
            rows[int(m.group(1))] = re.findall(r"`([yni]_[^`]+)`", m.group(3))
    assert sorted(rows) == list(range(1, 43))
    everything = load_corpus()
    ids = {c.id for c in everything.completions + everything.prompts}
    for number, case_ids in rows.items():
        assert case_ids, f"known bug class {number} has no case"
        assert set(case_ids) <= ids, (number, sorted(set(case_ids) - ids))


def test_whole_corpus_and_check_corpus_accept_the_generated_cases():
    everything = load_corpus()
    assert {c.id for c in CORPUS.completions} <= {c.id for c in everything.completions}
    done = subprocess.run(
        [K2CONFORM, "check-corpus", str(GENERATED)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "cases OK" in done.stdout


def _observable(result):
    return (result.content, result.reasoning, result.tool_calls)


@pytest.mark.parametrize("case", Y_CASES, ids=lambda c: c.id)
def test_y_case_parses_to_its_expectation_whole_and_per_character(case):
    expected = (case.expected.content, case.expected.reasoning, case.expected.tool_calls)
    assert _observable(parse(case.model_output, case.request)) == expected
    parser = ReferenceParser(case.request)
    for char in case.model_output:
        parser.feed(char)
    parser.finish()
    assert _observable(parser.result()) == expected
    if case.deltas is not None:
        recorded = ReferenceParser(case.request)
        for delta in case.deltas:
            recorded.feed(delta)
        recorded.finish()
        assert _observable(recorded.result()) == expected


def test_split_cases_record_deltas_and_cut_markers():
    split = [c for c in CORPUS.completions if c.tags[0] == "SPLIT.marker"]
    assert split and all(c.deltas is not None for c in split)
    assert any("<|tool_call_" in d and not d.endswith("|>") for c in split for d in c.deltas)


def test_check_mode_reports_missing_stale_and_changed_files(tmp_path):
    generate.write_generated(tmp_path)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "k2conform.case.generate", "--check", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
        )

    assert run().returncode == 0
    victim = next((tmp_path / "corpus" / "generated" / "json").glob("*.json"))
    victim.write_text(victim.read_text() + " ")
    gone = next((tmp_path / "corpus" / "generated" / "id").glob("*.json"))
    gone.unlink()
    (tmp_path / "corpus" / "generated" / "id" / "y_stale.json").write_text("{}")
    done = run()
    assert done.returncode == 1
    assert f"changed: corpus/generated/json/{victim.name}" in done.stdout
    assert f"missing: corpus/generated/id/{gone.name}" in done.stdout
    assert "stale: corpus/generated/id/y_stale.json" in done.stdout
    rewritten = subprocess.run(
        [sys.executable, "-m", "k2conform.case.generate", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert rewritten.returncode == 0 and run().returncode == 0


# -- the case sources (corpus/sources/) -----------------------------------------------------

SOURCES = ROOT / "corpus" / "sources"


def _case_index(path: Path, case_id: str) -> int:
    """Where the case table whose id is ``case_id`` stands in its group file."""
    import tomllib

    cases = tomllib.loads(path.read_text(encoding="utf-8"))["case"]
    return next(i for i, case in enumerate(cases) if case.get("id") == case_id)


@pytest.mark.parametrize(
    ("file", "old", "new", "field"),
    [
        # a missing field of a case, of a taxonomy class, of a bug class
        (
            "id.toml",
            'description = "Hyphenated name gtasks_list-tasklists"\n',
            "",
            "case[<y_id_hyphenated_name_gtasks>].description",
        ),
        ("taxonomy.toml", 'why = "Old vLLM kept', 'whence = "', "class[0].why"),
        # a wrong type
        (
            "think.toml",
            '4.${IM_END}"\nthinking = true',
            '4.${IM_END}"\nthinking = "yes"',
            "case[<y_think_on_answer_only>].thinking",
        ),
        ("bugs.toml", "number = 1\n", 'number = "1"\n', "bug[0].number"),
        # a template naming no variable, a prefix the verdict rule does not give
        (
            "special.toml",
            """output = 'functions.get_weather:0{"city": "Beijing"}'""",
            'output = "${nothing}"',
            "case[<i_special_markers_stripped_single_call>].output",
        ),
        (
            "ws.toml",
            'id = "n_ws_in_header_${label}"',
            'id = "y_ws_in_header_${label}"',
            "case[<n_ws_in_header_${label}>].id",
        ),
    ],
)
def test_bad_source_data_is_one_line_naming_the_file_and_the_field(
    tmp_path, capsys, file, old, new, field
):
    import shutil

    sources = tmp_path / "sources"
    shutil.copytree(SOURCES, sources)
    path = sources / file
    text = path.read_text(encoding="utf-8")
    assert old in text, "the test's anchor is gone from the sources"
    if "<" in field:  # case[<id>]: the index of the case table with that id
        marked = field[field.index("<") + 1 : field.index(">")]
        field = field.replace(f"<{marked}>", str(_case_index(path, marked)))
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    status = generate.main(["--check", "--root", str(ROOT), "--sources", str(sources)])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and f"{path}: field '{field}'" in err, err


def test_the_loader_takes_no_source_file_for_a_case(tmp_path):
    """The sources are data for the generator: a JSON file among them is not a case either."""
    everything = load_corpus()
    assert not [c for c in everything.completions + everything.prompts if "/sources/" in c.path]
    assert list(SOURCES.glob("*.toml")), "the sources moved: this test guards nothing"
    corpus_dir = tmp_path / "corpus"
    (corpus_dir / "sources").mkdir(parents=True)
    (corpus_dir / "sources" / "tools.json").write_text("{}")
    (corpus_dir / "x").mkdir()
    case = (GENERATED / "json" / "y_json_empty_object.json").read_bytes()
    renamed = case.replace(b"y_json_empty_object", b"y_example")
    (corpus_dir / "x" / "y_example.json").write_bytes(renamed)
    assert [c.id for c in load_corpus(corpus_dir).completions] == ["y_example"]


def test_every_group_file_lands_in_its_own_folder_and_every_case_has_a_source_table():
    groups = {group.name for group in load_sources().groups}
    assert groups == {p.name for p in GENERATED.iterdir() if p.is_dir()}
    assert {p.stem for p in SOURCES.glob("*.toml")} == groups | {"taxonomy", "bugs", "shared"}
