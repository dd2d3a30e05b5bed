"""Run one adapter on one delivery and return a canonical result; never raise for the parser.

Streams are reassembled here, once, the way an OpenAI client does it
(:mod:`k2conform.stream`), so every adapter's streaming path is judged by the same rules.
"""

from __future__ import annotations

import traceback

from k2conform.adapter import Adapter, AdapterGlueError, AdapterUnavailable, ParserCrash
from k2conform.delivery import Delivery
from k2conform.model import Request, Result
from k2conform.stream import assemble


def execute(adapter: Adapter, request: Request, delivery: Delivery) -> Result:
    """The adapter's result for this delivery, with outcome and provenance in ``meta``."""
    try:
        if delivery.streaming:
            assembled = assemble(adapter.parse_stream(request, delivery.deltas))
            result = assembled.result.with_meta(
                chunks=assembled.chunks, stream_violations=list(assembled.violations)
            )
        else:
            (output,) = delivery.deltas
            result = adapter.parse_whole(request, output)
    except ParserCrash as error:
        result = Result.failed("crash", str(error))
    except AdapterUnavailable as error:
        result = Result.failed("unavailable", str(error))
    except AdapterGlueError as error:
        result = Result.failed("adapter-error", str(error))
    except Exception as error:  # noqa: BLE001 - outside call_parser, so it is the glue's
        where = traceback.extract_tb(error.__traceback__)[-1]
        result = Result.failed(
            "adapter-error", f"{type(error).__name__}: {error} (at {where.filename}:{where.lineno})"
        )
    meta = {"adapter": adapter.name, "version": adapter.version(), "delivery": delivery.label}
    if delivery.seed is not None:
        meta["seed"] = delivery.seed
    return result.with_meta(**meta)
