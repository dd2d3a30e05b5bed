"""The shared adapter glue: what every OpenAI-style adapter relies on."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from k2conform.adapter.contract import AdapterGlueError
from k2conform.adapter.glue import (
    CASE_MESSAGES,
    RandomIds,
    build_chat_request,
    definitions_from_source,
    event_of,
    load_once,
    tool_calls_of,
)
from k2conform.model import Request, StreamEvent, ToolCall, ToolCallDelta

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_load_once_runs_the_body_once_and_again_after_a_failure():
    class Loader:
        calls = 0
        fail = True

        @load_once
        def load(self) -> None:
            self.calls += 1
            if self.fail:
                raise RuntimeError("not yet")

    loader = Loader()
    with pytest.raises(RuntimeError):
        loader.load()
    loader.fail = False
    loader.load()
    loader.load()
    assert loader.calls == 2


def test_build_chat_request_carries_the_case_and_the_servers_default_choice():
    seen = []

    def request_cls(**fields):
        seen.append(fields)
        return fields

    build_chat_request(
        request_cls,
        Request(tools=(TOOL,), tool_choice="required", thinking=True),
        choice_without_tools="none",
    )
    build_chat_request(request_cls, Request(), choice_without_tools=None, template_kwargs=False)
    with_tools, without = seen
    assert with_tools["tools"] == [TOOL] and with_tools["tool_choice"] == "required"
    assert with_tools["chat_template_kwargs"] == {"thinking": True}
    assert without["tools"] is None and without["tool_choice"] is None
    assert "chat_template_kwargs" not in without


def test_build_chat_request_applies_only_the_options_the_adapter_takes():
    """The case's conversation replaces the stand-in one, template arguments join thinking,
    other options become the request's own fields; an option the adapter does not apply stays
    out (such a case never reaches it: ``case_unfit``)."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "<think>Let me"},
    ]
    options = {
        "messages": history,
        "continue_final_message": True,
        "stream_reasoning": False,
        "chat_template_kwargs": {"force_nonempty_content": True},
        "max_tokens": 5,
    }
    request = Request(tools=(TOOL,), thinking=True, server_options=options)
    taken = {"messages", "continue_final_message", "stream_reasoning", "chat_template_kwargs"}
    built = build_chat_request(
        ChatCompletionRequest, request, choice_without_tools="none", options=taken
    )
    assert [m.content for m in built.messages] == ["Weather?", "<think>Let me"]
    assert built.continue_final_message is True and built.stream_reasoning is False
    assert built.chat_template_kwargs == {"thinking": True, "force_nonempty_content": True}
    assert built.max_tokens is None
    plain = build_chat_request(ChatCompletionRequest, request, choice_without_tools="none")
    assert [m.content for m in plain.messages] == [m["content"] for m in CASE_MESSAGES]
    assert plain.stream_reasoning is True and plain.chat_template_kwargs == {"thinking": True}


def test_build_chat_request_rejected_by_the_server_model_is_glue():
    def request_cls(**fields):
        raise ValueError("extra fields not permitted")

    with pytest.raises(AdapterGlueError, match="ChatCompletionRequest: ValueError: extra fields"):
        build_chat_request(request_cls, Request(), choice_without_tools=None)


def test_random_ids_are_masked_and_counted_and_model_ids_kept():
    ids = RandomIds.chatcmpl()
    assert ids.mask("chatcmpl-tool-0123456789abcdef") == "chatcmpl-tool-<random>"
    assert ids.mask("functions.get_weather:0") == "functions.get_weather:0"
    assert ids.mask("chatcmpl-tool-0123456789ABCDEF") == "chatcmpl-tool-0123456789ABCDEF"  # not hex
    assert ids.mask(None) is None
    assert ids.meta(version="1") == {"version": "1", "masked_random_ids": 1}
    assert RandomIds.chatcmpl().meta(version="1") == {"version": "1"}
    assert (
        RandomIds.chatcmpl("0-9A-Za-z").mask("chatcmpl-tool-0123456789ABCDEF")
        == "chatcmpl-tool-<random>"
    )


def _call(index=0, id=None, name=None, arguments=None, as_dict=False):
    function = (
        {"name": name, "arguments": arguments} if as_dict else NS(name=name, arguments=arguments)
    )
    return NS(index=index, id=id, function=function)


def test_tool_calls_of_reads_the_message_calls():
    calls = [
        NS(id="chatcmpl-tool-0123456789abcdef", function=NS(name="a", arguments="{}")),
        NS(id="functions.b:1", function=NS(name="b", arguments='{"x": 1}')),
    ]
    ids = RandomIds.chatcmpl()
    assert tool_calls_of(calls, ids) == (
        ToolCall("a", "{}", "chatcmpl-tool-<random>"),
        ToolCall("b", '{"x": 1}', "functions.b:1"),
    )
    assert tool_calls_of(None, ids) == ()


def test_event_of_keeps_what_the_server_sends_and_drops_empty_messages():
    ids = RandomIds.chatcmpl()
    assert event_of(None, ids) is None
    assert event_of(NS(content=None, reasoning=None, tool_calls=[]), ids) is None
    assert event_of(NS(content="", reasoning=None, tool_calls=None), ids) == StreamEvent(content="")
    assert (
        event_of(NS(content="", reasoning="", tool_calls=None), ids, blank_is_absent=True) is None
    )
    message = NS(
        content=None,
        reasoning_content="hm",
        tool_calls=[
            _call(0, "functions.f:0", "f", None),
            _call(0, None, None, '{"a"', as_dict=True),
            NS(index=1, id=None, function=None),
        ],
    )
    assert event_of(message, ids, reasoning_field="reasoning_content") == StreamEvent(
        reasoning="hm",
        tool_calls=(
            ToolCallDelta(0, "functions.f:0", "f", None),
            ToolCallDelta(0, None, None, '{"a"'),
            ToolCallDelta(1, None, None, None),
        ),
    )


SERVER_SOURCE = """
import json
import no_such_gpu_stack
from dataclasses import dataclass
LIMIT = 3

def unused():
    return no_such_gpu_stack.run()

@dataclass
class Point:
    x: int

def helper(value):
    return json.dumps(value)[:LIMIT]

def root():
    try:
        return helper([Point(1).x, Point(2).x])
    except ValueError as exc:
        return str(exc)
"""


def test_definitions_from_source_runs_only_what_the_roots_need(tmp_path):
    """A file whose import needs a GPU stack still gives the definitions a root reaches."""
    source = tmp_path / "server.py"
    source.write_text(SERVER_SOURCE)
    module = definitions_from_source(
        source, ["root"], module_name="k2conform_test_server", package="k2conform_test"
    )
    assert module.root() == "[1,"
    assert "unused" not in vars(module) and "no_such_gpu_stack" not in vars(module)
    replaced = definitions_from_source(
        source,
        ["root"],
        module_name="k2conform_test_server_2",
        package="k2conform_test",
        stand_ins={"LIMIT": 1},
    )
    assert replaced.root() == "["


def test_definitions_from_source_names_what_the_release_lacks(tmp_path):
    source = tmp_path / "server.py"
    source.write_text(SERVER_SOURCE)
    with pytest.raises(AdapterGlueError, match="server.py: gone"):
        definitions_from_source(source, ["gone"], module_name="k2conform_test_gone", package="t")
    with pytest.raises(AdapterGlueError, match="import no_such_gpu_stack.*ModuleNotFoundError"):
        definitions_from_source(
            source, ["unused"], module_name="k2conform_test_unused", package="t"
        )


def test_a_plugin_that_does_not_import_is_an_adapter_error_not_a_traceback(monkeypatch):
    import importlib.metadata

    from k2conform.adapter import registry

    broken = importlib.metadata.EntryPoint(
        "broken", "k2conform_no_such_module:Adapter", registry.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(registry, "_entry_points", lambda: {"broken": broken})
    adapter = registry.create_adapter("broken")
    availability = registry.load(adapter)
    assert adapter.name == "broken"
    assert availability.status == "adapter-error"
    assert "import k2conform_no_such_module:Adapter" in availability.reason
    assert "ModuleNotFoundError" in availability.reason
    assert registry.default_adapter_names() == ["broken"]
