"""The benchmark's workloads: one call whose JSON arguments are N KB (``args``), long content
before one small call (``content``) and 64 parallel small calls (``parallel``), each delivered
``whole``, ``stream-token`` (one token per delta, the stand-in tokenizer) and ``stream-4char``
(4 characters per delta, text-level)."""

from __future__ import annotations

import json
from typing import Any

from k2conform import markers
from k2conform.delivery import modes
from k2conform.model import Request

SIZES_KB = (1, 4, 10, 40, 100, 400)
QUICK_SIZES_KB = (1, 4, 16)
CONTENT_MAX_KB = 100
PARALLEL_CALLS = 64
DELIVERIES = ("whole", "stream-token", "stream-4char")
STREAMING = ("stream-token", "stream-4char")
DELTA_CHARS = 4
TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file",
        "parameters": {"type": "object", "properties": {}},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "day": {"type": "integer"}},
        },
    },
}


def json_arguments(chars: int) -> str:
    """Deterministic JSON arguments of about ``chars`` characters: strings with escapes,
    numbers, nested objects and arrays, as a large tool call carries them."""
    items, size, i = [], 2, 0
    while size < chars:
        if i % 4 == 0:
            item = f'"line_{i}": "print(\\"row {i}\\")\\n\\tvalue = {i} * 2  # café"'
        elif i % 4 == 1:
            item = f'"n_{i}": {i * 37 % 1000}.5'
        elif i % 4 == 2:
            item = f'"list_{i}": [1, 2, 3, "x<y", true, null]'
        else:
            item = f'"obj_{i}": {{"path": "/src/module_{i}.py", "mode": "w"}}'
        items.append(item)
        size += len(item) + 2
        i += 1
    return "{" + ", ".join(items) + "}"


def call_output(arguments: str, name: str = "write_file", index: int = 0) -> str:
    return (
        f"{markers.CALL_BEGIN}functions.{name}:{index}{markers.ARGUMENT_BEGIN}"
        f"{arguments}{markers.CALL_END}"
    )


def workload(kind: str, size_kb: int) -> tuple[str, Request]:
    """The model output and request of one benchmark point."""
    if kind == "args":
        text = (
            markers.SECTION_BEGIN
            + call_output(json_arguments(size_kb * 1000))
            + markers.SECTION_END
        )
        return text, Request(tools=(TOOL,))
    if kind == "content":
        sentence = (
            "The quick brown fox jumps over the lazy dog; prices rose 3.5% (see <b>table</b>).\n"
        )
        prose = (sentence * (size_kb * 1000 // len(sentence) + 1))[: size_kb * 1000]
        call = call_output('{"path": "notes.txt", "content": "done"}')
        return prose + markers.SECTION_BEGIN + call + markers.SECTION_END, Request(tools=(TOOL,))
    if kind == "parallel":
        calls = "".join(
            call_output(json.dumps({"city": f"City {i}", "day": i}), "get_weather", i)
            for i in range(PARALLEL_CALLS)
        )
        return "Checking.\n" + markers.SECTION_BEGIN + calls + markers.SECTION_END, Request(
            tools=(WEATHER, TOOL)
        )
    raise ValueError(f"unknown workload {kind!r}")


def make_deliveries(text: str, tokenizer: Any) -> dict[str, modes.Delivery]:
    """The three deliveries of one output; tokenising is done once, outside the timing."""
    whole = modes.deliveries(text, "whole", tokenizer)[0]
    token = modes.deliveries(text, "stream-token", tokenizer)[0]
    chars = modes.Delivery(
        "stream-4char", modes.cut(text, range(DELTA_CHARS, len(text), DELTA_CHARS))
    )
    return {"whole": whole, "stream-token": token, "stream-4char": chars}
