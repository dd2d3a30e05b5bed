"""``k2conform bench``: how every parser's cost grows with its output.

For each adapter, one call whose JSON arguments are N KB (``args``), long content before
one small call (``content``) and 64 parallel small calls (``parallel``), delivered
``whole``, ``stream-token`` (one token per delta, the stand-in tokenizer) and
``stream-4char`` (4 characters per delta, text-level).  What is timed is the adapter's
own call (``parse_whole`` / ``parse_stream``): the parser and the server steps its
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

The scaling exponent is the least-squares slope of log(total time) against log(size)
over the measured sizes of at least 10 KB (all sizes if fewer than two): 1 is linear
(constant cost per delta), 2 quadratic.  A streaming exponent above
:data:`SUPERLINEAR_EXPONENT` is a ``superlinear`` finding in the conformance report
(``k2conform run --bench bench.json``).
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from k2conform import __version__
from k2conform.delivery import modes as dl
from k2conform import markers as mk
from k2conform.model import Delta, Request
from k2conform.bench.fuzz_speed import fuzz_lines, fuzz_speeds, worker_lines, worker_speeds

#: A streaming exponent above this is reported as ``superlinear``.
SUPERLINEAR_EXPONENT = 1.3
#: The exponent is fitted from this size up (the issue's 10 KB to 400 KB range).
FIT_FROM_KB = 10
SIZES_KB = (1, 4, 10, 40, 100, 400)
QUICK_SIZES_KB = (1, 4, 16)
CONTENT_MAX_KB = 100
PARALLEL_CALLS = 64
DELIVERIES = ("whole", "stream-token", "stream-4char")
STREAMING = ("stream-token", "stream-4char")
DELTA_CHARS = 4
TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file",
        "parameters": {"type": "object", "properties": {}},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "integer"}},
        },
    },
}


# -- workloads ---------------------------------------------------------------------------


def json_arguments(chars: int) -> str:
    """Deterministic JSON arguments of about ``chars`` characters: strings with escapes,
    numbers, nested objects and arrays, as a large tool call carries them."""
    items, size, i = [], 2, 0
    while size < chars:
        if i % 4 == 0:
            item = f'"line_{i}": "print(\\"row {i}\\")\\n\\tvalue = {i} * 2  # café"'
        elif i % 4 == 1:
            item = f'"n_{i}": {i * 37 % 1000}.5'
        elif i % 4 == 2:
            item = f'"list_{i}": [1, 2, 3, "x<y", true, null]'
        else:
            item = f'"obj_{i}": {{"path": "/src/module_{i}.py", "mode": "w"}}'
        items.append(item)
        size += len(item) + 2
        i += 1
    return "{" + ", ".join(items) + "}"


def call_output(arguments: str, name: str = "write_file", index: int = 0) -> str:
    return f"{mk.CALL_BEGIN}functions.{name}:{index}{mk.ARGUMENT_BEGIN}{arguments}{mk.CALL_END}"


def workload(kind: str, size_kb: int) -> tuple[str, Request]:
    """The model output and request of one benchmark point."""
    if kind == "args":
        text = mk.SECTION_BEGIN + call_output(json_arguments(size_kb * 1000)) + mk.SECTION_END
        return text, Request(tools=(TOOL,))
    if kind == "content":
        sentence = (
            "The quick brown fox jumps over the lazy dog; prices rose 3.5% (see <b>table</b>).\n"
        )
        prose = (sentence * (size_kb * 1000 // len(sentence) + 1))[: size_kb * 1000]
        call = call_output('{"path": "notes.txt", "content": "done"}')
        return prose + mk.SECTION_BEGIN + call + mk.SECTION_END, Request(tools=(TOOL,))
    if kind == "parallel":
        calls = "".join(
            call_output(json.dumps({"city": f"City {i}", "day": i}), "get_weather", i)
            for i in range(PARALLEL_CALLS)
        )
        return "Checking.\n" + mk.SECTION_BEGIN + calls + mk.SECTION_END, Request(
            tools=(WEATHER, TOOL)
        )
    raise ValueError(f"unknown workload {kind!r}")


def make_deliveries(text: str, tokenizer: Any) -> dict[str, dl.Delivery]:
    """The three deliveries of one output; tokenising is done once, outside the timing."""
    whole = dl.deliveries(text, "whole", tokenizer)[0]
    token = dl.deliveries(text, "stream-token", tokenizer)[0]
    chars = dl.Delivery("stream-4char", dl.cut(text, range(DELTA_CHARS, len(text), DELTA_CHARS)))
    return {"whole": whole, "stream-token": token, "stream-4char": chars}


# -- fitting and findings ------------------------------------------------------------------


def fit_exponent(sizes: Sequence[float], costs: Sequence[float]) -> float | None:
    """Least-squares slope of log(cost) against log(size); None with fewer than two sizes."""
    points = [(math.log(s), math.log(c)) for s, c in zip(sizes, costs) if s > 0 and c > 0]
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx


def series_exponent(
    sizes_kb: Sequence[float], costs: Sequence[float]
) -> tuple[float | None, list[float]]:
    """The exponent over the sizes of at least FIT_FROM_KB (all sizes when fewer than two)."""
    fitted = [(s, c) for s, c in zip(sizes_kb, costs) if s >= FIT_FROM_KB]
    if len(fitted) < 2:
        fitted = list(zip(sizes_kb, costs))
    return fit_exponent([s for s, _ in fitted], [c for _, c in fitted]), [s for s, _ in fitted]


def is_superlinear(exponent: float | None, threshold: float = SUPERLINEAR_EXPONENT) -> bool:
    return exponent is not None and exponent > threshold


def streaming_cost(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """Each adapter's streaming scaling on the ``args`` workload, with a ``superlinear``
    finding (and its evidence) where the exponent exceeds the threshold."""
    rows = []
    for series in bench.get("series", ()):
        if series["workload"] != "args" or series["delivery"] not in STREAMING:
            continue
        exponent = series.get("exponent")
        rows.append(
            {
                "adapter": series["adapter"],
                "version": series.get("version"),
                "delivery": series["delivery"],
                "exponent": exponent,
                "fitted_sizes_kb": series.get("fitted_sizes_kb", []),
                "finding": "superlinear" if is_superlinear(exponent) else None,
                "threshold": SUPERLINEAR_EXPONENT,
                "evidence": {
                    "sizes_kb": series["sizes_kb"],
                    "per_delta_us": series["per_delta_us"],
                    "throughput_kchars_s": series["throughput_kchars_s"],
                    "capped": series.get("capped"),
                },
            }
        )
    return rows


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


def _runner(adapter: Any, request: Request, delivery: dl.Delivery) -> Callable[[], Any]:
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
        delivery: dl.Delivery,
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


def peak_memory(adapter: Any, request: Request, delivery: dl.Delivery) -> int:
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
            if case.family not in adapter.families:
                continue
            for mode in dl.DEFAULT_MODES:
                run_cell(timed, case, mode, settings, Availability("ok"), cache)
                cells += 1
            if time.perf_counter() - started > budget:
                break
        total = time.perf_counter() - started
        rows.append(
            {
                "adapter": name,
                "cells": cells,
                "cases": cells // len(dl.DEFAULT_MODES),
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


# -- output ------------------------------------------------------------------------------------


def table(doc: dict[str, Any]) -> str:
    lines = []
    sizes = sorted({s for row in doc["series"] for s in row["sizes_kb"]})
    header = (
        f"{'adapter':<10} {'workload':<8} {'delivery':<13} "
        + " ".join(f"{str(s) + ' KB':>15}" for s in sizes)
        + "  exponent"
    )
    lines += [
        "throughput K chars/s | per-delta µs (whole: ms per parse), median of runs side by side",
        header,
        "-" * len(header),
    ]
    for row in doc["series"]:
        cells = []
        for s in sizes:
            if s in row["sizes_kb"]:
                k = row["sizes_kb"].index(s)
                cost = (
                    f"{row['median_s'][k] * 1000:.2f}ms"
                    if row["delivery"] == "whole"
                    else f"{row['per_delta_us'][k]:.1f}µs"
                )
                cells.append(f"{row['throughput_kchars_s'][k]:>6.0f}|{cost:<8}")
            else:
                cells.append(f"{'-':>15}")
        exponent = "-" if row["exponent"] is None else f"{row['exponent']:.2f}"
        capped = (
            f"  capped after {row['capped']['after_kb']} KB ({row['capped']['reason']})"
            if row["capped"]
            else ""
        )
        lines.append(
            f"{row['adapter']:<10} {row['workload']:<8} {row['delivery']:<13} "
            + " ".join(cells)
            + f"  {exponent:>6}{capped}"
        )
    lines.append("")
    for row in doc["streaming_cost"]:
        if row["finding"]:
            lines.append(
                f"SUPERLINEAR {row['adapter']} {row['delivery']}: exponent {row['exponent']:.2f} > "
                f"{row['threshold']}"
                f" (per-delta µs {row['evidence']['per_delta_us']} at "
                f"{row['evidence']['sizes_kb']} KB)"
            )
    ratios = [p for p in doc["comparisons"] if p["adapter"] == "reference"]
    if ratios:
        lines.append("reference speed-up over each peer (median of per-repetition ratios):")
        for p in ratios:
            lines.append(
                f"  vs {p['peer']:<8} {p['workload']:<8} {p['size_kb']:>4} KB {p['delivery']:<13} "
                f"{p['speedup']:8.1f}x"
            )
    if doc.get("memory"):
        lines.append(
            "peak memory (tracemalloc, one run): "
            + "; ".join(
                f"{m['adapter']} {m['delivery']} {m['size_kb']} KB {m['peak_kib']} KiB"
                for m in doc["memory"]
            )
        )
    for row in doc.get("harness") or ():
        lines.append(
            f"harness {row['adapter']}: {row['cells']} cells in {row['seconds']} s, parsers "
            f"{row['parser_seconds']} s,"
            f" {100 * (row['outside_share'] or 0):.0f}% outside the parser ({row['ms_per_cell']} "
            "ms/cell)"
        )
    if doc.get("run_results"):
        r = doc["run_results"]
        lines.append(
            f"k2conform run ({r['file']}): wall {r['wall_seconds']} s, {r['cells']} cells, cell "
            f"seconds {r['cell_seconds']}"
        )
    if doc.get("fuzz") is not None:
        lines += fuzz_lines(doc["fuzz"])
    if doc.get("fuzz_workers") is not None:
        lines += worker_lines(doc["fuzz_workers"])
    for name, error in doc.get("errors", {}).items():
        lines.append(f"ERROR {name}: {error}")
    lines.append(f"bench wall time {doc['wall_seconds']:.1f} s")
    return "\n".join(lines) + "\n"


_COLOURS = {"reference": "#1b5e20", "vllm": "#0d47a1", "sglang": "#b71c1c"}
_STYLES = {"whole": ":", "stream-token": "--", "stream-4char": "-"}


def plot(doc: dict[str, Any], path: Path) -> str:
    """A log-log PNG of cost against size per adapter: per-delta cost of the streams and
    time per parse of the one-shot path.  Uses matplotlib when installed (the ``bench``
    extra), else a plain raster plot (axes, decade grid, one line per series)."""
    rows = [r for r in doc["series"] if r["workload"] == "args" and len(r["sizes_kb"]) >= 1]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _raster_plot(rows, path)
        return "raster"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for row in rows:
        colour = _COLOURS.get(row["adapter"])
        label = f"{row['adapter']} {row['delivery']} (exp {row['exponent']})"
        if row["delivery"] == "whole":
            right.plot(
                row["sizes_kb"],
                [s * 1000 for s in row["median_s"]],
                "o:",
                color=colour,
                label=label,
            )
        else:
            left.plot(
                row["sizes_kb"],
                row["per_delta_us"],
                "o" + _STYLES[row["delivery"]],
                color=colour,
                label=label,
            )
    for axis, title, unit in (
        (left, "streaming: cost per delta", "µs per delta"),
        (right, "one-shot: time per parse", "ms per parse"),
    ):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("JSON arguments in one call (KB)")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(f"k2conform bench ({doc['k2conform']}): cost against size, log-log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return "matplotlib"


def _raster_plot(
    rows: list[dict[str, Any]], path: Path, width: int = 640, height: int = 400
) -> None:
    import struct
    import zlib

    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    points = [(s, c) for r in rows for s, c in zip(r["sizes_kb"], _costs(r)) if s > 0 and c > 0]
    if points:
        lx = [math.log10(s) for s, _ in points]
        ly = [math.log10(c) for _, c in points]
        x0, x1 = math.floor(min(lx)), math.ceil(max(lx)) or 1
        y0, y1 = math.floor(min(ly)), math.ceil(max(ly))
        x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
        margin = 40

        def to_px(s: float, c: float) -> tuple[int, int]:
            x = margin + (math.log10(s) - x0) / (x1 - x0) * (width - 2 * margin)
            y = height - margin - (math.log10(c) - y0) / (y1 - y0) * (height - 2 * margin)
            return int(x), int(y)

        def line(a: tuple[int, int], b: tuple[int, int], colour: tuple[int, int, int]) -> None:
            steps = max(abs(b[0] - a[0]), abs(b[1] - a[1]), 1)
            for k in range(steps + 1):
                x = a[0] + (b[0] - a[0]) * k // steps
                y = a[1] + (b[1] - a[1]) * k // steps
                if 0 <= x < width and 0 <= y < height:
                    pixels[y][x] = colour

        grey = (210, 210, 210)
        for d in range(x0, x1 + 1):
            line(to_px(10**d, 10**y0), to_px(10**d, 10**y1), grey)
        for d in range(y0, y1 + 1):
            line(to_px(10**x0, 10**d), to_px(10**x1, 10**d), grey)
        for r in rows:
            hexc = _COLOURS.get(r["adapter"], "#444444")
            colour = tuple(int(hexc[i : i + 2], 16) for i in (1, 3, 5))
            pts = [to_px(s, c) for s, c in zip(r["sizes_kb"], _costs(r)) if s > 0 and c > 0]
            for a, b in zip(pts, pts[1:]):
                line(a, b, colour)
            for x, y in pts:
                for dx in (-1, 0, 1):
                    for dy in (-1, 0, 1):
                        if 0 <= x + dx < width and 0 <= y + dy < height:
                            pixels[y + dy][x + dx] = colour
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _costs(row: dict[str, Any]) -> list[float]:
    return (
        [s * 1000 for s in row["median_s"]] if row["delivery"] == "whole" else row["per_delta_us"]
    )


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
