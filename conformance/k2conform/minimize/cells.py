"""A minimiser's candidate judged as the matrix judges a cell: a corpus case (the reference
parser's result as its expectation, the verdict rule's prefix) run by :func:`run_cell` for one
adapter in one mode.  The catalogue shrinks a behaviour with it, and ``minimize`` holds a fuzz
finding's matrix judgement with it, so a minimised case still shows what made it a finding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from k2conform import formats
from k2conform.adapter.registry import Availability
from k2conform.case.corpus import CompletionCase, Expectation
from k2conform.delivery import modes
from k2conform.model import Cell, Request
from k2conform.run.cell import CellSettings, run_cell


def target_signature(outcome: str, fields: Sequence[str], spelled: bool = False) -> str:
    """A behaviour as the minimiser's signature: the one cell with its outcome and fields, and
    whether its case spells a marker from ordinary pieces (``spelled``: a behaviour of its own
    axis, so shrinking cannot trade the spelled marker for another way to the same fields)."""
    return "cell:" + ("spelled:" if spelled else "") + "+".join((outcome, *fields))


@dataclass
class Probe:
    """One candidate through the adapter: what the minimiser reads (``signature``)."""

    signature: str
    case: CompletionCase | None = None
    cell: Cell | None = None
    deltas: tuple[str, ...] | None = None
    mode: str = ""


class CellEngine:
    """The minimiser's engine: a candidate becomes a corpus case (the reference parser's result
    as its expectation, the verdict rule's prefix, both of the candidates' ``format``) and one
    cell of one adapter in one mode."""

    def __init__(
        self,
        adapter: Any,
        availability: Availability,
        settings: CellSettings,
        case_id: str,
        format: str = formats.DEFAULT,
    ) -> None:
        self.adapter = adapter
        self.availability = availability
        self.settings = settings
        self.case_id = case_id  # the id candidates carry (after the verdict prefix)
        self.format = formats.FORMATS[format]

    def case(
        self,
        request: Request,
        text: str,
        cuts: Sequence[int] | None,
        spelled: Sequence[int] = (),
    ) -> CompletionCase | None:
        """``spelled``: markers written from ordinary token pieces (ignored with ``cuts``: a
        text-level delivery sends no token ids)."""
        choice = request.tool_choice
        if isinstance(choice, Mapping) and choice["function"]["name"] not in request.tool_names:
            return None  # a named choice whose tool was removed: not a request a client sends
        try:
            reference = self.format.parse(text, request)
            spelled = tuple(spelled) if cuts is None else ()
            prefix = self.format.verdict(request, text, bool(spelled))[0]
        except Exception:  # noqa: BLE001 - a candidate the reference cannot judge: not kept
            return None
        deltas = tuple(d.text for d in modes.cut(text, cuts)) if cuts is not None else None
        expected = Expectation(reference.content, reference.reasoning, reference.tool_calls)
        return CompletionCase(
            f"{prefix}_{self.case_id}", "candidate", (), "k2conform catalogue", request, text,
            deltas, expected, format=self.format.name, spelled_markers=spelled,
        )  # fmt: skip

    def observe(
        self,
        request: Request,
        text: str,
        mode: str,
        cuts: Sequence[int] | None = None,
        spelled: Sequence[int] = (),
    ) -> Probe:
        case = self.case(request, text, cuts, spelled)
        if case is None:
            return Probe("")
        cell = run_cell(self.adapter, case, mode, self.settings, self.availability)
        found = (
            target_signature(cell.outcome.value, cell.fields, bool(case.spelled_markers))
            if cell.outcome.finding
            else ""
        )
        return Probe(found, case, cell, case.deltas, mode)
