"""Run one adapter on one delivery and return a canonical result; never raise for the parser.

Streams are reassembled here, once, the way an OpenAI client does it
(:mod:`k2conform.judge.stream`), so every adapter's streaming path is judged by the same rules.
"""

from __future__ import annotations

import traceback
from typing import Callable, TypeVar

from k2conform.adapter.contract import Adapter, AdapterGlueError, AdapterUnavailable, ParserCrash
from k2conform.delivery.modes import Delivery
from k2conform.model import Request, Result, StreamEvent, StreamReply, WireViolation
from k2conform.judge.stream import Assembled, assemble

T = TypeVar("T")


def guarded(call: Callable[[], T]) -> T | Result:
    """Run one adapter call: what the parser raised (through ``call_parser``) is a ``crash``,
    a missing package ``unavailable``, anything else the glue's ``adapter-error``; those come
    back as a failed Result, never as an exception."""
    try:
        return call()
    except ParserCrash as error:
        return Result.failed("crash", str(error))
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
    reply: list[StreamEvent] | StreamReply,
) -> tuple[Assembled, tuple[WireViolation, ...]]:
    """The stream as a client reassembles it, and the wire violations a server adapter read.
    (Called on the adapter's reply, not around the call: the parser runs at the stack depth
    it always ran at, which decides where a deeply nested output hits Python's recursion
    limit.)"""
    if isinstance(reply, StreamReply):
        return assemble(reply.events), reply.wire
    return assemble(reply), ()


def execute(adapter: Adapter, request: Request, delivery: Delivery) -> Result:
    """The adapter's result for this delivery, with outcome and provenance in ``meta``.  A
    delivery's prelude goes through the same adapter first, as an earlier request; what the
    parser made of it is not judged, only whether it then crashed (``meta.prelude``)."""
    prelude = None
    if delivery.prelude:
        earlier = guarded(lambda: _assembled(adapter.parse_stream(request, delivery.prelude)))
        prelude = earlier.outcome.value if isinstance(earlier, Result) else "ok"
    if delivery.streaming:
        streamed = guarded(lambda: _assembled(adapter.parse_stream(request, delivery.deltas)))
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
