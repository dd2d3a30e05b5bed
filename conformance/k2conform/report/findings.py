"""What the reports show of a finding besides its behaviour (``gate.behaviours``): the command
that reproduces it, why a standalone script cannot show it, and the deltas it received."""

from __future__ import annotations

import shlex

from k2conform import markers
from k2conform.delivery import modes
from k2conform.model import CaseSummary, Cell, Delta


def repro_command(cell: Cell, seed: int) -> str:
    """The ``k2conform report-finding`` command that reruns this cell and writes its bug report
    (for a ``grammar`` cell, the ``k2conform grammar`` command that draws it again)."""
    if cell.delivery == modes.GRAMMAR_MODE:
        from k2conform.case.samples import source_of

        return shlex.join(
            [
                "k2conform",
                "grammar",
                "--engine",
                modes.grammar_engine(cell.adapter),
                "--case",
                source_of(cell.case),
                "--seed",
                str(seed),
            ]
        )
    words = [
        "k2conform",
        "report-finding",
        cell.case,
        "--adapter",
        cell.adapter,
        "--delivery",
        cell.delivery,
    ]
    if cell.delivery in modes.SEEDED_MODES and seed != modes.DEFAULT_SEED:
        words += ["--seed", str(seed)]
    burst = modes.burst_of(cell.variant)
    if burst is not None and burst != modes.DEFAULT_BURST:
        words += ["--burst", str(burst)]
    # the report and its standalone script as files (CASE.md, CASE.py), not 500 lines on stdout
    return shlex.join([*words, "--out", f"{cell.case}.md"])


#: Differences a standalone script cannot show: it prints the message a client ends up with,
#: and these are in how the stream or the wire delivered it, not in that message.
_DELIVERY_ONLY = ("index", "stream-invariant", "isolation", "liveness", "wire:")


def script_cannot_show(cell: Cell) -> str | None:
    """Why ``report-finding``'s standalone script cannot reproduce this cell (None: it can try):
    every difference is in the stream's delivery, which k2conform judges and the script's
    printed message does not carry."""
    if cell.fields and all(f.startswith(_DELIVERY_ONLY) for f in cell.fields):
        return (
            f"its standalone script cannot show this finding: {', '.join(cell.fields)} "
            "is judged on the stream as delivered, and the script prints only the message a "
            "client ends up with"
        )
    return None


def delivered_deltas(case: CaseSummary, cell: Cell, seed: int) -> tuple[Delta, ...] | None:
    """The deltas the cell's reported variant received, derived again from the model output
    with the stand-in tokenizer; None for a one-shot mode, or when they cannot be derived
    (a run with another tokenizer gives another variant label)."""
    from k2conform.delivery.tokenizer import load_tokenizer

    # A grammar cell's variant is the parse mode it reports (none: the grammar alone judged it).
    mode = (cell.variant or "whole") if cell.delivery == modes.GRAMMAR_MODE else cell.delivery
    if mode in ("whole", *modes.SERVER_MODES):
        return None
    variants = modes.deliveries(
        case.model_output,
        mode,
        load_tokenizer(None),
        seed=modes.case_seed(seed, cell.case),
        recorded=case.deltas,
        burst=modes.burst_of(cell.variant) or modes.DEFAULT_BURST,
        tool=modes.cutoff_tool(case.request.tool_names),
        spelled=case.spelled_markers,
        format=case.format or markers.FORMAT,
    )
    return next((v.deltas for v in variants if v.label in (cell.variant, mode)), None)
