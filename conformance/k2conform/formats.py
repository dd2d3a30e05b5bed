"""The Kimi output formats, one record each: what the corpus, the verdict rule, the stand-in
tokenizer and the deliveries need to know of a case's format (its ``format`` field), so that
judging, running, gating and reporting never ask which format a case is.  A new format is a
package (markers, reference parser, verdict rule, cases) plus one record here
(docs/architecture.md, "Adding a format").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from k2conform import markers
from k2conform.k3 import markers as k3
from k2conform.model import Request, Result


@dataclass(frozen=True)
class Markup:
    """Where a format's tool calls sit in its text: the tools section's opener and closer, and
    a call's (K3's call opener carries attributes: ``call_begin`` is its fixed start)."""

    section_begin: str
    section_end: str
    call_begin: str
    call_end: str


@dataclass(frozen=True)
class Format:
    name: str
    #: The special tokens as text: where a marker the model wrote from ordinary pieces may start
    #: (a case's ``spelled_markers``).
    special_tokens: tuple[str, ...]
    #: Marker bytes that never belong in content or reasoning: where they show, markup leaked.
    leak_markers: tuple[str, ...]
    #: The markers whose every inner split point ``stream-marker-split`` exercises.
    split_markers: tuple[str, ...]
    markup: Markup
    #: The id a call's own text gives it (matched whole; groups ``name`` and ``index``), which
    #: the model reads back in history; None: the format writes no id, a server mints it.
    call_id: re.Pattern[str] | None
    #: Whether a request that does not say (``chat_template_kwargs.thinking``) is answered
    #: thinking: K3's generation prompt then opens ``think`` (vLLM's K3 reasoning parser takes
    #: thinking as on); K2's template opens no thinking.
    thinking_default: bool
    #: The stand-in tokenizer's ids for the special tokens it adds for this format (K2's are
    #: its own vocabulary's).
    standin_token_ids: Mapping[str, int]
    #: The reference adapter: the oracle of this format's cases.
    reference: str
    #: The reference parser's one-shot parse, in process (the minimiser's oracle of the
    #: candidates it makes; the reference adapter runs the same parser).
    parse: Callable[[str, Request | None], Result]
    #: ``stream-interleaved``'s partner stream: a short answer, then two complete calls of the
    #: tool named.
    partner: Callable[[str], str]
    #: The verdict rule: the prefix an output gets for a request, and why it is not ``y``
    #: (``spelled``: some marker is written from ordinary pieces).
    verdict: Callable[[Request, str, bool], tuple[str, tuple[str, ...]]]


def _k2_partner(tool: str) -> str:
    calls = "".join(
        f"{markers.CALL_BEGIN}functions.{tool}:{n}{markers.ARGUMENT_BEGIN}"
        f'{{"city": "{city}"}}{markers.CALL_END}'
        for n, city in enumerate(("Paris", "Rome"))
    )
    return f"Checking.{markers.SECTION_BEGIN}{calls}{markers.SECTION_END}"


def _k3_partner(tool: str) -> str:
    calls = "".join(
        k3.opener("call", {"tool": tool, "index": str(n)})
        + k3.opener("argument", {"key": "city", "type": "string"})
        + city
        + k3.closer("argument")
        + k3.closer("call")
        for n, city in enumerate(("Paris", "Rome"))
    )
    tools = k3.opener("tools") + calls + k3.closer("tools")
    return "Checking." + k3.closer("think") + tools + k3.closer("message")


def _k2_parse(output: str, request: Request | None) -> Result:
    from k2conform.reference.parser import parse

    return parse(output, request)


def _k3_parse(output: str, request: Request | None) -> Result:
    from k2conform.k3.parser import parse

    return parse(output, request)


def _k2_verdict(request: Request, output: str, spelled: bool) -> tuple[str, tuple[str, ...]]:
    from k2conform.case.verdict import verdict  # the rule reads the reference parser's policies

    found = verdict(request, output, spelled=spelled)
    return found.prefix, found.reasons


def _k3_verdict(request: Request, output: str, spelled: bool) -> tuple[str, tuple[str, ...]]:
    from k2conform.case.verdict import SPELLED_REASON
    from k2conform.k3.verdict import verdict

    prefix, reasons = verdict(request, output)
    if not spelled:
        return prefix, reasons
    # a spelled marker is the implementation's choice in K3 as in K2 (the fuzzers' token axis)
    return "i", (*(reasons if prefix == "i" else ()), SPELLED_REASON)


FORMATS: dict[str, Format] = {
    markers.FORMAT: Format(
        markers.FORMAT,
        tuple(markers.SPECIAL_TOKEN_IDS),
        markers.LEAK_MARKERS,
        (*markers.LEAK_MARKERS, markers.IM_END, markers.THINK_BEGIN, markers.THINK_END),
        Markup(markers.SECTION_BEGIN, markers.SECTION_END, markers.CALL_BEGIN, markers.CALL_END),
        markers.CALL_ID,
        False,
        {},
        "reference",
        _k2_parse,
        _k2_partner,
        _k2_verdict,
    ),
    k3.FORMAT: Format(
        k3.FORMAT,
        k3.MARKERS,
        k3.MARKERS,
        k3.MARKERS,
        Markup(k3.opener("tools"), k3.closer("tools"), k3.OPEN + "call", k3.closer("call")),
        None,
        True,
        k3.STANDIN_TOKEN_IDS,
        "reference-k3",
        _k3_parse,
        _k3_partner,
        _k3_verdict,
    ),
}
#: The format of a case that names none.
DEFAULT = markers.FORMAT
