"""The verdict rule: the prefix (``y_``, ``n_``, ``i_``) a case's id must carry.

The prefixes mean what they mean in JSONTestSuite:

* ``y`` — the spec (the Kimi K2 tool-call format) defines the result and a conforming parser
  must produce it;
* ``n`` — the output is not what the format defines, and what a conforming parser does
  instead is defined: by the spec, or by a reference policy that only keeps what a stricter
  parser would lose (docs/policies.md);
* ``i`` — implementation-defined: the spec does not decide, so the result is recorded, not
  judged.

The rule reads a case the way the reference parser does (the policies it fires) plus the
facts the policies do not record (the request, the arguments as strict JSON, the ids'
indexes).  Every reason is a sentence, so a disagreeing id can be explained.  The generator
checks every generated id against it, ``k2conform minimize`` and the fuzzers name new cases
with it, and a test holds every shipped id to it.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from k2conform import formats
from k2conform import markers
from k2conform.case.corpus import Case, CompletionCase
from k2conform.model import Request, Result
from k2conform.reference.parser import parse

#: Policies on which the spec itself decides: a case they fire on can still be ``y``.
SPEC_POLICIES = frozenset(
    {
        "ARGS.marker-in-string",
        "ARGS.raw",
        "END.im-end",
        "ID.dotted-name",
        "ID.standard",
        "ID.verbatim",
        "ID.whitespace",
        "THINK.end",
        "THINK.leading-open-tag",
        "THINK.off",
    }
)
#: Policies that only keep what a stricter parser would lose: malformed output, behaviour
#: required (``n``).  ``ARGS.invalid-json`` is not among them: whether arguments are JSON is
#: read here, strictly (its decoder accepts NaN and stops at Python's nesting limit).
KEEPING_POLICIES = frozenset(
    {
        "ARGS.empty",
        "ARGS.unterminated-string",
        "STRUCT.call-without-section",
        "STRUCT.missing-call-end",
        "STRUCT.missing-section-end",
        "STRUCT.section-noise",
        "STRUCT.stray-marker",
        "STRUCT.truncated-header",
        "THINK.implicit-end-at-section",
        "THINK.unterminated",
    }
)
#: Every policy that does not by itself make a case implementation-defined
#: (``REQUEST.*``: the request decides; with tool_choice none the call is the model's error).
_SETTLED = (
    SPEC_POLICIES
    | KEEPING_POLICIES
    | {
        "ARGS.invalid-json",
        "REQUEST.tool-choice-none",
        "REQUEST.force-nonempty-content",
        "REQUEST.continue-final-message",
    }
)

#: The chat template's own markup: the spec defines it in prompts, never in a model's reply.
TEMPLATE_MARKUP = (
    markers.IM_USER,
    markers.IM_ASSISTANT,
    markers.IM_SYSTEM,
    markers.IM_MIDDLE,
    markers.BOS,
    markers.EOS,
    "<|media_start|>",
    "<|media_content|>",
    "<|media_pad|>",
    "<|media_end|>",
)
_EMPTY_SECTION = re.compile(
    "(?:{}|{})\\s*(?:{}|{})".format(
        *(
            re.escape(m)
            for m in (
                markers.SECTION_BEGIN,
                markers.SECTION_BEGIN_SINGULAR,
                markers.SECTION_END,
                markers.SECTION_END_SINGULAR,
            )
        )
    )
)
_STRIPPED_CALL = re.compile(r"functions\.[^\s:]+:\d+\{")
#: How deep k2conform follows nested arguments (RFC 8259 section 9 lets a decoder limit it).
MAX_DEPTH = 2000


@dataclass(frozen=True)
class Verdict:
    """A prefix and why it is not ``y`` (no reasons: ``y``)."""

    prefix: str
    reasons: tuple[str, ...] = ()


#: Why a case with ``spelled_markers`` is ``i_``.
SPELLED_REASON = (
    "a marker written from ordinary pieces, not its special token: whether it is structure "
    "is the implementation's choice (sgl-project/sglang PR #32677)"
)


def verdict(
    request: Request,
    model_output: str,
    reference: Result | None = None,
    spelled: bool = False,
) -> Verdict:
    """The prefix the spec gives this model output for this request (``reference``: the
    reference parser's result for it, when the caller has it already; ``spelled``: some of
    its markers are written from ordinary pieces, ``CompletionCase.spelled_markers``)."""
    result = reference if reference is not None else parse(model_output, request)
    policies = set(result.meta.get("policies") or ())
    open_reasons = _implementation_defined(request, model_output, result, policies)
    if spelled:
        open_reasons.append(SPELLED_REASON)
    if open_reasons:
        return Verdict("i", tuple(open_reasons))
    malformed = _malformed(request, result, policies)
    return Verdict("n", tuple(malformed)) if malformed else Verdict("y")


def case_verdict(case: Case) -> Verdict:
    """The verdict of any case: a completion case's from its output; a prompt case (the chat
    template defines the prompt) and a live-engine probe (it asks for what the spec defines)
    are ``y``."""
    if isinstance(case, CompletionCase):
        rule = formats.FORMATS[case.format].verdict
        return Verdict(*rule(case.request, case.model_output, bool(case.spelled_markers)))
    return Verdict("y")


def _implementation_defined(
    request: Request, output: str, result: Result, policies: set[str]
) -> list[str]:
    # After ARGS.unterminated-string the rest is read again with every marker structural:
    # that recovery, not STRUCT.text-after-section, decides what the text after the section is.
    reasons = [
        f"policy {p} decides what the spec leaves open"
        for p in sorted(policies - _SETTLED)
        if not (p == "STRUCT.text-after-section" and "ARGS.unterminated-string" in policies)
    ]
    if "max_tokens" in request.server_options:
        reasons.append("max_tokens cuts the output at a token count the real tokenizer decides")
    declared = {tool["function"]["name"] for tool in request.tools}
    for call in result.tool_calls:
        written = standard_id(call.id)
        if written is None or written[0] not in declared or call.name != written[0]:
            reasons.append(f"call {call.id!r}: not functions.NAME:IDX naming a declared tool")
        shape = _arguments_shape(call.arguments)
        if shape in ("duplicate keys", "a lone surrogate", "nested too deep"):
            reasons.append(
                f"call {call.id!r}: arguments with {shape} (RFC 8259 leaves it to the decoder)"
            )
        if shape != "object" and any(marker in call.arguments for marker in markers.LEAK_MARKERS):
            reasons.append(
                f"call {call.id!r}: marker text in arguments that are not JSON (a string or not?)"
            )
    for field, text in (("content", result.content), ("reasoning", result.reasoning)):
        if text and any(markup in text for markup in TEMPLATE_MARKUP):
            reasons.append(f"the chat template's markup in the {field}")
    if result.content is not None and not result.content.strip():
        reasons.append("whitespace-only content: content or nothing")
    if not request.thinking and markers.THINK_END in (result.content or ""):
        reasons.append(
            "</think> with thinking off: the Instruct format has no reasoning channel, "
            "the thinking variants are out of the spec's scope"
        )
    if _EMPTY_SECTION.search(_outside_arguments(output, result)):
        reasons.append("a section without calls")
    if _STRIPPED_CALL.search(result.content or ""):
        reasons.append(
            "a call id and arguments with no markers (skip_special_tokens stripped them)"
        )
    return reasons


def _malformed(request: Request, result: Result, policies: set[str]) -> list[str]:
    reasons = [
        f"policy {p} keeps what a stricter parser would lose"
        for p in sorted(policies & KEEPING_POLICIES)
    ]
    for position, call in enumerate(result.tool_calls):
        if _arguments_shape(call.arguments) != "object":
            reasons.append(f"call {call.id!r}: arguments are not a JSON object")
        written = standard_id(call.id)
        if written is not None and written[1] != position:
            reasons.append(f"call {call.id!r}: index {written[1]} at position {position}")
    if "REQUEST.tool-choice-none" in policies or (
        request.tool_choice == "none" and result.tool_calls
    ):
        reasons.append("a call although tool_choice is none")
    return reasons


def standard_id(call_id: str | None) -> tuple[str, int] | None:
    """(NAME, IDX) of an id of the format's form ``functions.NAME:IDX`` (trimmed), else None."""
    match = markers.CALL_ID.fullmatch((call_id or "").strip())
    return (match.group(1), int(match.group(2))) if match else None


def _outside_arguments(output: str, result: Result) -> str:
    """The output up to the end of the turn, without the text of the calls' arguments."""
    text = output.partition(markers.IM_END)[0]
    for call in result.tool_calls:
        text = text.replace(call.arguments, "", 1)
    return text


def _arguments_shape(arguments: str) -> str:
    """``object`` for a JSON object as RFC 8259 defines it; else what it is instead."""
    duplicates = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in items}) != len(items):
            duplicates.append(items)
        return dict(items)

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + MAX_DEPTH)
    try:
        value = json.loads(arguments, object_pairs_hook=pairs, parse_constant=no_constant)
    except RecursionError:
        return "nested too deep"
    except ValueError:
        return "not JSON"
    finally:
        sys.setrecursionlimit(limit)
    if duplicates:
        return "duplicate keys"
    if _has_lone_surrogate(value):
        return "a lone surrogate"
    return "object" if isinstance(value, dict) else "not an object"


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= char <= "\udfff" for char in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
