"""One engine's grammar check, run in that engine's environment (its pinned xgrammar): each
case through the grammar the engine builds for its request (and, when the grammar accepts a
malformed output, through the engine's parser), then seeded walks of every required/named
grammar through the same parser.  Every outcome is a ``grammar`` cell of a results document.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from k2conform import markers
from k2conform.adapter import GrammarUse
from k2conform.adapter.harness import guarded
from k2conform.adapter.registry import create_adapter, load
from k2conform.case.corpus import CompletionCase, Expectation
from k2conform.case.samples import SAMPLE_CLASS, sample_id
from k2conform.delivery import modes
from k2conform.grammar.walk import CompiledTag, xgrammar_version
from k2conform.judge.cell import judge_result
from k2conform.model import (
    SEVERITY,
    Cell,
    CellOutcome,
    FieldDiff,
    RequestFate,
    Result,
    ResultOutcome,
    ToolCall,
)
from k2conform.run.cell import CellSettings, run_cell
from k2conform.run.results import adapter_row, case_summary

GRAMMAR = modes.GRAMMAR_MODE
#: How a grammar-admitted output reaches the parser: what an engine sends, one-shot and per token.
PARSE_MODES = ("whole", "stream-token")
#: A well-formed output the request does not allow (no call under required, another tool or a
#: second call under a named one, a strict schema broken): the grammar must reject it.
OUTSIDE_REQUEST = "GRAMMAR.outside-request"
FUNCTION_PREFIX = "functions."


@dataclass(frozen=True)
class Job:
    """What the parent sends an engine's worker: the engine (an adapter name), the cases, and
    how many walks of each grammar to draw from which seed."""

    engine: str
    cases: tuple[CompletionCase, ...]
    seed: int
    samples: int
    settings: CellSettings = field(default_factory=CellSettings)


def run_job(job: Job) -> dict[str, Any]:
    """The engine's cells, the drawn samples (as cases), the ``auto`` cases it builds no grammar
    for (``declined``: no cell is owed for them) and its adapter row, as JSON."""
    adapter = create_adapter(job.engine, job.settings.deadline)
    availability = load(adapter)
    row = adapter_row(adapter, (availability.status, availability.reason))
    if availability.status != "ok":
        cells = [
            Cell.failed(c.id, adapter.name, GRAMMAR, availability.status, availability.reason)
            for c in job.cases
        ]
        return _document(row, [], cells, [])
    grammars: dict[str, tuple[CompiledTag | Result | None, GrammarUse]] = {}
    cells, samples, declined = [], [], []
    for case in sorted(job.cases, key=_source_order):
        key = json.dumps(case.request.to_json(), sort_keys=True)
        first = key not in grammars
        if first:
            grammars[key] = _grammar(adapter, case)
        grammar, use = grammars[key]
        cell = _case_cell(adapter, grammar, use, case, job.settings)
        if cell is not None:
            cells.append(cell)
        else:
            declined.append(case.id)
        if first and isinstance(grammar, CompiledTag) and _sampled(case):
            drawn = draw_samples(adapter.name, grammar, case, job.seed, job.samples)
            samples.extend(drawn)
            cells.extend(
                parse_cell(adapter, sample, job.settings, _walk_facts(sample)) for sample in drawn
            )
    return _document(row, samples, cells, declined)


def _source_order(case: CompletionCase) -> tuple[int, bool, str]:
    """Walks are named after the first case of their request in this order: ``y_`` cases the
    request allows, then the others."""
    return ("yni".index(case.verdict), OUTSIDE_REQUEST in case.tags, case.id)


def _document(
    row: Any, samples: Sequence[CompletionCase], cells: Sequence[Cell], declined: Sequence[str]
) -> dict[str, Any]:
    return {
        "adapter": row.to_json(),
        "declined": list(declined),
        "xgrammar": xgrammar_version(),
        "samples": [case_summary(s).to_json() for s in samples],
        "cells": [c.to_json() for c in cells],
    }


def _grammar(adapter: Any, case: CompletionCase) -> tuple[CompiledTag | Result | None, GrammarUse]:
    """The engine's compiled grammar for the case's request and how its server applies it;
    None: the engine does not constrain it; a failed Result: building it crashed (the
    engine's code), its xgrammar could not compile it, or the glue broke."""
    spec = guarded(lambda: adapter.structural_tag(case.request))
    use = guarded(lambda: adapter.grammar_use(case.request)) if spec is not None else GrammarUse()
    if isinstance(use, Result):
        return use, GrammarUse()
    if spec is None or isinstance(spec, Result):
        return spec, use
    try:
        return CompiledTag(spec, use.tokens), use
    except Exception as error:  # noqa: BLE001 - the engine built a tag its xgrammar cannot compile
        failed = Result.failed(
            "crash", f"xgrammar {xgrammar_version()} cannot compile the tag: {error}", tag=spec
        )
        return failed, use


def _constrained(case: CompletionCase) -> bool:
    return case.request.tool_choice != "auto"


def _sampled(case: CompletionCase) -> bool:
    """Walks are drawn from required/named grammars without thinking: their language is calls
    only, so the calls a walk wrote are its whole expectation.  Not from a request-level case's:
    its question is the request's fate, and its schema may need names the walks' small
    vocabulary cannot spell.  Not from a Kimi K3 grammar: the walks' vocabulary and the calls
    read off a walk are K2's."""
    return (
        _constrained(case)
        and not case.request.thinking
        and not case.request_level
        and case.format == markers.FORMAT
    )


def _case_cell(
    adapter: Any,
    grammar: CompiledTag | Result | None,
    use: GrammarUse,
    case: CompletionCase,
    settings: CellSettings,
) -> Cell | None:
    """A case the engine constrains: a ``y_`` output must be accepted (rejected when tagged
    :data:`OUTSIDE_REQUEST`); an ``n_`` output rejected, or parsed as the case expects; an
    ``i_`` one is recorded.  None: an ``auto`` case the engine does not constrain, which the
    grammar column has nothing to say about."""
    if grammar is None:
        if not _constrained(case):
            return None
        return Cell.failed(
            case.id,
            adapter.name,
            GRAMMAR,
            "unavailable",
            f"{adapter.name} builds no grammar for this request",
        )
    if case.request_level and not case.request.thinking:
        if not isinstance(grammar, Result) or grammar.outcome is ResultOutcome.CRASH:
            return _fate_cell(adapter, grammar, use, case, settings)
    if isinstance(grammar, Result):
        return Cell(
            case.id, adapter.name, GRAMMAR, CellOutcome(grammar.outcome.value), observed=grammar
        )
    if case.request.thinking and use.think_end is None:
        return Cell.failed(
            case.id,
            adapter.name,
            GRAMMAR,
            "unavailable",
            "thinking on: the engine applies the grammar only once its reasoning "
            "parser ends the reasoning, which k2conform does not model for it",
        )
    rejection, facts = _verdict(grammar, use, case)
    if case.verdict == "n" and rejection is None:
        return parse_cell(adapter, case, settings, facts)
    diffs: tuple[FieldDiff, ...] = ()
    if case.verdict == "y" and (OUTSIDE_REQUEST in case.tags) == (rejection is None):
        wanted = "rejected" if rejection is None else "accepted"
        diffs = (FieldDiff("grammar", wanted, rejection or "accepted", "grammar"),)
    outcome = (
        CellOutcome.DIFFERS
        if diffs
        else CellOutcome.IMPL_DEFINED
        if case.verdict == "i"
        else CellOutcome.AGREE
    )
    return Cell(case.id, adapter.name, GRAMMAR, outcome, diffs, observed=Result(meta=facts))


def _verdict(
    grammar: CompiledTag, use: GrammarUse, case: CompletionCase
) -> tuple[str | None, dict[str, Any]]:
    """Where the grammar rejects the case's output as the server applies it (None: it accepts
    it), and what the cell records of the grammar.  The grammar sees the output's pieces
    (characters, or tokens when the tag names tokens) from the think closer on when the
    request thinks and ``use`` says where reasoning ends, up to the piece that completes a stop
    string (generation ends there, so the grammar need not), else to the end."""
    text = modes.engine_output(case.model_output)
    pieces = output_pieces(text, use.tokens, case.spelled_markers)
    start = 0
    if case.request.thinking and use.think_end is not None:
        start = _after(pieces, output_pieces(use.think_end, use.tokens))
    end = _stop_end(pieces, text, use.stops)
    rejection = None
    if start <= len(pieces) and start < end:  # the grammar holds before generation ends
        rejection = grammar.rejection_of(pieces[start:end], text, must_end=end > len(pieces))
    return rejection, {
        "grammar": {
            "accepted": rejection is None,
            "rejection": rejection,
            "xgrammar": xgrammar_version(),
            "structural_tag": grammar.spec,
            **({"stops": list(use.stops)} if use.stops else {}),
        }
    }


def output_pieces(
    text: str, tokens: Sequence[str], spelled: Sequence[int] = ()
) -> list[tuple[int, str]]:
    """``text`` as ``(offset, piece)``: each of ``tokens`` one piece where it is not spelled
    (``spelled``: offsets of markers written from ordinary pieces), any other text one character
    a piece."""
    pieces, at = [], 0
    while at < len(text):
        token = next((t for t in tokens if text.startswith(t, at)), None)
        piece = token if token is not None and at not in spelled else text[at]
        pieces.append((at, piece))
        at += len(piece)
    return pieces


def _after(pieces: Sequence[tuple[int, str]], closer: Sequence[tuple[int, str]]) -> int:
    """The index after the first run of ``pieces`` that spells ``closer``'s pieces (as SGLang's
    ``TokenSequenceMatcher`` matches token ids); past the end when there is none."""
    wanted = [piece for _, piece in closer]
    found = [piece for _, piece in pieces]
    for n in range(len(found) - len(wanted) + 1):
        if found[n : n + len(wanted)] == wanted:
            return n + len(wanted)
    return len(found) + 1


def _stop_end(pieces: Sequence[tuple[int, str]], text: str, stops: Sequence[str]) -> int:
    """The index after the piece with which the output first holds a stop string; past the
    end when it never does."""
    ends = [text.index(stop) + len(stop) for stop in stops if stop and stop in text]
    if not ends:
        return len(pieces) + 1
    first = min(ends)
    return next(n + 1 for n, (at, piece) in enumerate(pieces) if at + len(piece) >= first)


def _fate_cell(
    adapter: Any,
    grammar: CompiledTag | Result,
    use: GrammarUse,
    case: CompletionCase,
    settings: CellSettings,
) -> Cell:
    """A request-level case: the request's fate as the engine's grammar decides it, judged
    against the case's as a server's is (``rejected``: the engine's code or its xgrammar cannot
    build the grammar, which its server refuses the request for; ``uncallable``: the grammar
    refuses the case's output).  Accepted as the case expects, the output then goes through
    the engine's parser, as any case's."""
    if isinstance(grammar, Result):
        fate, detail = RequestFate.REJECTED, grammar.error or ""
        facts: dict[str, Any] = {"grammar": {"accepted": False, "xgrammar": xgrammar_version()}}
    else:
        rejection, facts = _verdict(grammar, use, case)
        fate = RequestFate.ACCEPTED if rejection is None else RequestFate.UNCALLABLE
        detail = rejection or ""
    if fate is RequestFate.ACCEPTED and case.expected is not None:
        if case.expected.request is RequestFate.ACCEPTED:
            served = replace(case, expected=replace(case.expected, request=None))
            return parse_cell(adapter, served, settings, facts)
    observed = Result(meta={**facts, "request": {"fate": fate.value, "detail": detail}})
    outcome, diffs, _ = judge_result(case, observed, None)
    return Cell(case.id, adapter.name, GRAMMAR, outcome, tuple(diffs), observed=observed)


def parse_cell(
    adapter: Any, case: CompletionCase, settings: CellSettings, facts: Mapping[str, Any]
) -> Cell:
    """The case through the engine's parser in :data:`PARSE_MODES`, judged as the matrix judges
    them; the grammar cell reports the worst of the two (then the one differing in more fields),
    with what the grammar check knows (``facts``) in its observed ``meta``."""
    parsed = [run_cell(adapter, case, mode, settings) for mode in PARSE_MODES]
    worst = min(parsed, key=lambda c: (SEVERITY.index(c.outcome), -len(c.fields)))
    failing = tuple(c.delivery for c in parsed if not c.outcome.passing)
    observed = worst.observed.with_meta(**facts) if worst.observed else None
    return replace(
        worst,
        delivery=GRAMMAR,
        variant=worst.delivery,
        variants_differing=failing,
        observed=observed,
        seconds=sum(c.seconds for c in parsed),
    )


def _walk_facts(sample: CompletionCase) -> dict[str, Any]:
    walk = sample.generator or {}
    return {
        "grammar": {
            "xgrammar": xgrammar_version(),
            "walk_seed": walk.get("seed"),
            "draw": walk.get("draw"),
        }
    }


def draw_samples(
    engine: str, grammar: CompiledTag, source: CompletionCase, seed: int, count: int
) -> list[CompletionCase]:
    """``count`` walks of the grammar, from a seed of the run's seed, the engine and the case
    whose request it is; each a ``y_`` case expecting the calls the walk wrote."""
    walk_seed = modes.case_seed(seed, f"{engine}:{source.id}")
    rng = random.Random(walk_seed)
    samples = []
    for draw in range(count):
        text = grammar.sample(rng)
        samples.append(
            CompletionCase(
                id=sample_id(engine, draw, source.id),
                description=f"walk {draw} of {engine}'s grammar for the request of {source.id}",
                tags=(SAMPLE_CLASS,),
                source=f"k2conform grammar --seed {seed}: xgrammar {xgrammar_version()} walk "
                f"seed {walk_seed}",
                request=source.request,
                model_output=text,
                deltas=None,
                expected=Expectation(None, None, generated_calls(text)),
                generator={"class": SAMPLE_CLASS, "seed": walk_seed, "draw": draw},
            )
        )
    return samples


def generated_calls(text: str) -> tuple[ToolCall, ...]:
    """The calls a walk of a required/named grammar wrote: ``SB (TB functions.NAME:N AB json
    TE)+ SE``, the id verbatim, the arguments the JSON text exactly (read to the end of the
    value, so marker text inside its strings stays in the arguments)."""
    decoder = json.JSONDecoder()
    calls = []
    position = len(markers.SECTION_BEGIN)
    while text.startswith(markers.CALL_BEGIN, position):
        header_end = text.index(markers.ARGUMENT_BEGIN, position)
        header = text[position + len(markers.CALL_BEGIN) : header_end]
        start = header_end + len(markers.ARGUMENT_BEGIN)
        _, end = decoder.raw_decode(text, start)
        name = header[len(FUNCTION_PREFIX) : header.rindex(":")]
        calls.append(ToolCall(name=name, arguments=text[start:end], id=header))
        position = end + len(markers.CALL_END)
    return tuple(calls)
