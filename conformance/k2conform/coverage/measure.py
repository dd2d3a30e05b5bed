"""The measurement: a fresh process starts coverage.py (branch mode, only the adapters' declared
files) before anything of the parsers is imported, so their import-time lines count too; runs
every cell through :func:`k2conform.run.cell.run_cell`; and returns the coverage document.

The document (``k2conform coverage --json``) holds, per measured file, the executed and missing
lines and branches as coverage.py reports them, the lines and branches Kimi cannot reach (with
the reason, :mod:`k2conform.coverage.reachability`), both sets of figures, and the source, so
the reports are built from the document alone.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from k2conform.coverage.reviewed import Entry
from k2conform.coverage.sources import NotMeasured, Source, Target
from k2conform.errors import HarnessError, UsageError
from k2conform.report.coverage_section import SCHEMA


def measure(
    targets: Sequence[Target],
    skipped: Sequence[NotMeasured],
    source: Source,
    settings: Any,
    reviewed: Sequence[Entry] = (),
) -> dict:
    """The coverage document of ``targets`` on the cases of ``source``; ``reviewed``: the
    entries of the reviewed-unreachable list (:mod:`k2conform.coverage.reviewed`)."""
    document: dict[str, Any] = {"adapters": []}
    if targets:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            try:
                document = pool.submit(
                    _measure_here, tuple(targets), source, settings, tuple(reviewed)
                ).result()
            except (UsageError, HarnessError):
                raise
            except Exception as error:
                trace = "".join(traceback.format_exception(error))
                raise HarnessError(f"measuring failed in its process:\n{trace}") from error
    document["adapters"] += [
        {"name": s.name, "status": "not measured", "reason": s.reason} for s in skipped
    ]
    return document


def _measure_here(
    targets: Sequence[Target], source: Source, settings: Any, reviewed: Sequence[Entry] = ()
) -> dict:
    """In the child: measure, then describe what was measured."""
    import coverage

    _refuse_imported(targets)
    files = sorted({real for target in targets for _, _, real in target.files})
    recorder = coverage.Coverage(branch=True, data_file=None, config_file=False, include=files)
    started = time.monotonic()
    recorder.start()
    try:
        run = _run_cells(targets, source, settings)
    finally:
        recorder.stop()
    wall = time.monotonic() - started
    report = _json_report(recorder, files)
    return {
        "schema": SCHEMA,
        "k2conform": _k2conform_version(),
        "coverage_py": coverage.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": source.describe(),
        "source_kind": "replay" if source.replay else "corpus",
        "cases": run["cases"],
        "cells": sum(sum(c.values()) for c in run["outcomes"].values()),
        "grammar_requests": run["grammar_requests"],
        "modes": sorted({m for t in targets for m in t.modes}),
        "wall_seconds": round(wall, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "adapters": [_adapter_entry(t, run, report, reviewed) for t in targets],
    }


def _k2conform_version() -> str:
    from k2conform import __version__

    return __version__


def _refuse_imported(targets: Iterable[Target]) -> None:
    """A file imported before coverage started would show its definitions as never run."""
    for target in targets:
        for path, _, _ in target.files:
            module = path.removesuffix(".py").replace("/", ".")
            if module in sys.modules:
                raise HarnessError(
                    f"{module} was imported before coverage started; its import-time lines "
                    "would count as missed"
                )


def _run_cells(targets: Sequence[Target], source: Source, settings: Any) -> dict[str, Any]:
    """Every cell of every target, through the one cell path; the outcomes per adapter."""
    import logging
    import warnings

    from k2conform.adapter.registry import create_adapter, load
    from k2conform.run.cell import run_cell
    from k2conform.run.matrix import plan, progress_printer

    logging.disable(logging.CRITICAL)  # parsers log freely; the progress line must stay readable
    warnings.simplefilter("ignore")
    cases = source.cases()
    adapters = {t.spec: create_adapter(t.spec) for t in targets}
    availability = {spec: load(adapter) for spec, adapter in adapters.items()}
    ready = [t.spec for t in targets if availability[t.spec].status == "ok"]
    modes = tuple(dict.fromkeys(m for t in targets for m in t.modes))
    options = {spec: adapter.request_options for spec, adapter in adapters.items()}
    formats = {spec: adapter.formats for spec, adapter in adapters.items()}
    tasks = plan(cases, ready, modes, {t.spec: t.modes for t in targets}, options, formats)
    by_id = {case.id: case for case in cases}
    outcomes: dict[str, Counter] = {spec: Counter() for spec in adapters}
    progress, whole_results = progress_printer(), {}
    for done, (case_id, spec, mode) in enumerate(tasks, 1):
        cell = run_cell(
            adapters[spec], by_id[case_id], mode, settings, availability[spec], whole_results
        )
        outcomes[spec][cell.outcome.value] += 1
        progress(done, len(tasks))
    grammars = _grammar_requests(adapters, ready, cases)
    versions = {spec: adapter.version() for spec, adapter in adapters.items()}
    return {
        "cases": len(cases),
        "grammar_requests": grammars,
        "outcomes": outcomes,
        "availability": availability,
        "versions": versions,
    }


def _grammar_requests(adapters: dict[str, Any], ready: Sequence[str], cases: Sequence[Any]) -> int:
    """The request step of the grammar lane (``k2conform grammar``): the structural tag each
    engine builds for each distinct request it may constrain, as its server does before
    decoding (vLLM's ``adjust_request``, SGLang's ``get_structure_constraint``).  Compiling
    and walking the grammar is the grammar lane's, in the engine's own environment."""
    from k2conform.adapter.harness import guarded

    requests = {}
    for case in cases:
        request = case.request
        if request.tools and request.tool_choice != "none" and not request.server_options:
            requests.setdefault(json.dumps(request.to_json(), sort_keys=True), request)
    built = 0
    for spec in ready:
        build = adapters[spec].structural_tag
        for request in requests.values():
            built += guarded(lambda request=request: build(request)) is not None
    return built


def _json_report(recorder: Any, files: Sequence[str]) -> dict[str, dict]:
    """coverage.py's JSON report of ``files``, keyed by real path.  A file coverage.py has no data
    for has its statements from coverage.py's analysis, all missed, and no branches."""
    import coverage

    reported: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "coverage.json"
        try:
            recorder.json_report(morfs=list(files), outfile=str(out))
            reported = json.loads(out.read_text(encoding="utf-8"))["files"]
        except coverage.exceptions.NoDataError:
            pass
    by_path = {os.path.realpath(name): data for name, data in reported.items()}
    for real in files:
        if os.path.realpath(real) not in by_path:
            _, _, excluded, missing, _ = recorder.analysis2(real)
            by_path[os.path.realpath(real)] = {
                "executed_lines": [],
                "missing_lines": missing,
                "excluded_lines": excluded,
            }
    return by_path


def _adapter_entry(
    target: Target, run: dict[str, Any], report: dict[str, dict], reviewed: Sequence[Entry] = ()
) -> dict[str, Any]:
    from k2conform.coverage import reviewed as review
    from k2conform.coverage.reachability import CONTEXTS, analyse

    availability = run["availability"][target.spec]
    if availability.status != "ok":
        return {
            "name": target.name,
            "status": "not measured",
            "reason": f"{availability.status}: {availability.reason}",
        }
    context = CONTEXTS.get((target.files[0][0].split("/")[0], target.format))
    reach = analyse({path: Path(real) for path, _, real in target.files}, context)
    release = run["versions"][target.spec]  # the entries of the reviewed list name it
    files = [
        _file_entry(
            path,
            role,
            real,
            report[os.path.realpath(real)],
            reach[path],
            review.for_file(reviewed, path, release),
        )
        for path, role, real in target.files
    ]
    return {
        "name": target.name,
        "status": "measured",
        "version": run["versions"][target.spec],
        "modes": list(target.modes),
        "cells": sum(run["outcomes"][target.spec].values()),
        "outcomes": dict(sorted(run["outcomes"][target.spec].items())),
        "kimi_context": context is not None,
        "release": release,
        "files": files,
        "totals": totals(files),
    }


def _file_entry(
    path: str, role: str, real: str, data: dict, reach: Any, reviewed: Sequence[Entry] = ()
) -> dict[str, Any]:
    """One file: what ran and what did not, what Kimi cannot reach (by the rules and by the
    reviewed list), the figures, the source."""
    from k2conform.coverage import reviewed as review

    source = Path(real).read_text(encoding="utf-8")
    executed, missing = set(data["executed_lines"]), set(data["missing_lines"])
    taken = [tuple(arc) for arc in data.get("executed_branches", ())]
    untaken = [tuple(arc) for arc in data.get("missing_branches", ())]
    unreachable = {
        line: reason for line, reason in reach.unreachable.items() if line in executed | missing
    }
    ran_anyway = sorted(
        set(unreachable) & executed
    )  # the analysis was wrong there: count them as reachable
    for line in ran_anyway:
        del unreachable[line]
    applied = review.apply(reviewed, source, executed, missing, taken, untaken)
    by_rules = set(unreachable)
    for line, reason in applied.lines.items():
        unreachable.setdefault(line, reason)
    dead = {
        arc
        for arc in reach.dead_arcs(taken + untaken)
        if arc not in taken and arc[0] not in ran_anyway and arc[1] not in ran_anyway
    }
    arc_reasons = {}
    for arc in taken + untaken:  # arcs from or into a reviewed line
        into_reviewed = arc[0] in applied.lines or arc[1] in applied.lines
        if arc not in taken and arc not in dead and into_reviewed:
            dead.add(arc)
            arc_reasons[arc] = applied.lines.get(arc[0]) or applied.lines[arc[1]]
    for arc, reason in applied.arcs.items():
        if arc not in dead:
            dead.add(arc)
            arc_reasons[arc] = reason
    reviewed_arcs = sorted(arc for arc in dead if arc in arc_reasons)
    return {
        "path": path,
        "role": role,
        "source": source,
        "never_run": not executed,
        "executed_lines": sorted(executed),
        "missing_lines": sorted(missing),
        "excluded_lines": sorted(data.get("excluded_lines", ())),
        "executed_branches": sorted(map(list, taken)),
        "missing_branches": sorted(map(list, untaken)),
        "unreachable_lines": {str(line): reason for line, reason in sorted(unreachable.items())},
        "unreachable_branches": [
            [a, b, arc_reasons.get((a, b)) or reach.reason_of_arc(a, b)] for a, b in sorted(dead)
        ],
        "unreachable_but_ran": ran_anyway,
        # the reviewed list's share of the two above, and its entries that no longer hold
        "reviewed_lines": sorted(set(unreachable) - by_rules),
        "reviewed_branches": [list(arc) for arc in reviewed_arcs],
        "reviewed_entries": applied.used,
        "stale_reviewed": applied.stale,
        "figures": _figures(executed, missing, taken, untaken, set()),
        "kimi_figures": _figures(executed, missing, taken, untaken, set(unreachable), dead),
    }


def _figures(
    executed: set[int],
    missing: set[int],
    taken: list[tuple],
    untaken: list[tuple],
    unreachable: set[int],
    dead: set[tuple] = frozenset(),
) -> dict[str, Any]:
    """Line and branch counts, leaving out what Kimi cannot reach."""
    statements = (executed | missing) - unreachable
    arcs_taken = [arc for arc in taken if arc not in dead]
    arcs_missed = [arc for arc in untaken if arc not in dead]
    partial = {a for a, _ in arcs_missed} & {a for a, _ in arcs_taken}
    lines = _count(len(statements & executed), len(statements))
    branches = _count(len(arcs_taken), len(arcs_taken) + len(arcs_missed))
    return {
        "lines": lines,
        "branches": branches,
        "partial_branch_lines": len(partial),
        # coverage.py's own percentage: lines and branches together
        "combined": _count(
            lines["covered"] + branches["covered"], lines["total"] + branches["total"]
        ),
    }


def _count(covered: int, total: int) -> dict[str, Any]:
    return {
        "covered": covered,
        "total": total,
        "percent": round(100.0 * covered / total, 1) if total else 100.0,
    }


def totals(files: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per role (the Kimi-specific files, the shared code): the files' figures added up."""
    result: dict[str, dict[str, Any]] = {}
    for role in sorted({f["role"] for f in files}):
        mine = [f for f in files if f["role"] == role]
        result[role] = {
            key: {
                kind: _count(
                    sum(f[key][kind]["covered"] for f in mine),
                    sum(f[key][kind]["total"] for f in mine),
                )
                for kind in ("lines", "branches")
            }
            for key in ("figures", "kimi_figures")
        }
    return result
