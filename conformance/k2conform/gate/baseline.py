"""Known deviations per adapter: the cells a release is allowed to get wrong, with a reason.

One entry is one *behaviour*: an adapter, an outcome, the fields that differ, the delivery
modes it shows in (``*``: all of them) and the cases that show it, with the reason a
reviewer wrote once for all of them.  A run passes when every failing cell is covered,
and fails when a listed case no longer shows the behaviour (a stale expectation must be
removed, as toml-test's ``-skip-must-err`` demands), so the file always says exactly
what is wrong today.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from k2conform.case.corpus import CorpusError
from k2conform.model import Cell, CellOutcome, RunResults
from k2conform.run.results import shortfall

_REQUIRED = ("adapter", "outcome", "fields", "deliveries", "cases")
_KEYS = set(_REQUIRED) | {"reason", "link"}
TODO = "TODO: review and explain"
#: An entry's ``link``: one upstream report (issue, pull request, commit) of this behaviour.
_URL = re.compile(r"^https?://[^\s/]+/\S*$")


@dataclass(frozen=True)
class BaselineEntry:
    adapter: str
    outcome: str
    fields: tuple[str, ...]
    deliveries: tuple[str, ...]
    cases: tuple[str, ...]
    reason: str = ""
    #: The upstream report of this behaviour; None: not reported upstream (docs/baseline.md).
    link: str | None = None

    def covers_delivery(self, delivery: str) -> bool:
        return "*" in self.deliveries or delivery in self.deliveries

    def covers_case(self, case: str) -> bool:
        return any(fnmatch.fnmatchcase(case, pattern) for pattern in self.cases)

    def matches(self, cell: Cell) -> bool:
        return (
            cell.adapter == self.adapter
            and cell.outcome == self.outcome
            and tuple(cell.fields) == self.fields
            and self.covers_delivery(cell.delivery)
            and self.covers_case(cell.case)
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BaselineEntry:
        """An entry as :meth:`to_json` wrote it (a baseline file's, checked by
        :func:`load_baseline` first; a gate block's)."""
        return cls(
            adapter=data["adapter"],
            outcome=data["outcome"],
            fields=tuple(data["fields"]),
            deliveries=tuple(data["deliveries"]),
            cases=tuple(data["cases"]),
            reason=data.get("reason") or "",
            link=data.get("link"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "outcome": self.outcome,
            "fields": list(self.fields),
            "deliveries": list(self.deliveries),
            "reason": self.reason,
            "link": self.link,
            "cases": list(self.cases),
        }


@dataclass(frozen=True)
class Baseline:
    """A baseline file: the adapters it vouches for, and their reviewed deviations.  An adapter
    it names must have run for the gate to pass (``--allow-missing`` says otherwise)."""

    adapters: tuple[str, ...]
    entries: tuple[BaselineEntry, ...]


def load_baseline(path: Path | str) -> Baseline:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise CorpusError(path, "-", f"cannot read the baseline: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise CorpusError(path, "entries", "must be a list")
    entries = []
    for i, raw in enumerate(data["entries"]):
        where = f"entries[{i}]"
        if not isinstance(raw, dict):
            raise CorpusError(path, where, "must be an object")
        for key in _REQUIRED:
            if key not in raw:
                raise CorpusError(path, f"{where}.{key}", "missing")
        for key in raw:
            if key not in _KEYS:
                raise CorpusError(
                    path, f"{where}.{key}", f"unknown field (allowed: {', '.join(sorted(_KEYS))})"
                )
        _check_link(raw.get("link"), path, f"{where}.link")
        entries.append(BaselineEntry.from_json(raw))
    adapters = data.get("adapters")
    if adapters is None:  # a baseline written before it named its adapters: those of its entries
        adapters = sorted({e.adapter for e in entries})
    if not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters):
        raise CorpusError(path, "adapters", "must be a list of adapter names")
    return Baseline(tuple(adapters), tuple(entries))


def _check_link(value: Any, path: Path, where: str) -> None:
    """An entry's link must be one URL, or null for a behaviour not reported upstream."""
    if value is None or (isinstance(value, str) and _URL.match(value)):
        return
    raise CorpusError(
        path,
        where,
        f"must be one upstream URL (https://...) or null (not reported upstream), not {value!r}",
    )


@dataclass(frozen=True)
class Stale:
    """A listed case that no longer shows the entry's behaviour."""

    entry: BaselineEntry
    case: str
    delivery: str

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "adapter": self.entry.adapter,
            "delivery": self.delivery,
            "outcome": self.entry.outcome,
            "fields": list(self.entry.fields),
        }


@dataclass
class FindingSplit:
    new: list[Cell]
    baselined: list[Cell]
    stale: list[Stale]
    adapter_errors: dict[str, dict[str, int]]  # adapter → error message → cells

    @property
    def passed(self) -> bool:
        return not self.new and not self.stale and not self.adapter_errors


def split_findings(cells: Sequence[Cell], entries: Sequence[BaselineEntry]) -> FindingSplit:
    """Split the findings into new and baselined; find entries that no longer occur.

    Cells whose adapter glue failed are set apart (``adapter_errors``): they say nothing
    about the parser, so they are neither findings nor evidence that an entry is stale.
    """
    new, baselined = [], []
    adapter_errors: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    matched: set[tuple[int, str, str]] = set()
    for cell in cells:
        if cell.outcome == CellOutcome.ADAPTER_ERROR:
            adapter_errors[cell.adapter][cell.error or "adapter-error"] += 1
            continue
        if not cell.outcome.finding:
            continue
        hits = [i for i, e in enumerate(entries) if e.matches(cell)]
        (baselined if hits else new).append(cell)
        matched.update((i, cell.case, cell.delivery) for i in hits)
    ran: dict[tuple[str, str], set[str]] = defaultdict(set)
    for cell in cells:
        if cell.outcome not in ("unavailable", "adapter-error"):
            ran[(cell.adapter, cell.case)].add(cell.delivery)
    stale = []
    for i, entry in enumerate(entries):
        for (adapter, case), deliveries in sorted(ran.items()):
            if adapter != entry.adapter or not entry.covers_case(case):
                continue
            if "*" in entry.deliveries:
                if not any((i, case, d) in matched for d in deliveries):
                    stale.append(Stale(entry, case, "*"))
            else:
                stale.extend(
                    Stale(entry, case, d)
                    for d in entry.deliveries
                    if d in deliveries and (i, case, d) not in matched
                )
    return FindingSplit(new, baselined, stale, {a: dict(e) for a, e in adapter_errors.items()})


@dataclass(frozen=True)
class GateBlock:
    """The gate's verdict as a results document carries it (``gate``): built by :func:`gate`,
    read back by the reports (:meth:`from_json`), with the entries the run was judged against
    so a report rebuilt from the results alone groups by their reviewed reasons."""

    passed: bool
    new: int
    baselined: int
    stale: tuple[Mapping[str, Any], ...]  #: :meth:`Stale.to_json` of each
    missing: tuple[str, ...]
    unreviewed: tuple[str, ...]
    new_cells: tuple[str, ...]
    entries: tuple[BaselineEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "new": self.new,
            "baselined": self.baselined,
            "stale": [dict(s) for s in self.stale],
            "missing": list(self.missing),
            "unreviewed": list(self.unreviewed),
            "new_cells": list(self.new_cells),
            "entries": [e.to_json() for e in self.entries],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateBlock:
        return cls(
            passed=bool(data["passed"]),
            new=int(data["new"]),
            baselined=int(data["baselined"]),
            stale=tuple(data.get("stale") or ()),
            missing=tuple(data.get("missing") or ()),
            unreviewed=tuple(data.get("unreviewed") or ()),
            new_cells=tuple(data.get("new_cells") or ()),
            entries=tuple(BaselineEntry.from_json(e) for e in data.get("entries") or ()),
        )

    @property
    def stale_lines(self) -> list[str]:
        return [
            f"{e['case']} {e['adapter']} {e['delivery']}: {e['outcome']} "
            f"{','.join(e['fields'])} no longer occurs"
            for e in self.stale
        ]


def gate_block(document: Mapping[str, Any]) -> GateBlock | None:
    """The gate block of a results document (None: it was not gated against a baseline)."""
    block = document.get("gate")
    return GateBlock.from_json(block) if block else None


def gate(
    results: RunResults, baseline: Baseline | None, allow_missing: Sequence[str] = ()
) -> tuple[RunResults, bool]:
    """The run's verdict, attached to the results.  It passes when cells were run, no adapter
    glue failed, and, with a baseline, no finding is new, no entry is stale or unreviewed
    (its reason a ``TODO``) and every adapter the baseline names ran (unless allowed
    missing); without one, when nothing is a finding."""
    split = split_findings(results.cells, baseline.entries if baseline else [])
    empty = shortfall(results)
    if baseline is None:
        passed = (
            not empty
            and not split.adapter_errors
            and not any(c.outcome.finding for c in results.cells)
        )
        return results.with_extra(adapter_errors=split.adapter_errors), passed
    rows = {row.name: row for row in results.adapters}
    missing = []
    for name in baseline.adapters:
        row = rows.get(name)
        if name in allow_missing or (
            row is not None
            and row.status != "unavailable"
            and any(c.adapter == name for c in results.cells)
        ):
            continue
        why = (
            f"{row.status}: {row.reason}"
            if row is not None and row.reason
            else "not selected for this run"
        )
        missing.append(
            f"the baseline covers {name}, which did not run ({why}); --allow-missing {name} if "
            "deliberate"
        )
    unreviewed = unreviewed_entries(baseline.entries)
    passed = split.passed and not missing and not empty and not unreviewed
    block = GateBlock(
        passed=passed,
        new=len(split.new),
        baselined=len(split.baselined),
        stale=tuple(e.to_json() for e in split.stale),
        missing=tuple(missing + empty),
        unreviewed=tuple(unreviewed),
        new_cells=tuple(
            f"{c.case} {c.adapter} {c.delivery}: {c.outcome} {','.join(c.fields)}"
            for c in split.new
        ),
        entries=tuple(baseline.entries),
    )
    return results.with_extra(adapter_errors=split.adapter_errors, gate=block.to_json()), passed


def unreviewed_entries(entries: Iterable[BaselineEntry]) -> list[str]:
    """Entries whose reason still holds the ``TODO`` that ``baseline`` and ``minimize
    --baseline`` write for a behaviour nobody explained: the gate refuses them, so an entry
    written by a tool never passes as reviewed."""
    return [
        f"{e.adapter} {e.outcome} {','.join(e.fields)} [{','.join(e.deliveries)}]: "
        f"{', '.join(e.cases)}"
        for e in entries
        if TODO in e.reason
    ]


def baseline_from_cells(
    cells: Iterable[Cell], previous: Sequence[BaselineEntry] = (), adapters: Iterable[str] = ()
) -> dict[str, Any]:
    """One entry per behaviour covering every failing cell; reviewed reasons are kept.  The
    baseline names ``adapters`` (those that ran) as the ones it vouches for."""
    modes_run: dict[tuple[str, str], set[str]] = defaultdict(set)
    failing: dict[tuple[str, str, tuple[str, ...]], dict[str, set[str]]] = defaultdict(
        lambda: defaultdict(set)
    )
    for cell in cells:
        modes_run[(cell.adapter, cell.case)].add(cell.delivery)
        if cell.outcome.finding:
            failing[(cell.adapter, cell.outcome, tuple(cell.fields))][cell.case].add(cell.delivery)
    entries = []
    for (adapter, outcome, fields), by_case in failing.items():
        by_deliveries: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for case, deliveries in by_case.items():
            everywhere = deliveries == modes_run[(adapter, case)] and len(deliveries) > 1
            by_deliveries[("*",) if everywhere else tuple(sorted(deliveries))].append(case)
        for deliveries, cases in by_deliveries.items():
            reason, link = _reviewed_reason(previous, adapter, outcome, fields, cases)
            entries.append(
                BaselineEntry(
                    adapter, outcome, fields, deliveries, tuple(sorted(cases)), reason, link
                ).to_json()
            )
    entries += [e.to_json() for e in _not_judged(previous, modes_run)]
    entries.sort(key=lambda e: (e["adapter"], e["outcome"], e["fields"], e["deliveries"]))
    return {"version": 1, "adapters": sorted(adapters), "entries": entries}


def _not_judged(
    previous: Sequence[BaselineEntry], modes_run: dict[tuple[str, str], set[str]]
) -> list[BaselineEntry]:
    """The parts of earlier entries this run did not judge (another adapter, case or mode),
    kept as they were: a run of one case rewrites that case's entries, not the file."""
    ran: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for (adapter, case), modes in modes_run.items():
        ran[adapter][case] = modes
    kept = []
    for entry in previous:
        by_deliveries: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for pattern in entry.cases:
            cases = ran[entry.adapter]
            if any(ch in pattern for ch in "*?["):
                modes = set().union(
                    *(m for c, m in cases.items() if fnmatch.fnmatchcase(c, pattern))
                )
            else:
                modes = cases.get(pattern, set())
            rest = (
                entry.deliveries
                if not modes
                else tuple(d for d in entry.deliveries if d != "*" and d not in modes)
            )
            if rest:
                by_deliveries[rest].append(pattern)
        kept += [
            BaselineEntry(
                entry.adapter, entry.outcome, entry.fields, deliveries, tuple(cases),
                entry.reason, entry.link,
            )
            for deliveries, cases in by_deliveries.items()
        ]
    return kept


def behaviour_units(entries: Iterable[dict[str, Any]]) -> set[tuple[str, ...]]:
    """Every (adapter, outcome, fields, delivery, case) an entry list vouches for: what
    ``baseline --previous`` compares to say what it added, removed and kept."""
    return {
        (e["adapter"], e["outcome"], ",".join(e["fields"]), delivery, case)
        for e in entries
        for delivery in e["deliveries"]
        for case in e["cases"]
    }


def _reviewed_reason(
    previous: Sequence[BaselineEntry],
    adapter: str,
    outcome: str,
    fields: tuple[str, ...],
    cases: Sequence[str],
) -> tuple[str, str | None]:
    """The reasons and link reviewers wrote for earlier entries of the same behaviour;
    cases that no reviewed entry covered yet are named in a TODO, so nothing new hides
    behind an old explanation.  An entry has one link: when merged entries cited several,
    the first stays the link and the others are named in the reason."""
    old = [
        e
        for e in previous
        if (e.adapter, e.outcome, e.fields) == (adapter, outcome, fields)
        and any(e.covers_case(c) for c in cases)
        and not e.reason.startswith(TODO)
    ]
    reasons = list(dict.fromkeys(e.reason for e in old if e.reason))
    links = list(dict.fromkeys(e.link for e in old if e.link))
    reasons.extend(f"(also reported: {link})" for link in links[1:])
    unreviewed = [c for c in cases if not any(e.covers_case(c) for e in old)]
    if unreviewed:
        reasons.append(f"{TODO} {', '.join(unreviewed)}" if reasons else TODO)
    return " / ".join(reasons), links[0] if links else None
