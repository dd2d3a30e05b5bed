"""The wire contract of an OpenAI-compatible chat server: the SSE frames of a streamed reply,
the shape of a non-streamed one, and the two against each other.

The parser checks (``judge.stream``) see the deltas a client reassembles; these see the bytes
a client reads, where vendors fail Moonshot's Kimi-Vendor-Verifier (KVV) without any parser
fault: a raw stop-token id as ``finish_reason`` (ROCm/ATOM#1727), a chunk after the finish, the
usage chunk twice, content sent twice (vllm-project/vllm PR #50367).  Each check has one kind
from a closed set (``WireKind``), its rule, and the contract that states it: ``openai`` (the
Chat Completions API reference, "The chat completion chunk object" and "Stream options") or
``kvv`` (the stream-spec rules sglang's KVV work spells out, sgl-project/sglang#39897, which
hold where OpenAI's are looser).  A violation is a finding of the server, never a harness error.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from k2conform.model import WireKind, WireViolation

#: The finish reasons a chat completion may end with (OpenAI's list, less the deprecated
#: ``function_call`` and ``content_filter``, which no Kimi server produces: a server that
#: ends with them is reported, and the baseline says whether it may).
FINISH_REASONS = frozenset({"stop", "tool_calls", "length"})


#: kind -> (contract, the rule it holds)
RULES: dict[WireKind, tuple[str, str]] = {
    WireKind.SSE_FRAMING: (
        "openai",
        "every event is a `data: ` line holding one JSON chunk object; `data: [DONE]` comes "
        "last, once",
    ),
    WireKind.FIRST_CALL_CHUNK: (
        "openai",
        "a call's first chunk carries its index, id, type `function` and function.name",
    ),
    WireKind.CALL_RESENT: (
        "kvv",
        "a call's later chunks carry only index and function.arguments: no id, type or name "
        "again (sgl-project/sglang#39897); an id that changes breaks every client",
    ),
    WireKind.INDEX_ORDER: ("openai", "tool-call indexes are contiguous from 0 per choice"),
    WireKind.FINISH_COUNT: ("openai", "exactly one chunk per choice carries a finish_reason"),
    WireKind.FINISH_VALUE: (
        "openai",
        "finish_reason is `stop`, `tool_calls` or `length`; never a raw stop-token id "
        "(ROCm/ATOM#1727); `tool_calls` only when a call was sent (calls that end with `stop`, "
        "as OpenAI answers a named tool_choice, are the finish_reason rule's to judge)",
    ),
    WireKind.AFTER_FINISH: (
        "openai",
        "after a choice's finish chunk only the usage chunk may follow, and only when "
        "stream_options.include_usage asks for it",
    ),
    WireKind.USAGE: (
        "openai",
        "with stream_options.include_usage, exactly one chunk carries usage, last, with an empty "
        "choices list; without it, no chunk does (vLLM's stream_options.continuous_usage_stats "
        "adds usage to every chunk, and is held to the same usage-only last chunk)",
    ),
    WireKind.STREAM_VS_WHOLE: (
        "openai",
        "the streamed content, concatenated, is the non-streamed content: nothing sent twice "
        "(vllm-project/vllm PR #50367), nothing lost",
    ),
    WireKind.WHOLE_SHAPE: (
        "openai",
        "a non-streamed reply has one choice per n with message.role `assistant`, each call an "
        "id, type `function`, a name and a string of arguments, and a finish_reason of the "
        "streamed list",
    ),
}


def parse_sse(body: str) -> tuple[list[dict[str, Any]], list[WireViolation]]:
    """The chunk objects of an SSE body, and what breaks its framing.  Comment lines (``:``)
    and blank separators are allowed, as the SSE standard allows them."""
    chunks: list[dict[str, Any]] = []
    violations: list[WireViolation] = []
    done = 0
    for number, line in enumerate(body.splitlines(), 1):
        if not line or line.startswith(":"):
            continue
        if not line.startswith("data: "):
            violations.append(
                WireViolation(
                    WireKind.SSE_FRAMING, f"line {number} is not a data line: {line[:60]!r}"
                )
            )
            continue
        data = line[len("data: ") :]
        if done:
            violations.append(
                WireViolation(
                    WireKind.SSE_FRAMING, f"line {number} comes after [DONE]: {data[:60]!r}"
                )
            )
        if data == "[DONE]":
            done += 1
            continue
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as error:
            violations.append(
                WireViolation(WireKind.SSE_FRAMING, f"line {number} is not JSON ({error.msg})")
            )
            continue
        if not isinstance(chunk, dict):
            violations.append(
                WireViolation(WireKind.SSE_FRAMING, f"line {number} is not an object")
            )
            continue
        chunks.append(chunk)
    if not done:
        violations.append(WireViolation(WireKind.SSE_FRAMING, "the stream never sends [DONE]"))
    return chunks, violations


def check_stream(
    chunks: Sequence[Mapping[str, Any]], *, include_usage: bool, continuous_usage: bool = False
) -> list[WireViolation]:
    """Every chunk rule of the contract, over the chunks of one streamed reply.
    ``continuous_usage``: the request asked for vLLM's ``stream_options.continuous_usage_stats``,
    usage on every chunk as well (the usage-only chunk still comes last)."""
    out: list[WireViolation] = []
    finished: dict[int, tuple[int, str]] = {}  # choice -> (chunk number, finish_reason)
    sent: dict[int, dict[int, str | None]] = {}  # choice -> call index -> its id
    resent: dict[int, set[int]] = {}  # choice -> calls already reported as re-sent
    usage_at: list[int] = []
    for number, chunk in enumerate(chunks):
        choices = chunk.get("choices") or []
        if chunk.get("usage") and not (continuous_usage and choices):
            usage_at.append(number)
            if choices:
                out.append(
                    WireViolation(
                        WireKind.USAGE,
                        f"chunk {number} carries usage beside {len(choices)} choices",
                    )
                )
        for choice in choices:
            slot = choice.get("index", 0)
            if slot in finished:
                out.append(
                    WireViolation(
                        WireKind.AFTER_FINISH,
                        f"chunk {number} continues choice {slot} after its finish chunk "
                        f"({finished[slot][0]})",
                    )
                )
            for call in (choice.get("delta") or {}).get("tool_calls") or ():
                _check_call_chunk(
                    out, number, sent.setdefault(slot, {}), resent.setdefault(slot, set()), call
                )
            reason = choice.get("finish_reason")
            if reason is not None:
                if slot in finished:
                    out.append(
                        WireViolation(
                            WireKind.FINISH_COUNT,
                            f"choice {slot} finishes twice "
                            f"({finished[slot][1]!r}, then {reason!r})",
                        )
                    )
                else:
                    finished[slot] = (number, reason)
    for slot in sorted(sent.keys() | finished.keys()):
        if slot not in finished:
            out.append(WireViolation(WireKind.FINISH_COUNT, f"choice {slot} never finishes"))
            continue
        reason = finished[slot][1]
        calls = bool(sent.get(slot))
        if reason not in FINISH_REASONS:
            out.append(WireViolation(WireKind.FINISH_VALUE, f"choice {slot}: {reason!r}"))
        elif reason == "tool_calls" and not calls:
            out.append(
                WireViolation(
                    WireKind.FINISH_VALUE,
                    f"choice {slot}: {reason!r} with no call sent",
                )
            )
    if not finished and not sent:
        out.append(WireViolation(WireKind.FINISH_COUNT, "no chunk carries a finish_reason"))
    if include_usage:
        if len(usage_at) != 1:
            out.append(
                WireViolation(
                    WireKind.USAGE, f"{len(usage_at)} usage chunks; include_usage asks for one"
                )
            )
        elif usage_at[0] != len(chunks) - 1:
            out.append(WireViolation(WireKind.USAGE, f"usage in chunk {usage_at[0]}, not last"))
    elif usage_at:
        out.append(
            WireViolation(
                WireKind.USAGE, f"usage in chunk {usage_at[0]} though include_usage is off"
            )
        )
    return out


def _check_call_chunk(
    out: list[WireViolation],
    number: int,
    sent: dict[int, str | None],
    resent: set[int],
    call: Mapping[str, Any],
) -> None:
    index = call.get("index")
    function = call.get("function") or {}
    if not isinstance(index, int):
        out.append(
            WireViolation(WireKind.FIRST_CALL_CHUNK, f"chunk {number}: a call without index")
        )
        return
    # what a call's first chunk must carry, and its later chunks must not send again
    header = {"id": call.get("id"), "type": call.get("type"), "function.name": function.get("name")}
    if index not in sent:
        if index != len(sent):
            out.append(
                WireViolation(
                    WireKind.INDEX_ORDER,
                    f"chunk {number}: call index {index} after {len(sent)} calls",
                )
            )
        lacking = [field for field, value in header.items() if not value]
        if call.get("type") not in (None, "function"):
            lacking.append(f"type {call.get('type')!r}")
        if lacking:
            out.append(
                WireViolation(
                    WireKind.FIRST_CALL_CHUNK,
                    f"chunk {number}: call {index}'s first chunk lacks {', '.join(lacking)}",
                )
            )
        sent[index] = call.get("id")
        return
    again = [field for field, value in header.items() if value]
    if again and index not in resent:  # once per call: its first re-send
        resent.add(index)
        changed = call.get("id") and call.get("id") != sent[index]
        detail = f"chunk {number}: call {index} sends {', '.join(again)} again"
        if changed:
            detail += f" (id {sent[index]!r} became {call.get('id')!r})"
        out.append(WireViolation(WireKind.CALL_RESENT, detail))


def check_whole(reply: Mapping[str, Any]) -> list[WireViolation]:
    """The shape of a non-streamed chat completion."""
    out: list[WireViolation] = []
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices:
        return [WireViolation(WireKind.WHOLE_SHAPE, "no choices")]
    for choice in choices:
        slot = choice.get("index", 0)
        message = choice.get("message") or {}
        if message.get("role") != "assistant":
            out.append(
                WireViolation(WireKind.WHOLE_SHAPE, f"choice {slot}: role {message.get('role')!r}")
            )
        calls = message.get("tool_calls") or []
        for n, call in enumerate(calls):
            function = call.get("function") or {}
            wrong = [
                field
                for field, ok in (
                    ("id", bool(call.get("id"))),
                    ("type", call.get("type") == "function"),
                    ("function.name", bool(function.get("name"))),
                    ("function.arguments", isinstance(function.get("arguments"), str)),
                )
                if not ok
            ]
            if wrong:
                out.append(
                    WireViolation(
                        WireKind.WHOLE_SHAPE, f"choice {slot}: call {n} lacks {', '.join(wrong)}"
                    )
                )
        reason = choice.get("finish_reason")
        if reason not in FINISH_REASONS:
            out.append(WireViolation(WireKind.FINISH_VALUE, f"choice {slot}: {reason!r}"))
        elif reason == "tool_calls" and not calls:
            out.append(
                WireViolation(WireKind.FINISH_VALUE, f"choice {slot}: {reason!r} with no call")
            )
    return out


def streamed_content(chunks: Iterable[Mapping[str, Any]], choice: int = 0) -> str | None:
    """A choice's content deltas concatenated, as a client shows them (None when none came)."""
    pieces = [
        (c.get("delta") or {}).get("content")
        for chunk in chunks
        for c in chunk.get("choices") or ()
        if c.get("index", 0) == choice
    ]
    texts = [p for p in pieces if p is not None]
    return "".join(texts) if texts else None


def check_stream_vs_whole(
    chunks: Sequence[Mapping[str, Any]], reply: Mapping[str, Any]
) -> list[WireViolation]:
    """The streamed content equals the non-streamed content (an empty string and no content
    are the same to a reader)."""
    whole = ((reply.get("choices") or [{}])[0].get("message") or {}).get("content")
    streamed = streamed_content(chunks)
    if (whole or "") == (streamed or ""):
        return []
    return [
        WireViolation(
            WireKind.STREAM_VS_WHOLE,
            f"streamed content {_clip(streamed)} but non-streamed {_clip(whole)}",
        )
    ]


def _clip(text: str | None, limit: int = 80) -> str:
    if text is None:
        return "None"
    return repr(text if len(text) <= limit else text[:limit] + "…")
