"""``k2conform catalogue build``: each distinct behaviour of each adapter in one or more results
documents, minimised and written as a corpus case with its bug report.

For a behaviour (:func:`k2conform.gate.behaviours.behaviours`, the report's grouping) its
example cell (:meth:`Behaviour.example`) is run again through :func:`run_cell`; the
minimiser (:class:`k2conform.minimize.delta_debug.Minimizer`) then shrinks the request, the
text and (for a replayed delivery) the chunk boundaries while that adapter, in that delivery
mode, still gives the same outcome with the same differing fields.  Each candidate is a corpus
case whose expectation is the reference parser's result for it and whose prefix is the verdict
rule's, judged by :func:`run_cell`, so "shows the behaviour" means what it means in the
matrix.  ``stream-random`` (its chunks derive from the case id) and ``stream-recorded`` are
kept as the deltas the cell saw, replayed as ``stream-recorded``; every other mode is kept.

A case whose behaviour does not hold with the reference's expectation (or a ``timeout``, whose
every probe would wait out the deadline) is catalogued as it is in the corpus, unminimised.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from k2conform.adapter.protocol import declared_formats, is_command_spec, split_spec
from k2conform.adapter.registry import Availability, adapter_names, create_adapter, load
from k2conform.case.corpus import CompletionCase, load_case, write_case
from k2conform.delivery import modes
from k2conform.errors import UsageError
from k2conform.fuzzing.signature import slug
from k2conform.minimize.cells import CellEngine, Probe, target_signature
from k2conform.minimize.delta_debug import Candidate, Minimizer
from k2conform.model import CaseSummary, Cell, dumps_canonical
from k2conform.gate.behaviours import Behaviour
from k2conform.report.findings import delivered_deltas, repro_command
from k2conform.run.cell import CellSettings, run_cell
from k2conform.run.matrix import adapter_sessions

#: The ``generator.class`` of a catalogue case; its ``generator.finding`` is the finding block.
CLASS = "CATALOGUE"
#: Deliveries whose chunks are not a function of the text alone: kept as the deltas the cell
#: saw and replayed as ``stream-recorded``.
REPLAYED = ("stream-random", "stream-recorded")
#: Cells the minimiser may run for one behaviour before it stops shrinking.
MAX_TESTS = 1200


class BudgetedMinimizer(Minimizer):
    """The minimiser, stopping (keeping what it has) after ``budget`` cells."""

    def __init__(self, engine: Any, mode: str, signature: str, budget: int = MAX_TESTS) -> None:
        super().__init__(engine, mode, signature)
        self.budget = budget

    def observe(self, candidate: Candidate) -> Any:
        if self.tests > self.budget:
            return Probe("")
        return super().observe(candidate)


# -- the adapters ------------------------------------------------------------------------------


def spec_name(spec: str) -> str:
    """The name results give an adapter spec: NAME of ``NAME=cmd:...``, else the spec."""
    if is_command_spec(spec):
        return split_spec(spec)[0] or spec
    return spec


def candidates(name: str, specs: Mapping[str, str], venv_root: Path | None) -> list[str]:
    """Where the adapter a results document names may be reached, in order: an ``--adapter``
    spec given for it; the in-process adapter of that name; the ``serve-adapter`` command of
    a built parser environment of that name (``k2conform setup-parsers --adapters``)."""
    if is_command_spec(specs.get(name, "")):
        return [specs[name]]
    found = [name] if is_command_spec(name) or name in adapter_names() else []
    if venv_root is not None:
        from k2conform.setup.parsers import environments, installed

        try:
            known = environments()
        except UsageError:
            known = {}
        for environment in known.values():
            if environment.into_current or not installed(environment, venv_root):
                continue
            for option in environment.adapter_options(venv_root):
                spec = option.removeprefix("--adapter=")
                if spec_name(spec) == name:
                    found.append(spec)
    return found


def reach(
    name: str, specs: Mapping[str, str], venv_root: Path | None, timeout: float
) -> tuple[str, Any, Availability] | None:
    """The first of the :func:`candidates` that loads, else the last one tried (its
    availability says why not); None when there is none."""
    reached = None
    for spec in candidates(name, specs, venv_root):
        reached = (spec, *open_adapter(spec, timeout))
        if reached[2].status == "ok":
            break
    return reached


def reach_in_session(
    sessions: contextlib.ExitStack,
    name: str,
    specs: Mapping[str, str],
    venv_root: Path | None,
    timeout: float,
) -> tuple[str, Any, Availability] | None:
    """``reach``, then the adapter's run session entered on ``sessions`` as ``run`` enters it
    (``vllm-server`` starts its server there), lasting until ``sessions`` closes."""
    reached = reach(name, specs, venv_root, timeout)
    if reached is not None:
        sessions.enter_context(adapter_sessions([reached[1]], None))
    return reached


def open_adapter(spec: str, timeout: float) -> tuple[Any, Availability]:
    adapter = create_adapter(spec, timeout)
    return adapter, load(adapter)


# -- one behaviour ---------------------------------------------------------------------------


@dataclass
class Built:
    """What the build did with one behaviour."""

    behaviour: Behaviour
    status: str  #: ``written`` or ``skipped``
    note: str = ""
    path: Path | None = None
    finding: dict[str, Any] = field(default_factory=dict)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:8]


def catalogue_id(prefix: str, adapter: str, outcome: str, fields: Sequence[str], key: str) -> str:
    what = slug("-".join((outcome, *fields)), 40)
    return f"{prefix}_cat_{slug(adapter, 24)}_{what}_{key}"


def build_one(
    behaviour: Behaviour,
    summaries: Mapping[str, CaseSummary],
    source: CompletionCase,
    adapter: Any,
    availability: Availability,
    seed: int,
    timeout: float,
    out: Path,
    budget: int = MAX_TESTS,
) -> Built:
    """Minimise the behaviour's example and write its catalogue case (no report yet)."""
    example = behaviour.example(summaries)
    mode = example.delivery
    settings = CellSettings(
        seed=seed, burst=modes.burst_of(example.variant) or modes.DEFAULT_BURST, deadline=timeout
    )
    target = (example.outcome.value, tuple(example.fields))
    now = run_cell(adapter, source, mode, settings, availability)
    if (now.outcome.value, tuple(now.fields)) != target:
        return Built(
            behaviour, "skipped",
            f"{source.id} [{mode}] shows {_shows(now)} now, not {_shows(example)}",
        )  # fmt: skip
    run_mode, cuts = mode, None
    if mode in REPLAYED:
        if mode == "stream-recorded":
            pieces = source.deltas
        else:
            delivered = delivered_deltas(summaries[source.id], now, seed)
            pieces = tuple(d.text for d in delivered) if delivered is not None else None
        if not pieces:
            return Built(behaviour, "skipped", f"cannot derive the deltas of {now.variant}")
        run_mode, cuts = "stream-recorded", modes.cut_points(pieces)
    key = _digest(behaviour.adapter, behaviour.family, behaviour.reason, behaviour.signatures,
                  behaviour.modes, source.id, mode)  # fmt: skip
    engine = CellEngine(adapter, availability, settings, f"cat_probe_{key}", source.format)
    spelled = source.spelled_markers if cuts is None else ()
    signature = target_signature(*target, spelled=bool(spelled))
    minimizer = BudgetedMinimizer(engine, run_mode, signature, budget)
    start = Candidate(source.request, source.model_output, cuts, spelled, source.format)
    note = ""
    if target[0] == "timeout":
        small, note = None, "not minimised: every probe of a timeout waits out the deadline"
    elif not minimizer.holds(start):
        small = None
        note = (
            "not minimised: with the reference parser's result as the expectation the cell "
            "does not show it (the case's expectation is not the reference's)"
        )
    else:
        small = minimizer.run(start)
        if minimizer.tests > budget:
            note = f"minimising stopped after {budget} cells"
    pieces = (
        tuple(d.text for d in modes.cut(source.model_output, cuts)) if cuts is not None else None
    )
    unminimised = replace(source, deltas=pieces, spelled_markers=spelled)
    bases = [(unminimised, False)]
    if small is not None:
        probe = engine.observe(small.request, small.text, run_mode, small.cuts, small.spelled)
        if probe.signature == signature and probe.case is not None:
            bases.insert(0, (probe.case, True))
        else:  # e.g. a RecursionError that hangs on the minimiser's own stack depth
            note = "not minimised: the minimised case did not show it when run again"
    for base, minimised in bases:
        case = _catalogue_case(behaviour, source, base, minimised, target, key, mode, run_mode,
                               seed, adapter.version(), note)  # fmt: skip
        again = run_cell(adapter, case, run_mode, settings, availability)
        if (again.outcome.value, tuple(again.fields)) == target:
            path = write_case(case, out)
            load_case(path)  # a valid corpus case, or a bug here
            return Built(behaviour, "written", note, path, dict(case.generator["finding"]))
        note = f"not minimised: the minimised case shows {_shows(again)} when run again"
    return Built(
        behaviour, "skipped", f"{source.id} [{run_mode}] shows {_shows(again)} when run again"
    )


def _catalogue_case(
    behaviour: Behaviour,
    source: CompletionCase,
    base: CompletionCase,
    minimised: bool,
    target: tuple[str, tuple[str, ...]],
    key: str,
    mode: str,
    run_mode: str,
    seed: int,
    release: str | None,
    note: str,
) -> CompletionCase:
    """The catalogue case: ``base``'s request, text, deltas and expectation, its own id, and
    the finding block."""
    finding = {
        "adapter": behaviour.adapter,
        "release": release,
        "delivery": run_mode,
        "observed_in": mode,
        "deliveries": list(behaviour.modes),
        "family": behaviour.family,
        "outcome": target[0],
        "fields": list(target[1]),
        "signatures": list(behaviour.signatures),
        "reason": behaviour.reason,
        "link": behaviour.links[0] if behaviour.links else None,
        "links": list(behaviour.links),
        "upstream": behaviour.upstream,
        "source_case": source.id,
        "source_cells": len(behaviour.cells),
        "source_cases": len(behaviour.cases),
        "seed": seed if mode == "stream-random" else (source.generator or {}).get("seed"),
        "minimised": minimised,
        "chars": [len(source.model_output), len(base.model_output)],
        "tools": [len(source.request.tools), len(base.request.tools)],
        "note": "" if minimised else note,
    }
    shows = target[0] + (f" ({', '.join(target[1])})" if target[1] else "")
    what = " ".join(behaviour.reason.split()) or f"minimised from {source.id}"
    if len(what) > 140:
        what = what[:137].rstrip() + "..."
    description = f"{shows} in {mode}: {what}"
    return CompletionCase(
        catalogue_id(base.id[0], behaviour.adapter, *target, key),
        description,
        tuple(dict.fromkeys((CLASS, *source.tags))),
        f"k2conform catalogue build ({'minimised from' if minimised else 'copy of'} corpus case "
        f"{source.id}; its source: {source.source})",
        base.request,
        base.model_output,
        base.deltas,
        base.expected,
        {"class": CLASS, "seed": seed, "finding": finding},
        format=base.format,
        spelled_markers=base.spelled_markers,
    )


def _shows(cell: Cell) -> str:
    return f"{cell.outcome.value}" + (f" ({', '.join(cell.fields)})" if cell.fields else "")


# -- the bug report ----------------------------------------------------------------------------


def report_command(spec: str) -> tuple[list[str], str] | None:
    """(the ``k2conform`` words that run report-finding where the adapter lives, its adapter
    name there); None for a command that is not ``k2conform serve-adapter NAME...`` serving
    the spec's formats."""
    if not is_command_spec(spec):
        return [sys.executable, "-m", "k2conform.cli"], spec
    argv = shlex.split(split_spec(spec)[1])
    at = argv.index("serve-adapter") if "serve-adapter" in argv else -1
    # the names served, up to the options (--release stays with serve)
    names = list(itertools.takewhile(lambda word: not word.startswith("-"), argv[at + 1 :]))
    if at < 1 or not names:
        return None
    if len(names) == 1:
        return argv[:at], names[0]
    # of several, the one parsing the spec's formats, as the command serves them
    wanted = sorted(declared_formats(spec))
    chosen = [name for name in names if sorted(create_adapter(name).formats) == wanted]
    return (argv[:at], chosen[0]) if chosen else None


def write_report(spec: str, path: Path, seed: int, timeout: float, run_script: bool) -> str:
    """``k2conform report-finding`` for a catalogue case, beside it as ``.md`` (and ``.py``):
    in this process for an in-process adapter, else with the adapter environment's k2conform.
    Returns how it went: ``reproduced``, ``not reproduced`` or ``not run`` (report and script
    written), ``no script`` (report written; the adapter has no reproduction template), or
    why there is no report."""
    case = load_case(path)
    finding = case.generator["finding"]
    where = report_command(spec)
    if where is None:
        return "no report: the adapter is not a `k2conform serve-adapter` command"
    words, target = where
    argv = [
        "report-finding", case.id, "--adapter", target, "--delivery", finding["delivery"],
        "--corpus", str(path.parent), "--out", str(path.with_suffix(".md")),
        "--seed", str(seed), "--timeout", str(timeout),
    ]  # fmt: skip
    if not run_script:
        argv.append("--no-run")
    if not is_command_spec(spec):
        from k2conform.exits import run_command
        from k2conform.report_finding.cli import add_parser

        parser = argparse.ArgumentParser(prog="k2conform")
        add_parser(parser.add_subparsers(dest="command"))
        buffer = io.StringIO()
        with contextlib.redirect_stderr(buffer), contextlib.redirect_stdout(buffer):
            status = run_command(parser.parse_args(argv))
        detail = buffer.getvalue().strip().splitlines()
    else:
        done = subprocess.run([*words, *argv], capture_output=True, text=True, timeout=900)
        status = done.returncode
        detail = (done.stderr or done.stdout).strip().splitlines()
    if status == 0:
        return "reproduced"
    written = path.with_suffix(".md").exists()
    if status == 2 and written and not path.with_suffix(".py").exists():
        return "no script"
    if status == 1 and written and path.with_suffix(".py").exists():
        return "not reproduced" if run_script else "not run"
    return "no report: " + (detail[-1] if detail else f"exit status {status}")


def _kept_report(path: Path, previous: Mapping[Path, bytes]) -> str | None:
    """The report state of the same case written before (its report and script put back), when
    the case is unchanged but for its report; None: the report is to be written."""
    before, report = previous.get(path), previous.get(path.with_suffix(".md"))
    if before is None or report is None:
        return None
    old, new = json.loads(before), json.loads(path.read_bytes())
    state = (old["generator"]["finding"].pop("report", None) or {}).get("state")
    if old != new or state in (None, "not run"):
        return None
    path.with_suffix(".md").write_bytes(report)
    script = previous.get(path.with_suffix(".py"))
    if script is not None:
        path.with_suffix(".py").write_bytes(script)
    return str(state)


def record_report(path: Path, state: str) -> None:
    """Keep the report's state in the case's finding block."""
    data = json.loads(path.read_text(encoding="utf-8"))
    report = path.with_suffix(".md")
    data["generator"]["finding"]["report"] = {
        "file": report.name if report.exists() else None,
        "script": path.with_suffix(".py").name if path.with_suffix(".py").exists() else None,
        "state": state,
    }
    path.write_text(dumps_canonical(data), encoding="utf-8")


# -- the whole build -----------------------------------------------------------------------------


def build(
    documents: Sequence[tuple[str, Mapping[str, Any]]],
    entries: Sequence[Any] | None,
    out: Path,
    corpus: Mapping[str, CompletionCase],
    adapters: Sequence[str] = (),
    venv_root: Path | None = None,
    timeout: float = 20.0,
    reports: bool = True,
    run_scripts: bool = True,
    budget: int = MAX_TESTS,
    say: Callable[[str], None] = print,
) -> list[Built]:
    """Build the catalogue of ``adapters`` (default: every adapter with cells) from the results
    ``documents``; each built adapter's folder under ``out`` is replaced, the index rewritten."""
    from k2conform.model import RunResults
    from k2conform.gate.behaviours import baseline_entries, behaviours

    specs = {spec_name(a): a for a in adapters}
    plan: list[tuple[str, Behaviour, Mapping[str, CaseSummary], int, str]] = []
    built_adapters: dict[str, str | None] = {}
    for name, document in documents:
        results = RunResults.from_json(document)
        found = behaviours(results, entries if entries is not None else baseline_entries(results))
        summaries = {c.id: c for c in results.cases}
        versions = {row.name: row.version for row in results.adapters}
        ran = {c.adapter for c in results.cells}
        for adapter, group in found.items():
            if (specs and adapter not in specs) or adapter not in ran:
                continue
            built_adapters.setdefault(adapter, versions.get(adapter))
            plan += [(adapter, b, summaries, results.seed, name) for b in group]
    if specs and not set(specs) <= set(built_adapters):
        missing = sorted(set(specs) - set(built_adapters))
        raise UsageError(f"no cells of {', '.join(missing)} in the results given")
    previous: dict[Path, bytes] = {}  # what the folders held: an unchanged case keeps its report
    for adapter in built_adapters:
        folder = out / adapter
        if folder.is_dir():
            for old in folder.iterdir():
                if old.suffix in (".json", ".md", ".py"):
                    previous[old] = old.read_bytes()
                    old.unlink()
    opened: dict[str, tuple[str, Any, Availability] | None] = {}
    done: list[Built] = []
    # Run-wide sessions (vllm-server starts its server) live for the whole build.
    with contextlib.ExitStack() as sessions:
        for n, (adapter_name, behaviour, summaries, seed, origin) in enumerate(plan, 1):
            if adapter_name not in opened:
                opened[adapter_name] = reach_in_session(
                    sessions, adapter_name, specs, venv_root, timeout
                )
            reached = opened[adapter_name]
            what = (behaviour.reason or behaviour.signatures[0])[:70]
            label = f"[{n}/{len(plan)}] {adapter_name}: {what}"
            if reached is None or reached[2].status != "ok":
                why = (
                    reached[2].reason if reached else "not reachable (give --adapter NAME=cmd:...)"
                )
                done.append(Built(behaviour, "skipped", f"adapter not available: {why}"))
                say(f"{label}: skipped, adapter not available: {why}")
                continue
            spec, adapter, availability = reached
            example = behaviour.example(summaries)
            if example.delivery not in modes.MODES:
                done.append(
                    Built(
                        behaviour,
                        "skipped",
                        f"a {example.delivery} cell of {origin}, not one cell of a delivery mode: "
                        f"`{repro_command(example, seed)}` draws it again",
                    )
                )
                say(f"{label}: skipped ({example.delivery} cell)")
                continue
            source = corpus.get(example.case)
            if source is None:
                done.append(
                    Built(behaviour, "skipped", f"case {example.case} is not in the corpus")
                )
                say(f"{label}: skipped (case {example.case} not in the corpus)")
                continue
            result = build_one(
                behaviour, summaries, source, adapter, availability, seed, timeout,
                out / adapter_name, budget,
            )  # fmt: skip
            if result.status == "written" and result.path is not None and reports:
                state = _kept_report(result.path, previous)
                if state is None:
                    state = write_report(spec, result.path, seed, timeout, run_scripts)
                record_report(result.path, state)
                result.finding["report"] = {"state": state}
            done.append(result)
            chars = result.finding.get("chars")
            report = result.finding.get("report")
            say(
                f"{label}: {result.status}"
                + (f" {result.path.name} ({chars[0]} -> {chars[1]} chars)" if result.path else "")
                + (f"; report {report['state']}" if report else "")
                + (f"; {result.note}" if result.note else "")
            )
    from k2conform.catalogue.index import write_index

    skipped = {
        a: [b for b in done if b.behaviour.adapter == a and b.status == "skipped"]
        for a in built_adapters
    }
    releases = {
        a: (reached[1].version() if reached and reached[2].status == "ok" else built_adapters[a])
        for a, reached in opened.items()
    }
    write_index(out, skipped, {a: releases.get(a, v) for a, v in built_adapters.items()})
    return done


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", type=Path, nargs="+", help="results JSON files of run / grammar")
    p.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        help="reviewed baseline(s) whose reasons and links group the behaviours (repeatable; "
        "default: the entries each results file was gated against)",
    )
    p.add_argument("--out", type=Path, help="catalogue folder (default: corpus/findings/catalogue)")
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        help="only this adapter (repeatable); NAME=cmd:... also says how to reach it",
    )
    p.add_argument("--corpus", type=Path, help="corpus of the cases (default: the shipped corpus)")
    p.add_argument(
        "--venv-root",
        type=Path,
        help="where setup-parsers built the parser environments (default .venvs or "
        "$K2CONFORM_VENVS): adapters of the results found there are reached through them",
    )
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per cell")
    p.add_argument("--budget", type=int, default=MAX_TESTS, help="cells per minimisation")
    p.add_argument("--no-reports", action="store_true", help="write the cases only")
    p.add_argument(
        "--no-run", action="store_true", help="write the reports without running their scripts"
    )


def cmd_build(args: argparse.Namespace) -> int:
    import os

    from k2conform.case.corpus import default_corpus_dir, load_corpus
    from k2conform.gate.baseline import load_baseline

    from k2conform.model import RunResults

    documents = []
    for path in args.results:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            RunResults.from_json(document)
        except (OSError, json.JSONDecodeError) as error:
            raise UsageError(f"cannot read results {path}: {error}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UsageError(
                f"{path} is not a k2conform results document: {type(error).__name__}: {error}"
            ) from None
        documents.append((path.name, document))
    entries = None
    if args.baseline:
        entries = [e for path in args.baseline for e in load_baseline(path).entries]
    quiet()
    root = args.corpus or default_corpus_dir()
    corpus = {c.id: c for c in load_corpus(root).completions}
    out = args.out or default_corpus_dir() / "findings" / "catalogue"
    venv_root = args.venv_root or Path(os.environ.get("K2CONFORM_VENVS", ".venvs"))
    done = build(
        documents, entries, out, corpus, args.adapter, venv_root, args.timeout,
        not args.no_reports, not args.no_run, args.budget,
    )  # fmt: skip
    written = sum(b.status == "written" for b in done)
    print(
        f"{written} catalogue case(s) written, {len(done) - written} skipped; index "
        f"{out / 'README.md'}"
    )
    return 0


def quiet() -> None:
    """The parsers' own logging and warnings off: the command's lines are its output."""
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
