"""``k2conform bench``: the command line of :mod:`k2conform.bench.measure` (how each parser's cost
grows with its output, and how it is measured on a noisy machine, is said there) and of
``bench --rediscovery`` (:mod:`k2conform.bench.rediscovery`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from k2conform.bench import measure
from k2conform.bench.measure import run_bench
from k2conform.bench.render import plot, table


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench", help="throughput, per-delta cost and scaling exponent of every adapter"
    )
    p.description = (measure.__doc__ or "").split("\n\n")[0] + (
        " Prints a table; --json writes every figure, --plot a log-log PNG of cost against size."
    )
    p.add_argument(
        "--adapter",
        action="append",
        help="adapter to measure (repeatable; default: all registered)",
    )
    p.add_argument("--json", type=Path, help="write every figure as JSON (input of run --bench)")
    p.add_argument("--plot", type=Path, help="write a log-log PNG of cost against size per adapter")
    p.add_argument(
        "--quick", action="store_true", help="small sizes, two repetitions, no fuzzing (seconds)"
    )
    p.add_argument("--reps", type=int, help="repetitions per point (default 3; quick 2)")
    p.add_argument(
        "--series-budget", type=float, help="seconds per adapter x workload x delivery (default 9)"
    )
    p.add_argument(
        "--max-seconds", type=float, help="stop measuring new sizes after this long (default 55)"
    )
    p.add_argument("--no-harness", action="store_true", help="skip the harness-cost measurement")
    p.add_argument(
        "--fuzz-seconds",
        type=int,
        default=None,
        help="bounded run per fuzz target (default 3; quick 0)",
    )
    p.add_argument(
        "--fuzz-workers",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="then the differential target alone with N workers (repeatable: 1 vs 2)",
    )
    p.add_argument(
        "--run-results",
        type=Path,
        help="a k2conform run --json file: report its wall time and cell time",
    )
    rediscovery_options(p)
    p.set_defaults(handler=cmd_bench)


def rediscovery_options(p: argparse.ArgumentParser) -> None:
    from k2conform.bench.rediscovery import CONFIGURATIONS, SEED_SETS

    group = p.add_argument_group(
        "rediscovery", "--rediscovery: fuzzing measured by the catalogued behaviours it finds"
    )
    group.add_argument("--rediscovery", action="store_true", help="run this benchmark instead")
    group.add_argument(
        "--budget", type=float, default=600.0, help="CPU seconds of fuzzing per trial (600)"
    )
    group.add_argument("--trials", type=int, default=3, help="trials per configuration (3)")
    group.add_argument("--seed", type=int, default=1, help="libFuzzer seed of the first trial")
    group.add_argument("--seeds", choices=SEED_SETS, default=SEED_SETS[0], help="the seed set")
    group.add_argument(
        "--configuration",
        action="append",
        choices=CONFIGURATIONS,
        help=f"what libFuzzer's coverage counts (repeatable; default: {', '.join(CONFIGURATIONS)})",
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from k2conform.adapter.registry import default_adapter_names

    if args.rediscovery:
        return cmd_rediscovery(args)

    names = args.adapter or default_adapter_names()
    fuzz_seconds = args.fuzz_seconds if args.fuzz_seconds is not None else (0 if args.quick else 3)
    doc = run_bench(
        names,
        quick=args.quick,
        reps=args.reps,
        series_budget=args.series_budget,
        max_seconds=args.max_seconds,
        harness=not args.no_harness,
        fuzz_seconds=fuzz_seconds,
        fuzz_workers=args.fuzz_workers,
        run_results=args.run_results,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        doc["plot"] = {"path": str(args.plot), "engine": plot(doc, args.plot)}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(table(doc))
    return 0


def cmd_rediscovery(args: argparse.Namespace) -> int:
    """``bench --rediscovery``: the trials, the table, ``--json`` and ``--plot``."""
    from k2conform.bench import rediscovery as rd
    from k2conform.errors import UsageError

    if not args.budget > 0 or args.trials < 1:
        raise UsageError("--budget must be more than 0 CPU seconds and --trials at least 1")
    for path in (args.json, args.plot):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    doc = rd.rediscovery(
        args.budget,
        args.trials,
        args.seeds,
        args.configuration or rd.CONFIGURATIONS,
        tuple(args.adapter or rd.ADAPTERS),
        args.seed,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.plot:
        doc["plot"] = rd.plot(doc, args.plot)
    if args.json:
        args.json.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("\n".join(rd.table_lines(doc)))
    return 0
