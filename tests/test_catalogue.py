"""``k2conform catalogue``: one minimised case per distinct behaviour (the report's grouping),
each still showing its behaviour on its adapter; the index counts; ``check`` noticing a
behaviour that no longer reproduces (exit 1) and a malformed file (exit 2); the matrix corpus
leaving the catalogue out while check-corpus still validates it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k2conform.adapter.registry import create_adapter, load
from k2conform.case.corpus import iter_problems, load_corpus
from k2conform.catalogue.build import build
from k2conform.catalogue.index import counts, read_catalogue
from k2conform.cli import main
from k2conform.gate.baseline import BaselineEntry
from k2conform.gate.behaviours import behaviours
from k2conform.run.cell import CellSettings, run_cell
from k2conform.run.results import adapter_row, build_results

#: A few cases with findings of vllm and sglang (baseline.json), and modes of both families,
#: stream-random included (kept as its deltas, replayed as stream-recorded).
CASES = (
    "y_think_prose_before_newline_then_think",
    "n_fuzz_vllm_extra-call_c82955e6",
    "n_fuzz_sglang_leaked-marker_7626227e",
)
MODES = ("whole", "stream-token", "stream-random")
ADAPTERS = ("reference", "vllm", "sglang")


def _adapters() -> list:
    found = []
    for name in ADAPTERS:
        adapter = create_adapter(name)
        availability = load(adapter)
        if availability.status != "ok":
            pytest.skip(f"{name} is not installed here: {availability.reason}")
        found.append((adapter, availability))
    return found


@pytest.fixture(scope="module")
def document(corpus) -> dict:
    """A small results document, computed cell by cell as the matrix computes them."""
    cases = [c for c in corpus.completions if c.id in CASES]
    assert len(cases) == len(CASES)
    settings = CellSettings()
    cells, rows = [], []
    for adapter, availability in _adapters():
        rows.append(adapter_row(adapter, (availability.status, availability.reason)))
        cells += [
            run_cell(adapter, case, mode, settings, availability)
            for case in cases
            for mode in MODES
        ]
    return build_results(cells, cases, rows, settings.seed, MODES, 0.0, 0).to_json()


@pytest.fixture(scope="module")
def entries(document) -> list[BaselineEntry]:
    """One reviewed, linked entry: the vllm cells of the first case."""
    from k2conform.model import RunResults

    cell = next(
        c
        for c in RunResults.from_json(document).cells
        if c.adapter == "vllm" and c.case == CASES[0] and c.outcome.finding
    )
    return [
        BaselineEntry(
            "vllm", cell.outcome.value, tuple(cell.fields), ("*",), (CASES[0],),
            "a reviewed reason", "https://github.com/vllm-project/vllm/issues/1",
        )
    ]  # fmt: skip


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, document, entries, corpus) -> Path:
    out = tmp_path_factory.mktemp("catalogue")
    cases = {c.id: c for c in corpus.completions}
    build([("results.json", document)], entries, out, cases, reports=False, say=lambda _: None)
    return out


def _expected_behaviours(document, entries) -> dict[str, int]:
    from k2conform.model import RunResults

    return {a: len(g) for a, g in behaviours(RunResults.from_json(document), entries).items() if g}


def test_one_case_per_distinct_behaviour(catalogue, document, entries):
    found = read_catalogue(catalogue)
    wanted = _expected_behaviours(document, entries)
    assert wanted.get("vllm") and wanted.get("sglang") and "reference" not in wanted
    per_adapter: dict[str, int] = {}
    for entry in found:
        per_adapter[entry.adapter] = per_adapter.get(entry.adapter, 0) + 1
        assert entry.path.parent.name == entry.adapter
    assert per_adapter == wanted
    assert len({e.case.id for e in found}) == len(found)
    assert any(e.finding["observed_in"] == "stream-random" for e in found)
    assert all(
        e.finding["delivery"] == "stream-recorded"
        for e in found
        if e.finding["observed_in"] == "stream-random"
    )


def test_every_catalogue_case_still_shows_its_behaviour_on_its_adapter(catalogue):
    adapters = {name: create_adapter(name) for name in ("vllm", "sglang")}
    for entry in read_catalogue(catalogue):
        finding = entry.finding
        seed = entry.case.generator["seed"]
        cell = run_cell(adapters[entry.adapter], entry.case, finding["delivery"],
                        CellSettings(seed=seed))  # fmt: skip
        assert (cell.outcome.value, list(cell.fields)) == (
            finding["outcome"],
            finding["fields"],
        ), entry.case.id
        assert finding["chars"][1] <= finding["chars"][0]
    assert any(e.finding["minimised"] and e.finding["chars"][1] < e.finding["chars"][0]
               for e in read_catalogue(catalogue))  # fmt: skip


@pytest.mark.slow
def test_an_adapter_in_another_process_gives_the_same_catalogue(
    catalogue, document, entries, corpus, tmp_path, capsys
):
    """Through the adapter protocol (as --adapter 'vllm=cmd:...' runs in the matrix) the build
    minimises to the same cases, and check reaches the adapter the same way."""
    import sys

    spec = f"vllm=cmd:{sys.executable} -m k2conform.cli serve-adapter vllm"
    out = tmp_path / "catalogue"
    cases = {c.id: c for c in corpus.completions}
    build([("results.json", document)], entries, out, cases, (spec,), reports=False,
          say=lambda _: None)  # fmt: skip
    theirs = {e.case.id: e.case.to_json() for e in read_catalogue(out)}
    ours = {e.case.id: e.case.to_json() for e in read_catalogue(catalogue) if e.adapter == "vllm"}
    assert theirs == ours and ours
    assert main(["catalogue", "check", str(out), "--adapter", spec]) == 0
    assert capsys.readouterr().out.count("still reproduces") == len(ours)


def test_the_index_counts_match(catalogue, document, entries):
    table = counts(catalogue)
    wanted = _expected_behaviours(document, entries)
    assert {a: row["behaviours"] for a, row in table.items() if row["behaviours"]} == wanted
    assert table["reference"]["behaviours"] == 0  # it ran and agreed: listed with none
    assert table["vllm"]["linked"] >= 1
    for adapter, row in table.items():
        mine = [e for e in read_catalogue(catalogue) if e.adapter == adapter]
        assert row["catalogued"] == len(mine)
        assert row["linked"] + row["not reported"] == row["behaviours"]
        assert row["not reported"] == sum(e.not_reported for e in mine)
    index = (catalogue / "README.md").read_text(encoding="utf-8")
    assert f"| {table['vllm']['behaviours']} | {table['vllm']['catalogued']} |" in index
    assert "not reported upstream yet" in index


def test_check_passes_then_fails_when_a_behaviour_no_longer_reproduces(catalogue, tmp_path, capsys):
    import shutil

    copy = tmp_path / "catalogue"
    shutil.copytree(catalogue, copy)
    assert main(["catalogue", "check", str(copy)]) == 0
    assert "still reproduces" in capsys.readouterr().out
    # A "fixed" parser: the expectation becomes what the adapter returns.
    entry = next(e for e in read_catalogue(copy) if e.finding["delivery"] == "whole")
    cell = run_cell(create_adapter(entry.adapter), entry.case, "whole")
    data = json.loads(entry.path.read_text(encoding="utf-8"))
    observed = cell.observed.to_json()
    data["expected"] = {k: observed[k] for k in ("content", "reasoning", "tool_calls")}
    entry.path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["catalogue", "check", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"changed           {entry.adapter} {entry.case.id} [whole]: showed" in out


def test_an_unreachable_adapter_is_reported_not_failed(catalogue, tmp_path, capsys):
    import shutil

    copy = tmp_path / "catalogue"
    shutil.copytree(catalogue, copy)
    entry = read_catalogue(copy)[0]
    data = json.loads(entry.path.read_text(encoding="utf-8"))
    data["generator"]["finding"]["adapter"] = "no-such-parser"
    (copy / "no-such-parser").mkdir()
    (copy / "no-such-parser" / entry.path.name).write_text(json.dumps(data), encoding="utf-8")
    entry.path.unlink()
    status = main(["catalogue", "check", str(copy), "--venv-root", str(tmp_path / "none")])
    assert status == 0
    assert "adapter not available no-such-parser" in capsys.readouterr().out


def test_a_malformed_catalogue_file_is_exit_2_naming_the_file_and_field(
    catalogue, tmp_path, capsys
):
    import shutil

    copy = tmp_path / "catalogue"
    shutil.copytree(catalogue, copy)
    entry = read_catalogue(copy)[0]
    data = json.loads(entry.path.read_text(encoding="utf-8"))
    data["generator"]["finding"]["outcome"] = "agree"
    entry.path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["catalogue", "check", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert entry.path.name in err and "generator.finding.outcome" in err


def test_the_matrix_corpus_leaves_the_catalogue_out_and_check_corpus_validates_it(
    catalogue, tmp_path
):
    import shutil

    root = tmp_path / "corpus"
    shutil.copytree(catalogue, root / "findings" / "catalogue")
    shipped = Path(load_corpus().completions[0].path)
    shutil.copy(shipped, root / shipped.name)
    loaded = load_corpus(root)
    assert [c.id for c in loaded.completions] == [shipped.stem]
    assert list(iter_problems(root)) == []
    bad = read_catalogue(catalogue)[0].path.relative_to(catalogue)
    (root / "findings" / "catalogue" / bad).write_text('{"kind": "completion"}', encoding="utf-8")
    problems = [str(p) for p in iter_problems(root)]
    assert len(problems) == 1 and bad.name in problems[0]
    assert not any("findings/catalogue" in c.path for c in load_corpus().completions)


def test_a_server_adapter_is_built_inside_its_run_session(tmp_path, corpus, monkeypatch):
    """As ``run`` does, the build enters an adapter's ``run_session`` (vllm-server starts its
    server there) before its first cell: outside it the cells would be ``unavailable``."""
    import contextlib
    import os
    from dataclasses import replace

    from k2conform.adapter.contract import AdapterUnavailable
    from k2conform.adapter.registry import Availability
    from k2conform.catalogue import build as catalogue_build
    from k2conform.run.matrix import adapter_sessions
    from k2conform_adapters.reference import ReferenceAdapter

    class ServerToy(ReferenceAdapter):
        name = "server-toy"

        @contextlib.contextmanager
        def run_session(self, run_dir):
            yield {"K2CONFORM_TOY_SERVER": "up"}

        def parse_whole(self, request, output):
            if os.environ.get("K2CONFORM_TOY_SERVER") != "up":
                raise AdapterUnavailable("no server for this process")
            result = super().parse_whole(request, output)
            return replace(result, content=(result.content or "") + "!")

    toy = ServerToy()
    (case,) = [c for c in corpus.completions if c.id == "y_think_prose_before_newline_then_think"]
    with adapter_sessions([toy], tmp_path):
        cell = run_cell(toy, case, "whole", CellSettings(), Availability("ok"))
    assert cell.outcome.finding, cell
    row = adapter_row(toy, ("ok", ""))
    document = build_results(
        [cell], [case], [row], CellSettings().seed, ("whole",), 0.0, 0
    ).to_json()
    monkeypatch.setattr(
        catalogue_build, "reach", lambda *_: ("server-toy", toy, Availability("ok"))
    )
    out = tmp_path / "catalogue"
    done = build(
        [("results.json", document)], [], out, {case.id: case}, ["server-toy"],
        reports=False, say=lambda _: None,
    )  # fmt: skip
    assert [b.status for b in done] == ["written"], [b.note for b in done]
    assert os.environ.get("K2CONFORM_TOY_SERVER") is None  # the session ended with the build


@pytest.mark.parametrize(
    ("writes_script", "state"), [(True, "not reproduced"), (False, "no script")]
)
def test_a_report_without_a_script_is_no_script_not_unreproduced(
    tmp_path, monkeypatch, writes_script, state
):
    """report-finding exits 1 when its script did not reproduce the finding and 2 ("no
    script") when the adapter has no reproduction template; only a script that ran can fail
    to reproduce."""
    import shutil

    import k2conform.report_finding.cli
    from k2conform.catalogue.build import write_report

    root = Path(__file__).resolve().parent.parent
    source = next((root / "corpus/findings/catalogue/vllm").glob("*.json"))
    path = tmp_path / source.name
    shutil.copy(source, path)

    def report_finding(args):
        assert args.command == "report-finding" and args.case == path.stem
        path.with_suffix(".md").write_text("report")
        if writes_script:
            path.with_suffix(".py").write_text("script")
            return 1
        return 2

    monkeypatch.setattr(k2conform.report_finding.cli, "cmd_report_finding", report_finding)
    assert write_report("vllm", path, seed=1, timeout=5.0, run_script=True) == state


def test_a_k3_behaviour_is_catalogued_as_a_k3_case(corpus, tmp_path):
    """The catalogue case keeps its source's format: a K3 output written as a K2 case would be
    delivered and judged with K2's markers (no K3 marker split, none looked for in content)."""
    case = next(
        c for c in corpus.completions if c.id == "n_k3_message_close_without_response_close"
    )
    adapter = create_adapter("vllm-k3")
    availability = load(adapter)
    if availability.status != "ok":
        pytest.skip(f"vllm-k3 is not installed here: {availability.reason}")
    cell = run_cell(adapter, case, "stream-token", CellSettings(), availability)
    assert "stream-invariant" in cell.fields  # the K3 marker reaches content (vllm#51399)
    row = adapter_row(adapter, (availability.status, availability.reason))
    document = build_results([cell], [case], [row], 0, ("stream-token",), 0.0, 0).to_json()
    build([("results.json", document)], [], tmp_path, {case.id: case}, reports=False,
          say=lambda _: None)  # fmt: skip
    (entry,) = read_catalogue(tmp_path)
    assert entry.case.format == case.format == "k3"
    again = run_cell(adapter, entry.case, entry.finding["delivery"], CellSettings())
    assert (again.outcome.value, list(again.fields)) == (cell.outcome.value, list(cell.fields))


def test_a_spelled_behaviour_is_minimised_with_its_marker_still_spelled(corpus, tmp_path):
    """vLLM's K3 stream losing the call to a spelled think closer (``i_k3_spelled_think_close``)
    is catalogued as a case that still spells its ``<|close|>``: the minimiser keeps the spelled
    axis, where a lone ``<|sep|>`` unspelled shows the same outcome and fields another way."""
    case = next(c for c in corpus.completions if c.id == "i_k3_spelled_think_close")
    adapter = create_adapter("vllm-k3")
    availability = load(adapter)
    if availability.status != "ok":
        pytest.skip(f"vllm-k3 is not installed here: {availability.reason}")
    cell = run_cell(adapter, case, "stream-token", CellSettings(), availability)
    row = adapter_row(adapter, (availability.status, availability.reason))
    document = build_results([cell], [case], [row], 0, ("stream-token",), 0.0, 0).to_json()
    build([("results.json", document)], [], tmp_path, {case.id: case}, reports=False,
          say=lambda _: None)  # fmt: skip
    (entry,) = read_catalogue(tmp_path)
    (at,) = entry.case.spelled_markers
    assert entry.case.model_output.startswith("<|close|>", at)
    assert len(entry.case.model_output) < len(case.model_output)
    again = run_cell(adapter, entry.case, "stream-token", CellSettings())
    assert (again.outcome.value, list(again.fields)) == (cell.outcome.value, list(cell.fields))


def test_every_shipped_catalogue_case_is_in_a_format_its_adapter_parses():
    root = Path(__file__).resolve().parent.parent / "corpus" / "findings" / "catalogue"
    for entry in read_catalogue(root):
        assert entry.case.format in create_adapter(entry.adapter).formats, entry.case.id


def test_the_bug_report_of_a_command_serving_two_adapters_is_made_by_the_specs_own():
    """A release environment's command serves its K2 and K3 adapters; the report of a K3
    finding is made by the K3 adapter there (the one parsing the spec's formats)."""
    from k2conform.catalogue.build import report_command

    k2conform = ".venvs/vllm-0.30.0/bin/k2conform"
    both = f"{k2conform} serve-adapter vllm vllm-k3 --release 0.30.0"
    assert report_command(f"vllm-0.30.0=cmd:{both}") == ([k2conform], "vllm")
    assert report_command(f"vllm-k3-0.30.0[k3]=cmd:{both}") == ([k2conform], "vllm-k3")
    assert report_command(f"v=cmd:{k2conform} serve-adapter vllm-legacy --release 0.19.0") == (
        [k2conform],
        "vllm-legacy",
    )
    assert report_command(f"v[k2,k3]=cmd:{both}") is None  # neither parses both
