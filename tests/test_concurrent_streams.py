"""Streams a loaded server delivers: outputs merged while the server falls behind
(``stream-coalesced``) and several streams in flight through one adapter at once
(``stream-interleaved``), each against a parser that breaks the way the mode exists to show."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from k2conform.formats import FORMATS
from k2conform.adapter.contract import Adapter, stream_steps
from k2conform.adapter.harness import execute, interleave
from k2conform.adapter.registry import create_adapter, default_adapter_names
from k2conform.case.corpus import load_case
from k2conform.delivery import modes
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform.model import CellOutcome, Delta, Request, StreamEvent
from k2conform.reference.parser import ReferenceParser
from k2conform.run.cell import CellSettings, run_cell
from k2conform_adapters.reference import ReferenceAdapter, stepper

TOKENIZER = load_tokenizer()
GOLDEN = Path(__file__).resolve().parent.parent / "corpus" / "golden" / "completions"
TWO_CALLS = load_case(GOLDEN / "y_spec_parallel_calls.json")
SETTINGS = CellSettings(deadline=60.0)


def _request(*tools: str) -> Request:
    return Request(tools=tuple({"type": "function", "function": {"name": t}} for t in tools))


# -- stream-coalesced -------------------------------------------------------------------------


def test_coalesced_deltas_merge_1_to_8_tokens_drawn_from_the_recorded_seed():
    text = modes.engine_output(TWO_CALLS.model_output)
    spans = TOKENIZER.tokenize_spans(text)
    variants = modes.deliveries(text, "stream-coalesced", TOKENIZER, seed=11)
    assert [v.seed for v in variants] == [11 + k for k in range(modes.COALESCED_VARIANTS)]
    assert [v.label for v in variants] == [f"stream-coalesced[seed={v.seed}]" for v in variants]
    for delivery in variants:
        sizes = [len(d.token_ids) for d in delivery.deltas]
        assert all(1 <= n <= modes.MOST_COALESCED for n in sizes) and max(sizes) > 1
        assert [i for d in delivery.deltas for i in d.token_ids] == [i for i, _ in spans]
        assert "".join(d.text for d in delivery.deltas) == text
    again = modes.deliveries(text, "stream-coalesced", TOKENIZER, seed=11)
    assert again == variants  # the seed alone reproduces a cell
    assert len({v.deltas for v in variants}) == len(variants)  # three draws, not one
    assert "stream-coalesced" in modes.SEEDED_MODES and "stream-coalesced" in modes.OPT_IN_MODES


class _OneTokenAtATime(ReferenceAdapter):
    """Reads only the first token of a delta: right per token, wrong once outputs merge (as
    vLLM 0.19.0's kimi_k2 streaming parser raises IndexError at tool_parsers/
    kimi_k2_tool_parser.py:523 when a delta starts two calls, vllm-project/vllm#54701)."""

    name = "one-token-at-a-time"

    def open_stream(self, request):
        step = super().open_stream(request)

        def first_token(delta, finished):
            pieces = TOKENIZER.tokenize_spans(delta.text) if len(delta.token_ids) > 1 else ()
            kept = Delta(pieces[0][1], delta.token_ids[:1]) if pieces else delta
            return step(kept, finished)

        return first_token


def test_a_parser_that_reads_one_token_a_delta_passes_per_token_and_differs_coalesced():
    broken = _OneTokenAtATime()
    assert run_cell(broken, TWO_CALLS, "stream-token", SETTINGS).outcome == CellOutcome.AGREE
    coalesced = run_cell(broken, TWO_CALLS, "stream-coalesced", SETTINGS)
    assert coalesced.outcome == CellOutcome.DIFFERS
    assert coalesced.variant.startswith("stream-coalesced[seed=")
    reference = create_adapter("reference")
    assert run_cell(reference, TWO_CALLS, "stream-coalesced", SETTINGS).outcome == "agree"


# -- stream-interleaved -----------------------------------------------------------------------


class _Recording(ReferenceAdapter):
    """Logs which stream opened and which stream stepped, in order."""

    name = "recording"

    def __init__(self):
        self.log = []

    def open_stream(self, request):
        stream = sum(1 for entry in self.log if entry[0] == "open")
        self.log.append(("open", stream))
        step = super().open_stream(request)

        def logged(delta, finished):
            self.log.append(("step", stream, delta.text, finished))
            return step(delta, finished)

        return logged


def test_interleave_opens_every_stream_first_then_spreads_each_over_the_others():
    recording = _Recording()
    short = tuple(Delta(c) for c in "ab")
    long = tuple(Delta(c) for c in "wxyz")
    events = interleave(recording, Request(), (short, long))
    assert recording.log[:2] == [("open", 0), ("open", 1)]
    steps = [(s, text) for _, s, text, _ in recording.log[2:]]
    assert steps == [(0, "a"), (1, "w"), (1, "x"), (0, "b"), (1, "y"), (1, "z")]
    assert [e[3] for e in recording.log[2:] if e[1] == 0] == [False, True]  # the last finishes
    assert ["".join(e.content or "" for e in stream) for stream in events] == ["ab", "wxyz"]
    assert stream_steps(()) == [(Delta(""), True)]


class _OneParserForAll(ReferenceAdapter):
    """Every stream shares one parser state, the hypothesis of vllm-project/vllm#54701: alone,
    each stream is right; two in flight at once corrupt each other."""

    name = "one-parser-for-all"

    def __init__(self):
        self.parser = None

    def open_stream(self, request):
        if self.parser is None or self.parser.finished:
            self.parser = _Finishing(request)
        return stepper(self.parser)


class _Finishing(ReferenceParser):
    finished = False

    def finish(self):
        self.finished = True
        return super().finish()


def test_a_parser_state_shared_by_streams_is_an_isolation_difference_only_interleaved():
    shared = _OneParserForAll()
    assert run_cell(shared, TWO_CALLS, "stream-token", SETTINGS).outcome == CellOutcome.AGREE
    cell = run_cell(shared, TWO_CALLS, "stream-interleaved", SETTINGS)
    assert cell.outcome == CellOutcome.DIFFERS
    isolation = [d for d in cell.diffs if d.field == "isolation"]
    assert {d.observed.split(":")[0] for d in isolation} == {"this stream", "the stream beside it"}
    assert cell.variant == "stream-interleaved[beside get_weather]"
    reference = create_adapter("reference")
    fresh = run_cell(reference, TWO_CALLS, "stream-interleaved", SETTINGS)
    assert fresh.outcome == CellOutcome.AGREE and not fresh.diffs


class _DepthReporting(ReferenceAdapter):
    """Sends the stack depth it is stepped at as content: a parser whose result depends on it
    (SGLang keeps the text of a JSON nested past the recursion limit) must be stepped at the
    same depth alone as beside another stream, or the harness invents an isolation finding."""

    name = "depth-reporting"

    def open_stream(self, request):
        def step(delta, finished):
            return [StreamEvent(content=str(len(inspect.stack(0))))]

        return step


def test_a_stream_is_stepped_at_the_same_depth_alone_as_beside_another():
    (delivery,) = modes.deliveries("Hi", "stream-interleaved", TOKENIZER)
    result = execute(_DepthReporting(), Request(), delivery)
    assert result.outcome == "ok"
    assert not [v for v in result.meta["stream_violations"] if v["kind"] == "cross-stream"]


@pytest.mark.parametrize("format", sorted(FORMATS))
def test_the_partner_is_two_calls_of_the_cases_first_tool_in_its_format(format):
    """Each format's partner stream (``k2conform.formats``), as its own reference reads it."""
    (delivery,) = modes.deliveries(
        "Hi", "stream-interleaved", TOKENIZER, tool="read_file", format=format
    )
    assert delivery.deltas == modes.deliveries("Hi", "stream-token", TOKENIZER)[0].deltas
    assert all(len(d.token_ids) == 1 for d in delivery.partner)
    partner = "".join(d.text for d in delivery.partner)
    adapter = create_adapter(FORMATS[format].reference)
    assert format in adapter.formats
    result = adapter.parse_whole(_request("read_file"), Delta(partner))
    assert [c.name for c in result.tool_calls] == ["read_file", "read_file"]
    assert [c.arguments.replace(" ", "") for c in result.tool_calls] == [
        '{"city":"Paris"}',
        '{"city":"Rome"}',
    ]


class _WholeOnly(Adapter):
    """An adapter that parses a stream only whole (a server, another process)."""

    name = "whole-only"

    def parse_whole(self, request, output):
        return create_adapter("reference").parse_whole(request, output)

    def parse_stream(self, request, deltas):
        return create_adapter("reference").parse_stream(request, deltas)


def test_only_an_adapter_that_opens_streams_takes_the_interleaved_mode():
    whole_only = _WholeOnly()
    assert not whole_only.opens_streams
    assert "stream-interleaved" not in modes.adapter_modes(whole_only)
    cell = run_cell(whole_only, TWO_CALLS, "stream-interleaved", SETTINGS)
    assert cell.outcome == CellOutcome.UNAVAILABLE
    (delivery,) = modes.deliveries(TWO_CALLS.model_output, "stream-interleaved", TOKENIZER)
    result = execute(whole_only, TWO_CALLS.request, delivery)
    assert result.outcome == "unavailable" and "opens no stream" in (result.error or "")


@pytest.mark.parametrize(
    "name", ["reference", "reference-k3", "vllm", "vllm-k3", "sglang", "sglang-k3"]
)
def test_the_in_process_parsers_open_streams(name):
    assert name in default_adapter_names() or name.endswith("-k3")
    adapter = create_adapter(name)
    assert adapter.opens_streams
    assert "stream-interleaved" in modes.adapter_modes(adapter)
    assert "stream-interleaved" not in modes.planned_modes(adapter)
    assert "stream-interleaved" in modes.planned_modes(adapter, ("stream-interleaved",))


# -- server-concurrent ------------------------------------------------------------------------


class _ServerLike(ReferenceAdapter):
    """A server adapter's shape: takes the server modes, parses a stream whole per request.
    ``loses_calls``: a request sent while another is in flight loses its calls and finishes
    with ``stop`` (vllm-project/vllm#54701's symptom)."""

    name = "server-like"
    delivery_modes = modes.SERVER_MODES

    def __init__(self, loses_calls: bool):
        import threading

        self.loses_calls = loses_calls
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def parse_stream(self, request, deltas):
        import time

        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.05)
        try:
            events = [e for d in deltas for e in (ReferenceParser(request).feed(d.text),) if e]
            events.append(StreamEvent(finish_reason="tool_calls"))
            crowded = self.most_in_flight > 1  # once others came, every later request
        finally:
            with self.lock:
                self.in_flight -= 1
        if self.loses_calls and crowded:
            return [StreamEvent(content=None, finish_reason="stop")]
        return events


def test_server_concurrent_sends_the_copies_at_once_and_holds_each_to_the_one_alone():
    (delivery,) = modes.deliveries(TWO_CALLS.model_output, "server-concurrent", TOKENIZER)
    assert delivery.copies == modes.CONCURRENT_STREAMS and "server-concurrent" in modes.OPT_IN_MODES
    sound = _ServerLike(loses_calls=False)
    result = execute(sound, TWO_CALLS.request, delivery)
    assert sound.most_in_flight == modes.CONCURRENT_STREAMS  # the barrier: all in flight at once
    assert not result.meta["stream_violations"] and len(result.tool_calls) == 2
    cell = run_cell(sound, TWO_CALLS, "server-concurrent", SETTINGS)
    assert cell.outcome == CellOutcome.AGREE


def test_calls_lost_only_beside_other_requests_are_an_isolation_difference():
    crowded = _ServerLike(loses_calls=True)
    assert run_cell(crowded, TWO_CALLS, "server-stream", SETTINGS).outcome == CellOutcome.AGREE
    cell = run_cell(crowded, TWO_CALLS, "server-concurrent", SETTINGS)
    assert cell.outcome == CellOutcome.DIFFERS
    isolation = [d.observed for d in cell.diffs if d.field == "isolation"]
    assert len(isolation) == modes.CONCURRENT_STREAMS
    assert isolation[0].startswith(f"stream 1 of {modes.CONCURRENT_STREAMS}: count 0 beside")
    assert "finish_reason 'stop' beside the others, 'tool_calls' alone" in isolation[0]
    assert cell.observed.tool_calls == ()  # the result is what the losing client saw
