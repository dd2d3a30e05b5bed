"""Run one adapter on one delivery and return a canonical result; never raise for the parser.

Streams are reassembled here, once, the way an OpenAI client does it
(:mod:`k2conform.judge.stream`), so every adapter's streaming path is judged by the same rules.
"""

from __future__ import annotations

import traceback
from dataclasses import replace
from typing import Callable, Sequence, TypeVar

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    ParserCrash,
    RequestRefused,
    stream_steps,
)
from k2conform.delivery.modes import Delivery
from k2conform.model import (
    Delta,
    Request,
    Result,
    StreamEvent,
    StreamKind,
    StreamReply,
    StreamViolation,
    WireViolation,
)
from k2conform.judge.compare import compare_results
from k2conform.judge.stream import Assembled, assemble

T = TypeVar("T")


def guarded(call: Callable[[], T]) -> T | Result:
    """Run one adapter call: what the parser raised (through ``call_parser``) is a ``crash``,
    a missing package ``unavailable``, anything else the glue's ``adapter-error``; those come
    back as a failed Result, never as an exception.  A request the server did not serve
    (``RequestRefused``) is a result with its fate and no reply."""
    try:
        return call()
    except ParserCrash as error:
        return Result.failed("crash", str(error))
    except RequestRefused as error:
        return Result(meta={"request": {"fate": error.fate.value, "detail": error.detail}})
    except AdapterUnavailable as error:
        return Result.failed("unavailable", str(error))
    except AdapterGlueError as error:
        return Result.failed("adapter-error", str(error))
    except Exception as error:  # noqa: BLE001 - outside call_parser, so it is the glue's
        where = traceback.extract_tb(error.__traceback__)[-1]
        return Result.failed(
            "adapter-error", f"{type(error).__name__}: {error} (at {where.filename}:{where.lineno})"
        )


def _assembled(
    reply: list[StreamEvent] | StreamReply, fed: int | None, leaks: Sequence[str]
) -> tuple[Assembled, tuple[WireViolation, ...]]:
    """The stream as a client reassembles it, and the wire violations a server adapter read.
    (Called on the adapter's reply, not around the call: the parser runs at the stack depth
    it always ran at, which decides where a deeply nested output hits Python's recursion
    limit.)"""
    if isinstance(reply, StreamReply):
        return assemble(reply.events, fed, leaks=leaks), reply.wire
    return assemble(reply, fed, leaks=leaks), ()


def interleave(
    adapter: Adapter, request: Request, streams: Sequence[Sequence[Delta]]
) -> list[list[StreamEvent]]:
    """Each stream's events when all are open at once over one adapter, as a server's requests
    are: every stream's parser state is opened first, then their deltas are stepped in turn,
    each stream's spread evenly over the whole (its k-th of n at k/n, the earlier stream first
    on a tie), so each is in flight for all of the others."""
    steppers = [adapter.open_stream(request) for _ in streams]
    steps = [stream_steps(deltas) for deltas in streams]
    order = sorted(
        ((k / len(own), i, k) for i, own in enumerate(steps) for k in range(len(own))),
    )
    events: list[list[StreamEvent]] = [[] for _ in streams]
    for _, i, k in order:
        events[i].extend(steppers[i](*steps[i][k]))
    return events


def _isolated(
    adapter: Adapter, request: Request, delivery: Delivery
) -> tuple[Assembled, tuple[WireViolation, ...]]:
    """``stream-interleaved``: this stream stepped in turn with its partner, each held to what
    it sends alone through a fresh parser state, stepped the same way (a difference is the
    adapter's shared state, vllm-project/vllm#54701)."""
    partner, own = interleave(adapter, request, (delivery.partner, delivery.deltas))
    # alone at the same stack depth as together: where a parser hits the recursion limit
    # depends on it (SGLang keeps the text of a JSON nested too deep), and must not differ
    (own_alone,) = interleave(adapter, request, (delivery.deltas,))
    (partner_alone,) = interleave(adapter, request, (delivery.partner,))
    crossed = [
        StreamViolation(StreamKind.CROSS_STREAM, f"{which}: {difference}")
        for which, beside, alone in (
            ("this stream", own, own_alone),
            ("the stream beside it", partner, partner_alone),
        )
        if (difference := _first_difference(beside, alone))
    ]
    assembled = assemble(own, delivery.fed, leaks=delivery.leaks)
    return replace(assembled, violations=assembled.violations + tuple(crossed)), ()


def _first_difference(beside: list[StreamEvent], alone: list[StreamEvent]) -> str | None:
    """Where a stream stepped beside another first sent other chunks than alone (None: it
    sent the same)."""
    if beside == alone:
        return None
    for n, (one, other) in enumerate(zip(beside, alone)):
        if one != other:
            return f"chunk {n + 1} is {one} beside another stream, {other} alone"
    return f"{len(beside)} chunks beside another stream, {len(alone)} alone"


def _concurrent(
    adapter: Adapter, request: Request, delivery: Delivery
) -> tuple[Assembled, tuple[WireViolation, ...]]:
    """``server-concurrent``: the stream alone, then ``delivery.copies`` copies at once, each
    held to what the one alone gave a client (the reply, its finish_reason and which
    invariants it broke: how a loaded server groups tokens into chunks may differ, what the
    client assembles may not).  The result is the first copy that differs, else the one
    alone."""
    alone = _assembled(adapter.parse_stream(request, delivery.deltas), delivery.fed, delivery.leaks)
    together = [
        _assembled(reply, delivery.fed, delivery.leaks)
        for reply in adapter.parse_concurrent(request, delivery.deltas, delivery.copies)
    ]
    crossed = [
        (n, StreamViolation(StreamKind.CROSS_STREAM, f"stream {n + 1} of {len(together)}: {what}"))
        for n, copy in enumerate(together)
        if (what := _seen_differently(alone, copy))
    ]
    if not crossed:
        return alone
    first, _ = crossed[0]
    (assembled, wire) = together[first]
    violations = assembled.violations + tuple(v for _, v in crossed)
    return replace(assembled, violations=violations), wire


def _seen_differently(
    alone: tuple[Assembled, tuple[WireViolation, ...]],
    beside: tuple[Assembled, tuple[WireViolation, ...]],
) -> str | None:
    """What a client of a stream sent beside others saw other than alone (None: the same):
    the reply's fields, its finish_reason, the kinds of invariants and wire rules broken."""
    (one, one_wire), (other, other_wire) = alone, beside
    seen = [
        (diff.field, diff.expected, diff.observed)
        for diff in compare_results(one.result, other.result)
    ]
    for what, own, theirs in (
        (
            "finish_reason",
            one.result.meta.get("finish_reason"),
            other.result.meta.get("finish_reason"),
        ),
        ("stream invariants", _kinds(one.violations), _kinds(other.violations)),
        ("wire rules", _kinds(one_wire), _kinds(other_wire)),
    ):
        if own != theirs:
            seen.append((what, own, theirs))
    return (
        "; ".join(
            f"{what} {_short(theirs)} beside the others, {_short(own)} alone"
            for what, own, theirs in seen
        )
        or None
    )


def _kinds(violations: Sequence[StreamViolation | WireViolation]) -> list[str]:
    return sorted({v.kind.value for v in violations})


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def execute(adapter: Adapter, request: Request, delivery: Delivery) -> Result:
    """The adapter's result for this delivery, with outcome and provenance in ``meta``.  A
    delivery's prelude goes through the same adapter first, as an earlier request; what the
    parser made of it is not judged, only whether it then crashed (``meta.prelude``)."""
    prelude = None
    if delivery.prelude:
        earlier = guarded(
            lambda: _assembled(
                adapter.parse_stream(request, delivery.prelude), None, delivery.leaks
            )
        )
        prelude = earlier.outcome.value if isinstance(earlier, Result) else "ok"
    if delivery.streaming:
        streamed = guarded(
            (lambda: _isolated(adapter, request, delivery))
            if delivery.partner
            else (lambda: _concurrent(adapter, request, delivery))
            if delivery.copies
            else (
                lambda: _assembled(
                    adapter.parse_stream(request, delivery.deltas), delivery.fed, delivery.leaks
                )
            )
        )
        if isinstance(streamed, Result):
            result = streamed
        else:
            assembled, wire = streamed
            result = assembled.result.with_meta(
                chunks=assembled.chunks,
                stream_violations=[v.to_json() for v in assembled.violations],
            )
            if wire:
                result = result.with_meta(wire_violations=[v.to_json() for v in wire])
    else:
        (output,) = delivery.deltas
        result = guarded(lambda: adapter.parse_whole(request, output))
    meta = {"adapter": adapter.name, "version": adapter.version(), "delivery": delivery.label}
    if delivery.seed is not None:
        meta["seed"] = delivery.seed
    if prelude is not None:
        meta["prelude"] = prelude
    return result.with_meta(**meta)
