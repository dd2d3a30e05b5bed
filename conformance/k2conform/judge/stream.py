"""Reassemble a stream of delta messages exactly as an OpenAI client does, and check it.

The client keeps the first id and name it sees for each tool-call index and
concatenates argument fragments; content and reasoning fragments are concatenated.
The stream itself must keep the invariants clients rely on: a call's id and name are
sent once, with its first delta; indexes are contiguous from 0 in order of first
appearance; no marker bytes reach content; nothing follows the chunk that carries
``finish_reason`` (server adapters report it; it becomes the result's ``meta.finish_reason``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from k2conform.markers import LEAK_MARKERS
from k2conform.model import Result, StreamEvent, ToolCall, join_text


@dataclass
class _Assembling:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Assembled:
    result: Result
    violations: tuple[str, ...]
    chunks: int


def assemble(events: Iterable[StreamEvent | None]) -> Assembled:
    """The result a client ends up with, plus every stream invariant the events broke."""
    content: list[str | None] = []
    reasoning: list[str | None] = []
    calls: dict[int, _Assembling] = {}
    violations: list[str] = []
    finish_reason: str | None = None
    chunks = 0
    for event in events:
        if event is None:
            continue
        chunks += 1
        if finish_reason is not None:
            violations.append(
                f"chunk {chunks}: sent after the chunk with finish_reason {finish_reason!r}"
            )
        elif event.finish_reason is not None:
            finish_reason = event.finish_reason
        content.append(event.content)
        reasoning.append(event.reasoning)
        if event.content and any(m in event.content for m in LEAK_MARKERS):
            violations.append(f"chunk {chunks}: marker bytes in a content delta")
        for delta in event.tool_calls:
            call = calls.get(delta.index)
            if call is None:
                if delta.index != len(calls):
                    violations.append(
                        f"chunk {chunks}: index {delta.index} after {len(calls)} calls (not "
                        "contiguous)"
                    )
                if delta.name is None:
                    violations.append(
                        f"chunk {chunks}: first delta of index {delta.index} has no name"
                    )
                call = calls[delta.index] = _Assembling(delta.id, delta.name)
            else:
                # openai-python concatenates repeated string fields, so a resent id or
                # name corrupts the client's call even when it is identical; one that comes
                # only after the call's first delta breaks the invariant too, differently.
                for what, sent, known in (
                    ("id", delta.id, call.id),
                    ("name", delta.name, call.name),
                ):
                    if sent:
                        when = (
                            "sent again"
                            if known is not None
                            else "first sent after its first delta"
                        )
                        violations.append(f"chunk {chunks}: {what} of index {delta.index} {when}")
                call.id = call.id if call.id is not None else delta.id
                call.name = call.name if call.name is not None else delta.name
            if delta.arguments:
                call.arguments.append(delta.arguments)
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
