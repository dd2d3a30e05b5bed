"""Client-side reassembly and its invariants; every delivery mode reproduces the text."""

from __future__ import annotations

import pytest

from k2conform import markers
from k2conform.k3 import markers as k3
from k2conform.delivery.modes import MODES, TOKEN_ALIGNED_MODES, case_seed, deliveries
from k2conform.model import (
    Delta,
    StreamEvent,
    StreamKind,
    StreamViolation,
    ToolCall,
    ToolCallDelta,
)
from k2conform.judge.stream import assemble
from k2conform.markers import LEAK_MARKERS
from k2conform.delivery.tokenizer import load_tokenizer

TOKENIZER = load_tokenizer()
TEXT = (
    "Zürich 天气 <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Zürich 🦄"}<|tool_call_end|>'
    "<|tool_calls_section_end|>"
)


def test_client_reassembly_keeps_first_id_and_name_and_concatenates_arguments():
    events = [
        StreamEvent(content="Hi"),
        StreamEvent(tool_calls=(ToolCallDelta(0, "functions.f:0", "f", '{"a"'),)),
        StreamEvent(tool_calls=(ToolCallDelta(0, arguments=": 1}"),)),
        None,
    ]
    assembled = assemble(events, leaks=LEAK_MARKERS)
    assert assembled.violations == ()
    assert assembled.result.tool_calls == (ToolCall("f", '{"a": 1}', "functions.f:0"),)
    assert assembled.result.content == "Hi" and assembled.chunks == 3


def test_stream_invariant_violations_are_reported():
    events = [
        StreamEvent(content="x" + markers.CALL_END),
        StreamEvent(tool_calls=(ToolCallDelta(1, "a", "f", "{}"),)),
        StreamEvent(tool_calls=(ToolCallDelta(1, "a", "f", ""),)),
        StreamEvent(tool_calls=(ToolCallDelta(2, None, None, "{}"),)),
    ]
    text = " | ".join(map(str, assemble(events, leaks=LEAK_MARKERS).violations))
    for expected in (
        "marker bytes in a content delta",
        "not contiguous",
        "id of index 1 sent again",
        "name of index 1 sent again",
        "has no name",
    ):
        assert expected in text


@pytest.mark.parametrize("mode", [m for m in MODES if m != "stream-recorded"])
def test_every_mode_reproduces_the_text_and_token_modes_carry_every_token_id(mode):
    ids = [i for i, _ in TOKENIZER.tokenize_spans(TEXT)]
    variants = deliveries(TEXT, mode, TOKENIZER, seed=7)
    assert variants, "every mode delivers the text at least once"
    for delivery in variants:
        assert "".join(d.text for d in delivery.deltas) == TEXT
        sent = [i for d in delivery.deltas for i in d.token_ids]
        # stream-holdback ends with the end-of-turn token's output: its id, no text of its own
        end = [markers.SPECIAL_TOKEN_IDS[markers.IM_END]] if mode == "stream-holdback" else []
        assert sent == (ids + end if mode in TOKEN_ALIGNED_MODES else [])
        assert delivery.streaming == (mode not in ("whole", "server-whole"))


def test_token_mode_sends_markers_as_single_tokens_and_split_characters_as_empty_deltas():
    (delivery,) = deliveries(TEXT, "stream-token", TOKENIZER)
    by_text = {d.text: d.token_ids for d in delivery.deltas}
    assert by_text[markers.CALL_BEGIN] == (markers.SPECIAL_TOKEN_IDS[markers.CALL_BEGIN],)
    assert any(d.text == "" for d in delivery.deltas), "a multi-byte character split across tokens"


#: A Kimi K3 output with a call: its four special tokens, each to be split at every offset.
K3_TEXT = (
    "r" + k3.closer("think") + k3.opener("tools")
    + k3.opener("call", {"tool": "get_weather", "index": "1"})
    + k3.opener("argument", {"key": "city", "type": "string"}) + "Zürich"
    + k3.closer("argument") + k3.closer("call") + k3.closer("tools") + k3.closer("message")
    + k3.END_OF_MSG
)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "format", "marker_texts", "streams"),
    [(TEXT, "k2", markers.TOOL_MARKERS, 9), (K3_TEXT, "k3", k3.MARKERS, 9)],
    ids=["k2", "k3"],
)
def test_marker_split_cuts_every_marker_at_every_offset(text, format, marker_texts, streams):
    """Each format's own markers (K3's were never split before 7 Dec 2026)."""
    variants = deliveries(text, "stream-marker-split", TOKENIZER, format=format)
    assert len(variants) == streams and {v.format for v in variants} == {format}
    for marker in marker_texts:
        start = text.find(marker)
        assert start >= 0, marker
        covered = set()
        for delivery in variants:
            position = 0
            for delta in delivery.deltas:
                position += len(delta.text)
                if start < position < start + len(marker):
                    covered.add(position - start)
        assert covered == set(range(1, len(marker))), marker


def test_random_mode_is_reproducible_from_its_recorded_seed():
    seed = case_seed(1, "y_case")
    assert seed == case_seed(1, "y_case") != case_seed(2, "y_case")
    first = deliveries(TEXT, "stream-random", TOKENIZER, seed=seed)[0]
    again = deliveries(TEXT, "stream-random", TOKENIZER, seed=first.seed)[0]
    assert first.deltas == again.deltas and first.variant == f"seed={seed}"


def test_recorded_mode_uses_the_case_deltas():
    pieces = [TEXT[:10], TEXT[10:11], TEXT[11:]]
    (delivery,) = deliveries(TEXT, "stream-recorded", TOKENIZER, recorded=pieces)
    assert [d.text for d in delivery.deltas] == pieces
    assert deliveries(TEXT, "stream-recorded", TOKENIZER) == []


# -- what a wrong reassembly would let through (each kills mutants of judge/stream.py) --------


def _call_deltas(*deltas: ToolCallDelta) -> list[StreamEvent]:
    return [StreamEvent(tool_calls=(delta,)) for delta in deltas]


def test_reasoning_fragments_are_concatenated_apart_from_content():
    events = [
        StreamEvent(reasoning="Need "),
        StreamEvent(content="Su"),
        StreamEvent(reasoning="weather."),
        StreamEvent(content="re."),
    ]
    assembled = assemble(events, leaks=LEAK_MARKERS)
    assert (assembled.result.reasoning, assembled.result.content) == ("Need weather.", "Sure.")
    assert assemble([StreamEvent(content="x")], leaks=LEAK_MARKERS).result.reasoning is None


def test_a_late_id_and_name_are_kept_as_a_client_keeps_them_and_reported():
    """The client takes the first id and name it sees, even after the call's first delta;
    the stream broke the send-them-first invariant, which the violations say."""
    assembled = assemble(
        _call_deltas(
            ToolCallDelta(0, None, None, '{"a"'),
            ToolCallDelta(0, "functions.f:0", "f", ": 1}"),
            ToolCallDelta(0, "call_9", "g", ""),
        ),
        leaks=LEAK_MARKERS,
    )
    assert assembled.result.tool_calls == (ToolCall("f", '{"a": 1}', "functions.f:0"),)
    assert assembled.violations[0] == StreamViolation(
        StreamKind.NO_NAME, "chunk 1: first delta of index 0 has no name"
    )
    assert assembled.violations[-2:] == (
        StreamViolation(StreamKind.ID_RESENT, "chunk 3: id of index 0 sent again"),
        StreamViolation(StreamKind.NAME_RESENT, "chunk 3: name of index 0 sent again"),
    )
    assert [v.kind for v in assembled.violations[1:3]] == [StreamKind.ID_LATE, StreamKind.NAME_LATE]


def test_a_call_whose_name_never_arrives_is_named_empty():
    assembled = assemble(
        _call_deltas(ToolCallDelta(0, "functions.f:0", None, "{}")), leaks=LEAK_MARKERS
    )
    assert assembled.result.tool_calls == (ToolCall("", "{}", "functions.f:0"),)
    assert [str(v) for v in assembled.violations] == ["chunk 1: first delta of index 0 has no name"]


def test_a_late_id_is_reported_as_late_not_as_sent_again():
    late_id = _call_deltas(
        ToolCallDelta(0, None, "f", "{"), ToolCallDelta(0, "functions.f:0", None, "}")
    )
    violations = assemble(late_id, leaks=LEAK_MARKERS).violations
    assert [v.kind for v in violations] == [StreamKind.ID_LATE], violations
    assert str(violations[0]) == "chunk 2: id of index 0 first sent after its first delta"
    assert (
        assemble(late_id, leaks=LEAK_MARKERS).result.tool_calls[0].id == "functions.f:0"
    )  # the client still gets it


def test_the_finish_reason_is_kept_and_nothing_may_follow_its_chunk():
    done = assemble(
        [StreamEvent(content="Hi"), StreamEvent(finish_reason="stop")], leaks=LEAK_MARKERS
    )
    assert done.violations == () and done.result.meta == {"finish_reason": "stop"}
    late = assemble(
        [StreamEvent(finish_reason="tool_calls"), StreamEvent(content="x")], leaks=LEAK_MARKERS
    )
    assert [(v.kind, str(v)) for v in late.violations] == [
        (StreamKind.AFTER_FINISH, "chunk 2: sent after the chunk with finish_reason 'tool_calls'")
    ]
    assert assemble([StreamEvent(content="Hi")], leaks=LEAK_MARKERS).result.meta == {}
    trailing = assemble(
        [StreamEvent(finish_reason="stop"), StreamEvent(content="x")], leaks=LEAK_MARKERS
    )
    assert trailing.result.meta == {"finish_reason": "stop"}  # a trailing chunk keeps it


def test_stream_after_cutoff_sends_the_case_per_token_after_a_call_cut_off_mid_arguments():
    (token,) = deliveries(TEXT, "stream-token", TOKENIZER)
    (after,) = deliveries(TEXT, "stream-after-cutoff", TOKENIZER, tool="read_file")
    assert after.deltas == token.deltas and not token.prelude
    prelude = "".join(d.text for d in after.prelude)
    assert prelude.startswith(markers.SECTION_BEGIN + markers.CALL_BEGIN + "functions.read_file:0")
    assert prelude.endswith('{"city": "Par') and markers.CALL_END not in prelude
    assert all(len(d.token_ids) == 1 for d in after.prelude)


class _Remembering:
    """A parser that keeps what an earlier stream left: the leak stream-after-cutoff exists for."""

    def __init__(self, adapter):
        self.adapter, self.name, self.left = adapter, "remembering", ""

    def version(self):
        return "0"

    def parse_stream(self, request, deltas):
        events = self.adapter.parse_stream(request, (Delta(self.left), *deltas))
        self.left = "".join(d.text for d in deltas)
        return events


def test_a_parser_that_keeps_state_between_requests_differs_only_after_the_cutoff():
    from k2conform.adapter.harness import execute
    from k2conform.adapter.registry import create_adapter
    from k2conform.model import Request

    reference = create_adapter("reference")
    request = Request(tools=({"type": "function", "function": {"name": "get_weather"}},))
    (token,) = deliveries(TEXT, "stream-token", TOKENIZER)
    (after,) = deliveries(TEXT, "stream-after-cutoff", TOKENIZER)
    fresh = execute(reference, request, token)
    assert execute(reference, request, after).tool_calls == fresh.tool_calls
    assert execute(reference, request, after).meta["prelude"] == "ok"
    leaky = _Remembering(reference)
    assert execute(leaky, request, token).tool_calls == fresh.tool_calls
    assert execute(leaky, request, after).tool_calls != fresh.tool_calls


def test_an_opt_in_mode_is_taken_when_asked_for_and_left_out_of_a_default_run():
    from k2conform.adapter.registry import create_adapter
    from k2conform.delivery import modes

    reference = create_adapter("reference")
    assert "stream-after-cutoff" in modes.adapter_modes(reference)
    assert "stream-after-cutoff" not in modes.planned_modes(reference)
    assert "stream-after-cutoff" not in modes.DEFAULT_MODES
    assert set(modes.planned_modes(reference)) == set(modes.adapter_modes(reference)) - set(
        modes.OPT_IN_MODES
    )


def test_holdback_sends_each_id_at_once_and_its_text_a_stop_buffer_later():
    """vLLM's detokenizer with stop strings: one engine step per delta with all its ids, the
    text released lags the text produced by exactly the stop buffer (never going back); the
    end-of-turn token's output, which adds no text of its own, releases the rest."""
    from k2conform.delivery.modes import HOLDBACKS, holdback_variant

    spans = TOKENIZER.tokenize_spans(TEXT)
    variants = deliveries(TEXT, "stream-holdback", TOKENIZER)
    assert [v.variant for v in variants] == [holdback_variant(*h) for h in HOLDBACKS]
    assert any(step > 1 for _, step in HOLDBACKS)
    begin = markers.SPECIAL_TOKEN_IDS[markers.CALL_BEGIN]
    for (lag, step), held in zip(HOLDBACKS, variants):
        *steps, end = held.deltas
        groups = [spans[k : k + step] for k in range(0, len(spans), step)]
        assert [d.token_ids for d in steps] == [tuple(i for i, _ in g) for g in groups]
        produced, released = "", ""
        for group, delta in zip(groups, steps):
            produced += "".join(piece for _, piece in group)
            released += delta.text
            assert len(released) == max(len(produced) - lag, 0)
            assert produced.startswith(released)
        assert end.token_ids == (markers.SPECIAL_TOKEN_IDS[markers.IM_END],)
        assert released + end.text == TEXT and len(end.text) == min(lag, len(TEXT))
        if step == 1:  # a marker's id goes out while its text is held back: the mode's point
            (at,) = [n for n, d in enumerate(steps) if begin in d.token_ids]
            assert markers.CALL_BEGIN not in "".join(d.text for d in steps[: at + 1])


def test_holdback_is_taken_only_where_the_server_holds_text_back_and_only_when_asked():
    from k2conform.adapter.registry import create_adapter
    from k2conform.delivery import modes

    reference, sglang = create_adapter("reference"), create_adapter("sglang")
    assert "stream-holdback" in modes.adapter_modes(reference)
    assert "stream-holdback" not in modes.adapter_modes(sglang)  # its detokenizer trims at the end
    assert "stream-holdback" not in modes.planned_modes(reference)
    assert "stream-holdback" in modes.planned_modes(reference, ("stream-holdback",))
    assert "stream-holdback" not in modes.planned_modes(sglang, ("stream-holdback",))


def test_a_burst_cells_variant_reads_back_its_tokens_per_delta():
    """The report and the catalogue derive a burst cell's deltas again from its variant label:
    one writer (``burst_variant``), one reader (``burst_of``), the same number back."""
    from k2conform.delivery import modes
    from k2conform.delivery.tokenizer import load_tokenizer

    (delivery,) = deliveries("<think>a</think>b", "stream-burst", load_tokenizer(), burst=3)
    assert modes.burst_of(delivery.label) == 3 and delivery.label == "stream-burst[k=3]"
    for other in ("stream-token", "stream-burst[k=]", "stream-burst[k=3", None, ""):
        assert modes.burst_of(other) is None
    assert modes.ONE_SHOT_MODES == ("whole", "server-whole")
    assert modes.Delivery("stream-4char", ()).streaming  # the benchmark's own delivery
    assert not modes.Delivery("whole", ()).streaming


def test_a_long_argument_delta_from_a_finely_fed_stream_is_held_back():
    """Liveness (judge.stream.HELD_BACK): one argument delta of HELD_BACK characters or more is
    held back when the stream was fed deltas a sixteenth its size or less; fed coarser, or
    not known to be fed finely, it is not."""
    from k2conform.judge.stream import HELD_BACK, HELD_BACK_RATIO

    def kinds(size, fed):
        events = [
            StreamEvent(tool_calls=(ToolCallDelta(0, "c", "f", '{"a": "'),)),
            StreamEvent(tool_calls=(ToolCallDelta(0, arguments="x" * size),)),
        ]
        return [v.kind for v in assemble(events, fed, leaks=LEAK_MARKERS).violations]

    assert kinds(HELD_BACK, 1) == [StreamKind.HELD_BACK]
    assert kinds(HELD_BACK - 1, 1) == []
    assert kinds(HELD_BACK * 2, HELD_BACK * 2 // HELD_BACK_RATIO) == [StreamKind.HELD_BACK]
    assert kinds(HELD_BACK * 2, HELD_BACK * 2 // HELD_BACK_RATIO + 1) == []
    assert kinds(HELD_BACK * 4, None) == []


def test_a_hold_back_is_a_delta_over_twice_what_the_call_sent_before():
    """A delta is held back only when it is more than twice the arguments sent before it: with
    512 characters sent a piece at a time, a 1,024-character delta is not, 1,025 is (the
    bounds of ``size > 2 * call.sent``, counted from 0)."""
    from k2conform.judge.stream import HELD_BACK

    def kinds(size):
        opened = StreamEvent(tool_calls=(ToolCallDelta(0, "c", "f", ""),))
        pieces = [StreamEvent(tool_calls=(ToolCallDelta(0, arguments="x" * 8),))] * 64
        last = StreamEvent(tool_calls=(ToolCallDelta(0, arguments="y" * size),))
        return [v.kind for v in assemble([opened, *pieces, last], 8, leaks=LEAK_MARKERS).violations]

    assert 2 * 64 * 8 == HELD_BACK
    assert kinds(HELD_BACK) == []
    assert kinds(HELD_BACK + 1) == [StreamKind.HELD_BACK]


def test_the_hold_back_policy_is_the_one_the_docs_state():
    """docs/cli.md states the liveness rule with its numbers; the policy's constants are those
    numbers (a changed threshold is a changed rule, and its documentation changes with it)."""
    import re
    from pathlib import Path

    from k2conform.judge.stream import HELD_BACK, HELD_BACK_RATIO

    text = " ".join((Path(__file__).parents[1] / "docs" / "cli.md").read_text().split())
    rule = re.search(r"max\(([\d,]+), (\d+) × F\) characters", text)
    assert rule, "docs/cli.md no longer states the liveness rule"
    assert (int(rule[1].replace(",", "")), int(rule[2])) == (HELD_BACK, HELD_BACK_RATIO)
    assert f"`judge.stream.HELD_BACK` ({HELD_BACK:,})" in text
    assert f"`HELD_BACK_RATIO` ({HELD_BACK_RATIO}:" in text


def test_a_long_delta_that_repeats_what_was_streamed_is_no_hold_back():
    """A finishing step that resends a call's whole arguments after streaming them (vLLM
    0.10-0.11 with bursts, EasyDeL's final-delta check) is judged by the arguments it
    duplicates, not as liveness: the client was not kept waiting."""
    from k2conform.judge.stream import HELD_BACK

    streamed = [
        StreamEvent(tool_calls=(ToolCallDelta(0, arguments="x" * 8),)) for _ in range(HELD_BACK)
    ]
    events = [StreamEvent(tool_calls=(ToolCallDelta(0, "c", "f", ""),)), *streamed]
    resent = StreamEvent(tool_calls=(ToolCallDelta(0, arguments="x" * HELD_BACK * 8),))
    assert assemble([*events, resent], 8, leaks=LEAK_MARKERS).violations == ()
    half = [events[0], *streamed[: HELD_BACK // 8], resent]  # held back most of it
    assert [v.kind for v in assemble(half, 8, leaks=LEAK_MARKERS).violations] == [
        StreamKind.HELD_BACK
    ]


def test_liveness_is_not_judged_on_an_open_point():
    """An ``i_`` case's reading may need the whole call (ID.foreign names a call from its
    arguments): a held-back call there is no finding; on a ``y_`` case it is ``liveness``."""
    from dataclasses import replace

    from k2conform.case.corpus import load_corpus
    from k2conform.judge.cell import judge_result
    from k2conform.model import Result

    case = next(c for c in load_corpus().completions if c.id == "y_k3_long_argument")
    held = Result(
        content=case.expected.content,
        reasoning=case.expected.reasoning,
        tool_calls=case.expected.tool_calls,
        meta={"stream_violations": [{"kind": "arguments-held-back", "detail": "chunk 1: ..."}]},
    )
    outcome, diffs, _ = judge_result(case, held, None)
    assert outcome.value == "differs" and [d.field for d in diffs] == ["liveness"]
    outcome, diffs, _ = judge_result(replace(case, id="i" + case.id[1:]), held, None)
    assert outcome.value == "impl-defined" and diffs == []
