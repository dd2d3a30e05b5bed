"""The wire contract (k2conform.judge.wire): each rule catches its fault and nothing else, on
the fake engine's own frames (no HTTP here; tests/test_engine_plugin.py runs the same faults
through the plugin over loopback), and a conforming engine breaks none on any probe."""

from __future__ import annotations

import json

import pytest

from k2conform.case.corpus import load_corpus
from k2conform.engine.fake import FakeEngine
from k2conform.formats import FORMATS
from k2conform.adapter.harness import execute
from k2conform.adapter.protocol import request_line
from k2conform.adapter.serve import answer
from k2conform.delivery.modes import Delivery
from k2conform.model import DIFF_FIELDS, CellOutcome, Delta, StreamReply, WireKind, WireViolation
from k2conform.judge.cell import judge_result
from k2conform_adapters.reference import ReferenceAdapter
from k2conform.judge.wire import (
    RULES,
    check_stream,
    check_stream_vs_whole,
    check_whole,
    parse_sse,
)

PROBES = load_corpus().probes

#: fault -> (the probe that shows it, the kind that must catch it); the concurrency fault is
#: caught by comparing streams, not by one stream's rules (the plugin's concurrent-streams)
WIRE_FAULTS = {
    "raw-stop-finish": ("y_probe_single_call", WireKind.FINISH_VALUE),
    "chunk-after-finish": ("y_probe_single_call", WireKind.AFTER_FINISH),
    "usage-twice": ("y_probe_single_call", WireKind.USAGE),
    "content-twice": ("y_probe_tool_choice_none", WireKind.STREAM_VS_WHOLE),
    "no-done": ("y_probe_single_call", WireKind.SSE_FRAMING),
    "name-resent": ("y_probe_single_call", WireKind.CALL_RESENT),
}


def _body(probe_id: str) -> dict:
    probe = next(p for p in PROBES if p.id == probe_id)
    return {
        "model": f"kimi-{probe.format}-fake",
        "messages": list(probe.messages),
        "tools": list(probe.tools),
        "tool_choice": probe.tool_choice,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _violations(faults: list[str], probe_id: str, crowded: bool = False) -> list:
    """The wire violations of one probe's replies from an engine of its format."""
    body = _body(probe_id)
    format = next(p.format for p in PROBES if p.id == probe_id)
    engine = FakeEngine(PROBES, faults=faults, adapter=FORMATS[format].reference)
    text = b"".join(engine.sse_frames(engine.chat_chunks(body, crowded))).decode()
    chunks, framing = parse_sse(text)
    whole = engine.chat_response({**body, "stream": False})
    return [
        *framing,
        *check_stream(chunks, include_usage=True),
        *check_whole(whole),
        *check_stream_vs_whole(chunks, whole),
    ]


def test_every_format_has_probes_for_the_contract():
    assert {p.format for p in PROBES} == set(FORMATS)


@pytest.mark.parametrize("probe_id", [p.id for p in PROBES])
def test_a_conforming_engine_breaks_no_wire_rule(probe_id):
    assert _violations([], probe_id) == []


@pytest.mark.parametrize("fault", sorted(WIRE_FAULTS))
def test_each_wire_fault_is_caught_by_its_own_rule_alone(fault):
    probe_id, kind = WIRE_FAULTS[fault]
    found = _violations([fault], probe_id)
    assert found and {v.kind for v in found} == {kind}, [str(v) for v in found]


def test_calls_lost_beside_another_stream_leave_each_stream_self_consistent():
    """vllm-project/vllm#54701's symptom is a stream that is well-formed alone: only comparing
    it with the same request sent alone finds it (the plugin's concurrent-streams check)."""
    assert _violations(["calls-lost-under-concurrency"], "y_probe_single_call", True) == []
    engine = FakeEngine(PROBES, faults=["calls-lost-under-concurrency"])
    body = _body("y_probe_single_call")
    alone = list(engine.chat_chunks(body, crowded=False))
    crowded = list(engine.chat_chunks(body, crowded=True))
    assert [c["choices"][0]["finish_reason"] for c in alone if c["choices"]][-1] == "tool_calls"
    assert [c["choices"][0]["finish_reason"] for c in crowded if c["choices"]][-1] == "stop"


def _chunk(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def _call(index: int, **fields) -> dict:
    call: dict = {"index": index}
    if "id" in fields:
        call |= {"id": fields["id"], "type": "function"}
    function = {k: fields[k] for k in ("name", "arguments") if k in fields}
    if function:
        call["function"] = function
    return {"tool_calls": [call]}


def _kinds(chunks: list[dict], include_usage: bool = False) -> list[WireKind]:
    return [v.kind for v in check_stream(chunks, include_usage=include_usage)]


def test_the_rules_of_one_stream():
    first = _call(0, id="functions.f:0", name="f", arguments="")
    done = _chunk({}, "tool_calls")
    assert _kinds([_chunk(first), _chunk(_call(0, arguments="{}")), done]) == []
    # a later chunk that re-sends the id, or a changed id
    changed = check_stream(
        [_chunk(first), _chunk(_call(0, id="x", arguments="{}")), done], include_usage=False
    )
    assert [v.kind for v in changed] == [WireKind.CALL_RESENT] and "became 'x'" in changed[0].detail
    # the first chunk without a name; indexes from 1
    assert _kinds([_chunk(_call(0, id="a", arguments="{}")), done]) == [WireKind.FIRST_CALL_CHUNK]
    assert _kinds([_chunk(_call(1, id="a", name="f")), done]) == [WireKind.INDEX_ORDER]
    # finish twice, never, tool_calls with no call, a chunk after the finish
    assert _kinds([_chunk({"content": "a"}, "stop"), _chunk({}, "stop")]) == [
        WireKind.AFTER_FINISH,
        WireKind.FINISH_COUNT,
    ]
    assert _kinds([_chunk({"content": "a"})]) == [WireKind.FINISH_COUNT]
    assert _kinds([_chunk({"content": "a"}, "tool_calls")]) == [WireKind.FINISH_VALUE]
    # calls that end with stop are the finish_reason rule's (OpenAI's named tool_choice)
    assert _kinds([_chunk(first), _chunk({}, "stop")]) == []
    # usage: beside choices, not last, missing, or unasked
    usage = {"choices": [], "usage": {"total_tokens": 1}}
    ended = [_chunk({"content": "a"}, "stop")]
    assert _kinds([*ended, usage], include_usage=True) == []
    assert _kinds(ended, include_usage=True) == [WireKind.USAGE]
    assert _kinds([*ended, usage]) == [WireKind.USAGE]
    assert _kinds([usage, *ended], include_usage=True) == [WireKind.USAGE]
    # vLLM's continuous_usage_stats: usage on every chunk too, the usage-only chunk still last
    each = [{**c, "usage": {"total_tokens": 1}} for c in ended]
    assert check_stream([*each, usage], include_usage=True, continuous_usage=True) == []
    assert [v.kind for v in check_stream(each, include_usage=True, continuous_usage=True)] == [
        WireKind.USAGE
    ]
    assert _kinds([*each, usage], include_usage=True) == [WireKind.USAGE] * 2  # beside, twice
    assert _kinds([*ended, {**ended[0], "usage": {"total_tokens": 1}}], include_usage=True) == [
        WireKind.USAGE,
        WireKind.AFTER_FINISH,
        WireKind.FINISH_COUNT,
    ]


def test_framing():
    good = 'data: {"choices": []}\n\n: a comment\n\ndata: [DONE]\n\n'
    assert parse_sse(good) == ([{"choices": []}], [])
    for body, needle in [
        ('{"choices": []}\ndata: [DONE]\n', "not a data line"),
        ("data: {oops\ndata: [DONE]\n", "not JSON"),
        ('data: {"choices": []}\n', "never sends [DONE]"),
        ('data: [DONE]\ndata: {"choices": []}\n', "after [DONE]"),
        ("data: [1]\ndata: [DONE]\n", "not an object"),
    ]:
        framing = parse_sse(body)[1]
        assert [v.kind for v in framing] == [WireKind.SSE_FRAMING] and needle in str(framing[0]), (
            body
        )


def test_the_shape_of_a_reply_that_is_not_streamed():
    call = {"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    reply = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    assert check_whole(reply) == []
    bad = json.loads(json.dumps(reply))
    bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {}
    bad["choices"][0]["message"]["role"] = None
    assert [v.kind for v in check_whole(bad)] == [WireKind.WHOLE_SHAPE] * 2
    assert [v.kind for v in check_whole({"choices": []})] == [WireKind.WHOLE_SHAPE]
    raw = json.loads(json.dumps(reply))
    raw["choices"][0]["finish_reason"] = "stop_163586"
    assert [v.kind for v in check_whole(raw)] == [WireKind.FINISH_VALUE]


def test_every_kind_has_a_rule_and_a_contract():
    assert set(RULES) == set(WireKind)
    assert {contract for contract, _ in RULES.values()} <= {"openai", "kvv"}


class _WireToy(ReferenceAdapter):
    """A server adapter in miniature: the reference's parse, and a wire violation each way."""

    name = "wire-toy"

    def parse_whole(self, request, output):
        result = super().parse_whole(request, output)
        return result.with_meta(
            wire_violations=[WireViolation(WireKind.WHOLE_SHAPE, "x").to_json()]
        )

    def parse_stream(self, request, deltas):
        events = super().parse_stream(request, deltas)
        return StreamReply(events, (WireViolation(WireKind.USAGE, "2 usage chunks"),))


def test_a_server_adapters_wire_violations_are_findings_of_its_cell_by_kind():
    """Through the harness and the judge: each violation is a difference named wire:KIND (the
    baseline and the behaviour grouping key on it), on a cell that agrees otherwise; and
    through the adapter protocol the violations arrive typed."""
    case = next(c for c in load_corpus().completions if c.id == "y_spec_single_call")
    adapter = _WireToy()
    adapter.load()
    whole = execute(adapter, case.request, Delivery("whole", (Delta(case.model_output),)))
    outcome, diffs, _ = judge_result(case, whole, None)
    assert outcome == CellOutcome.DIFFERS
    assert [(d.field, d.observed) for d in diffs] == [("wire:whole-shape", "x")]
    streamed = execute(
        adapter, case.request, Delivery("stream-char", tuple(map(Delta, case.model_output)))
    )
    outcome, diffs, _ = judge_result(case, streamed, whole)
    assert [(d.field, d.observed) for d in diffs] == [("wire:usage", "2 usage chunks")]
    line = answer(
        [adapter], json.dumps(request_line("stream", case.request, (Delta(case.model_output),)))
    )
    assert line["wire"] == [{"kind": "usage", "detail": "2 usage chunks"}]
    assert all(field in DIFF_FIELDS for field in (f"wire:{k.value}" for k in WireKind))
