"""``k2conform bench``: how every parser's cost grows with its output.

For each adapter, each workload (:mod:`k2conform.bench.workloads`) in each delivery, at
growing sizes; each series' exponent is :mod:`k2conform.bench.scaling`'s.  What is timed is the
adapter's own call (``parse_whole`` / ``parse_stream``): the parser and the server steps its
adapter re-states; building the deltas and reassembling the stream are not counted.

Measurement rules, so that ratios hold on a shared, noisy machine:

* adapters are measured side by side: every repetition of a point runs each adapter
  once, in a rotating order, and a ratio between two adapters is the median of the
  per-repetition ratios;
* every figure is a median of repeated runs;
* a series (adapter × workload × delivery) has a time budget: before each size the
  next run's time is predicted from the previous sizes (never assuming better than
  linear), and a size that would not fit is skipped and the series recorded as
  ``capped`` (a quadratic streaming parser reaches fewer sizes, and says so).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from k2conform import __version__
from k2conform.bench.fuzz_speed import fuzz_speeds, worker_speeds
from k2conform.bench.scaling import (
    FIT_FROM_KB,
    SUPERLINEAR_EXPONENT,
    fit_exponent,
    series_exponent,
    streaming_cost,
)
from k2conform.bench.workloads import (
    CONTENT_MAX_KB,
    DELTA_CHARS,
    PARALLEL_CALLS,
    QUICK_SIZES_KB,
    SIZES_KB,
    make_deliveries,
    workload,
)
from k2conform.delivery import modes
from k2conform.model import Delta, Request


# -- measuring -------------------------------------------------------------------------------


@dataclass
class _Point:
    size_kb: int
    chars: int
    deltas: int
    seconds: list[float] = field(default_factory=list)


@dataclass
class _Series:
    adapter: str
    workload: str
    delivery: str
    budget: float
    spent: float = 0.0
    points: list[_Point] = field(default_factory=list)
    capped: dict[str, Any] | None = None

    def predict(self, size_kb: float) -> float:
        """The next run's time: the last one scaled by the series' growth so far (at least
        linear)."""
        if not self.points:
            return 0.0
        last = self.points[-1]
        growth = 1.0
        if len(self.points) >= 2:
            previous = self.points[-2]
            growth = max(
                1.0,
                fit_exponent(
                    [previous.size_kb, last.size_kb], [min(previous.seconds), min(last.seconds)]
                )
                or 1.0,
            )
        return min(last.seconds) * (size_kb / last.size_kb) ** growth


def _runner(adapter: Any, request: Request, delivery: modes.Delivery) -> Callable[[], Any]:
    if delivery.streaming:
        return lambda: adapter.parse_stream(request, delivery.deltas)
    (output,) = delivery.deltas
    return lambda: adapter.parse_whole(request, output)


def _time_once(run: Callable[[], Any]) -> float:
    """One timed run with the cyclic garbage collector paused, as timeit does: with vLLM's
    and SGLang's modules in memory a full collection costs more than a small parse, and
    it would land on whichever adapter happened to allocate at that moment."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        run()
        return time.perf_counter() - started
    finally:
        gc.enable()


class Bench:
    """Measures one workload over its sizes, adapters side by side.

    Round 0 runs every size once, smallest first, for every adapter whose series can
    still afford it (the size is skipped and the series capped when the predicted time
    does not fit its budget); rounds 1.. repeat the points while the budget lasts.
    Every round visits every size, so a change in the machine's load during the bench
    shifts all sizes alike instead of bending the fitted exponent.
    """

    def __init__(
        self,
        adapters: dict[str, Any],
        tokenizer: Any,
        *,
        reps: int,
        series_budget: float,
        deadline: float,
        log: Callable[[str], None],
    ) -> None:
        self.adapters = adapters
        self.tokenizer = tokenizer
        self.reps = reps
        self.series_budget = series_budget
        self.deadline = deadline
        self.log = log
        self.series: dict[tuple[str, str, str], _Series] = {}
        self.errors: dict[str, str] = {}

    def workload(self, kind: str, sizes_kb: Sequence[int]) -> None:
        inputs = []
        for size_kb in sizes_kb:
            text, request = workload(kind, size_kb)
            inputs.append(
                (
                    size_kb or round(len(text) / 1000),
                    text,
                    request,
                    make_deliveries(text, self.tokenizer),
                )
            )
        for round_ in range(self.reps):
            if round_ and time.monotonic() > self.deadline:
                break
            for size_kb, text, request, deliveries in inputs:
                for mode, delivery in deliveries.items():
                    self._run_point(kind, size_kb, text, request, mode, delivery, round_)

    def _run_point(
        self,
        kind: str,
        size_kb: int,
        text: str,
        request: Request,
        mode: str,
        delivery: modes.Delivery,
        round_: int,
    ) -> None:
        names = list(self.adapters)
        names = names[round_ % len(names) :] + names[: round_ % len(names)]  # rotate the order
        for name in names:
            if name in self.errors:
                continue
            series = self.series.setdefault(
                (name, kind, mode), _Series(name, kind, mode, self.series_budget)
            )
            point = next((p for p in series.points if p.size_kb == size_kb), None)
            if round_ == 0:
                if series.capped:
                    continue
                predicted = series.predict(size_kb)
                over_budget = predicted > series.budget - series.spent
                if over_budget or predicted > self.deadline - time.monotonic():
                    series.capped = {
                        "after_kb": series.points[-1].size_kb if series.points else None,
                        "skipped_kb": size_kb,
                        "predicted_s": round(predicted, 3),
                        "reason": "time budget" if over_budget else "bench deadline",
                    }
                    continue
                point = _Point(size_kb, len(text), len(delivery.deltas))
                series.points.append(point)
            elif (
                point is None
                or series.spent + min(point.seconds) > series.budget
                or time.monotonic() + min(point.seconds) > self.deadline
            ):
                continue
            try:
                elapsed = _time_once(_runner(self.adapters[name], request, delivery))
            except Exception as error:  # noqa: BLE001 - recorded, the bench goes on
                self.errors[name] = f"{kind} {size_kb} KB {mode}: {type(error).__name__}: {error}"
                continue
            point.seconds.append(elapsed)
            series.spent += elapsed
        if round_ == 0:
            firsts = {
                n: self.series[(n, kind, mode)].points[-1]
                for n in names
                if (n, kind, mode) in self.series and self.series[(n, kind, mode)].points
            }
            done = ", ".join(
                f"{n} {p.seconds[0] * 1000:.1f} ms"
                for n, p in firsts.items()
                if p.size_kb == size_kb and p.seconds
            )
            self.log(f"  {kind:<8} {size_kb:>4} KB {mode:<13} {done}")

    def pairs(self) -> list[dict[str, Any]]:
        """Speed-ups of each adapter over each other one, from the runs made side by side
        (the same round of the same point): the median of the per-round ratios."""
        rows = []
        by_point: dict[tuple[str, int, str], dict[str, list[float]]] = {}
        for (name, kind, mode), series in self.series.items():
            for point in series.points:
                by_point.setdefault((kind, point.size_kb, mode), {})[name] = point.seconds
        for (kind, size_kb, mode), times in by_point.items():
            for a, ta in times.items():
                for b, tb in times.items():
                    paired = [y / x for x, y in zip(ta, tb)]
                    if a != b and paired:
                        rows.append(
                            {
                                "adapter": a,
                                "peer": b,
                                "workload": kind,
                                "size_kb": size_kb,
                                "delivery": mode,
                                "speedup": round(statistics.median(paired), 3),
                                "reps": len(paired),
                            }
                        )
        return rows

    def series_rows(self, versions: dict[str, str | None]) -> list[dict[str, Any]]:
        rows = []
        for (name, kind, mode), series in self.series.items():
            points = [p for p in series.points if p.seconds]
            if not points:
                continue
            sizes = [p.size_kb for p in points]
            costs = [statistics.median(p.seconds) for p in points]
            exponent, fitted = series_exponent(sizes, costs)
            rows.append(
                {
                    "adapter": name,
                    "version": versions.get(name),
                    "workload": kind,
                    "delivery": mode,
                    "sizes_kb": sizes,
                    "median_s": [round(c, 6) for c in costs],
                    "per_delta_us": [round(c / p.deltas * 1e6, 3) for c, p in zip(costs, points)],
                    "throughput_kchars_s": [
                        round(p.chars / c / 1000, 1) for c, p in zip(costs, points)
                    ],
                    "chars": [p.chars for p in points],
                    "deltas": [p.deltas for p in points],
                    "reps": [len(p.seconds) for p in points],
                    "exponent": None if exponent is None else round(exponent, 3),
                    "fitted_sizes_kb": fitted,
                    "capped": series.capped,
                }
            )
        return rows


def peak_memory(adapter: Any, request: Request, delivery: modes.Delivery) -> int:
    """Peak bytes allocated by one run (tracemalloc), outside the timed runs."""
    gc.collect()
    tracemalloc.start()
    try:
        _runner(adapter, request, delivery)()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- the harness's own cost -------------------------------------------------------------------


class _TimedAdapter:
    """Delegates to an adapter and adds up the time spent inside its two parse methods."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.parser_seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def parse_whole(self, request: Request, output: Delta) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.parse_whole(request, output)
        finally:
            self.parser_seconds += time.perf_counter() - started

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.parse_stream(request, deltas)
        finally:
            self.parser_seconds += time.perf_counter() - started


def harness_cost(
    adapters: dict[str, Any], tokenizer: Any, budget: float, max_cases: int | None
) -> list[dict[str, Any]]:
    """Run the matrix's own cell function (delivery modes, stream reassembly, comparison) in
    this process over a sample of the corpus, and split its time into the parsers' calls
    and everything else."""
    from k2conform.adapter.registry import Availability
    from k2conform.case.corpus import load_corpus
    from k2conform.run.cell import CellSettings, run_cell

    cases = sorted(load_corpus().completions, key=lambda c: c.id)
    rows = []
    for name, adapter in adapters.items():
        timed = _TimedAdapter(adapter)
        settings = CellSettings(deadline=600.0)
        cache: dict = {}
        started = time.perf_counter()
        cells = 0
        step = max(1, len(cases) // max_cases) if max_cases else 1
        for case in cases[::step]:
            if case.format not in adapter.formats:
                continue
            for mode in modes.DEFAULT_MODES:
                run_cell(timed, case, mode, settings, Availability("ok"), cache)
                cells += 1
            if time.perf_counter() - started > budget:
                break
        total = time.perf_counter() - started
        rows.append(
            {
                "adapter": name,
                "cells": cells,
                "cases": cells // len(modes.DEFAULT_MODES),
                "seconds": round(total, 3),
                "parser_seconds": round(timed.parser_seconds, 3),
                "outside_share": round(1 - timed.parser_seconds / total, 3) if total else None,
                "ms_per_cell": round(total / cells * 1000, 3) if cells else None,
            }
        )
    return rows


def run_results_cost(path: Path) -> dict[str, Any]:
    """Wall time and summed cell time of a ``k2conform run --json`` results file."""
    results = json.loads(path.read_text(encoding="utf-8"))
    by_adapter: dict[str, float] = {}
    for cell in results["cells"]:
        by_adapter[cell["adapter"]] = by_adapter.get(cell["adapter"], 0.0) + cell.get(
            "seconds", 0.0
        )
    return {
        "file": str(path),
        "wall_seconds": round(results["wall_seconds"], 2),
        "cells": len(results["cells"]),
        "cell_seconds": {k: round(v, 2) for k, v in by_adapter.items()},
    }


# -- the command -------------------------------------------------------------------------------


def run_bench(
    names: Sequence[str],
    *,
    quick: bool = False,
    reps: int | None = None,
    series_budget: float | None = None,
    max_seconds: float | None = None,
    memory_kb: int | None = None,
    harness: bool = True,
    fuzz_seconds: int = 0,
    fuzz_workers: Sequence[int] = (),
    run_results: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    from k2conform.adapter.registry import create_adapter, load
    from k2conform.delivery.tokenizer import load_tokenizer

    started = time.monotonic()
    max_seconds = max_seconds if max_seconds is not None else (30.0 if quick else 55.0)
    deadline = started + max_seconds
    sizes = QUICK_SIZES_KB if quick else SIZES_KB
    reps = reps or (2 if quick else 3)
    series_budget = series_budget or (5.0 if quick else 9.0)
    tokenizer = load_tokenizer()
    adapters, rows = {}, []
    for name in names:
        adapter = create_adapter(name)
        t0 = time.perf_counter()
        availability = load(adapter)
        rows.append(
            {
                "name": adapter.name,
                "version": adapter.version(),
                "status": availability.status,
                "reason": availability.reason,
                "load_seconds": round(time.perf_counter() - t0, 3),
            }
        )
        if availability.status == "ok":
            adapters[adapter.name] = adapter
        log(
            f"{adapter.name} {adapter.version() or '-'}: {availability.status} "
            f"{availability.reason} ({rows[-1]['load_seconds']} s to load)"
        )
    bench = Bench(
        adapters, tokenizer, reps=reps, series_budget=series_budget, deadline=deadline, log=log
    )
    bench.workload("parallel", [0])
    bench.workload("args", sizes)
    bench.workload("content", [s for s in sizes if s <= CONTENT_MAX_KB])
    versions = {r["name"]: r["version"] for r in rows}
    doc: dict[str, Any] = {
        "k2conform": __version__,
        "quick": quick,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg": list(os.getloadavg()),
        },
        "settings": {
            "sizes_kb": list(sizes),
            "reps": reps,
            "series_budget_s": series_budget,
            "max_seconds": max_seconds,
            "delta_chars": DELTA_CHARS,
            "fit_from_kb": FIT_FROM_KB,
            "superlinear_exponent": SUPERLINEAR_EXPONENT,
            "parallel_calls": PARALLEL_CALLS,
        },
        "adapters": rows,
        "series": bench.series_rows(versions),
        "comparisons": bench.pairs(),
        "errors": dict(bench.errors),
    }
    doc["streaming_cost"] = streaming_cost(doc)
    memory_kb = memory_kb or (4 if quick else 10)
    text, request = workload("args", memory_kb)
    deliveries = make_deliveries(text, tokenizer)
    doc["memory"] = []
    for name, adapter in adapters.items():
        for mode, delivery in deliveries.items():
            if name in bench.errors:
                continue
            doc["memory"].append(
                {
                    "adapter": name,
                    "delivery": mode,
                    "size_kb": memory_kb,
                    "chars": len(text),
                    "peak_kib": round(peak_memory(adapter, request, delivery) / 1024, 1),
                }
            )
    if harness:
        log("harness: the matrix's cell function over a corpus sample")
        doc["harness"] = harness_cost(
            adapters, tokenizer, budget=2.0, max_cases=12 if quick else None
        )
    if run_results is not None:
        doc["run_results"] = run_results_cost(run_results)
    if fuzz_seconds:
        log(f"fuzz: every target for {fuzz_seconds} s, side by side")
        doc["fuzz"] = fuzz_speeds(fuzz_seconds)
        if fuzz_workers:
            log(f"fuzz: differential alone for {fuzz_seconds} s with {fuzz_workers} workers")
            doc["fuzz_workers"] = worker_speeds(fuzz_seconds, fuzz_workers)
    doc["wall_seconds"] = time.monotonic() - started
    return doc
