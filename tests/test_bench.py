"""``k2conform bench``: the exponent fit, the superlinear check, the command's JSON and PNG,
and the reference parser's streaming work counted in operations (never in time)."""

from __future__ import annotations

import json
import sys

import pytest

from k2conform.bench import render, scaling, workloads
from k2conform.bench.fuzz_speed import (
    fuzz_lines,
    fuzz_row,
    fuzz_speeds,
    worker_lines,
    worker_speeds,
    with_repeats,
    workers_row,
)
from k2conform.cli import main
from k2conform.delivery.modes import cut
from k2conform.model import RunResults
from k2conform.reference.parser import ReferenceParser
from k2conform.report.pages import streaming_cost_lines, streaming_cost_rows

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [1, 4, 10, 40, 100, 400]


def test_exponent_of_a_quadratic_series_is_two_and_of_a_linear_one_is_one():
    assert scaling.fit_exponent(SIZES, [3e-6 * s * s + 1e-9 for s in SIZES]) == pytest.approx(
        2.0, abs=0.01
    )
    assert scaling.fit_exponent(SIZES, [5e-4 * s for s in SIZES]) == pytest.approx(1.0, abs=1e-9)
    assert scaling.fit_exponent(SIZES, [0.25] * len(SIZES)) == pytest.approx(0.0, abs=1e-9)
    assert scaling.fit_exponent([10], [1.0]) is None


def test_the_exponent_is_fitted_from_10_kb_up():
    # cheap and flat below 10 KB (fixed costs), quadratic above: the fit sees the quadratic part
    costs = [0.01, 0.01, 1e-4 * 10**2, 1e-4 * 40**2, 1e-4 * 100**2, 1e-4 * 400**2]
    exponent, fitted = scaling.series_exponent(SIZES, costs)
    assert fitted == [10, 40, 100, 400] and exponent == pytest.approx(2.0)
    exponent, fitted = scaling.series_exponent([1, 4, 10], [1, 4, 10])
    assert fitted == [1, 4, 10] and exponent == pytest.approx(1.0)


def _series(adapter, delivery, per_delta_us, workload="args"):
    deltas = [s * 250 for s in SIZES]
    seconds = [c * d / 1e6 for c, d in zip(per_delta_us, deltas)]
    exponent, fitted = scaling.series_exponent(SIZES, seconds)
    return {
        "adapter": adapter,
        "version": "1.0",
        "workload": workload,
        "delivery": delivery,
        "sizes_kb": SIZES,
        "median_s": seconds,
        "per_delta_us": per_delta_us,
        "throughput_kchars_s": [1.0] * 6,
        "exponent": exponent,
        "fitted_sizes_kb": fitted,
        "capped": None,
    }


def test_superlinear_flag_only_above_the_threshold_with_evidence():
    assert (
        scaling.is_superlinear(1.31)
        and not scaling.is_superlinear(1.3)
        and not scaling.is_superlinear(None)
    )
    doc = {
        "series": [
            _series("linear", "stream-4char", [10.0] * 6),
            _series(
                "quadratic", "stream-4char", [s * 0.5 for s in SIZES]
            ),  # per-delta cost grows with the text
            _series(
                "quadratic", "whole", [s * 0.5 for s in SIZES]
            ),  # one-shot: not a streaming finding
            _series("quadratic", "stream-token", [s * 0.5 for s in SIZES], workload="content"),
        ]
    }
    rows = scaling.streaming_cost(doc)
    assert [(r["adapter"], r["delivery"]) for r in rows] == [
        ("linear", "stream-4char"),
        ("quadratic", "stream-4char"),
    ]
    linear, quadratic = rows
    assert linear["finding"] is None and linear["exponent"] == pytest.approx(1.0)
    assert quadratic["finding"] == "superlinear" and quadratic["exponent"] == pytest.approx(2.0)
    assert (
        quadratic["evidence"]["sizes_kb"] == SIZES
        and quadratic["evidence"]["per_delta_us"][-1] == 200.0
    )
    checked = RunResults("0", 0, (), (), (), (), extra={"streaming_cost": rows})
    lines = streaming_cost_lines(checked)
    assert "### Streaming cost" in lines and any(
        "**superlinear**" in line and "quadratic" in line for line in lines
    )
    assert [r[4] for r in streaming_cost_rows(checked)] == ["ok", "superlinear"]
    assert streaming_cost_lines(RunResults("0", 0, (), (), (), ())) == []


@pytest.mark.slow
def test_bench_quick_on_the_reference_writes_json_and_a_png(tmp_path, capsys):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    status = main(
        [
            "bench",
            "--adapter",
            "reference",
            "--quick",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--series-budget",
            "30",
            "--max-seconds",
            "300",
        ]
    )  # all sizes even on a loaded machine
    assert status == 0
    doc = json.loads(out.read_text())
    assert doc["quick"] and doc["errors"] == {}
    assert {a["name"]: a["status"] for a in doc["adapters"]} == {"reference": "ok"}
    kinds = {(r["workload"], r["delivery"]) for r in doc["series"]}
    assert {(w, d) for w in ("args", "content", "parallel") for d in workloads.DELIVERIES} <= kinds
    for row in doc["series"]:
        assert (
            len(row["sizes_kb"])
            == len(row["median_s"])
            == len(row["per_delta_us"])
            == len(row["reps"])
        )
        assert all(t > 0 for t in row["median_s"])
    args = [r for r in doc["series"] if r["workload"] == "args"]
    assert all(
        r["sizes_kb"] == list(workloads.QUICK_SIZES_KB) and r["exponent"] is not None for r in args
    )
    assert {r["delivery"] for r in doc["streaming_cost"]} == set(workloads.STREAMING)
    assert doc["memory"] and all(m["peak_kib"] > 0 for m in doc["memory"])
    assert doc["harness"][0]["cells"] > 0 and 0 <= doc["harness"][0]["outside_share"] <= 1
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert "exponent" in capsys.readouterr().out


def test_the_plain_png_writer_needs_no_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as when it is not installed
    doc = {
        "k2conform": "x",
        "series": [
            _series("reference", "stream-4char", [3.0] * 6),
            _series("sglang", "whole", [s * 0.5 for s in SIZES]),
        ],
    }
    assert render.plot(doc, tmp_path / "p.png") == "raster"
    data = (tmp_path / "p.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE) and b"IEND" in data[-12:]


LIBFUZZER_OUTPUT = """[k2conform fuzz] instrumented 27 functions in 1 modules: ...
[k2conform fuzz] differential: ready after 2.00 CPU seconds
#401	INITED cov: 281 ft: 990 corp: 112/43Kb exec/s: 401 rss: 50Mb
#3000	DONE   cov: 283 ft: 1131 corp: 175/72Kb lim: 4096 exec/s: 750 rss: 50Mb
stat::number_of_executed_units: 3000
stat::average_exec_per_sec:     750
"""


def test_a_fuzz_row_reads_libfuzzers_final_figures():
    row = fuzz_row("differential", ("--instrument", "reference"), 20, 0, LIBFUZZER_OUTPUT, 8.0)
    assert row == {
        "target": "differential",
        "run": "differential --instrument reference",
        "seconds": 20,
        "executions": 3000,
        "exec_per_s": 750,
        "cpu_seconds": 6.0,
        "exec_per_cpu_s": 500,
        "cov": 283,
        "ft": 1131,
    }  # 2 of 8 CPU seconds: imports
    broken = fuzz_row("reference", (), 20, 1, "Traceback (most recent call last): ImportError", 0.5)
    assert broken["error"].startswith("exit 1:") and "ImportError" in broken["error"]
    load = {"before": [9.0], "after": [11.0]}
    lines = fuzz_lines({"note": "2 runs", "loadavg": load, "targets": [row, broken]})
    assert "load average 9.0 -> 11.0" in lines[0] and "500 per CPU second" in lines[1]
    assert "error" in lines[2]


def test_a_differential_row_counts_the_repeats_of_every_findings_table(tmp_path):
    """Executions that reran an input explored nothing: the row says how many, added up over
    the workers' tables; a table that does not count them (roundtrip) adds nothing."""
    tables = {
        "signatures-differential.worker-0.json": {"executions": 300, "repeats": 30},
        "signatures-differential.worker-1.json": {"executions": 100, "repeats": 10},
        "signatures-roundtrip.json": {"executions": 50},
    }
    for name, table in tables.items():
        (tmp_path / name).write_text(json.dumps(table))
    row = with_repeats({"target": "differential", "executions": 400}, tmp_path)
    assert row["repeats"] == 40 and row["repeat_share"] == 0.1
    speeds = fuzz_row("differential", (), 20, 0, LIBFUZZER_OUTPUT, 8)
    assert "40 repeats (10 %)" in fuzz_lines({"note": "", "targets": [{**row, **speeds}]})[1]
    assert "repeats" not in with_repeats({"target": "roundtrip"}, tmp_path)


def test_fuzz_speeds_runs_a_target_from_the_seed_corpus():
    from k2conform.fuzzing.seeds import seed_files

    fuzz = fuzz_speeds(2, runs=(("reference", ()),))
    (row,) = fuzz["targets"]
    assert "error" not in row, row
    assert row["executions"] >= len(seed_files())  # libFuzzer ran every seed before mutating
    assert row["cpu_seconds"] > 0 and row["exec_per_cpu_s"] > 0 and row["cov"] > 0
    assert set(fuzz["loadavg"]) == {"before", "after"}


def test_a_workers_row_adds_the_workers_up():
    from k2conform.fuzzing.workers import Worker

    workers = [Worker(0, []), Worker(1, [])]
    for worker, (runs, speed, cov, ready) in zip(
        workers, ((300, 10, 900, 7.0), (200, 8, 950, 6.0))
    ):
        worker.read(f"[k2conform fuzz] differential: ready after {ready:.2f} CPU seconds\n")
        worker.read(f"#{runs}\tDONE   cov: {cov} ft: {cov * 4} corp: 9/1Kb exec/s: {speed}\n")
        worker.read(f"stat::number_of_executed_units: {runs}\n")
        worker.read(f"stat::average_exec_per_sec:     {speed}\n")
    row = workers_row("differential", 30, workers, 63.0)
    assert row == {
        "target": "differential",
        "run": "differential --workers 2",
        "workers": 2,
        "seconds": 30,
        "executions": 500,
        "exec_per_s": 18,
        "cpu_seconds": 50.0,
        "exec_per_cpu_s": 10,
        "cov": 950,
        "ft": 3800,
    }  # 13 of 63 CPU seconds: the two workers' imports
    assert "error" in workers_row("differential", 30, [Worker(0, [])], 1.0)


def test_worker_speeds_runs_the_target_with_each_worker_count():
    fuzz = worker_speeds(2, (1, 2), target="reference")
    assert [row["workers"] for row in fuzz["targets"]] == [1, 2]
    for row in fuzz["targets"]:
        assert "error" not in row, row
        assert row["executions"] > 0 and row["exec_per_cpu_s"] > 0 and row["cov"] > 0
        assert set(row["loadavg"]) == {"before", "after"}
    lines = worker_lines(fuzz)
    assert "reference --workers 2" in lines[2] and "load average" in lines[2]


def _operations(text: str) -> int:
    """Function calls (Python and C) made while streaming ``text`` in 4-character deltas."""
    deltas = [d.text for d in cut(text, range(4, len(text), 4))]
    parser = ReferenceParser(workloads.workload("args", 1)[1])
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        for delta in deltas:
            parser.feed(delta)
        parser.finish()
    finally:
        sys.setprofile(None)
    return count


def test_reference_streaming_work_is_linear_in_operations():
    """A constant number of operations per delta: the exponent of the operation count
    against the size stays at 1 (a parser that rescans would show 2)."""
    sizes = [4, 16, 64]
    texts = [workloads.workload("args", size)[0] for size in sizes]
    operations = [_operations(text) for text in texts]
    exponent = scaling.fit_exponent([len(t) for t in texts], operations)
    assert exponent == pytest.approx(1.0, abs=0.05), operations
    per_delta = [ops / (len(t) / 4) for ops, t in zip(operations, texts)]
    assert max(per_delta) < 40, per_delta
