"""The ``sglang-server`` adapter: SGLang 0.5.23's real ``OpenAIServingChat`` with a scripted
TokenizerManager (the one engine-bound object), on the spec's golden completions.

Needs SGLang's serving closure in the venv (requirements/parsers.txt plus the serving
modules' imports); skips only when sglang itself is missing.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
from k2conform import markers
from k2conform.judge.compare import compare_results
from k2conform.delivery.modes import deliveries
from k2conform.adapter.harness import execute
from k2conform.model import Delta, Request, WireKind
from k2conform.judge.stream import assemble
from k2conform.markers import LEAK_MARKERS

GOLDEN = [
    "y_spec_single_call",
    "y_spec_parallel_calls",
    "y_spec_final_answer",
    "y_spec_content_before_section",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SINGLE = (
    f"{markers.SECTION_BEGIN}{markers.CALL_BEGIN}functions.get_weather:0{markers.ARGUMENT_BEGIN}"
    f'{{"city": "Paris"}}{markers.CALL_END}{markers.SECTION_END}'
)


def _loaded(module: str, name: str):
    """One of the server adapters, loaded (a module fixture: SGLang's set-up takes seconds)."""
    pytest.importorskip("sglang")
    adapter = getattr(importlib.import_module(f"k2conform_adapters.{module}"), name)()
    adapter.load()
    return adapter


@pytest.fixture(scope="module")
def adapter():
    return _loaded("sglang_server", "SglangServerAdapter")


@pytest.fixture(scope="module")
def tokenizer():
    from k2conform.delivery.tokenizer import load_tokenizer

    return load_tokenizer()


@pytest.mark.parametrize("mode", ["whole", "stream-token", "stream-burst"])
@pytest.mark.parametrize("case_id", GOLDEN)
def test_golden_cases_give_the_spec_mapping(adapter, tokenizer, corpus, case_id, mode):
    case = next(c for c in corpus.completions if c.id == case_id)
    (delivery,) = deliveries(case.model_output, mode, tokenizer)
    result = execute(adapter, case.request, delivery)
    assert result.outcome == "ok", result.error
    assert compare_results(case.expected.as_result(), result) == []
    assert not result.meta.get("stream_violations")


def test_the_real_handler_ran(adapter, tokenizer):
    """The reply is OpenAIServingChat's: finish_reason rewritten to tool_calls by
    _process_tool_calls, skip_special_tokens turned off by _process_messages because tools
    are declared, the prompt rendered from the served chat template."""
    result = adapter.parse_whole(
        Request(tools=(WEATHER,)), Delta(SINGLE, tuple(tokenizer.encode(SINGLE)))
    )
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("functions.get_weather:0", "get_weather", '{"city": "Paris"}')
    ]
    assert result.content == "" and result.meta["finish_reason"] == "tool_calls"
    assert result.meta["skip_special_tokens"] is False
    _, manager, _ = adapter._servers[False]
    prompt = manager.tokenizer.decode(manager.last_request.input_ids)
    assert (
        prompt.startswith(f"{markers.IM_SYSTEM}tool_declare{markers.IM_MIDDLE}")
        and "get_weather" in prompt
    )


def test_stream_opens_with_the_role_chunk_and_ids_once(adapter, tokenizer):
    pieces = [Delta(p, (i,)) for i, p in tokenizer.tokenize_spans(SINGLE)]
    reply = adapter.parse_stream(Request(tools=(WEATHER,)), pieces)
    events = reply.events
    assert (
        events[0].content == "" and not events[0].tool_calls
    )  # _generate_chat_stream's first chunk
    got = assemble(events, leaks=LEAK_MARKERS)
    assert not got.violations
    assert [(c.id, c.name, c.arguments) for c in got.result.tool_calls] == [
        ("functions.get_weather:0", "get_weather", '{"city": "Paris"}')
    ]
    # On the wire, SGLang 0.5.23 sends "type": "function" again with every argument chunk: an
    # OpenAI client ignores it, KVV's stream spec does not (sgl-project/sglang#39897)
    assert [(v.kind, v.detail.split(": ", 1)[1]) for v in reply.wire] == [
        (WireKind.CALL_RESENT, "call 0 sends type again")
    ]


def test_thinking_routes_reasoning_through_the_configured_parser(adapter, tokenizer):
    text = "<think>Need the weather.</think>" + SINGLE
    request = Request(tools=(WEATHER,), thinking=True)
    whole = adapter.parse_whole(request, Delta(text))
    assert whole.reasoning == "Need the weather." and len(whole.tool_calls) == 1
    streamed = assemble(
        adapter.parse_stream(
            request, [Delta(p, (i,)) for i, p in tokenizer.tokenize_spans(text)]
        ).events,
        leaks=LEAK_MARKERS,
    )
    assert streamed.result.reasoning == "Need the weather." and len(streamed.result.tool_calls) == 1


def test_a_missing_serving_method_is_a_glue_error(monkeypatch):
    pytest.importorskip("sglang")
    from k2conform.adapter import AdapterGlueError
    from k2conform_adapters import sglang_server

    sglang_server.SglangServerAdapter().load()  # imports serving_chat (placeholder included)
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    monkeypatch.delattr(OpenAIServingChat, "_check_for_unstreamed_tool_args")
    with pytest.raises(AdapterGlueError) as info:
        sglang_server.SglangServerAdapter().load()
    assert info.value.api == "OpenAIServingChat._check_for_unstreamed_tool_args"


def test_an_attribute_the_stand_in_lacks_is_adapter_error_not_a_crash(
    adapter, tokenizer, monkeypatch
):
    """The handler turns every exception into a 500 reply; one caused by the stand-in
    missing a TokenizerManager attribute must still surface as adapter-error."""
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    real = OpenAIServingChat._validate_request

    def reads_a_new_field(self, request):
        self.tokenizer_manager.field_added_in_a_later_release  # noqa: B018
        return real(self, request)

    monkeypatch.setattr(OpenAIServingChat, "_validate_request", reads_a_new_field)
    (delivery,) = deliveries(SINGLE, "whole", tokenizer)
    result = execute(adapter, Request(tools=(WEATHER,)), delivery)
    assert result.outcome == "adapter-error"
    assert "TokenizerManager.field_added_in_a_later_release" in result.error


@pytest.mark.parametrize("mode", ["whole", "stream-token"])
def test_recorded_difference_the_server_rejects_an_invalid_tool_schema(adapter, tokenizer, mode):
    """Recorded behaviour, where the real serving code and the ``sglang`` adapter part:
    OpenAIServingChat._validate_request checks every tool's ``parameters`` with
    Draft202012Validator.check_schema before anything is parsed, and answers 400; the
    ``sglang`` adapter (parser calls only) parses the call.  The 400 is the request rejected
    (its fate, ``meta.request``), naming the status, never a crash."""
    from k2conform_adapters.sglang_parser import SglangAdapter

    bad = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": "Paris"}},
            },
        },
    }
    request = Request(tools=(bad,))
    (delivery,) = deliveries(SINGLE, mode, tokenizer)
    served = execute(adapter, request, delivery)
    assert served.outcome == "ok" and served.tool_calls == ()
    assert served.meta["request"]["fate"] == "rejected"
    assert served.meta["request"]["detail"].startswith(
        "HTTP 400: Tool 0 function has invalid 'parameters' schema"
    )
    parsed = execute(SglangAdapter(), request, delivery)
    assert parsed.outcome == "ok" and [c.name for c in parsed.tool_calls] == ["get_weather"]


@pytest.mark.slow
def test_a_missing_module_of_the_serving_closure_is_unavailable_with_the_reason():
    """requirements/parsers.txt installs the parser closure; the serving code imports more
    (uvicorn among others).  Without it the adapter is unavailable, naming the module."""
    pytest.importorskip("sglang")
    script = textwrap.dedent(
        """
        import sys
        sys.modules["uvicorn"] = None  # blocks the import
        from k2conform.adapter import AdapterUnavailable
        from k2conform_adapters.sglang_server import SglangServerAdapter
        try:
            SglangServerAdapter().load()
        except AdapterUnavailable as exc:
            print("unavailable:", exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300
    )
    assert "unavailable: SGLang's serving code needs 'uvicorn', not installed" in out.stdout, (
        out.stderr[-2000:]
    )


@pytest.fixture(scope="module")
def k3_adapter():
    return _loaded("sglang_server_k3", "SglangServerK3Adapter")


def test_the_k3_server_runs_sglangs_k3_parsers_in_its_serving_code(k3_adapter, tokenizer, corpus):
    """``sglang-server-k3``: one server per thinking setting, both started with the kimi_k3
    parsers; a K3 call comes out of the real handler with the server's id and finish_reason,
    and a think channel is reasoning even when the request does not ask for thinking (K3's
    detector thinks unless told not to)."""
    for _, manager, _ in k3_adapter._servers.values():
        assert manager.server_args.tool_call_parser == "kimi_k3"
        assert manager.server_args.reasoning_parser == "kimi_k3"
    case = next(c for c in corpus.completions if c.id == "y_k3_think_response_call")
    (delivery,) = deliveries(case.model_output, "whole", tokenizer, format=case.format)
    result = execute(k3_adapter, case.request, delivery)
    assert result.outcome == "ok", result.error
    assert compare_results(case.expected.as_result(), result) == []
    assert result.reasoning and result.meta["finish_reason"] == "tool_calls"


@pytest.mark.slow
def test_the_k3_server_gives_the_in_process_k3_parsers_results_on_the_k3_corpus(
    k3_adapter, tokenizer, corpus
):
    """The serving code adds nothing the in-process ``sglang-k3`` leaves out, on every K3 case,
    whole and per token (56 cases on 5 Dec 2026): the same reply and the same kinds of stream
    violation (``y_k3_long_argument``'s held-back arguments in both)."""
    from k2conform.k3 import markers as k3
    from k2conform_adapters.sglang_k3 import SglangK3Adapter

    in_process = SglangK3Adapter()
    cases = [c for c in corpus.completions if c.format == k3.FORMAT]
    assert len(cases) >= 50
    differ = []
    for case in cases:
        for mode in ("whole", "stream-token"):
            (delivery,) = deliveries(case.model_output, mode, tokenizer, format=case.format)
            served = execute(k3_adapter, case.request, delivery)
            parsed = execute(in_process, case.request, delivery)
            if served.outcome != parsed.outcome or compare_results(parsed, served):
                differ.append((case.id, mode, served.outcome, parsed.outcome))
            elif kinds(served) != kinds(parsed):
                differ.append((case.id, mode, kinds(served), kinds(parsed)))
    assert differ == []


def kinds(result):
    """A result's stream violations by kind (their details count chunks, and a server's stream
    opens with a role chunk of its own)."""
    return sorted(v["kind"] for v in result.meta.get("stream_violations") or ())
