"""How a parser's cost grows with its output: the scaling exponent, the least-squares slope of
log(total time) against log(size) over the measured sizes of at least 10 KB (all sizes if
fewer than two): 1 is linear (constant cost per delta), 2 quadratic.  A streaming exponent
above :data:`SUPERLINEAR_EXPONENT` is a ``superlinear`` finding in the conformance report
(``k2conform run --bench bench.json``)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from k2conform.bench.workloads import STREAMING

#: A streaming exponent above this is reported as ``superlinear``.
SUPERLINEAR_EXPONENT = 1.3
#: The exponent is fitted from this size up (the issue's 10 KB to 400 KB range).
FIT_FROM_KB = 10


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
