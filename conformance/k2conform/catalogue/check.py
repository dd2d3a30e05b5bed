"""``k2conform catalogue check [DIR]``: each catalogue case through its own adapter in its own
delivery mode (:func:`run_cell`, as the matrix runs a cell): it still reproduces (the same
outcome and differing fields), it changed (and what it shows now), or its adapter is not
available here.  Exit status 1 when one no longer reproduces (a parser fixed it, or a new
release does something else: rebuild or drop the entry), 2 on a bad catalogue file."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Any, Callable

from k2conform.catalogue.build import quiet, reach_in_session, spec_name
from k2conform.catalogue.index import Entry, read_catalogue
from k2conform.errors import UsageError
from k2conform.run.cell import CellSettings, run_cell

REPRODUCES = "still reproduces"
CHANGED = "changed"
UNAVAILABLE = "adapter not available"


def check_entry(entry: Entry, adapter: Any, availability: Any, timeout: float) -> tuple[str, str]:
    """(state, what the cell shows now) of one catalogue case."""
    finding = entry.finding
    if availability is None or availability.status != "ok":
        return UNAVAILABLE, availability.reason if availability else "not reachable here"
    seed = entry.case.generator.get("seed", 0) if entry.case.generator else 0
    settings = CellSettings(seed=int(seed) if isinstance(seed, int) else 0, deadline=timeout)
    cell = run_cell(adapter, entry.case, finding["delivery"], settings, availability)
    shows = cell.outcome.value + (f" ({', '.join(cell.fields)})" if cell.fields else "")
    if cell.outcome.value == "unavailable":
        return UNAVAILABLE, cell.error or "unavailable"
    if cell.outcome.value == finding["outcome"] and list(cell.fields) == list(finding["fields"]):
        return REPRODUCES, shows
    version = adapter.version()
    release = f"; release {version}, catalogued on {finding['release']}"
    return CHANGED, shows + (release if version != finding["release"] else "")


def check(
    root: Path,
    adapters: tuple[str, ...] = (),
    venv_root: Path | None = None,
    timeout: float = 20.0,
    say: Callable[[str], None] = print,
) -> dict[str, int]:
    """Check every case; the number in each state.  A bad file raises ``CorpusError`` before
    any cell runs."""
    entries = read_catalogue(root)
    specs = {spec_name(a): a for a in adapters}
    opened: dict[str, tuple[Any, Any]] = {}
    tally = {REPRODUCES: 0, CHANGED: 0, UNAVAILABLE: 0}
    with contextlib.ExitStack() as sessions:  # a server adapter's server, for the whole check
        for entry in entries:
            name = entry.adapter
            if specs and name not in specs and not any(s == name for s in specs.values()):
                continue
            if name not in opened:
                reached = reach_in_session(sessions, name, specs, venv_root, timeout)
                opened[name] = reached[1:] if reached else (None, None)
            adapter, availability = opened[name]
            state, shows = check_entry(entry, adapter, availability, timeout)
            tally[state] += 1
            expected = entry.finding["outcome"] + (
                f" ({', '.join(entry.finding['fields'])})" if entry.finding["fields"] else ""
            )
            detail = {
                REPRODUCES: shows,
                CHANGED: f"showed {expected}, now {shows}",
                UNAVAILABLE: shows,
            }[state]
            say(f"{state:<17} {name} {entry.case.id} [{entry.finding['delivery']}]: {detail}")
    return tally


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "directory", nargs="?", type=Path, help="catalogue folder (default: the shipped one)"
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        help="check only this adapter's cases (repeatable); NAME=cmd:... says how to reach it",
    )
    p.add_argument(
        "--venv-root",
        type=Path,
        help="where setup-parsers built the parser environments (default .venvs or "
        "$K2CONFORM_VENVS)",
    )
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per cell")


def cmd_check(args: argparse.Namespace) -> int:
    from k2conform.case.corpus import default_corpus_dir

    root = args.directory or default_corpus_dir() / "findings" / "catalogue"
    if not root.is_dir():
        raise UsageError(f"no such directory: {root}")
    quiet()
    venv_root = args.venv_root or Path(os.environ.get("K2CONFORM_VENVS", ".venvs"))
    tally = check(root, tuple(args.adapter), venv_root, args.timeout)
    print(
        f"{sum(tally.values())} catalogue case(s): {tally[REPRODUCES]} still reproduce, "
        f"{tally[CHANGED]} changed, {tally[UNAVAILABLE]} with the adapter not available"
    )
    return 1 if tally[CHANGED] else 0
