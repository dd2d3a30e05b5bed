"""``k2conform coverage``: the corpus (or a fuzz corpus, ``--replay``) through every in-process
adapter under coverage.py, branch mode, restricted to the files each adapter declares
(``coverage_files``, ``coverage_shared_files``); line and branch coverage per file, raw and of
what Kimi can reach (by the rules of ``reachability``, and by the reviewed list
``unreachable.toml``, whose stale entries are reported).  Exit status: 0 measured (every
adapter named with --adapter, else at least one), 1 an adapter that should have been measured
was not, 2 usage or harness error (a malformed reviewed list among them)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from k2conform.case.corpus import add_case_options
from k2conform.delivery import modes
from k2conform.errors import UsageError

COVERAGE_PY = "coverage==7.17.3"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "coverage", help="line and branch coverage of the parsers' own Kimi code by the corpus"
    )
    p.description = (__doc__ or "").replace("\n", " ")
    p.add_argument(
        "--adapter",
        action="append",
        help="adapter to measure (repeatable; default: all registered)",
    )
    p.add_argument(
        "--delivery",
        action="append",
        metavar="MODE",
        help="delivery mode (repeatable; default: every mode each adapter takes)",
    )
    add_case_options(p)
    p.add_argument(
        "--replay",
        type=Path,
        metavar="DIR",
        help="run a fuzz corpus directory (the reference/differential targets' input files) "
        "instead; stream-recorded is the input's own cuts",
    )
    p.add_argument(
        "--json",
        type=Path,
        help="write the coverage document (input of `k2conform report --coverage`)",
    )
    p.add_argument(
        "--html", type=Path, help="write a standalone page with every file's source marked"
    )
    p.add_argument(
        "--unreachable",
        type=Path,
        metavar="FILE",
        help="the reviewed list of unreachable code (default: the shipped "
        "k2conform/coverage/unreachable.toml); its stale entries are reported",
    )
    p.set_defaults(handler=cmd_coverage)


def cmd_coverage(args: argparse.Namespace) -> int:
    from k2conform.adapter.registry import default_adapter_names
    from k2conform.case.corpus import default_corpus_dir
    from k2conform.outputs import check_writable
    from k2conform.coverage import page, reviewed
    from k2conform.coverage.measure import measure
    from k2conform.coverage.sources import Source, targets
    from k2conform.run.cell import CellSettings

    _require_coverage_py()
    asked = _modes(args.delivery or ())
    if args.replay is not None and args.corpus is not None:
        raise UsageError("give --corpus or --replay, not both")
    source = Source(
        corpus=None if args.replay else (args.corpus or default_corpus_dir()),
        replay=args.replay,
        case_globs=tuple(args.case),
    )
    source.cases()  # a bad directory or an empty selection stops here, before anything runs
    entries = reviewed.load(args.unreachable)  # a malformed list stops here, before anything runs
    check_writable(args.json, args.html)
    measured, skipped = targets(args.adapter or default_adapter_names(), asked)
    document = measure(measured, skipped, source, CellSettings(), entries)
    if args.json:
        args.json.write_text(
            json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    if args.html:
        args.html.write_text(page.html_page(document), encoding="utf-8")
    sys.stdout.write(page.console_table(document))
    done = {a["name"] for a in document["adapters"] if a["status"] == "measured"}
    wanted = [a["name"] for a in document["adapters"]] if args.adapter else []
    return 0 if done and all(name in done for name in wanted) else 1


def _require_coverage_py() -> None:
    try:
        import coverage  # noqa: F401 - only checked for here
    except ImportError:
        raise UsageError(
            f"coverage.py is not installed: pip install {COVERAGE_PY} (or k2conform[test])"
        ) from None


def _modes(asked: Sequence[str]) -> tuple[str, ...]:
    for mode in asked:
        if mode not in modes.MODES:
            raise UsageError(f"unknown delivery mode {mode!r} (known: {', '.join(modes.MODES)})")
    return tuple(dict.fromkeys(asked))
