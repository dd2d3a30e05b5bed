"""``k2conform minimize``: the command line of :mod:`k2conform.minimize.delta_debug` (what it
shrinks and how is said there), and the baseline entries it can add for the case it writes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from k2conform import formats
from k2conform.minimize import delta_debug
from k2conform.minimize.delta_debug import JudgedEngine, NoMatrixFinding, minimize_input, read_input


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "minimize", help="shrink a disagreeing input and write it as a corpus case"
    )
    p.description = (delta_debug.__doc__ or "").split("\n\n")[1].replace("\n", " ")
    p.add_argument("input", type=Path, help="a case file, a JSON payload or a raw fuzz input")
    p.add_argument(
        "--delivery",
        help="delivery mode (default: the one the input names, else whole; "
        "stream-recorded replays the input's deltas)",
    )
    p.add_argument(
        "--adapter", action="append", help="adapter under test (repeatable; default: all available)"
    )
    p.add_argument(
        "--signature",
        help="the signature to keep, e.g. sglang:leaked-marker (default: the one the "
        "input names, else its own); adapters it does not name may change",
    )
    p.add_argument("--out", type=Path, help="directory for the case (default: corpus/findings)")
    p.add_argument(
        "--baseline",
        type=Path,
        help="also run the written case through every adapter this baseline covers and add "
        "an entry per failing behaviour, its reason TODO (the gate refuses it until reviewed)",
    )
    p.add_argument(
        "--fuzz-kind-only",
        action="store_true",
        help="hold only the fuzz signature, not the matrix's verdict prefix and fields",
    )
    p.add_argument(
        "--format",
        choices=tuple(formats.FORMATS),
        help="the Kimi format of a raw fuzz input or payload (a case file names its own; "
        "default k2)",
    )
    p.add_argument("--target", default="differential", help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help="print the case instead of writing it")
    p.set_defaults(handler=cmd_minimize)


def cmd_minimize(args: argparse.Namespace) -> int:
    import logging
    import warnings

    from k2conform.case.corpus import default_corpus_dir
    from k2conform.errors import UsageError
    from k2conform.fuzzing.differential import (
        FUZZ_MODES,
        Differential,
        finding_case,
        run_label,
        write_case_file,
    )
    from k2conform.model import dumps_canonical

    request, text, deltas, named, named_signature, spelled, format = read_input(
        args.input, args.format
    )
    mode = args.delivery or named or ("stream-recorded" if deltas is not None else "whole")
    if mode not in FUZZ_MODES:
        raise UsageError(f"unknown delivery mode {mode!r}")
    if mode == "stream-recorded" and deltas is None:
        raise UsageError("--delivery stream-recorded needs deltas in the input")
    if args.baseline is not None and args.dry_run:
        raise UsageError("--baseline adds entries for the written case: not with --dry-run")
    baseline = read_baseline(args.baseline)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    engine = Differential(args.adapter, format=format)
    wanted = args.signature or named_signature
    try:
        observation, start, small, minimizer = minimize_input(
            engine,
            request,
            text,
            mode,
            deltas,
            wanted,
            judged=not args.fuzz_kind_only,
            spelled=spelled,
        )
    except NoMatrixFinding as why:
        print(f"k2conform minimize: {args.input}: {why}; nothing written", file=sys.stderr)
        return 1
    if observation is None:
        print(
            "k2conform minimize: no "
            f"disagreement{' with signature ' + wanted if wanted else ''} "
            f"in {mode} for {args.input}",
            file=sys.stderr,
        )
        return 1
    held = minimizer.engine if isinstance(minimizer.engine, JudgedEngine) else None
    cells = held.cells_of(small, mode) if held is not None else {}
    case = finding_case(
        small.request,
        small.text,
        observation,
        run_label(args.target, format),
        minimised=True,
        focus=minimizer.signature,
        cells=cells,
    )
    print(
        f"signature {observation.signature} in {mode}: {len(start.text)} -> {len(small.text)} "
        "characters, "
        f"{len(start.cuts or ()) + 1 if start.cuts is not None else '-'} -> "
        f"{len(small.cuts or ()) + 1 if small.cuts is not None else '-'} deltas, "
        f"{len(start.request.tools)} -> {len(small.request.tools)} tools, {minimizer.tests} tests"
    )
    if held is not None:
        print_known(case, cells, mode)
    if args.dry_run:
        sys.stdout.write(dumps_canonical(case.to_json()))
        return 0
    out = args.out or default_corpus_dir() / "findings"
    try:
        path = write_case_file(case, out)
    except OSError as error:
        raise UsageError(f"cannot write the case to {out}: {error}") from None
    print(f"wrote {path}")
    if baseline is not None:
        add_baseline_entries(args.baseline, baseline, case)
    return 0


def read_baseline(path: Path | None) -> Any:
    from k2conform.case.corpus import CorpusError
    from k2conform.errors import UsageError
    from k2conform.gate.baseline import load_baseline

    if path is None:
        return None
    try:
        baseline = load_baseline(path)
    except CorpusError as error:
        raise UsageError(str(error)) from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{path}: not writable, and --baseline adds the case's entries to it")
    return baseline


def print_known(case: Any, cells: Mapping[str, Any], mode: str) -> None:
    """For each adapter held, the matrix's judgement and where the project already has it."""
    from k2conform.fuzzing.differential import axis
    from k2conform.minimize.known import NEW, Judgement, Known

    known = Known.load()
    for name, cell in cells.items():
        behaviour = Judgement.of(cell, axis(mode, bool(case.spelled_markers)))
        where = known.lookup(case, behaviour)
        verdict = "known: " + "; ".join(where) if where else f"NEW: {NEW}"
        print(f"{behaviour} ({case.id[:1]}_ case): {verdict}")


def add_baseline_entries(path: Path, baseline: Any, case: Any) -> None:
    """The case through every adapter the baseline covers, in the modes a run plans, and an
    entry for each failing behaviour (reason TODO): what ``make matrix`` will ask for."""
    import json

    from k2conform.adapter.registry import create_adapter, load
    from k2conform.delivery.modes import planned_modes
    from k2conform.errors import UsageError
    from k2conform.gate.baseline import baseline_from_cells
    from k2conform.run.cell import CellSettings, run_cell
    from k2conform.run.matrix import plan

    adapters = {name: create_adapter(name) for name in baseline.adapters}
    ran, skipped, cells = set(), [], []
    settings = CellSettings()
    for name, adapter in adapters.items():
        availability = load(adapter)
        if availability.status != "ok" or not adapter.run_by_default:
            skipped.append(f"{name} ({availability.reason or 'runs only in its own lane'})")
            continue
        tasks = plan(
            [case], [name], planned_modes(adapter), None,
            {name: adapter.request_options}, {name: adapter.formats},
        )  # fmt: skip
        for _, _, delivery in tasks:
            cells.append(run_cell(adapter, case, delivery, settings, availability))
            ran.add(name)
    document = baseline_from_cells(cells, baseline.entries, set(baseline.adapters))
    try:
        path.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        raise UsageError(
            f"cannot write {path}: {error}; the case is written ({case.id}), the baseline is "
            "unchanged: run minimize --baseline again or add its entries by hand"
        ) from None
    failing = [c for c in cells if c.outcome.finding]
    print(
        f"{path}: {len(failing)} failing cell(s) of {case.id} over {', '.join(sorted(ran))} "
        f"now have entries with the reason TODO: review each, then the gate passes"
        + (f"; not run here: {', '.join(skipped)}" if skipped else "")
    )
