"""A server's finish_reason: carried by the stream, reassembled once, judged in the server modes.

The spec: ``tool_calls`` when the turn held a tool-calls section, otherwise ``stop``; a case
may say otherwise (``expected.finish_reason``, e.g. ``length`` for a ``max_tokens`` cut)."""

from __future__ import annotations


import pytest

from k2conform.case.corpus import CorpusError, case_from_json
from k2conform.judge.stream import assemble
from k2conform.markers import LEAK_MARKERS
from k2conform.model import (
    Request,
    Result,
    StreamEvent,
    StreamKind,
    StreamViolation,
    ToolCall,
    ToolCallDelta,
)
from k2conform.judge.cell import judge_result
from k2conform.run.cell import adhoc_case

CALL = ToolCall("get_weather", '{"city": "Paris"}', "functions.get_weather:0")
OUTPUT = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)


def _case(**expected):
    data = {
        "kind": "completion",
        "id": "y_finish_case",
        "description": "d",
        "tags": ["t"],
        "source": "s",
        "request": {"tools": [], "tool_choice": "auto", "thinking": False},
        "model_output": OUTPUT,
        "expected": {
            "content": None,
            "reasoning": None,
            "tool_calls": [CALL.to_json()],
            **expected,
        },
    }
    return case_from_json(data)


def test_the_stream_carries_finish_reason_into_the_result_meta():
    events = [
        StreamEvent(tool_calls=(ToolCallDelta(0, CALL.id, CALL.name, CALL.arguments),)),
        StreamEvent(finish_reason="tool_calls"),
    ]
    assembled = assemble(events, leaks=LEAK_MARKERS)
    assert assembled.result.meta == {"finish_reason": "tool_calls"}
    assert assembled.violations == ()
    assert assemble([StreamEvent(content="hi")], leaks=LEAK_MARKERS).result.meta == {}


def test_a_chunk_after_the_finishing_chunk_breaks_the_stream():
    assembled = assemble(
        [StreamEvent(content="a", finish_reason="stop"), StreamEvent(content="b")],
        leaks=LEAK_MARKERS,
    )
    assert assembled.violations == (
        StreamViolation(
            StreamKind.AFTER_FINISH, "chunk 2: sent after the chunk with finish_reason 'stop'"
        ),
    )


@pytest.mark.parametrize(
    ("expected", "observed", "differs"),
    [
        ({}, "tool_calls", False),
        ({}, "stop", True),  # calls returned, but "stop"
        ({"finish_reason": "length"}, "length", False),
        ({"finish_reason": "length"}, "tool_calls", True),  # a max_tokens cut reported as done
    ],
)
def test_the_servers_finish_reason_is_judged_against_the_case(expected, observed, differs):
    case = _case(**expected)
    outcome, diffs, _ = judge_result(
        case, Result(None, None, (CALL,), meta={"finish_reason": observed}), None
    )
    assert (outcome == "differs") is differs
    assert [d.field for d in diffs] == (["finish_reason"] if differs else [])
    if differs:
        assert (
            diffs[0].expected == expected.get("finish_reason", "tool_calls")
            and diffs[0].observed == observed
        )


def test_a_parser_without_finish_reason_is_not_judged_on_it():
    outcome, diffs, _ = judge_result(_case(), Result(None, None, (CALL,)), None)
    assert outcome == "agree" and diffs == []


def test_the_rule_follows_the_calls_the_server_sent():
    """A reply without calls should say ``stop`` even where calls were expected: the missing
    call is the finding (``count``), not a second one in finish_reason."""
    outcome, diffs, _ = judge_result(
        _case(), Result("text", None, (), meta={"finish_reason": "stop"}), None
    )
    assert "finish_reason" not in [d.field for d in diffs] and "count" in [d.field for d in diffs]
    outcome, diffs, _ = judge_result(
        _case(), Result("text", None, (), meta={"finish_reason": "tool_calls"}), None
    )
    assert ("finish_reason", "stop", "tool_calls") in [
        (d.field, d.expected, d.observed) for d in diffs
    ]
    assert adhoc_case(Request(), "hello").expected is None  # ad-hoc cases: nothing to judge against


def test_an_unknown_finish_reason_in_a_case_names_the_field():
    with pytest.raises(
        CorpusError,
        match=r"field 'expected.finish_reason': must be one of stop, tool_calls, length",
    ):
        _case(finish_reason="done")
    with pytest.raises(CorpusError, match=r"field 'expected.finish_reason': must be a string"):
        _case(finish_reason=1)


def test_the_expectation_writes_finish_reason_only_when_a_case_gives_one():
    assert "finish_reason" not in _case().expected.to_json()
    assert _case(finish_reason="length").expected.to_json()["finish_reason"] == "length"


def test_finish_reason_travels_over_the_adapter_protocol():
    from k2conform.adapter.protocol import events_line

    event = StreamEvent(content="x", finish_reason="stop")
    assert events_line({"events": [event.to_json()]}) == [event]
