"""The benchmark's document as a console table and a log-log plot of cost against size."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from k2conform.bench.fuzz_speed import fuzz_lines, worker_lines


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
