"""An adapter's finding cells grouped into distinct behaviours, so a parser's maintainer reads
one entry per thing the parser does, not one per cell: the grouping the reports, ``history`` and
``catalogue`` share, beside the gate whose entries it reads.

A behaviour is the cells a reviewed baseline entry explains (one group per reason), or else
the cases that show the same outcome and differing fields in the same delivery modes (the
entry ``k2conform baseline`` would write for them).  Token-aligned and text-level modes never
share a behaviour: a failure only a text-level mode shows cannot be reached through an
engine's token stream.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from k2conform.delivery import modes
from k2conform.gate.baseline import TODO, BaselineEntry, gate_block
from k2conform.model import CaseSummary, Cell, RunResults

TOKEN_ALIGNED = "token-aligned"
TEXT_LEVEL = "text-level"
FAMILIES = (TOKEN_ALIGNED, TEXT_LEVEL)
_MODE_ORDER = {mode: i for i, mode in enumerate(modes.MODES)}


def family(mode: str) -> str:
    return TOKEN_ALIGNED if mode in modes.TOKEN_ALIGNED_MODES else TEXT_LEVEL


@dataclass(frozen=True)
class Behaviour:
    """One distinct thing an adapter does wrong, in one family of delivery modes."""

    adapter: str
    family: str
    cells: tuple[Cell, ...]
    #: True when the run's baseline lists it; False for a new finding (or a run without one).
    baselined: bool
    reason: str = ""  #: the reviewed reason, when a baseline entry with one explains the cells
    links: tuple[str, ...] = ()  #: upstream reports the baseline entries cite

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(sorted({c.case for c in self.cells}))

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(sorted({c.delivery for c in self.cells}, key=lambda m: _MODE_ORDER.get(m, 99)))

    @property
    def signatures(self) -> tuple[str, ...]:
        """Each outcome with its differing fields, once: ``differs: arguments, content``."""
        return tuple(dict.fromkeys(signature(c) for c in self.cells))

    @property
    def upstream(self) -> str:
        """``linked``, ``not reported`` (baselined, no upstream report) or ``new``."""
        if not self.baselined:
            return "new"
        return "linked" if self.links else "not reported"

    def modes_of(self, case: str) -> tuple[str, ...]:
        return tuple(c.delivery for c in self.cells if c.case == case)

    def example(self, cases: Mapping[str, CaseSummary]) -> Cell:
        """The cell of the shortest model output (then the first mode): the minimal example."""
        return min(
            self.cells,
            key=lambda c: (
                len(cases[c.case].model_output),
                _MODE_ORDER.get(c.delivery, 99),
                c.case,
            ),
        )


def ran_adapters(results: RunResults) -> list[str]:
    """The adapters with cells, in the run's order (an unavailable adapter has none)."""
    ran = {cell.adapter for cell in results.cells}
    return [a.name for a in results.adapters if a.name in ran]


def signature(cell: Cell) -> str:
    return f"{cell.outcome}: {', '.join(cell.fields)}" if cell.fields else str(cell.outcome)


def baseline_entries(results: RunResults) -> tuple[BaselineEntry, ...]:
    """The entries the run was gated against (kept in the gate block of the results)."""
    block = gate_block(results.extra)
    return block.entries if block else ()


def gated_behaviours(results: RunResults) -> dict[str, list[Behaviour]]:
    """The behaviours the reports show: grouped by the entries the run was gated against.  A
    caller that renders several reports groups once and hands the grouping to each."""
    return behaviours(results, baseline_entries(results))


def behaviours(results: RunResults, entries: Sequence[BaselineEntry]) -> dict[str, list[Behaviour]]:
    """Adapter → its distinct behaviours, in the order a maintainer should read them: new ones
    first, then those not reported upstream, then the rest; larger groups first."""
    by_reason: dict[tuple[str, str, str], list[tuple[Cell, list[BaselineEntry]]]]
    by_reason = defaultdict(list)
    unexplained: list[tuple[Cell, bool]] = []
    of_adapter: dict[str, list[BaselineEntry]] = defaultdict(list)
    for entry in entries:
        of_adapter[entry.adapter].append(entry)
    for cell in results.cells:
        if not cell.outcome.finding:
            continue
        matched = [e for e in of_adapter[cell.adapter] if e.matches(cell)]
        reason = next((e.reason for e in matched if e.reason and not e.reason.startswith(TODO)), "")
        if reason:
            by_reason[(cell.adapter, family(cell.delivery), reason)].append((cell, matched))
        else:
            unexplained.append((cell, bool(matched)))
    found = [_explained(*key, group) for key, group in by_reason.items()]
    found += _by_signature(unexplained)
    ordered: dict[str, list[Behaviour]] = {row.name: [] for row in results.adapters}
    for behaviour in sorted(found, key=_reading_order):
        ordered.setdefault(behaviour.adapter, []).append(behaviour)
    return ordered


def _explained(
    adapter: str, fam: str, reason: str, group: Sequence[tuple[Cell, Sequence[BaselineEntry]]]
) -> Behaviour:
    links = dict.fromkeys(e.link for _, matched in group for e in matched if e.link)
    return Behaviour(adapter, fam, tuple(c for c, _ in group), True, reason, tuple(links))


def _by_signature(cells: Iterable[tuple[Cell, bool]]) -> list[Behaviour]:
    """Cells no reviewed reason explains: one behaviour per outcome, fields and set of modes."""
    by_key: dict[tuple[str, str, bool, str], dict[str, list[Cell]]]
    by_key = defaultdict(lambda: defaultdict(list))
    for cell, baselined in cells:
        key = (cell.adapter, family(cell.delivery), baselined, signature(cell))
        by_key[key][cell.case].append(cell)
    groups: dict[tuple[Any, ...], list[Cell]] = defaultdict(list)
    for key, by_case in by_key.items():
        for case_cells in by_case.values():
            groups[(*key, tuple(sorted(c.delivery for c in case_cells)))].extend(case_cells)
    return [
        Behaviour(adapter, fam, tuple(group), baselined)
        for (adapter, fam, baselined, _, _), group in groups.items()
    ]


def _reading_order(behaviour: Behaviour) -> tuple[Any, ...]:
    rank = {"new": 0, "not reported": 1, "linked": 2}[behaviour.upstream]
    return (FAMILIES.index(behaviour.family), rank, -len(behaviour.cases), behaviour.signatures)


def counts(found: Mapping[str, Sequence[Behaviour]]) -> dict[str, dict[str, int]]:
    """Per adapter: distinct behaviours per family, new ones, baselined ones with no upstream
    report, and the finding cells they hold."""
    table = {}
    for adapter, group in found.items():
        row = {fam: sum(b.family == fam for b in group) for fam in FAMILIES}
        row["new"] = sum(b.upstream == "new" for b in group)
        row["not reported"] = sum(b.upstream == "not reported" for b in group)
        row["cells"] = sum(len(b.cells) for b in group)
        table[adapter] = row
    return table
