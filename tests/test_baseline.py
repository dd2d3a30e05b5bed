"""The baseline gate: known deviations pass, new ones fail, stale entries fail, and the
generator keeps reviewed reasons without letting new cases hide behind them."""

from __future__ import annotations

import json

import pytest

from k2conform.baseline import TODO, BaselineEntry, baseline_from_cells, judge, load_baseline
from k2conform.corpus import CorpusError
from k2conform.runner import Cell


def cell(case, delivery="whole", outcome="differs", fields=("content",), adapter="vllm"):
    return Cell(case, adapter, delivery, outcome, fields=list(fields))


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
