"""SGLang kimi_k2 FunctionCallParser

Drives SGLang's FunctionCallParser(tools, 'kimi_k2') (and the kimi_k2 reasoning parser) as
serving_chat.py does.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser

from k2conform_adapters.repro.shared import Case, assemble

PACKAGE = "sglang"


def run(case: Case) -> dict[str, Any]:
    """SGLang's message for the case, one-shot or streamed."""
    # As serving_chat.py does with --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2].
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K2-Instruct",
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools or None,
        tool_choice=case.tool_choice if case.tools else "none",
        chat_template_kwargs={"thinking": case.thinking},
    )
    active = bool(request.tools) and request.tool_choice != "none"
    if case.mode == "whole":
        return parse_whole(case, request, active)
    return parse_stream(case, request, active)


def call_id(name: str, index: int) -> str:
    """serving_chat._process_tool_call_id for kimi_k2."""
    return f"functions.{name}:{index}"


def parse_whole(case: Case, request: Any, active: bool) -> dict[str, Any]:
    """The one-shot path: reasoning first (thinking on), then the tool calls."""
    text, reasoning = case.text, None
    if case.thinking and request.separate_reasoning:
        parser = ReasoningParser(
            model_type="kimi_k2",
            stream_reasoning=False,
            force_reasoning=True,
            request=request,
            tool_call_parser_active=active,
        )
        reasoning, text = parser.parse_non_stream(text)
    calls = []
    if active:
        parser = FunctionCallParser(request.tools, "kimi_k2", tool_choice=request.tool_choice)
        if parser.has_tool_call(text):
            text, items = parser.parse_non_stream(text)
            calls = [
                {"id": call_id(i.name, i.tool_index), "name": i.name, "arguments": i.parameters}
                for i in items
            ]
    return {"content": text or "", "reasoning": reasoning or None, "tool_calls": calls}


def parse_stream(case: Case, request: Any, active: bool) -> dict[str, Any]:
    """The streaming path: each delta through the reasoning parser, then the tool parser;
    the last delta also ends both streams."""
    reasoning_parser = None
    if case.thinking and request.separate_reasoning:
        reasoning_parser = ReasoningParser(
            model_type="kimi_k2",
            stream_reasoning=request.stream_reasoning,
            force_reasoning=True,
            request=request,
            tool_call_parser_active=active,
        )
    tool_parser = None
    if active:
        tool_parser = FunctionCallParser(request.tools, "kimi_k2", tool_choice=request.tool_choice)
    events: list[dict[str, Any]] = []
    for n, (text, _ids) in enumerate(case.deltas):
        finished = n == len(case.deltas) - 1
        if reasoning_parser is not None:
            reasoning, text = reasoning_parser.parse_stream_chunk(text)
            if finished:
                end_reasoning, end_text = reasoning_parser.parse_stream_end()
                reasoning = (reasoning or "") + (end_reasoning or "")
                text = (text or "") + (end_text or "")
            if reasoning:
                events.append({"reasoning": reasoning})
        if tool_parser is None:
            if text:
                events.append({"content": text})
            continue
        normal, items = tool_parser.parse_stream_chunk(text)
        if finished:
            end_text, end_items = tool_parser.parse_stream_end()
            normal, items = (normal or "") + end_text, list(items) + list(end_items)
        if normal:
            events.append({"content": normal})
        for i in items:
            events.append(
                {
                    "tool_calls": [
                        {
                            "index": i.tool_index,
                            "name": i.name or None,
                            "id": call_id(i.name, i.tool_index) if i.name else None,
                            "arguments": i.parameters,
                        }
                    ]
                }
            )
    return assemble(events)
