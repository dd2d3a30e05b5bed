"""The baseline gate: known deviations pass, new ones fail, stale entries fail, and the
generator keeps reviewed reasons without letting new cases hide behind them."""

from __future__ import annotations

import json

import pytest

from k2conform.gate.baseline import (
    TODO,
    BaselineEntry,
    baseline_from_cells,
    load_baseline,
    split_findings,
)
from k2conform.case.corpus import CorpusError
from k2conform.model import Cell, CellOutcome, FieldDiff


def cell(case, delivery="whole", outcome="differs", fields=("content",), adapter="vllm"):
    diffs = tuple(FieldDiff(f, None, None, "text") for f in fields)
    return Cell(case, adapter, delivery, CellOutcome(outcome), diffs=diffs)


def test_known_new_and_stale_deviations():
    entry = BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a", "y_gone"), "why")
    cells = [
        cell("y_a"),
        cell("y_a", "stream-token"),
        cell("y_b"),
        cell("y_gone", outcome="agree", fields=()),
    ]
    verdict = split_findings(cells, [entry])
    assert [c.case for c in verdict.baselined] == ["y_a", "y_a"]
    assert [c.case for c in verdict.new] == ["y_b"]
    assert [(s.case, s.delivery) for s in verdict.stale] == [("y_gone", "*")]
    assert not verdict.passed


def test_an_entry_for_cases_or_adapters_not_run_is_not_stale():
    entry = BaselineEntry("sglang", "differs", ("content",), ("whole",), ("y_a",), "why")
    assert split_findings([cell("y_a", outcome="agree", fields=())], [entry]).passed


def test_generated_entries_group_behaviours_and_keep_reviewed_reasons():
    cells = [
        cell("y_a"),
        cell("y_a", "stream-token"),
        cell("y_b"),
        cell("y_c", "stream-token", fields=("count",)),
    ]
    first = baseline_from_cells(cells)["entries"]
    assert {(tuple(e["deliveries"]), tuple(e["cases"])) for e in first} == {
        (("*",), ("y_a",)),
        (("whole",), ("y_b",)),
        (("stream-token",), ("y_c",)),
    }
    reviewed = [
        BaselineEntry(
            e["adapter"],
            e["outcome"],
            tuple(e["fields"]),
            tuple(e["deliveries"]),
            tuple(e["cases"]),
            "explained",
        )
        for e in first
    ]
    new_case = cell("y_new", "stream-token", fields=("count",))
    again = baseline_from_cells(cells + [new_case], reviewed)["entries"]
    reasons = {tuple(e["cases"]): e["reason"] for e in again}
    assert reasons[("y_a",)] == "explained"
    assert reasons[("y_c", "y_new")] == f"explained / {TODO} y_new"


def test_bad_baseline_file_names_the_field(tmp_path):
    path = tmp_path / "baseline.json"
    no_cases = {"adapter": "vllm", "outcome": "differs", "fields": [], "deliveries": ["*"]}
    path.write_text(json.dumps({"entries": [no_cases]}))
    with pytest.raises(CorpusError, match=r"entries\[0\]\.cases"):
        load_baseline(path)


# -- the gate is never green by accident ------------------------------------------------------


def _results(cells, adapters):
    from k2conform.model import AdapterRow, ResultOutcome, RunResults

    rows = tuple(
        AdapterRow(name, "1", status=ResultOutcome(status), reason=reason)
        for name, status, reason in adapters
    )
    return RunResults("0", 0, ("whole",), rows, (), tuple(cells))


def test_an_adapter_the_baseline_covers_that_did_not_run_fails_the_gate():
    from k2conform.gate.baseline import Baseline, gate

    baseline = Baseline(("reference", "vllm"), ())
    results = _results(
        [cell("y_a", outcome="agree", fields=(), adapter="reference")],
        [("reference", "ok", ""), ("vllm", "unavailable", "vllm is not installed")],
    )
    judged, passed = gate(results, baseline)
    assert not passed
    assert judged.extra["gate"]["missing"] == [
        "the baseline covers vllm, which did not run (unavailable: vllm is not installed); "
        "--allow-missing vllm if deliberate"
    ]
    _, passed = gate(results, baseline, allow_missing=["vllm"])
    assert passed


def test_an_adapter_left_out_of_the_run_is_missing_too_and_an_empty_run_never_passes():
    from k2conform.gate.baseline import Baseline, gate

    baseline = Baseline(("reference", "sglang"), ())
    results = _results(
        [cell("y_a", outcome="agree", fields=(), adapter="reference")], [("reference", "ok", "")]
    )
    judged, passed = gate(results, baseline)
    (missing,) = judged.extra["gate"]["missing"]
    assert not passed and "sglang, which did not run (not selected for this run)" in missing
    _, passed = gate(_results([], [("reference", "ok", "")]), Baseline(("reference",), ()))
    assert not passed
    _, passed = gate(_results([], []), None)
    assert not passed


def test_the_adapters_a_baseline_covers_default_to_those_of_its_entries(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "adapter": "sglang",
                        "outcome": "differs",
                        "fields": ["content"],
                        "deliveries": ["*"],
                        "cases": ["y_a"],
                    }
                ]
            }
        )
    )
    assert load_baseline(path).adapters == ("sglang",)
    path.write_text(json.dumps({"adapters": "vllm", "entries": []}))
    with pytest.raises(CorpusError, match="field 'adapters'"):
        load_baseline(path)


# -- what a wrong gate would let through (each kills mutants of gate/baseline.py) --------------

FULL_ENTRY = {
    "adapter": "vllm",
    "outcome": "differs",
    "fields": ["content"],
    "deliveries": ["whole"],
    "cases": ["y_a*"],
    "reason": "why",
    "link": "https://github.com/a/b/issues/1",
}


def _load_error(tmp_path, document: str) -> str:
    """What load_baseline says of a baseline file holding ``document``, less the file name."""
    path = tmp_path / "b.json"
    path.write_text(document)
    with pytest.raises(CorpusError) as info:
        load_baseline(str(path))
    return str(info.value).removeprefix(f"{path}: ")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            '{"entries": [',
            "field '-': cannot read the baseline: Expecting value: line 1 column 14 (char 13)",
        ),
        ("[]", "field 'entries': must be a list"),
        ('{"entries": {}}', "field 'entries': must be a list"),
        ('{"entries": ["y_a"]}', "field 'entries[0]': must be an object"),
        ('{"entries": [{"adapter": "vllm"}]}', "field 'entries[0].outcome': missing"),
        (
            json.dumps({"entries": [{**FULL_ENTRY, "note": "x"}]}),
            "field 'entries[0].note': unknown field "
            "(allowed: adapter, cases, deliveries, fields, link, outcome, reason)",
        ),
        (
            json.dumps({"adapters": ["vllm", 1], "entries": []}),
            "field 'adapters': must be a list of adapter names",
        ),
    ],
)
def test_a_malformed_baseline_file_is_one_message_naming_the_field(tmp_path, document, message):
    assert _load_error(tmp_path, document) == message


def test_a_missing_baseline_file_is_a_corpus_error_not_a_traceback(tmp_path):
    with pytest.raises(CorpusError, match=r"field '-': cannot read the baseline: \[Errno 2\]"):
        load_baseline(tmp_path / "nowhere.json")


def test_a_baseline_file_loads_every_field_of_its_entries(tmp_path):
    bare = {key: value for key, value in FULL_ENTRY.items() if key not in ("reason", "link")}
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"adapters": ["vllm", "sglang"], "entries": [FULL_ENTRY, bare]}))
    baseline = load_baseline(str(path))
    assert baseline.adapters == ("vllm", "sglang")
    assert baseline.entries == (
        BaselineEntry(
            "vllm", "differs", ("content",), ("whole",), ("y_a*",), "why", FULL_ENTRY["link"]
        ),
        BaselineEntry("vllm", "differs", ("content",), ("whole",), ("y_a*",)),
    )
    assert [e.to_json() for e in baseline.entries] == [
        FULL_ENTRY,
        {**bare, "reason": "", "link": None},
    ]


def test_an_entry_matches_only_its_adapter_outcome_fields_delivery_and_cases():
    entry = BaselineEntry("vllm", "differs", ("content",), ("whole", "stream-char"), ("y_a*",))
    assert entry.matches(cell("y_a1")) and entry.matches(cell("y_a", "stream-char"))
    for other in (
        cell("y_a", adapter="sglang"),
        cell("y_a", outcome="crash"),
        cell("y_a", fields=("count",)),
        cell("y_a", fields=("count", "content")),
        cell("y_a", "stream-token"),
        cell("y_b"),
    ):
        assert not entry.matches(other), other
    everywhere = BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a",))
    assert everywhere.matches(cell("y_a", "stream-token"))


def test_an_entry_with_explicit_deliveries_is_stale_in_each_listed_delivery_that_ran_and_passed():
    entry = BaselineEntry(
        "vllm", "differs", ("content",), ("whole", "stream-token", "stream-char"), ("y_a", "y_b")
    )
    cells = [
        cell("y_a"),
        cell("y_a", "stream-token", outcome="agree", fields=()),
        cell("y_b", "stream-token"),
        cell("y_b", outcome="agree", fields=()),
    ]
    verdict = split_findings(cells, [entry])
    assert [(s.case, s.delivery) for s in verdict.stale] == [
        ("y_a", "stream-token"),
        ("y_b", "whole"),
    ]
    assert [c.key for c in verdict.baselined] == [
        ("y_a", "vllm", "whole"),
        ("y_b", "vllm", "stream-token"),
    ]
    assert verdict.new == [] and not verdict.passed
    assert verdict.stale[0].to_json() == {
        "case": "y_a",
        "adapter": "vllm",
        "delivery": "stream-token",
        "outcome": "differs",
        "fields": ["content"],
    }


@pytest.mark.parametrize("outcome", ["unavailable", "adapter-error"])
def test_a_cell_that_never_reached_the_parser_is_no_evidence_that_an_entry_is_stale(outcome):
    entry = BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a",))
    verdict = split_findings([cell("y_a", outcome=outcome, fields=())], [entry])
    assert (verdict.new, verdict.baselined, verdict.stale) == ([], [], [])


def test_adapter_errors_are_counted_per_adapter_and_message_and_fail_the_verdict():
    broken = [
        Cell.failed("y_a", "vllm", "whole", "adapter-error", "no parse_delta"),
        Cell.failed("y_b", "vllm", "whole", "adapter-error", "no parse_delta"),
        Cell("y_c", "sglang", "whole", CellOutcome.ADAPTER_ERROR),
    ]
    verdict = split_findings(broken, [])
    assert verdict.adapter_errors == {"vllm": {"no parse_delta": 2}, "sglang": {"adapter-error": 1}}
    assert verdict.new == [] and not verdict.passed


def test_a_verdict_passes_only_with_nothing_new_nothing_stale_and_no_adapter_error():
    from k2conform.gate.baseline import FindingSplit, Stale

    stale = Stale(BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a",)), "y_a", "*")
    assert FindingSplit([], [cell("y_a")], [], {}).passed
    for verdict in (
        FindingSplit([cell("y_a")], [], [], {}),
        FindingSplit([], [], [stale], {}),
        FindingSplit([], [], [], {"vllm": {"glue": 1}}),
    ):
        assert not verdict.passed, verdict


def test_without_a_baseline_the_gate_passes_only_a_clean_run():
    from k2conform.gate.baseline import gate

    rows = [("reference", "ok", "")]
    agree = cell("y_a", outcome="agree", fields=(), adapter="reference")
    judged, passed = gate(_results([agree], rows), None)
    assert passed and judged.extra == {"adapter_errors": {}}
    assert not gate(_results([agree, cell("y_b", adapter="reference")], rows), None)[1]
    glue = Cell.failed("y_b", "reference", "whole", "adapter-error", "glue")
    judged, passed = gate(_results([agree, glue], rows), None)
    assert not passed and judged.extra["adapter_errors"] == {"reference": {"glue": 1}}


def test_the_gate_block_says_what_is_new_baselined_stale_and_missing():
    from k2conform.gate.baseline import Baseline, gate, gate_block

    entry = BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a", "y_gone"), "why")
    cells = [
        cell("y_a"),
        cell("y_b", "stream-token", fields=("count", "content")),
        cell("y_gone", outcome="agree", fields=()),
    ]
    judged, passed = gate(_results(cells, [("vllm", "ok", "")]), Baseline(("vllm",), (entry,)))
    assert not passed
    assert judged.extra["gate"] == {
        "passed": False,
        "new": 1,
        "baselined": 1,
        "missing": [],
        "unreviewed": [],
        "stale": [
            {
                "case": "y_gone",
                "adapter": "vllm",
                "delivery": "*",
                "outcome": "differs",
                "fields": ["content"],
            }
        ],
        "new_cells": ["y_b vllm stream-token: differs count,content"],
        "entries": [entry.to_json()],
    }
    # typed, and read back as it was built (the reports read it so)
    block = gate_block(judged.to_json())
    assert block.to_json() == judged.extra["gate"] and block.entries == (entry,)
    assert block.stale_lines == ["y_gone vllm *: differs content no longer occurs"]
    judged, passed = gate(_results(cells[:1], [("vllm", "ok", "")]), Baseline(("vllm",), (entry,)))
    assert passed and judged.extra["gate"]["passed"] is True
    assert gate_block({"cells": []}) is None


def test_an_empty_run_is_named_in_the_gate_block(tmp_path):
    from k2conform.gate.baseline import Baseline, gate

    judged, passed = gate(
        _results([], [("reference", "ok", "")]),
        Baseline(("reference",), ()),
        allow_missing=["reference"],
    )
    assert not passed and judged.extra["gate"]["missing"] == ["no cell was run"]


def test_an_adapter_that_loaded_but_ran_no_cell_or_was_unavailable_is_missing():
    from k2conform.gate.baseline import Baseline, gate

    ran = cell("y_a", outcome="agree", fields=(), adapter="reference")
    for status, reason in (("ok", ""), ("unavailable", "")):
        judged, passed = gate(
            _results([ran], [("reference", "ok", ""), ("vllm", status, reason)]),
            Baseline(("reference", "vllm"), ()),
        )
        assert not passed
        assert judged.extra["gate"]["missing"] == [
            "the baseline covers vllm, which did not run (not selected for this run); "
            "--allow-missing vllm if deliberate"
        ]
    judged, passed = gate(
        _results(
            [ran, cell("y_a", outcome="unavailable", fields=())],
            [("reference", "ok", ""), ("vllm", "unavailable", "no torch")],
        ),
        Baseline(("reference", "vllm"), ()),
    )
    assert not passed and "(unavailable: no torch)" in judged.extra["gate"]["missing"][0]


def test_a_generated_baseline_names_its_version_and_adapters_and_sorts_its_entries():
    cells = [
        cell("y_b"),
        cell("y_a", adapter="sglang", fields=("count",)),
        cell("y_c", adapter="sglang"),
    ]
    document = baseline_from_cells(cells, adapters=["vllm", "sglang"])
    assert document["version"] == 1 and document["adapters"] == ["sglang", "vllm"]
    assert [(e["adapter"], e["fields"], e["cases"]) for e in document["entries"]] == [
        ("sglang", ["content"], ["y_c"]),
        ("sglang", ["count"], ["y_a"]),
        ("vllm", ["content"], ["y_b"]),
    ]


def test_a_case_failing_in_some_of_the_modes_it_ran_in_lists_those_modes():
    cells = [
        cell("y_a"),
        cell("y_a", "stream-token"),
        cell("y_a", "stream-char", outcome="agree", fields=()),
    ]
    (entry,) = baseline_from_cells(cells)["entries"]
    assert entry["deliveries"] == ["stream-token", "whole"]


@pytest.mark.parametrize(
    "previous",
    [
        BaselineEntry("vllm", "differs", ("count",), ("*",), ("y_a",), "another behaviour"),
        BaselineEntry("sglang", "differs", ("content",), ("*",), ("y_a",), "another adapter"),
        BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_other",), "other cases"),
        BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a",), f"{TODO} y_a"),
    ],
)
def test_only_a_reviewed_entry_of_the_same_behaviour_and_case_lends_its_reason(previous):
    entries = baseline_from_cells([cell("y_a")], [previous])["entries"]
    (entry,) = [e for e in entries if e["reason"] != previous.reason]
    assert entry["reason"] == TODO


def test_what_the_run_did_not_judge_is_kept_as_it_was():
    """``baseline one-case.json --previous baseline.json``: the run's case is rewritten from
    its cells; other cases, adapters and modes keep their entries, reasons and links."""
    previous = [
        BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a", "y_b"), "why", "https://x/1"),
        BaselineEntry("sglang", "differs", ("content",), ("*",), ("y_a",), "other adapter"),
        BaselineEntry("vllm", "differs", ("count",), ("whole", "stream-char"), ("y_a",), "mode"),
        BaselineEntry("vllm", "crash", (), ("*",), ("y_gone",), "another case"),
    ]
    entries = baseline_from_cells([cell("y_a")], previous, ["vllm", "sglang"])["entries"]
    kept = {
        (
            e["adapter"],
            e["outcome"],
            tuple(e["fields"]),
            tuple(e["deliveries"]),
            tuple(e["cases"]),
            e["reason"],
        )
        for e in entries
    }
    assert kept == {
        ("vllm", "differs", ("content",), ("whole",), ("y_a",), "why"),  # from the run's cell
        ("vllm", "differs", ("content",), ("*",), ("y_b",), "why"),  # not run: kept
        ("sglang", "differs", ("content",), ("*",), ("y_a",), "other adapter"),
        ("vllm", "differs", ("count",), ("stream-char",), ("y_a",), "mode"),  # a mode not run
        ("vllm", "crash", (), ("*",), ("y_gone",), "another case"),
    }


def test_a_glob_entry_the_run_judged_in_part_keeps_the_modes_the_run_did_not_judge():
    """An entry whose case is a pattern (``y_a*``) is judged by every case it matches that ran:
    what those cases ran in is rewritten, the rest of its modes is kept; a pattern no case of
    the run matches keeps the entry whole."""
    previous = [
        BaselineEntry("vllm", "differs", ("count",), ("whole", "stream-char"), ("y_a*",), "glob"),
        BaselineEntry("vllm", "differs", ("name",), ("whole", "stream-token"), ("y_[a]?*",), "all"),
        BaselineEntry("vllm", "crash", (), ("whole",), ("y_z*",), "no match"),
    ]
    cells = [cell("y_a1", outcome="agree", fields=()), cell("y_b", outcome="agree", fields=())]
    entries = baseline_from_cells(cells, previous, ["vllm"])["entries"]
    kept = {(e["outcome"], tuple(e["deliveries"]), tuple(e["cases"])) for e in entries}
    assert kept == {
        ("differs", ("stream-char",), ("y_a*",)),
        ("differs", ("stream-token",), ("y_[a]?*",)),
        ("crash", ("whole",), ("y_z*",)),
    }


def test_behaviour_units_are_each_adapter_outcome_fields_delivery_and_case_an_entry_vouches_for():
    """What ``baseline --previous`` compares to say what it added, removed and kept."""
    from k2conform.gate.baseline import behaviour_units

    entry = {
        "adapter": "vllm",
        "outcome": "differs",
        "fields": ["content", "count"],
        "deliveries": ["whole", "stream-token"],
        "cases": ["y_a", "y_b"],
    }
    assert behaviour_units([entry]) == {
        ("vllm", "differs", "content,count", delivery, case)
        for delivery in ("whole", "stream-token")
        for case in ("y_a", "y_b")
    }
    assert behaviour_units([]) == set()


def test_the_gate_block_reads_back_what_it_wrote_and_defaults_what_an_old_one_lacks():
    """A results document carries the gate block; a report rebuilt from it must read every
    list back (the missing adapters, unreviewed entries, new cells, stale items, entries), and
    a block written before a list existed reads as that list empty."""
    from k2conform.gate.baseline import GateBlock

    block = GateBlock(
        passed=False,
        new=1,
        baselined=2,
        stale=({"case": "y_a", "adapter": "vllm", "delivery": "whole"},),
        missing=("sglang",),
        unreviewed=("vllm differs content",),
        new_cells=("y_b vllm whole",),
        entries=(BaselineEntry("vllm", "differs", ("content",), ("*",), ("y_a",), "why"),),
    )
    assert GateBlock.from_json(json.loads(json.dumps(block.to_json()))) == block
    old = GateBlock.from_json({"passed": True, "new": 0, "baselined": 0})
    assert (old.stale, old.missing, old.unreviewed, old.new_cells, old.entries) == ((),) * 5


# -- upstream links (docs/baseline.md) ---------------------------------------------------------

#: The one form a shipped link takes: an upstream issue, pull request or commit on GitHub.
UPSTREAM = (
    r"^https://github\.com/[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+/"
    r"(issues/\d+|pull/\d+|commit/[0-9a-f]{7,40})$"
)


@pytest.mark.parametrize("name", ["baseline.json", "baseline-servers.json"])
def test_every_shipped_link_is_null_or_one_upstream_thread(name):
    import re
    from pathlib import Path

    entries = load_baseline(Path(__file__).resolve().parent.parent / name).entries
    links = [e.link for e in entries]
    assert all(link is None or re.match(UPSTREAM, link) for link in links), links
    assert any(link is None for link in links) and any(link for link in links)  # both kinds occur


def _entry(link):
    return {
        "adapter": "vllm",
        "outcome": "differs",
        "fields": ["content"],
        "deliveries": ["*"],
        "cases": ["y_a"],
        "link": link,
    }


@pytest.mark.parametrize(
    "link",
    [
        "",
        "see #123",
        ["https://github.com/a/b/pull/1"],
        7,
        "https://github.com/a/b/pull/1 https://github.com/a/b/pull/2",
    ],
)
def test_a_malformed_link_names_the_file_the_entry_and_the_field(tmp_path, link):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"entries": [_entry(None), _entry(link)]}))
    message = r"b\.json: field 'entries\[1\]\.link': must be one upstream URL"
    with pytest.raises(CorpusError, match=message):
        load_baseline(path)


def test_a_malformed_link_is_exit_2_with_one_line_before_anything_runs(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "b.json"
    path.write_text(json.dumps({"entries": [_entry("TODO")]}))
    command = [
        sys.executable,
        "-m",
        "k2conform.cli",
        "run",
        "--adapter",
        "reference",
        "--baseline",
        str(path),
    ]
    completed = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == (
        f"k2conform run: {path}: field 'entries[0].link': must be one "
        "upstream URL (https://...) or null (not reported upstream), "
        "not 'TODO'\n"
    )


def test_null_links_load_and_a_regenerated_entry_keeps_one_link(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"entries": [_entry(None)]}))
    assert load_baseline(path).entries[0].link is None
    first, second = "https://github.com/a/b/issues/1", "https://github.com/a/b/pull/2"
    reviewed = [
        BaselineEntry("vllm", "differs", ("content",), ("*",), (case,), "why", link)
        for case, link in (("y_a", first), ("y_b", second))
    ]
    (entry,) = baseline_from_cells([cell("y_a"), cell("y_b")], reviewed)["entries"]
    assert (entry["link"], entry["reason"]) == (first, f"why / (also reported: {second})")
    (fresh,) = baseline_from_cells([cell("y_c")])["entries"]
    assert fresh["link"] is None


def test_an_entry_whose_reason_is_still_the_generated_todo_fails_the_gate():
    """``baseline`` and ``minimize --baseline`` write TODO for a behaviour nobody explained:
    the gate refuses it even though it covers its cell, and names it; once a reviewer writes
    the reason, the same run passes."""
    from k2conform.gate.baseline import Baseline, gate
    from k2conform.report.pages import markdown

    cells = [cell("y_a")]
    written = baseline_from_cells(cells)["entries"][0]
    entry = BaselineEntry("vllm", "differs", ("content",), ("whole",), ("y_a",), written["reason"])
    judged, passed = gate(_results(cells, [("vllm", "ok", "")]), Baseline(("vllm",), (entry,)))
    block = judged.extra["gate"]
    assert not passed and block["passed"] is False and block["baselined"] == 1
    assert block["unreviewed"] == ["vllm differs content [whole]: y_a"]
    assert "- UNREVIEWED: vllm differs content [whole]: y_a" in markdown(judged)
    reviewed = BaselineEntry("vllm", "differs", ("content",), ("whole",), ("y_a",), "explained")
    judged, passed = gate(_results(cells, [("vllm", "ok", "")]), Baseline(("vllm",), (reviewed,)))
    assert passed and judged.extra["gate"]["unreviewed"] == []


def test_no_shipped_baseline_has_an_unreviewed_entry():
    from pathlib import Path

    from k2conform.gate.baseline import unreviewed_entries

    root = Path(__file__).resolve().parent.parent
    for path in sorted(root.glob("baseline*.json")):
        assert unreviewed_entries(load_baseline(path).entries) == [], path.name
