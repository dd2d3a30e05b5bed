"""A deliberately tiny Kimi K2 tool-call parser: the "parser under test" of the example.

It knows the five markers and nothing else: no ``<think>`` handling, no repair of broken
JSON, no streaming of its own (a stream is buffered and parsed when it ends).  The
conformance suite shows exactly where that falls short of the spec.
"""

from __future__ import annotations

import re

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?P<id>.+?)\s*<\|tool_call_argument_begin\|>(?P<arguments>.*?)<\|tool_call_end\|>",
    re.S,
)


def parse(text: str) -> tuple[str | None, list[dict[str, str]]]:
    """``(content, calls)``: each call is ``{"id", "name", "arguments"}``."""
    start = text.find(SECTION_BEGIN)
    if start < 0:
        return (text or None), []
    end = text.find(SECTION_END, start)
    section = text[start + len(SECTION_BEGIN) : end if end >= 0 else len(text)]
    rest = text[end + len(SECTION_END) :] if end >= 0 else ""
    calls = []
    for match in CALL.finditer(section):
        call_id = match.group("id")
        name = call_id.split(".", 1)[-1].rsplit(":", 1)[0]
        calls.append({"id": call_id, "name": name, "arguments": match.group("arguments").strip()})
    content = text[:start] + rest
    return (content or None), calls


class StreamingParser:
    """Buffers the deltas; :meth:`finish` parses the whole text."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, delta: str) -> None:
        self._text += delta

    def finish(self) -> tuple[str | None, list[dict[str, str]]]:
        return parse(self._text)
