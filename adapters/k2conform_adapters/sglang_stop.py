"""SGLang's engine on stop strings, for the SGLang adapters' stand-in engine (its scheduler and
detokenizer cannot run on this CPU): what reaches ``serving_chat`` when a request has stop
strings, read from SGLang 0.5.23.

* After each token the scheduler ends the request at the first of its stop strings (in their
  order) that the output contains (``schedule_batch.py`` ``Req._check_str_based_finish``),
  and the detokenizer cuts the text before it (``detokenizer_manager.py``
  ``trim_matched_stop``; ``no_stop_trim`` is off).
* A stream sends nothing while the output ends in the beginning of a stop string
  (``output_streamer.py``: ``should_output &= not req.check_match_stop_str_prefix()``); the
  held text goes out with the next token that does not continue it.

The stop strings are the request's ``stop`` and, for Kimi K3 with tools, the tools closer
``serving_chat`` adds (``tool_call_stop = parser.detector.eot_token``).
"""

from __future__ import annotations

from collections.abc import Sequence

from k2conform.adapter.contract import StreamStep
from k2conform.model import Delta, StreamEvent


def request_stops(stop: str | Sequence[str] | None) -> list[str]:
    """A request's ``stop`` as the list ``serving_chat`` extends."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def matched_stop(text: str, stops: Sequence[str]) -> str | None:
    """The stop string the scheduler ends ``text`` at: the first in order it contains."""
    return next((s for s in stops if s and s in text), None)


def served_text(text: str, stops: Sequence[str]) -> str:
    """A whole reply's text: cut before the first stop string matched."""
    stop = matched_stop(text, stops)
    return text if stop is None else text[: text.find(stop)]


def holds_back(text: str, stops: Sequence[str]) -> bool:
    """Whether a stream holds ``text``'s end back: it ends in the beginning of a stop string."""
    return any(text.endswith(s[:i]) for s in stops if s for i in range(1, len(s) + 1))


def stopping(step: StreamStep, stops: Sequence[str]) -> StreamStep:
    """``step`` fed as SGLang's engine feeds ``serving_chat``: text held back while it may begin
    a stop string, the stream finished (its text cut before it) at the first one matched, and
    nothing after it."""
    if not stops:
        return step
    generated, sent, stopped = "", 0, False

    def stopped_step(delta: Delta, finished: bool) -> list[StreamEvent]:
        nonlocal generated, sent, stopped
        if stopped:
            return []
        generated += delta.text
        if matched_stop(generated, stops) is not None:
            stopped = True
            return step(Delta(served_text(generated, stops)[sent:]), True)
        if not finished and holds_back(generated, stops):
            return []
        text, sent = generated[sent:], len(generated)
        return step(Delta(text), finished)

    return stopped_step
