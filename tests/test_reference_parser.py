"""Properties of the reference parser: split invariance, no marker leaks, linear work,
render→parse round trips, and one corpus case behind every named policy."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k2conform import markers
from k2conform.bench.scaling import fit_exponent
from k2conform.case.corpus import load_corpus
from k2conform.model import Request
from k2conform.run.cell import case_unfit
from k2conform.reference import parser as reference
from k2conform.reference.parser import ReferenceParser, parse
from k2conform.reference.policies import POLICIES
from k2conform.testkit.strategies import chunkings, completions
from k2conform.judge.stream import assemble
from k2conform.k3 import markers as k3_markers
from k2conform.k3 import parser as k3
from k2conform_adapters.reference import ReferenceAdapter

CORPUS = load_corpus()


#: Each format's reference parser: its streaming class and its one-shot parse
PARSERS = {"k2": (ReferenceParser, parse), "k3": (k3.K3Parser, k3.parse)}


def stream(text: str, deltas: list[str], request: Request | None = None, format: str = "k2"):
    parser = PARSERS[format][0](request)
    events = [parser.feed(d) for d in deltas] + [parser.finish()]
    return parser.result(), events


def observable(result):
    return (result.content, result.reasoning, result.tool_calls)


@pytest.mark.parametrize("case", CORPUS.completions, ids=lambda c: c.id)
def test_reference_reproduces_every_corpus_expectation(case):
    if case.expected is None:
        pytest.skip("no expectation recorded")
    if case_unfit(case, "whole", ReferenceAdapter.request_options):
        pytest.skip("a server-level case whose options the reference does not model")
    result = PARSERS[case.format][1](case.model_output, case.request)
    assert observable(result) == (
        case.expected.content,
        case.expected.reasoning,
        case.expected.tool_calls,
    )


@pytest.mark.parametrize("case", CORPUS.completions, ids=lambda c: c.id)
def test_every_single_split_point_gives_the_one_shot_result(case):
    """Exhaustive over two-delta splits, then one character per delta."""
    text = case.model_output
    whole = PARSERS[case.format][1](text, case.request)
    for k in range(len(text) + 1):
        split, events = stream(text, [text[:k], text[k:]], case.request, case.format)
        assert observable(split) == observable(whole), f"split at {k}"
    per_char, events = stream(text, list(text), case.request, case.format)
    assert observable(per_char) == observable(whole)
    assert observable(assemble(events, leaks=markers.LEAK_MARKERS).result) == observable(whole)
    assert assemble(events, leaks=markers.LEAK_MARKERS).violations == ()


@given(st.sampled_from(CORPUS.completions), st.data())
def test_any_chunking_of_corpus_cases_gives_the_one_shot_result(case, data):
    deltas = data.draw(chunkings(case.model_output))
    result, events = stream(case.model_output, deltas, case.request, case.format)
    whole = PARSERS[case.format][1](case.model_output, case.request)
    assert observable(result) == observable(whole)
    assembled = assemble(events, leaks=markers.LEAK_MARKERS)
    assert observable(assembled.result) == observable(whole)
    assert assembled.violations == ()


@given(completions(), st.data())
def test_render_then_parse_round_trips(generated, data):
    """Names with dots, hyphens and non-ASCII letters; nested JSON; 0 to 16 calls."""
    for deltas in ([generated.text], data.draw(chunkings(generated.text))):
        result, events = stream(generated.text, deltas, generated.request)
        assert result.tool_calls == generated.calls
        assert result.content == generated.content
        assert observable(assemble(events, leaks=markers.LEAK_MARKERS).result) == observable(result)


@given(completions(min_calls=1, with_markers=True), st.data())
def test_marker_bytes_reach_arguments_only_inside_json_strings(generated, data):
    result, events = stream(generated.text, data.draw(chunkings(generated.text)), generated.request)
    for event in events:
        if event is not None and event.content:
            assert not any(m in event.content for m in markers.LEAK_MARKERS)
    for call in result.tool_calls:
        outside_strings = _strip_json_strings(call.arguments)
        assert not any(m in outside_strings for m in markers.LEAK_MARKERS)


def _strip_json_strings(text: str) -> str:
    json.loads(text)  # well-formed by construction
    out, in_string, escaped = [], False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            out.append(char)
    return "".join(out)


def test_partial_marker_at_delta_end_is_held_back_not_leaked():
    parser = ReferenceParser()
    first = parser.feed("Hello <|tool_calls_sec")
    assert first.content == "Hello "
    second = parser.feed(
        "tion_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
    )
    assert second.content is None and second.tool_calls[0].name == "f"
    last = parser.finish()
    assert last is None or not last.content, "nothing of the marker is released at the end"
    assert parser.result().content == "Hello "


def test_a_lone_angle_bracket_is_released_once_it_cannot_be_a_marker():
    parser = ReferenceParser()
    assert parser.feed("a <").content == "a "
    assert parser.feed(" b").content == "< b"


@given(completions(min_calls=1, max_calls=4), st.data())
def test_total_work_is_linear_no_rescans_per_delta(generated, data):
    """The characters the scanner reads add up to the text plus a bounded held-back tail per
    delta."""
    deltas = data.draw(chunkings(generated.text, max_cuts=200))
    parser = ReferenceParser(generated.request)
    seen = []
    original = parser._scan

    def counting_scan(chunk, final):
        seen.append(len(chunk))
        return original(chunk, final)

    parser._scan = counting_scan
    for delta in deltas:
        parser.feed(delta)
    parser.finish()
    longest_marker = max(
        len(m) for m in reference._STATE_MARKERS[reference.State.ARGS] + (markers.THINK_END,)
    )
    assert sum(seen) <= len(generated.text) + longest_marker * (len(deltas) + 1)


class _CountingText(str):
    """Text whose ``find`` adds up the characters it reads (a miss reads to the end)."""

    read = 0

    def find(self, sub, start=0, end=None):
        end = len(self) if end is None else end
        at = str.find(self, sub, start, end)
        _CountingText.read += (at + len(sub) if at >= 0 else end) - start
        return at


@pytest.mark.parametrize("tag", [k3_markers.OPEN, k3_markers.CLOSE, k3_markers.closer("nothing")])
def test_k3_one_shot_work_is_linear_on_tags_that_never_reach_their_sep(tag, monkeypatch):
    """The K3 scan looks ahead for each tag's ``<|sep|>`` and for the next marker; on a run of
    tags that never reach one, searching afresh from every tag reads the rest of the text each
    time (quadratic: the one-shot parse of 4,000 lone ``<|open|>`` took 138 ms before the
    look-ahead was kept, 5 Dec 2026).  The characters searched grow with the text, not its
    square."""
    made = k3._Ahead.__init__

    def counting(self, data):
        made(self, _CountingText(data))

    monkeypatch.setattr(k3._Ahead, "__init__", counting)
    sizes, read = [200, 400, 800], []
    for n in sizes:
        _CountingText.read = 0
        k3.parse(("x" + tag) * n)
        read.append(_CountingText.read)
    exponent = fit_exponent([len("x" + tag) * n for n in sizes], read)
    assert exponent == pytest.approx(1.0, abs=0.1), read


def test_every_policy_is_documented_and_exercised_by_a_tagged_corpus_case():
    fired_by_tag: dict[str, set[str]] = {}
    for case in (c for c in CORPUS.completions if c.format == "k2"):
        policies = set(parse(case.model_output, case.request).meta["policies"])
        assert policies <= set(POLICIES), case.id
        for tag in case.tags:
            if tag in policies:
                fired_by_tag.setdefault(tag, set()).add(case.id)
    assert set(POLICIES) - {"ID.verbatim", "ARGS.raw"} <= set(fired_by_tag), sorted(
        set(POLICIES) - set(fired_by_tag)
    )
    docs = (_repo_file("docs/policies.md")).read_text()
    for policy in POLICIES:
        assert f"`{policy}`" in docs, f"{policy} missing from docs/policies.md"


def _repo_file(name):
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / name


@given(completions(), st.data())
def test_tool_choice_none_withholds_every_call_at_every_split(generated, data):
    """REQUEST.tool-choice-none: the same output with tool_choice none keeps content and
    reasoning as auto does, and no call reaches the result or any streamed delta."""
    tools = generated.tools or (
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
    )
    thinking = data.draw(st.booleans())
    auto = Request(tools=tools, tool_choice="auto", thinking=thinking)
    none = Request(tools=tools, tool_choice="none", thinking=thinking)
    deltas = data.draw(chunkings(generated.text))
    expected = parse(generated.text, auto)
    result, events = stream(generated.text, deltas, none)
    assert result.tool_calls == ()
    assert all(e is None or not e.tool_calls for e in events)
    assert (result.content, result.reasoning) == (expected.content, expected.reasoning)
    assert ("REQUEST.tool-choice-none" in result.meta["policies"]) == bool(expected.tool_calls)
    assembled = assemble(events, leaks=markers.LEAK_MARKERS).result
    assert observable(assembled) == observable(result)


@given(completions(), st.data())
def test_force_nonempty_content_gives_reasoning_only_replies_content_at_every_split(
    generated, data
):
    """REQUEST.force-nonempty-content: a reply that is only reasoning (no content, no section)
    has that reasoning as content, and no streamed delta carries it as reasoning; any other
    reply parses as without the option, streamed or not."""
    options = {"chat_template_kwargs": {"force_nonempty_content": True}}
    plain = Request(tools=generated.tools, thinking=True)
    forced = Request(tools=generated.tools, thinking=True, server_options=options)
    deltas = data.draw(chunkings(generated.text))
    expected = parse(generated.text, plain)
    result, events = stream(generated.text, deltas, forced)
    swapped = "REQUEST.force-nonempty-content" in result.meta["policies"]
    reasoning_only = expected.content is None and not expected.tool_calls and expected.reasoning
    if swapped:
        assert reasoning_only
        assert (result.content, result.reasoning) == (expected.reasoning, None)
        assert all(e is None or e.reasoning is None for e in events)
    else:
        assert observable(result) == observable(expected)
        # only a section that holds no call (its markers are in the text) answers such a reply
        sections = (markers.SECTION_BEGIN, markers.SECTION_BEGIN_SINGULAR, markers.CALL_BEGIN)
        assert not reasoning_only or any(m in generated.text for m in sections)
    assert observable(assemble(events, leaks=markers.LEAK_MARKERS).result) == observable(result)


def test_a_continued_message_is_not_part_of_the_reply_even_with_force_nonempty_content():
    """REQUEST.continue-final-message with REQUEST.force-nonempty-content: the prefix's own
    reasoning is neither the reply's reasoning nor its content, streamed or not."""
    options = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "<think>Prefix thoughts"},
        ],
        "continue_final_message": True,
        "chat_template_kwargs": {"force_nonempty_content": True},
    }
    request = Request(thinking=True, server_options=options)
    whole = parse(" and more", request)
    assert (whole.content, whole.reasoning) == (" and more", None)
    for deltas in ([" and more"], list(" and more")):
        result, events = stream(" and more", deltas, request)
        assert observable(result) == observable(whole)
        assert observable(assemble(events, leaks=markers.LEAK_MARKERS).result) == observable(whole)


def test_the_parsers_patterns_hold_no_possessive_repeat():
    """pyproject promises Python 3.11 and later: possessive repeats (``*+``) raise on 3.10 and
    mis-match on CPython 3.11.2 (Debian 12's python3), where the argument run let ``<|``
    through its lookahead and kept ``<|tool_call_end|>`` in the arguments."""
    import re

    from k2conform.k3 import parser as k3_parser
    from k2conform.reference import parser as k2_parser

    possessive = re.compile(r"(?<!\\)[*+?}]\+")
    for module in (k2_parser, k3_parser):
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                assert not possessive.search(value.pattern), (module.__name__, name)
