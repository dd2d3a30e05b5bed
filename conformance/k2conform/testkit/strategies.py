"""Hypothesis strategies for Kimi K2 tool calling, for this project's property tests and yours.

    from hypothesis import given
    from k2conform.testkit.strategies import completions, chunkings

    @given(completions(), st.data())
    def test_my_parser(generated, data):
        deltas = data.draw(chunkings(generated.text))
        assert my_parse_stream(deltas, generated.tools) == generated.expected_calls

Every strategy draws well-formed material (what a correct model writes), so a parser
that fails on it has a bug; malformed material comes from the fuzzers' mutator.
Profiles: ``ci`` (fast, derandomized) and ``deep`` (many examples), registered here;
choose one with ``--hypothesis-profile`` or ``settings.load_profile``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from k2conform import markers
from k2conform.model import Request, ToolCall
from k2conform.reference.render import render_tool_calls

settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NON_ASCII_LETTERS = "éüßçñøåжщкπλ天气查询ツール"


@st.composite
def tool_names(
    draw: st.DrawFn, dotted: bool = True, hyphenated: bool = True, non_ascii: bool = True
) -> str:
    """Function names: plain identifiers, dotted namespaces, hyphens and non-ASCII letters."""
    alphabet = (
        _LETTERS
        + "_0123456789"
        + ("-" if hyphenated else "")
        + (_NON_ASCII_LETTERS if non_ascii else "")
    )
    segment = st.builds(
        lambda head, tail: head + tail,
        st.sampled_from(_LETTERS + "_"),
        st.text(alphabet=alphabet, max_size=15),
    )
    count = draw(st.integers(1, 3)) if dotted else 1
    return ".".join(draw(segment) for _ in range(count))


def _text(**kwargs: Any) -> st.SearchStrategy[str]:
    """Text that never holds the end-of-turn token: generation stops at ``<|im_end|>`` (the
    spec's eos), so it cannot stand inside a call's arguments.  (Hypothesis also draws the
    string constants of the code under test, this marker among them.)"""
    return st.text(**kwargs).filter(lambda text: markers.IM_END not in text)


def json_scalars(with_markers: bool = True) -> st.SearchStrategy[Any]:
    strings = _text(max_size=30)
    if with_markers:
        strings = st.one_of(
            strings, st.sampled_from(markers.TOOL_MARKERS).map(lambda m: f"see {m} here")
        )
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        strings,
    )


def json_values(max_leaves: int = 12, with_markers: bool = True) -> st.SearchStrategy[Any]:
    """Nested JSON values (no NaN); strings sometimes hold marker text."""
    return st.recursive(
        json_scalars(with_markers),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(_text(max_size=10), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def arguments(with_markers: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A call's arguments: a JSON object."""
    return st.dictionaries(
        _text(min_size=1, max_size=12), json_values(with_markers=with_markers), max_size=5
    )


def tool_schema(name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI tool object for ``name`` whose parameters accept ``args``."""
    properties = {key: {} for key in (args or {})}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Tool {name}",
            "parameters": {"type": "object", "properties": properties},
        },
    }


@dataclass(frozen=True)
class GeneratedCompletion:
    """A model output and what a correct parser must return for it."""

    text: str
    tools: tuple[dict[str, Any], ...]
    content: str | None
    calls: tuple[ToolCall, ...]

    @property
    def request(self) -> Request:
        return Request(tools=self.tools)


_CONTENT = st.text(
    alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=40
)


@st.composite
def completions(
    draw: st.DrawFn,
    min_calls: int = 0,
    max_calls: int = 16,
    with_markers: bool = True,
    declare_tools: bool | None = None,
) -> GeneratedCompletion:
    """A complete model output with 0 to 16 calls, optional content before the section."""
    count = draw(st.integers(min_calls, max_calls))
    names = draw(st.lists(tool_names(), min_size=1, max_size=max(1, min(count, 4)), unique=True))
    calls, rendered = [], []
    for index in range(count):
        name = draw(st.sampled_from(names))
        args = json.dumps(draw(arguments(with_markers)), ensure_ascii=draw(st.booleans()))
        call_id = f"functions.{name}:{index}"
        calls.append(ToolCall(name=name, arguments=args, id=call_id))
        rendered.append({"id": call_id, "function": {"name": name, "arguments": args}})
    content = draw(_CONTENT) or None
    declared = draw(st.booleans()) if declare_tools is None else declare_tools
    tools = tuple(tool_schema(n) for n in names) if declared else ()
    text = (content or "") + render_tool_calls(rendered)
    return GeneratedCompletion(text=text, tools=tools, content=content, calls=tuple(calls))


@st.composite
def chunkings(draw: st.DrawFn, text: str, max_cuts: int = 40) -> list[str]:
    """A split of ``text`` into deltas at arbitrary character positions."""
    if len(text) < 2:
        return [text]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(text) - 1), max_size=max_cuts))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]
