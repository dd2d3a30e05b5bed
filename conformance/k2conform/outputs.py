"""What every command that ends in a results document shares (``run``, ``merge``,
``grammar``, ``coverage``): its output and gate options, the check that its outputs can be
written before any work, and the gate with the reports it writes and prints."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from k2conform.errors import UsageError
from k2conform.model import RunResults


def add_gate_options(p: argparse.ArgumentParser, what: str) -> None:
    """The outputs and the gate of a command that ends in results (run, merge)."""
    p.add_argument("--json", type=Path, help="write every cell with its observed result and diff")
    p.add_argument("--html", type=Path, help="write the HTML report (and an SVG matrix beside it)")
    p.add_argument("--markdown", type=Path, help="write a Markdown summary (for a CI job summary)")
    p.add_argument(
        "--baseline", type=Path, help="known deviations; new ones and stale entries fail the gate"
    )
    p.add_argument(
        "--allow-missing",
        action="append",
        default=[],
        metavar="ADAPTER",
        help=f"an adapter the baseline covers that may be absent from {what} (repeatable)",
    )


def check_writable(*paths: Path | None) -> None:
    """Refuse, before any work, an output path that cannot be written."""
    for path in paths:
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
        if (
            path.is_dir()
            or not os.access(path.parent, os.W_OK)
            or (path.exists() and not os.access(path, os.W_OK))
        ):
            raise UsageError(f"cannot write {path}: not a writable file path")


def gate_and_report(results: RunResults, baseline: Any, args: argparse.Namespace) -> int:
    """The gate, the reports, the console summary; the exit status."""
    from k2conform.report import pages as report
    from k2conform.gate.baseline import gate
    from k2conform.gate.behaviours import gated_behaviours

    results, passed = gate(results, baseline, args.allow_missing)
    passed = passed and "partial" not in results.extra
    grouped = gated_behaviours(results)  # once, for the summary and the HTML page
    summary = report.markdown(results, grouped)  # the gate's every new, stale and missing item
    write_reports(results, args.json, args.html, args.markdown, summary, grouped)
    sys.stdout.write(summary)
    return 0 if passed else 1


def write_reports(
    results: RunResults,
    json_path: Path | None,
    html_path: Path | None,
    md_path: Path | None,
    summary: str | None = None,
    grouped: Any = None,
) -> None:
    """``summary``: the Markdown summary when the caller has rendered it already; ``grouped``:
    the behaviours, when it has grouped them
    (:func:`k2conform.gate.behaviours.gated_behaviours`)."""
    from k2conform.report import pages as report

    for path, text in (
        (json_path, lambda: json.dumps(results.to_json(), ensure_ascii=False, indent=1)),
        (html_path, lambda: report.html_page(results, grouped)),
        (html_path.with_suffix(".svg") if html_path else None, lambda: report.matrix_svg(results)),
        (md_path, lambda: summary if summary is not None else report.markdown(results)),
    ):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A parser's strings may hold lone surrogates (ms-swift decodes the JSON escape \ud83d
            # and re-encodes it with ensure_ascii=False): written as \udXXX, which JSON reads back.
            path.write_text(text(), encoding="utf-8", errors="backslashreplace")
