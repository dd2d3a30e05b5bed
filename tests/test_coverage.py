"""``k2conform coverage``: figures that move with the corpus, what is not measured and why, the
replay of a fuzz corpus, usage errors, the report section, and the Kimi-reachability rules."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from entry_points import K2CONFORM
from k2conform.coverage.reachability import KimiContext, analyse
from k2conform.fuzzing.envelope import DECLARE_TOOLS, FuzzInput

SECTION = (
    "<|tool_calls_section_begin|><|tool_call_begin|>{header}<|tool_call_argument_begin|>"
    '{{"city": "Paris"}}<|tool_call_end|><|tool_calls_section_end|>'
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [K2CONFORM, *args], capture_output=True, text=True, timeout=600, check=False
    )


def write_case(corpus: Path, case_id: str, header: str) -> None:
    case = {
        "id": case_id,
        "kind": "completion",
        "description": "coverage test case",
        "tags": ["TEST.coverage"],
        "source": "tests/test_coverage.py",
        "request": {"tools": TOOLS, "tool_choice": "auto", "thinking": False},
        "model_output": SECTION.format(header=header),
    }
    (corpus / f"{case_id}.json").write_text(json.dumps(case), encoding="utf-8")


def measured_file(document: dict, adapter: str, path: str) -> dict:
    entry = next(a for a in document["adapters"] if a["name"] == adapter)
    assert entry["status"] == "measured", entry
    return next(f for f in entry["files"] if f["path"] == path)


def console_branches(stdout: str, path: str) -> str:
    """The raw branch figure the console table prints for ``path`` ("12/40")."""
    line = next(line for line in stdout.splitlines() if line.strip().startswith(path))
    return line.split()[4]


ADAPTER_FILES = [("reference", "k2conform/reference/parser.py"), ("vllm", "vllm/parser/kimi_k2.py")]


@pytest.mark.slow
@pytest.mark.parametrize(("adapter", "path"), ADAPTER_FILES)
def test_a_case_reaching_a_new_branch_raises_the_branch_figure(tmp_path, adapter, path):
    if importlib.util.find_spec(path.split("/")[0]) is None:
        pytest.skip(f"{adapter}'s parser is not installed")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_case(corpus, "i_cov_standard_id", "functions.get_weather:0")
    documents, printed = [], []
    for extra in (None, "i_cov_id_without_index"):
        if extra:  # an id with no ":IDX": both parsers take another branch to read it
            write_case(corpus, extra, "functions.get_weather")
        out = tmp_path / f"coverage-{len(documents)}.json"
        completed = run(
            "coverage",
            "--adapter",
            adapter,
            "--corpus",
            str(corpus),
            "--delivery",
            "whole",
            "--json",
            str(out),
            "--html",
            str(tmp_path / "coverage.html"),
        )
        assert completed.returncode == 0, completed.stderr
        documents.append(json.loads(out.read_text(encoding="utf-8")))
        printed.append(console_branches(completed.stdout, path))
    before, after = (measured_file(d, adapter, path) for d in documents)
    assert documents[1]["cases"] == 2 and documents[1]["cells"] == 2
    assert set(map(tuple, before["executed_branches"])) < set(
        map(tuple, after["executed_branches"])
    )
    assert after["figures"]["branches"]["covered"] > before["figures"]["branches"]["covered"]
    for figure, file_entry in zip(printed, (before, after)):
        branches = file_entry["figures"]["branches"]
        assert figure == f"{branches['covered']}/{branches['total']}"
    page = (tmp_path / "coverage.html").read_text(encoding="utf-8")
    assert path in page and "class='run'" in page and "class='miss'" in page


def test_adapters_that_cannot_be_measured_are_listed_with_the_reason(tmp_path):
    out = tmp_path / "coverage.json"
    completed = run(
        "coverage",
        "--adapter",
        "reference",
        "--adapter",
        "lmdeploy",
        "--adapter",
        "other=cmd:true",
        "--case",
        "y_spec_single_call",
        "--delivery",
        "whole",
        "--json",
        str(out),
    )
    assert completed.returncode == 1, completed.stderr  # two adapters asked for were not measured
    reasons = {
        a["name"]: a.get("reason")
        for a in json.loads(out.read_text())["adapters"]
        if a["status"] != "measured"
    }
    assert set(reasons) == {"lmdeploy", "other"}
    assert "declares no coverage_files" in reasons["lmdeploy"]
    assert "another process" in reasons["other"]
    assert "not measured: lmdeploy: declares no coverage_files" in completed.stdout
    assert measured_file(json.loads(out.read_text()), "reference", "k2conform/reference/parser.py")[
        "executed_lines"
    ]


def test_replay_runs_a_fuzz_corpus_through_the_same_cells(tmp_path):
    fuzz_dir = tmp_path / "fuzz-corpus"
    fuzz_dir.mkdir()
    text = SECTION.format(header="functions.get_weather:0")
    (fuzz_dir / "cut-inside-a-marker").write_bytes(
        FuzzInput(text, DECLARE_TOOLS, (5, 40, 41)).encode()
    )
    (fuzz_dir / "no-cuts").write_bytes(FuzzInput("plain text", 0, ()).encode())
    out = tmp_path / "replay.json"
    completed = run(
        "coverage",
        "--adapter",
        "reference",
        "--replay",
        str(fuzz_dir),
        "--delivery",
        "stream-recorded",
        "--delivery",
        "whole",
        "--json",
        str(out),
    )
    assert completed.returncode == 0, completed.stderr
    document = json.loads(out.read_text())
    assert document["source_kind"] == "replay" and document["cases"] == 2 and document["cells"] == 4
    assert (
        measured_file(document, "reference", "k2conform/reference/parser.py")["figures"][
            "branches"
        ]["covered"]
        > 0
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--delivery", "stream-sideways"),
        ("--replay", "/nonexistent/fuzz-corpus"),
        ("--case", "no_such_case_*"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args):
    completed = run("coverage", "--adapter", "reference", *args)
    assert completed.returncode == 2
    assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
    assert completed.stderr.startswith("k2conform coverage: ")


def test_the_main_report_gets_a_coverage_section(tmp_path):
    results, coverage_json, page = (
        tmp_path / "results.json",
        tmp_path / "coverage.json",
        tmp_path / "report.html",
    )
    assert (
        run(
            "run", "--adapter", "reference", "--case", "y_spec_single_call", "--json", str(results)
        ).returncode
        == 0
    )
    assert (
        run(
            "coverage",
            "--adapter",
            "reference",
            "--case",
            "y_spec_single_call",
            "--delivery",
            "whole",
            "--json",
            str(coverage_json),
        ).returncode
        == 0
    )
    completed = run("report", str(results), "--html", str(page), "--coverage", str(coverage_json))
    assert completed.returncode == 0, completed.stderr
    html = page.read_text(encoding="utf-8")
    assert "<h2>Parser coverage</h2>" in html and "k2conform/reference/parser.py" in html
    bad = run("report", str(results), "--html", str(page), "--coverage", str(results))
    assert bad.returncode == 2 and "is not a k2conform coverage document" in bad.stderr


# -- the Kimi-reachability rules, on a small engine written here -------------------------------

ENGINE = """
import enum
from dataclasses import dataclass, field


class State(enum.Enum):
    CONTENT = 1
    HEADER = 2
    ARGS = 3


@dataclass(frozen=True)
class Transition:
    next_state: State


@dataclass(frozen=True)
class Config:
    initial_state: State = State.CONTENT
    transitions: dict = field(default_factory=dict)
    array_body: bool = False


class Engine:
    def __init__(self, config):
        self.config = config
        self.state = config.initial_state
        self._array = config.array_body

    def feed(self, text):
        if self.state == State.HEADER:
            return "header"  # MARK: header
        if self._array:
            return self._feed_array(text)
        return text  # MARK: plain

    def _feed_array(self, text):
        return text[::-1]  # MARK: array

    def describe(self):
        return "base"  # MARK: describe

    def name(self):
        return "engine"  # MARK: name


class OtherFamilyEngine(Engine):
    def feed(self, text):
        return text.upper()  # MARK: other family


class HelperEngine(Engine):
    def feed(self, text):
        return text.lower()  # MARK: helper
"""

KIMI = """
from {package}.engine import Config, Engine, HelperEngine, State, Transition


def kimi_config(thinking):
    return Config(transitions={{(State.CONTENT, "A"): Transition(State.ARGS)}}, array_body={array})


class KimiEngine(Engine):
    def describe(self):
        return "kimi"

    def helper(self):
        return HelperEngine  # a class Kimi's own code names stays reachable

    def name(self):
        return "kimi " + super().name()
"""


def _analyse_toy(tmp_path: Path, monkeypatch, array: str) -> tuple[dict[int, str], dict[str, int]]:
    package = f"kimitoy_{abs(hash((str(tmp_path), array)))}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "engine.py").write_text(textwrap.dedent(ENGINE))
    (root / "kimi.py").write_text(KIMI.format(package=package, array=array))
    monkeypatch.syspath_prepend(str(tmp_path))
    context = KimiContext(
        classes=(f"{package}.kimi:KimiEngine",),
        config_factory=f"{package}.kimi:kimi_config",
        config_settings=({"thinking": True}, {"thinking": False}),
        config_names=("config",),
        state_attribute="state",
    )
    try:
        found = analyse({f"{package}/engine.py": root / "engine.py"}, context)[
            f"{package}/engine.py"
        ]
    finally:
        for name in [m for m in sys.modules if m.startswith(package)]:
            del sys.modules[name]
    marks = {
        line.split("# MARK: ")[1]: n
        for n, line in enumerate(textwrap.dedent(ENGINE).splitlines(), 1)
        if "# MARK: " in line
    }
    return found.unreachable, marks


def test_reachability_rules_on_a_toy_engine(tmp_path, monkeypatch):
    unreachable, marks = _analyse_toy(tmp_path, monkeypatch, array="False")
    assert (
        "self.state == State.HEADER" in unreachable[marks["header"]]
    )  # a state the table never reaches
    assert "only called from code Kimi cannot reach" in unreachable[marks["array"]]
    assert "replaced by KimiEngine.describe" in unreachable[marks["describe"]]
    assert marks["name"] not in unreachable  # the override calls it through super()
    assert marks["plain"] not in unreachable
    assert "OtherFamilyEngine is another family's Engine" in unreachable[marks["other family"]]
    assert marks["helper"] not in unreachable


def test_code_one_kimi_configuration_reaches_stays_reachable(tmp_path, monkeypatch):
    unreachable, marks = _analyse_toy(tmp_path, monkeypatch, array="thinking")
    assert marks["array"] not in unreachable
    assert marks["header"] in unreachable


def test_vllm_engine_code_only_other_families_configure_is_found():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent
    from k2conform.coverage.reachability import CONTEXTS

    paths = ["vllm/parser/kimi_k2.py", "vllm/parser/engine/streaming_parser_engine.py"]
    found = analyse({path: root / path for path in paths}, CONTEXTS["vllm", "k2"])
    source = (root / paths[1]).read_text().splitlines()
    array_body = next(n for n, line in enumerate(source, 1) if "def _feed_array_text" in line) + 1
    reasons = {found[paths[1]].unreachable.get(n, "") for n in range(array_body, array_body + 12)}
    assert any("only called from code Kimi cannot reach" in r for r in reasons), reasons
    assert not found[paths[0]].unreachable  # every line of Kimi's own parser is Kimi's


# -- the reviewed list of unreachable code (k2conform/coverage/unreachable.toml) -------------

REFERENCE_FILE = "k2conform/reference/parser.py"


def reviewed_entry(line: int, text: str, reason: str = "", **extra) -> str:
    fields = {"release": "0.1.0", "file": REFERENCE_FILE, "line": line, **extra, "text": text}
    body = "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())
    reason = reason or "a test entry: the reason says why no Kimi output reaches it"
    return f"[[entry]]\n{body}reason = {json.dumps(reason)}\n\n"


def reference_coverage(tmp_path: Path, unreachable: Path | None, name: str) -> dict:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    write_case(corpus, "i_cov_standard_id", "functions.get_weather:0")
    out = tmp_path / f"{name}.json"
    extra = ["--unreachable", str(unreachable)] if unreachable else []
    completed = run(
        "coverage",
        "--adapter",
        "reference",
        "--corpus",
        str(corpus),
        "--delivery",
        "whole",
        "--json",
        str(out),
        *extra,
    )
    assert completed.returncode == 0, completed.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    document["stdout"] = completed.stdout
    return document


def test_reviewed_entries_leave_the_denominator_and_stale_ones_are_reported(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    plain = measured_file(reference_coverage(tmp_path, empty, "plain"), "reference", REFERENCE_FILE)
    source = plain["source"].splitlines()
    missed = next(
        line for line in plain["missing_lines"] if str(line) not in plain["unreachable_lines"]
    )
    ran = plain["executed_lines"][-1]
    arcs = {tuple(a) for a in plain["executed_branches"]}
    untaken = next(
        (a, b)
        for a, b in plain["missing_branches"]
        if b != missed and a != missed and (a, b) not in arcs
    )
    text = lambda line: source[line - 1].strip()  # noqa: E731
    listed = tmp_path / "unreachable.toml"
    listed.write_text(
        reviewed_entry(missed, text(missed))  # used: a line that did not run
        + reviewed_entry(untaken[0], text(untaken[0]), to=untaken[1])  # used: an untaken branch
        + reviewed_entry(ran, text(ran))  # stale: it ran
        + reviewed_entry(missed, "this is not the line")  # stale: the release changed
        + reviewed_entry(len(source) + 5, "past the end")  # stale: no such line
        + reviewed_entry(1, text(1), release="0.0.0-other"),  # another release: not used
        encoding="utf-8",
    )
    document = reference_coverage(tmp_path, listed, "listed")
    entry = measured_file(document, "reference", REFERENCE_FILE)
    assert entry["reviewed_entries"] == 2
    assert missed in entry["reviewed_lines"]
    assert entry["unreachable_lines"][str(missed)].startswith("unreachable (reviewed): ")
    assert list(untaken) in entry["reviewed_branches"]
    problems = sorted(s["problem"] for s in entry["stale_reviewed"])
    assert len(problems) == 3, problems
    assert any(p == f"line {ran} ran: it is reachable" for p in problems)
    assert any(p.startswith(f"line {missed} now reads") for p in problems)
    assert any("past the end of the file" in p for p in problems)
    kimi_before, kimi_after = plain["kimi_figures"], entry["kimi_figures"]
    assert kimi_after["lines"]["total"] == kimi_before["lines"]["total"] - 1
    assert kimi_after["branches"]["total"] < kimi_before["branches"]["total"]
    assert entry["figures"] == plain["figures"]  # the raw figures do not move
    assert (
        f"STALE reviewed entry {REFERENCE_FILE}:{ran} (0.1.0): line {ran} ran" in document["stdout"]
    )
    assert "unreachable (reviewed): k2conform/reference/parser.py: 1 lines" in document["stdout"]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[entry]]\nrelease = "0.1.0"\nfile = "x.py"\nline = 3\ntext = "x"\n', "'reason'"),
        (reviewed_entry(3, "x", release=7), "'release'"),
        (reviewed_entry(0, "x"), "'line'"),
        (reviewed_entry(3, "x", reason="because"), "'reason'"),
        (reviewed_entry(3, "x", end=1), "'end'"),
        (reviewed_entry(3, "x", end=5, to=4), "'to'"),
        (reviewed_entry(3, "x", colour="red"), "'colour'"),
        ("[[entry]\n", "not valid TOML"),
    ],
)
def test_a_malformed_reviewed_list_is_exit_2_naming_file_and_field(tmp_path, text, field):
    bad = tmp_path / "unreachable.toml"
    bad.write_text(text, encoding="utf-8")
    completed = run("coverage", "--adapter", "reference", "--unreachable", str(bad))
    assert completed.returncode == 2, completed.stderr
    assert str(bad) in completed.stderr and field in completed.stderr
    assert "Traceback" not in completed.stderr


def test_the_shipped_reviewed_list_is_well_formed_and_every_entry_says_why():
    from k2conform.coverage import reviewed

    entries = reviewed.load()
    assert entries, "the shipped list is empty: this test guards nothing"
    for entry in entries:
        assert entry.reason.strip() and ":" in entry.reason, entry.where  # cites file:line
