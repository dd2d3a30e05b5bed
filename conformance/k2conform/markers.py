"""The Kimi K2 special tokens, spelled once, with their token ids (tokenizer_config.json)."""

from __future__ import annotations

import re

#: The format these markers write (``k2conform.k3.markers.FORMAT``: the other one).
FORMAT = "k2"

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

#: Singular section markers seen from K2-Thinking; not registered tokens.
SECTION_BEGIN_SINGULAR = "<|tool_call_section_begin|>"
SECTION_END_SINGULAR = "<|tool_call_section_end|>"

IM_END = "<|im_end|>"
IM_USER = "<|im_user|>"
IM_ASSISTANT = "<|im_assistant|>"
IM_SYSTEM = "<|im_system|>"
IM_MIDDLE = "<|im_middle|>"
BOS = "[BOS]"
EOS = "[EOS]"

THINK_BEGIN = "<think>"
THINK_END = "</think>"

#: A call's id as the format writes it, ``functions.NAME:IDX`` (match it whole).
CALL_ID = re.compile(r"functions\.(?P<name>.+):(?P<index>\d+)")

#: The five markers of the tool-call grammar.
TOOL_MARKERS: tuple[str, ...] = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END)

#: Every marker whose bytes must never reach content or arguments outside a JSON string.
LEAK_MARKERS: tuple[str, ...] = TOOL_MARKERS + (SECTION_BEGIN_SINGULAR, SECTION_END_SINGULAR)

SPECIAL_TOKEN_IDS: dict[str, int] = {
    BOS: 163584,
    EOS: 163585,
    IM_END: 163586,
    IM_USER: 163587,
    IM_ASSISTANT: 163588,
    IM_SYSTEM: 163594,
    SECTION_BEGIN: 163595,
    SECTION_END: 163596,
    CALL_BEGIN: 163597,
    ARGUMENT_BEGIN: 163598,
    CALL_END: 163599,
    IM_MIDDLE: 163601,
    THINK_BEGIN: 163606,
    THINK_END: 163607,
}

#: Short names for making markers visible in reports and diffs.
SHORT_NAMES: dict[str, str] = {
    SECTION_BEGIN: "SB",
    SECTION_END: "SE",
    CALL_BEGIN: "TB",
    ARGUMENT_BEGIN: "AB",
    CALL_END: "TE",
    SECTION_BEGIN_SINGULAR: "SB1",
    SECTION_END_SINGULAR: "SE1",
    IM_END: "IM_END",
}


def visible(text: str) -> str:
    """Make markers and invisible characters visible (yaml-test-suite style glyphs).

    Markers become ``⟦SB⟧``-style tokens, a tab ``»``, a carriage return ``←``, a newline
    ``↵`` (kept as a line break) and a space at the end of a line ``␣``.
    """
    for marker, short in SHORT_NAMES.items():
        text = text.replace(marker, f"⟦{short}⟧")
    text = text.replace("\t", "»").replace("\r", "←")
    lines = [re.sub(r" +$", lambda m: "␣" * len(m.group()), line) for line in text.split("\n")]
    return "↵\n".join(lines)
