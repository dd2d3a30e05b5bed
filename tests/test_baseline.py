"""The baseline gate: known deviations pass, new ones fail, stale entries fail, and the
generator keeps reviewed reasons without letting new cases hide behind them."""

from __future__ import annotations

import json

import pytest

from k2conform.gate.baseline import TODO, BaselineEntry, baseline_from_cells, judge, load_baseline
from k2conform.case.corpus import CorpusError
from k2conform.model import Cell, CellOutcome, FieldDiff


def cell(case, delivery="whole", outcome="differs", fields=("content",), adapter="vllm"):
    return Cell(case, adapter, delivery, CellOutcome(outcome), diffs=tuple(FieldDiff(f, None, None, "text") for f in fields))


def test_known_new_and_stale_deviations():
    entry = BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a", "y_gone"), "why")
    cells = [cell("y_a"), cell("y_a", "stream-token"), cell("y_b"), cell("y_gone", outcome="agree", fields=())]
    verdict = judge(cells, [entry])
    assert [c.case for c in verdict.baselined] == ["y_a", "y_a"]
    assert [c.case for c in verdict.new] == ["y_b"]
    assert [(s.case, s.delivery) for s in verdict.stale] == [("y_gone", "*")]
    assert not verdict.passed


def test_an_entry_for_cases_or_adapters_not_run_is_not_stale():
    entry = BaselineEntry("sglang", "differs", ("content",), ("whole",), ("y_a",), "why")
    assert judge([cell("y_a", outcome="agree", fields=())], [entry]).passed


def test_generated_entries_group_behaviours_and_keep_reviewed_reasons():
    cells = [cell("y_a"), cell("y_a", "stream-token"), cell("y_b"), cell("y_c", "stream-token", fields=("count",))]
    first = baseline_from_cells(cells)["entries"]
    assert {(tuple(e["deliveries"]), tuple(e["cases"])) for e in first} == {
        (("*",), ("y_a",)), (("whole",), ("y_b",)), (("stream-token",), ("y_c",))}
    reviewed = [BaselineEntry(e["adapter"], e["outcome"], tuple(e["fields"]), tuple(e["deliveries"]),
                              tuple(e["cases"]), "explained") for e in first]
    again = baseline_from_cells(cells + [cell("y_new", "stream-token", fields=("count",))], reviewed)["entries"]
    reasons = {tuple(e["cases"]): e["reason"] for e in again}
    assert reasons[("y_a",)] == "explained"
    assert reasons[("y_c", "y_new")] == f"explained / {TODO} y_new"


def test_bad_baseline_file_names_the_field(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"entries": [{"adapter": "vllm", "outcome": "differs", "fields": [], "deliveries": ["*"]}]}))
    with pytest.raises(CorpusError, match=r"entries\[0\]\.cases"):
        load_baseline(path)


# -- the gate is never green by accident ------------------------------------------------------


def _results(cells, adapters):
    from k2conform.model import AdapterRow, ResultOutcome, RunResults

    rows = tuple(AdapterRow(name, "1", status=ResultOutcome(status), reason=reason) for name, status, reason in adapters)
    return RunResults("0", 0, ("whole",), rows, (), tuple(cells))


def test_an_adapter_the_baseline_covers_that_did_not_run_fails_the_gate():
    from k2conform.gate.baseline import Baseline, gate

    baseline = Baseline(("reference", "vllm"), ())
    results = _results([cell("y_a", outcome="agree", fields=(), adapter="reference")],
                       [("reference", "ok", ""), ("vllm", "unavailable", "vllm is not installed")])
    judged, passed = gate(results, baseline)
    assert not passed
    assert judged.extra["gate"]["missing"] == [
        "the baseline covers vllm, which did not run (unavailable: vllm is not installed); "
        "--allow-missing vllm if deliberate"]
    _, passed = gate(results, baseline, allow_missing=["vllm"])
    assert passed


def test_an_adapter_left_out_of_the_run_is_missing_too_and_an_empty_run_never_passes():
    from k2conform.gate.baseline import Baseline, gate

    baseline = Baseline(("reference", "sglang"), ())
    results = _results([cell("y_a", outcome="agree", fields=(), adapter="reference")], [("reference", "ok", "")])
    judged, passed = gate(results, baseline)
    assert not passed and "sglang, which did not run (not selected for this run)" in judged.extra["gate"]["missing"][0]
    _, passed = gate(_results([], [("reference", "ok", "")]), Baseline(("reference",), ()))
    assert not passed
    _, passed = gate(_results([], []), None)
    assert not passed


def test_the_adapters_a_baseline_covers_default_to_those_of_its_entries(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"entries": [{"adapter": "sglang", "outcome": "differs", "fields": ["content"],
                                             "deliveries": ["*"], "cases": ["y_a"]}]}))
    assert load_baseline(path).adapters == ("sglang",)
    path.write_text(json.dumps({"adapters": "vllm", "entries": []}))
    with pytest.raises(CorpusError, match="field 'adapters'"):
        load_baseline(path)
