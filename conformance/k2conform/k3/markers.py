"""The Kimi K3 special tokens, spelled once, and the tags built from them.

Four markers are single special tokens; the tag names between them (``think``,
``response``, ``tools``, ``call``, ``argument``, ``message``) are ordinary text, so a tag is
``<|open|>NAME attrs<|sep|>`` or ``<|close|>NAME<|sep|>`` (vllm/tool_parsers/
kimi_k3_tool_parser.py and sglang/srt/function_call/kimik3_detector.py in the pinned
releases).  No public source gives the real token ids: the stand-in tokenizer puts the four at
reserved K2 slots (:data:`STANDIN_TOKEN_IDS`); ``--tokenizer DIR`` takes the real ones.
"""

from __future__ import annotations

from collections.abc import Mapping

FORMAT = "k3"

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"

MARKERS: tuple[str, ...] = (OPEN, CLOSE, SEP, END_OF_MSG)

#: The stand-in's ids: reserved slots of the K2 stand-in, after ``</think>`` (163607).
STANDIN_TOKEN_IDS: dict[str, int] = {OPEN: 163608, CLOSE: 163609, SEP: 163610, END_OF_MSG: 163611}


def escape(value: str) -> str:
    """An attribute value as the engines' structural tags write it: ``&`` then ``"``."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


def unescape(value: str) -> str:
    """The inverse of :func:`escape` (``&quot;`` first, then ``&amp;``); no other entity."""
    return value.replace("&quot;", '"').replace("&amp;", "&")


def opener(name: str, attrs: Mapping[str, str] | None = None) -> str:
    """``<|open|>NAME key="value" ...<|sep|>``."""
    spelled = "".join(f' {key}="{escape(value)}"' for key, value in (attrs or {}).items())
    return f"{OPEN}{name}{spelled}{SEP}"


def closer(name: str) -> str:
    return f"{CLOSE}{name}{SEP}"
