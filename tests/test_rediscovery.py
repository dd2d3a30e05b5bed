"""The rediscovery benchmark's parts: findings keyed by the matrix's judgement with the CPU
time of their first sighting, the CPU budget, the goals and seed sets, the summary."""

from __future__ import annotations

import json

import pytest

from k2conform.bench import rediscovery as rd
from k2conform.fuzzing.differential import FindingStore, Observation
from k2conform.model import Cell, CellOutcome, FieldDiff, Request, Result

REQUEST = Request()


def _observation(sig: str, mode: str = "whole") -> Observation:
    ok = Result(content="x")
    return Observation(mode, ok, sig, {}, {}, None)


def _cell(adapter: str, outcome: str, fields: tuple[str, ...]) -> Cell:
    diffs = tuple(FieldDiff(f, None, None, "text") for f in fields)
    return Cell("y_x", adapter, "whole", CellOutcome(outcome), diffs=diffs)


def test_findings_keyed_by_the_matrixs_judgement(tmp_path):
    """Two inputs of one fuzz kind that the matrix judges apart are two findings; one it
    files as no finding is none; each row has the CPU seconds of its first sighting."""
    verdicts = iter(
        [
            _cell("vllm", "differs", ("content",)),
            _cell("vllm", "differs", ("content", "reasoning")),
            _cell("vllm", "agree", ()),
            _cell("vllm", "differs", ("content",)),
        ]
    )
    store = FindingStore(tmp_path, "differential", judge=lambda case, name, mode: next(verdicts))
    for text in ("a", "b", "c", "d"):
        store.record(REQUEST, text, _observation("vllm:content-drift"))
    store.save(force=True)
    table = json.loads((tmp_path / "signatures-differential.json").read_text())
    rows = {row["key"]: row for row in table["signatures"]}
    assert table["distinct"] == "cells"
    assert set(rows) == {"whole vllm:differs:content", "whole vllm:differs:content+reasoning"}
    assert rows["whole vllm:differs:content"]["count"] == 2
    assert rows["whole vllm:differs:content"]["cell"] == {
        "adapter": "vllm",
        "outcome": "differs",
        "fields": ["content"],
    }
    assert all(isinstance(row["first_cpu"], float) for row in rows.values())
    assert len(list(tmp_path.glob("*_fuzz_*.json"))) == 2  # one case file per finding
    # only a fuzz component not seen yet is "new" (no judging to find out)
    assert not store.is_new(_observation("vllm:content-drift"))
    assert store.is_new(_observation("vllm:content-drift", "stream-token"))


def test_the_cpu_budget_ends_the_process_with_its_table_written(tmp_path, monkeypatch):
    from k2conform.fuzzing import differential

    def exit_now(status):
        raise SystemExit(status)

    monkeypatch.setattr(differential.os, "_exit", exit_now)
    store = FindingStore(tmp_path, "differential", cpu_budget=3600.0)
    store.tick()
    assert store.executions == 1  # within the budget: nothing ends
    store.cpu_budget = 0.0
    with pytest.raises(SystemExit) as ended:
        store.tick()
    assert ended.value.code == 0
    assert json.loads((tmp_path / "signatures-differential.json").read_text())["executions"] == 2


def test_goals_are_the_catalogues_behaviours_once_each():
    goals = rd.targets(("vllm",))
    assert goals and all(g.adapter == "vllm" for g in goals)
    keys = [(g.adapter, g.outcome, g.fields, g.family) for g in goals]
    assert len(keys) == len(set(keys))
    assert any(g.outcome == "crash" for g in goals)  # the 1000-level nesting crash


def test_the_seed_sets():
    from pathlib import Path

    golden = rd.seed_cases("golden", rd.ADAPTERS)
    spec = Path(__file__).resolve().parent.parent / "corpus" / "golden" / "completions"
    assert sorted(c.id for c in golden) == sorted(p.stem for p in spec.glob("*.json"))
    minus = {c.id for c in rd.seed_cases("corpus-minus", rd.ADAPTERS)}
    # a case a baseline entry of vLLM lists is one that shows a behaviour: not a seed
    assert "n_fuzz_vllm_extra-call_c82955e6" not in minus
    assert minus and all(not i.startswith("n_fuzz_vllm_extra-call") for i in minus)


def test_the_summary_counts_a_behaviour_only_within_the_budget():
    a = rd.Target("vllm", "differs", ("content",), "token-aligned", "y_cat_a")
    b = rd.Target("sglang", "crash", (), "text-level", "n_cat_b")
    row = {"key": "stream-recorded sglang:crash:", "first_cpu": 4.0}
    row["cell"] = {"adapter": "sglang", "outcome": "crash", "fields": []}
    assert b.shown_by(row) and not a.shown_by(row)
    assert not b.shown_by({**row, "key": "whole sglang:crash:"})  # another family of modes
    trials = [
        {"found": {a.name: 2.0, b.name: 50.0}},
        {"found": {a.name: 4.0}},
        {"found": {a.name: 9.0, b.name: 5.0}},
    ]
    summary = rd.summarise([a, b], trials, budget=10.0)
    assert summary["share_per_trial"] == [0.5, 0.5, 1.0]
    assert summary["median_share"] == 0.5
    assert summary["behaviours"][a.name]["median_cpu_seconds"] == 4.0
    assert summary["behaviours"][b.name]["median_cpu_seconds"] is None  # found in 1 of 3
    assert summary["behaviours"][b.name]["share_of_trials"] == pytest.approx(0.333)
    curve = summary["over_time"]
    assert curve["median_share"][0] == 0.0 and curve["median_share"][-1] == 0.5
    # a seed input that shows the behaviour finds it at 0.0 CPU s: found, not missed
    at_once = rd.summarise([a], [{"found": {a.name: 0.0}}], budget=10.0)
    assert at_once["share_per_trial"] == [1.0] and at_once["over_time"]["median_share"][0] == 1.0
    assert at_once["behaviours"][a.name]["median_cpu_seconds"] == 0.0
    # a spelled finding is another family of modes: it rediscovers no unspelled behaviour
    plain = {"key": "whole vllm:differs:content", "first_cpu": 1.0}
    plain["cell"] = {"adapter": "vllm", "outcome": "differs", "fields": ["content"]}
    assert a.shown_by(plain)
    assert not a.shown_by({**plain, "key": "whole+spelled vllm:differs:content"})


def test_the_kimi_configuration_instruments_only_the_parsers_own_files():
    from k2conform.adapter.registry import create_adapter
    from k2conform.fuzzing.instrument import declared_modules

    adapter = create_adapter("vllm")
    own = declared_modules([adapter], shared=False)
    assert own == ["vllm.parser.kimi_k2", "vllm.tool_parsers.kimi_k2_tool_parser"]
    assert set(own) < set(declared_modules([adapter]))


@pytest.mark.slow
def test_one_short_trial_end_to_end(tmp_path):
    """The real differential target under a CPU budget, its findings keyed by cells, matched
    to the catalogue: within a few CPU seconds from the golden seeds some behaviour is found,
    and the report names every goal."""
    pytest.importorskip("vllm")
    doc = rd.rediscovery(3.0, 1, "golden", ["reference"], ("vllm",))
    result = doc["configurations"]["reference"]
    (run,) = result["runs"]
    assert run["seed"] == 1 and run["executions"] > 0 and 3.0 <= run["cpu_seconds"] < 10
    assert run["found"] and set(run["found"]) <= set(doc["goals"])
    assert all(0 <= t <= 3.0 for t in run["found"].values())
    assert set(result["behaviours"]) == set(doc["goals"])
    lines = rd.table_lines(doc)
    assert lines[0].startswith(f"rediscovery: {len(doc['goals'])} behaviours, 1 trials of 3 CPU s")
