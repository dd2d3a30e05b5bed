"""Known deviations per adapter: the cells a release is allowed to get wrong, with a reason.

An entry names a case, an adapter, a delivery mode (or ``*``), the outcome and the fields
that differ.  A run passes when every failing cell is covered by an entry, and fails when
an entry no longer occurs (a stale expectation must be removed, as toml-test's
``-skip-must-err`` demands), so the file always says exactly what is wrong today.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from k2conform.corpus import CorpusError
from k2conform.runner import PASSING, Cell

_KEYS = {"case", "adapter", "delivery", "outcome", "fields", "reason", "link"}


@dataclass(frozen=True)
class BaselineEntry:
    case: str
    adapter: str
    delivery: str
    outcome: str
    fields: tuple[str, ...]
    reason: str = ""
    link: str = ""

    def matches(self, cell: Cell) -> bool:
        return (
            fnmatch.fnmatchcase(cell.case, self.case)
            and cell.adapter == self.adapter
            and fnmatch.fnmatchcase(cell.delivery, self.delivery)
            and cell.outcome == self.outcome
            and tuple(cell.fields) == self.fields
        )

    def applies_to(self, cases: set[str], adapters: set[str], modes: set[str]) -> bool:
        """Whether the run could have produced this entry's cell at all."""
        return (
            self.adapter in adapters
            and any(fnmatch.fnmatchcase(c, self.case) for c in cases)
            and any(fnmatch.fnmatchcase(m, self.delivery) for m in modes)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case, "adapter": self.adapter, "delivery": self.delivery,
            "outcome": self.outcome, "fields": list(self.fields), "reason": self.reason, "link": self.link,
        }


def load_baseline(path: Path | str) -> list[BaselineEntry]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise CorpusError(path, "-", f"cannot read the baseline: {error}") from None
    entries = []
    for i, raw in enumerate(data.get("entries", []) if isinstance(data, dict) else []):
        where = f"entries[{i}]"
        if not isinstance(raw, dict) or not {"case", "adapter", "delivery", "outcome", "fields"} <= set(raw):
            raise CorpusError(path, where, "needs case, adapter, delivery, outcome and fields")
        unknown = set(raw) - _KEYS
        if unknown:
            raise CorpusError(path, f"{where}.{sorted(unknown)[0]}", "unknown field")
        entries.append(BaselineEntry(raw["case"], raw["adapter"], raw["delivery"], raw["outcome"],
                                     tuple(raw["fields"]), raw.get("reason", ""), raw.get("link", "")))
    return entries


@dataclass
class Verdict:
    new: list[Cell]
    baselined: list[Cell]
    stale: list[BaselineEntry]

    @property
    def passed(self) -> bool:
        return not self.new and not self.stale


def judge(cells: Sequence[Cell], entries: Sequence[BaselineEntry], modes: Iterable[str]) -> Verdict:
    failing = [c for c in cells if c.outcome not in PASSING]
    new, baselined, used = [], [], set()
    for cell in failing:
        match = next((i for i, e in enumerate(entries) if e.matches(cell)), None)
        if match is None:
            new.append(cell)
        else:
            baselined.append(cell)
            used.add(match)
    ran_cases = {c.case for c in cells}
    ran_adapters = {c.adapter for c in cells if c.outcome != "unavailable"}
    stale = [
        e for i, e in enumerate(entries)
        if i not in used and e.applies_to(ran_cases, ran_adapters, set(modes))
    ]
    return Verdict(new, baselined, stale)


def baseline_from_cells(cells: Sequence[Cell], previous: Sequence[BaselineEntry] = ()) -> dict[str, Any]:
    """A baseline covering every failing cell, keeping the reasons of entries that still match.

    A deviation that shows in every delivery mode of a case is written once, with
    delivery ``*``; one that shows in some modes only is written per mode.
    """
    modes_run: dict[tuple[str, str], set[str]] = {}
    failing: dict[tuple[str, str, str, tuple[str, ...]], list[Cell]] = {}
    for cell in cells:
        modes_run.setdefault((cell.case, cell.adapter), set()).add(cell.delivery)
        if cell.outcome not in PASSING:
            failing.setdefault((cell.case, cell.adapter, cell.outcome, tuple(cell.fields)), []).append(cell)
    entries = []
    for (case, adapter, outcome, fields), group in failing.items():
        everywhere = {c.delivery for c in group} == modes_run[(case, adapter)] and len(group) > 1
        for delivery in ["*"] if everywhere else sorted(c.delivery for c in group):
            old = next((e for e in previous if e.matches(next(c for c in group if fnmatch.fnmatchcase(c.delivery, delivery)))), None)
            entries.append(BaselineEntry(
                case, adapter, delivery, outcome, fields,
                reason=old.reason if old else "TODO: review and explain",
                link=old.link if old else "",
            ).to_json())
    entries.sort(key=lambda e: (e["adapter"], e["case"], e["delivery"]))
    return {"version": 1, "entries": entries}
