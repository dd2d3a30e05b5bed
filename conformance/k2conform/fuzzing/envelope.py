"""The fuzz input: one byte string carrying the request flags, the model output and the
chunk boundaries of a text-level stream.

Layout::

    FLAGS  TEXT-UTF-8  [0xFF  GAP GAP ...]

``FLAGS`` (the first byte): bit 0 thinking on, bit 1 declare the tools the output names,
bit 2 leave the first named tool undeclared, bit 3 spell one marker from ordinary token
pieces instead of its special token (the token axis: :meth:`FuzzInput.spelled_markers`).
``TEXT`` is the model output; bytes that are not UTF-8 decode as U+FFFD, so every input is
a valid string.  0xFF never occurs in UTF-8, so it separates the optional cut list: a
``GAP`` byte below 255 puts the next cut ``GAP + 1`` characters on, 255 moves 255
characters on without a cut.  Without a cut list :data:`SAMPLED_CUTS` cut points are drawn
from a hash of the input, so every input still carries a split and replays with the same
one.  A few cuts per input, not one every few
characters: a stream's cost grows with its deltas, and libFuzzer moves the cuts itself (the
mutator's ``split`` and ``cuts``); every split point of every corpus case is checked in the
test suite (``tests/test_reference_parser.py``) and by the matrix's ``stream-char`` mode.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from k2conform import formats
from k2conform.delivery.modes import engine_output
from k2conform.fuzzing.syntax import DEFAULT as DEFAULT_SYNTAX
from k2conform.fuzzing.syntax import SYNTAXES, Syntax
from k2conform.model import Request

THINKING = 1
DECLARE_TOOLS = 2
UNDECLARED_FIRST = 4
SPELLED = 8
#: The flag bits a fuzz input carries (the rest of the first byte is ignored).
FLAG_BITS = 4
SEPARATOR = 0xFF
MAX_DECLARED = 8
#: Cut points drawn for an input without a cut list.
SAMPLED_CUTS = 4


@dataclass(frozen=True)
class FuzzInput:
    text: str
    flags: int = DECLARE_TOOLS
    cuts: tuple[int, ...] | None = None  # character offsets; None: derived from the input's hash
    #: The Kimi format of the text: the target's, never in the bytes (:func:`decode`).
    format: str = formats.DEFAULT

    @property
    def thinking(self) -> bool:
        return bool(self.flags & THINKING)

    @property
    def syntax(self) -> Syntax:
        return SYNTAXES[self.format]

    def spelled_markers(self) -> tuple[int, ...]:
        """With :data:`SPELLED`, the offset of the one marker (K2: a tool marker or think tag;
        K3: a special token; up to the end of turn) the model wrote from ordinary pieces,
        chosen by a hash of the text: same text, other token ids (sgl-project/sglang PR
        #32677); else none."""
        if not self.flags & SPELLED:
            return ()
        found = [m.start() for m in self.syntax.spellable.finditer(engine_output(self.text))]
        if not found:
            return ()
        return (found[zlib.crc32(self.text.encode("utf-8")) % len(found)],)

    def request(self) -> Request:
        tools = declared_tools(self.text, self.flags, self.syntax)
        return Request(tools=tuple(tools), thinking=self.thinking)

    def split_points(self) -> tuple[int, ...]:
        """The cut offsets of the text-level delivery (``stream-recorded`` replays its pieces)."""
        if self.cuts is not None:
            return tuple(c for c in self.cuts if 0 < c < len(self.text))
        return sample_cuts(len(self.text), zlib.crc32(self.text.encode("utf-8")) ^ self.flags)

    def encode(self) -> bytes:
        data = bytes([self.flags & 0xFF]) + self.text.encode("utf-8")
        if self.cuts is None:
            return data
        gaps, previous = [], 0
        for cut in sorted(set(self.cuts)):
            step = cut - previous
            if step < 1:
                continue
            while step > 255:  # a long stretch without a cut
                gaps.append(255)
                step -= 255
            gaps.append(step - 1)
            previous = cut
        return data + bytes([SEPARATOR]) + bytes(gaps)


def sample_cuts(length: int, seed: int, count: int = SAMPLED_CUTS) -> tuple[int, ...]:
    """``count`` distinct cut offsets inside a text of ``length`` characters, in order, drawn
    from ``seed`` (the same seed gives the same cuts)."""
    inner = range(1, length)
    return tuple(sorted(random.Random(seed).sample(inner, min(count, len(inner)))))


def decode(data: bytes, format: str = formats.DEFAULT) -> FuzzInput:
    """Any byte string is a fuzz input (of the target's ``format``)."""
    if not data:
        return FuzzInput("", 0, None, format)
    flags, rest = data[0], data[1:]
    at = rest.find(SEPARATOR)
    cuts = None
    if at >= 0:
        rest, gap_bytes = rest[:at], rest[at + 1 :]
        position, cut_list = 0, []
        for gap in gap_bytes:
            if gap == 255:
                position += 255
                continue
            position += gap + 1
            cut_list.append(position)
        cuts = tuple(cut_list)
    text = rest.decode("utf-8", "replace")
    return FuzzInput(text, flags & ((1 << FLAG_BITS) - 1), cuts, format)


def tool_names_in(text: str, syntax: Syntax = DEFAULT_SYNTAX) -> list[str]:
    """The function names the output's calls carry, in order, without repeats."""
    names = (syntax.read_name(m.group(1)) for m in syntax.tool_name.finditer(text))
    return list(dict.fromkeys(names))[:MAX_DECLARED]


def declared_tools(text: str, flags: int, syntax: Syntax = DEFAULT_SYNTAX) -> list[dict]:
    if not flags & DECLARE_TOOLS:
        return []
    names = tool_names_in(text, syntax)
    if flags & UNDECLARED_FIRST:
        names = names[1:]
    if not names:  # a server with tool parsing on always declares at least one tool
        names = ["get_weather"]
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"Tool {name}",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for name in names
    ]
