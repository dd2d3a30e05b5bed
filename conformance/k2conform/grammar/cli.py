"""``k2conform grammar``: each engine's own grammar (the structural tag its server builds for a
constrained request, compiled with the xgrammar release that engine pins) against its own
parser.  Each engine runs in its pinned environment (``k2conform setup-parsers grammar-vllm
grammar-sglang``), one worker process each; the cells form a results document with one
``grammar`` column, which ``report``, ``baseline`` and ``merge`` (beside a run) read.
Exit status: 0 when every cell passes (or is in the baseline), 1 on a finding, 2 on usage or
harness errors."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from k2conform.case.corpus import CompletionCase, add_case_options
from k2conform.delivery import modes
from k2conform.errors import HarnessError, UsageError

#: The engines whose grammar is checked: engine → the environment with its pinned xgrammar.
ENVIRONMENTS = {"vllm": "grammar-vllm", "sglang": "grammar-sglang"}
DEFAULT_SAMPLES = 20


def add_parser(subparsers: Any) -> None:
    from k2conform.outputs import add_gate_options

    p = subparsers.add_parser("grammar", help="each engine's grammar against its own parser")
    p.description = (__doc__ or "").replace("\n", " ")
    p.add_argument(
        "--engine",
        action="append",
        choices=list(ENVIRONMENTS),
        help="engine to check (repeatable; default: all)",
    )
    add_case_options(p)
    p.add_argument(
        "--samples",
        type=int,
        default=DEFAULT_SAMPLES,
        help=f"walks drawn from each required/named grammar (default {DEFAULT_SAMPLES})",
    )
    p.add_argument("--seed", type=int, default=modes.DEFAULT_SEED, help="run seed of the walks")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per parse cell")
    venvs = Path(os.environ.get("K2CONFORM_VENVS", ".venvs"))
    p.add_argument(
        "--venv-root",
        type=Path,
        default=venvs,
        help="where the grammar environments are (default .venvs, or $K2CONFORM_VENVS)",
    )
    add_gate_options(p, "this check")
    p.set_defaults(handler=cmd_grammar)


def cmd_grammar(args: argparse.Namespace) -> int:
    from k2conform import __version__
    from k2conform.outputs import check_writable, gate_and_report
    from k2conform.gate.baseline import load_baseline
    from k2conform.grammar.check import Job
    from k2conform.model import AdapterRow, CaseSummary, Cell, RunResults
    from k2conform.run.cell import CellSettings
    from k2conform.run.results import case_summary

    if args.samples < 0:
        raise UsageError(f"--samples must be 0 or more, not {args.samples}")
    try:
        settings = CellSettings(deadline=args.timeout)
    except ValueError as error:
        raise UsageError(str(error)) from None
    cases = constrainable_cases(args.corpus, args.case)
    pythons = {
        engine: _environment_python(engine, args.venv_root)
        for engine in args.engine or ENVIRONMENTS
    }
    baseline = load_baseline(args.baseline) if args.baseline else None
    check_writable(args.json, args.html, args.markdown)
    started = time.monotonic()
    jobs = {
        adapter: (engine, Job(adapter, chosen, args.seed, args.samples, settings))
        for engine in pythons
        for format, adapter in modes.GRAMMAR_ENGINES[engine].items()
        if (chosen := tuple(c for c in cases if c.format == format))
    }
    documents = run_workers(
        {adapter: job for adapter, (_, job) in jobs.items()},
        {adapter: pythons[engine] for adapter, (engine, _) in jobs.items()},
    )
    cells = tuple(Cell.from_json(c) for d in documents.values() for c in d["cells"])
    judged = {c.case for c in cells}
    summaries = [case_summary(c) for c in cases if c.id in judged]
    summaries += [CaseSummary.from_json(s) for d in documents.values() for s in d["samples"]]
    results = RunResults(
        __version__,
        args.seed,
        (modes.GRAMMAR_MODE,),
        tuple(AdapterRow.from_json(d["adapter"]) for d in documents.values()),
        tuple(summaries),
        cells,
        time.monotonic() - started,
        extra={
            "inventory": inventory(
                (len(job.cases), documents[adapter]) for adapter, (_, job) in jobs.items()
            )
        },
    )
    return gate_and_report(results, baseline, args)


def inventory(jobs: Iterable[tuple[int, Mapping[str, Any]]]) -> dict[str, int]:
    """What the lane owes and what it judged, over each worker's (cases given, document): a cell
    for every case it did not decline and for every walk it drew; a worker that lost a cell
    leaves "run" short of "planned", and the gate refuses the run."""
    jobs = list(jobs)
    return {
        "planned": sum(cases - len(d["declined"]) + len(d["samples"]) for cases, d in jobs),
        "run": sum(len(d["cells"]) for _, d in jobs),
    }


def constrainable_cases(corpus: Path | None, globs: Sequence[str]) -> list[CompletionCase]:
    """The completion cases an engine may constrain: tools declared, tool_choice not "none", and
    not server-level (those are judged in the server modes only); each engine then says which
    it builds a grammar for."""
    from k2conform.case.corpus import default_corpus_dir, load_corpus
    from k2conform.run.matrix import select_cases

    cases = select_cases(load_corpus(corpus or default_corpus_dir()).completions, globs)
    chosen = [
        c
        for c in cases
        if c.request.tools and c.request.tool_choice != "none" and not c.request.server_options
    ]
    if not chosen:
        raise UsageError(
            f"no case with tools and a tool_choice other than none matches {list(globs)}"
        )
    return chosen


def _environment_python(engine: str, venv_root: Path) -> Path:
    from k2conform.setup.parsers import environments, installed

    environment = environments()[ENVIRONMENTS[engine]]
    if not installed(environment, venv_root):
        raise UsageError(
            f"{engine}'s grammar environment is not built in {venv_root}: "
            f"k2conform setup-parsers {environment.name}"
        )
    return environment.venv(venv_root) / "bin" / "python"


def run_workers(jobs: dict[str, Any], pythons: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each engine's job in its own environment, all at once; their result documents.  A worker
    that fails is k2conform's own failure (a parser's is a cell), so a harness error."""
    from k2conform.grammar.worker import job_to_json

    with tempfile.TemporaryDirectory(prefix="k2conform-grammar-") as tmp:
        running = {}
        for engine, job in jobs.items():
            job_path, out_path, log_path = (
                Path(tmp) / f"{engine}.{kind}" for kind in ("job", "out", "log")
            )
            job_path.write_text(json.dumps(job_to_json(job), ensure_ascii=False), encoding="utf-8")
            with open(log_path, "w", encoding="utf-8") as log:
                command = [
                    str(pythons[engine]),
                    "-m",
                    "k2conform.grammar.worker",
                    str(job_path),
                    str(out_path),
                ]
                running[engine] = (
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT),
                    out_path,
                    log_path,
                )
        documents = {}
        for engine, (process, out_path, log_path) in running.items():
            if process.wait() != 0 or not out_path.exists():
                tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
                raise HarnessError(
                    f"the {engine} grammar worker failed (exit {process.returncode}):\n{tail}"
                )
            documents[engine] = json.loads(out_path.read_text(encoding="utf-8"))
    return documents
