"""``k2conform report-finding``: the command line of :mod:`k2conform.report_finding.bug_report`
(what the report holds, and the exit status, are said there)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from k2conform.adapter.registry import create_adapter, load
from k2conform.case.corpus import default_corpus_dir, load_corpus
from k2conform.delivery import modes
from k2conform.errors import UsageError
from k2conform.report_finding.bug_report import (
    markdown,
    other_results,
    reproduces,
    run_script,
    script_for,
)
from k2conform.run.cell import CellSettings, run_cell


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report-finding",
        help="write a Markdown bug report (with a standalone repro) for one finding",
    )
    p.description = (
        "Runs CASE through ADAPTER in MODE, and writes a Markdown report for the parser's "
        "maintainers: "
        "the model output with markers visible, the deltas, the parser's result, the expected one "
        "and the "
        "other parsers' results, and a reproduction script that imports only the parser's package. "
        "The "
        "script is run once here (k2conform unimportable) to confirm it reproduces. Run it in the "
        "environment where the parser is installed (.venvs/NAME/bin/k2conform report-finding ...). "
        "Exit status: 0 reproduced, 1 not reproduced, 2 usage error or no script (the adapter "
        "has no reproduction template; the report is written)."
    )
    p.add_argument("case", help="case id")
    p.add_argument("--adapter", required=True, help="in-process adapter name (see list-adapters)")
    p.add_argument(
        "--delivery",
        default="whole",
        choices=list(modes.MODES),
        help="delivery mode (default: whole)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="report file (default: stdout); the script is written beside it as .py",
    )
    p.add_argument(
        "--compare",
        action="append",
        metavar="ADAPTER",
        help="other adapters to show (repeatable; default: every available registered adapter)",
    )
    p.add_argument(
        "--results",
        type=Path,
        help="a results JSON of k2conform run: its cells for this case and mode "
        "are shown too (parsers in other environments)",
    )
    p.add_argument("--corpus", type=Path, help="corpus directory (default: the shipped corpus)")
    p.add_argument("--seed", type=int, default=modes.DEFAULT_SEED)
    p.add_argument("--burst", type=int, default=modes.DEFAULT_BURST)
    p.add_argument(
        "--tokenizer", help="directory with the real tiktoken.model and tokenizer_config.json"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="seconds before the parse is a timeout (re-run once with 10x)",
    )
    p.add_argument("--no-run", action="store_true", help="do not run the reproduction script")
    p.set_defaults(handler=cmd_report_finding)


def cmd_report_finding(args: argparse.Namespace) -> int:
    from k2conform.delivery.tokenizer import load_tokenizer

    root = args.corpus or default_corpus_dir()
    cases = {c.id: c for c in load_corpus(root).completions}
    case = cases.get(args.case)
    if case is None:
        raise UsageError(f"no completion case {args.case!r} under {root}")
    adapter = create_adapter(args.adapter)
    availability = load(adapter)
    if availability.status != "ok":
        raise UsageError(
            f"adapter {adapter.name} is {availability.status} here: {availability.reason}"
        )
    tokenizer = load_tokenizer(args.tokenizer)
    cell = run_cell(adapter, case, args.delivery, CellSettings.from_args(args), availability)
    if not cell.outcome.finding:
        raise UsageError(
            f"{case.id} [{args.delivery}] is {cell.outcome} for {adapter.name}: not a finding"
        )
    variants = modes.case_deliveries(
        case, args.delivery, tokenizer, seed=args.seed, burst=args.burst
    )
    variant = next((v for v in variants if v.label == cell.variant), variants[0])

    others = other_results(args, adapter.name, case, variant)
    expected = case.expected.to_json() if case.expected else None
    script = script_for(adapter, case, variant, expected)
    script_path = args.out.with_suffix(".py") if args.out else None
    run = None
    if script is not None:
        if script_path is not None:
            script_path.parent.mkdir(parents=True, exist_ok=True)
            script_path.write_text(script, encoding="utf-8")
        if not args.no_run:
            run = run_script(script)
    verdict = reproduces(case, cell, run) if run is not None else None
    report = markdown(case, adapter, cell, variant, others, script, script_path, run, verdict)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        print(
            f"report written to {args.out}"
            + (f", script to {script_path}" if script is not None and script_path else ""),
            file=sys.stderr,
        )
    else:
        sys.stdout.write(report)
    if script is None:
        print(
            f"NO SCRIPT: the {adapter.name} adapter has no reproduction template (repro_script); "
            "the report has no reproduction",
            file=sys.stderr,
        )
        return 2
    if verdict is not None:
        print(("REPRODUCED: " if verdict[0] else "NOT REPRODUCED: ") + verdict[1], file=sys.stderr)
    return 0 if verdict is not None and verdict[0] else 1
