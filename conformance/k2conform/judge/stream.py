"""Reassemble a stream of delta messages exactly as an OpenAI client does, and check it.

The client keeps the first id and name it sees for each tool-call index and
concatenates argument fragments; content and reasoning fragments are concatenated.
The stream itself must keep the invariants clients rely on: a call's id and name are
sent once, with its first delta; indexes are contiguous from 0 in order of first
appearance; no marker bytes reach content; nothing follows the chunk that carries
``finish_reason`` (server adapters report it; it becomes the result's ``meta.finish_reason``);
a call's arguments go out as they come (:data:`HELD_BACK`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from k2conform.model import (
    Result,
    StreamEvent,
    StreamKind,
    StreamViolation,
    ToolCall,
    join_text,
)


#: Liveness, a named policy (vllm-project/vllm#50604: arguments held until the call closes make
#: a client's stream-idle watchdog time out while a long call is generated): a stream fed
#: deltas of at most ``fed`` characters that sends one argument delta of at least
#: ``max(HELD_BACK, HELD_BACK_RATIO * fed)`` characters, more than twice what it sent of that
#: call's arguments before, held the call's arguments back.  The ratio leaves room for JSON
#: escapes (at most 6 characters for one) and a marker's worth of text held at a delta's end;
#: fed whole (one delta), a stream holds nothing back; a delta that repeats arguments streamed
#: before it (a finishing step's resend, judged as the arguments it duplicates) is no hold-back.
HELD_BACK = 1024
HELD_BACK_RATIO = 16


@dataclass
class _Assembling:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    sent: int = 0  # characters of arguments so far (the liveness check's "before")


@dataclass(frozen=True)
class Assembled:
    result: Result
    violations: tuple[StreamViolation, ...]
    chunks: int


def assemble(
    events: Iterable[StreamEvent | None], fed: int | None = None, *, leaks: Sequence[str]
) -> Assembled:
    """The result a client ends up with, plus every stream invariant the events broke;
    ``fed``: the longest delta of model output the stream was made from (None: unknown, no
    liveness check); ``leaks``: the marker texts of the output's format that must not reach a
    content delta (:attr:`k2conform.formats.Format.leak_markers`)."""
    content: list[str | None] = []
    reasoning: list[str | None] = []
    calls: dict[int, _Assembling] = {}
    violations: list[StreamViolation] = []

    def broke(kind: StreamKind, what: str) -> None:
        violations.append(StreamViolation(kind, f"chunk {chunks}: {what}"))

    held_back = max(HELD_BACK, HELD_BACK_RATIO * fed) if fed is not None else None
    finish_reason: str | None = None
    chunks = 0
    for event in events:
        if event is None:
            continue
        chunks += 1
        if finish_reason is not None:
            broke(
                StreamKind.AFTER_FINISH,
                f"sent after the chunk with finish_reason {finish_reason!r}",
            )
        elif event.finish_reason is not None:
            finish_reason = event.finish_reason
        content.append(event.content)
        reasoning.append(event.reasoning)
        if event.content and any(m in event.content for m in leaks):
            broke(StreamKind.MARKER_IN_CONTENT, "marker bytes in a content delta")
        for delta in event.tool_calls:
            call = calls.get(delta.index)
            if call is None:
                if delta.index != len(calls):
                    broke(
                        StreamKind.INDEX_GAP,
                        f"index {delta.index} after {len(calls)} calls (not contiguous)",
                    )
                if delta.name is None:
                    broke(StreamKind.NO_NAME, f"first delta of index {delta.index} has no name")
                call = calls[delta.index] = _Assembling(delta.id, delta.name)
            else:
                # openai-python concatenates repeated string fields, so a resent id or
                # name corrupts the client's call even when it is identical; one that comes
                # only after the call's first delta breaks the invariant too, differently.
                for what, sent, known, kinds in (
                    ("id", delta.id, call.id, (StreamKind.ID_RESENT, StreamKind.ID_LATE)),
                    ("name", delta.name, call.name, (StreamKind.NAME_RESENT, StreamKind.NAME_LATE)),
                ):
                    if sent and known is not None:
                        broke(kinds[0], f"{what} of index {delta.index} sent again")
                    elif sent:
                        broke(
                            kinds[1],
                            f"{what} of index {delta.index} first sent after its first delta",
                        )
                call.id = call.id if call.id is not None else delta.id
                call.name = call.name if call.name is not None else delta.name
            if delta.arguments:
                size = len(delta.arguments)
                if held_back is not None and size >= held_back and size > 2 * call.sent:
                    broke(
                        StreamKind.HELD_BACK,
                        f"{size} characters of index {delta.index}'s arguments in one delta "
                        f"(fed at most {fed} a delta; sent before it: {call.sent} characters in "
                        f"{len(call.arguments)} deltas)",
                    )
                call.arguments.append(delta.arguments)
                call.sent += size
    tool_calls = tuple(
        ToolCall(name=calls[i].name or "", arguments="".join(calls[i].arguments), id=calls[i].id)
        for i in sorted(calls)
    )
    result = Result(
        content=join_text(content),
        reasoning=join_text(reasoning),
        tool_calls=tool_calls,
        meta={"finish_reason": finish_reason} if finish_reason is not None else {},
    )
    return Assembled(result, tuple(violations), chunks)
