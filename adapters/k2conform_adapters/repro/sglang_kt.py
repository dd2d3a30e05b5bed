"""sglang-kt (KTransformers' SGLang fork) kimi_k2 FunctionCallParser

Drives the fork's FunctionCallParser(tools, 'kimi_k2') (and the kimi_k2 reasoning parser) as the
fork's serving_chat.py does: no end-of-stream parser steps, then _check_for_unstreamed_tool_args;
one-shot content is the text or null.
"""

from __future__ import annotations

import json
from typing import Any

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser

from k2conform_adapters.repro.shared import Case, assemble

PACKAGE = "sglang-kt"


def run(case: Case) -> dict[str, Any]:
    """The fork's message for the case, one-shot or streamed."""
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K2-Instruct",
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools or None,
        tool_choice=case.tool_choice if case.tools else "none",
        chat_template_kwargs={"thinking": case.thinking},
    )
    thinking = case.thinking and request.separate_reasoning
    tools = None
    if request.tools and request.tool_choice != "none":
        tools = FunctionCallParser(request.tools, "kimi_k2", tool_choice=request.tool_choice)
    if case.mode == "whole":
        text, reasoning, calls = case.text, None, []
        if thinking:
            reasoning, text = ReasoningParser("kimi_k2", False, True, request).parse_non_stream(
                text
            )
        if tools is not None and tools.has_tool_call(text):
            text, items = tools.parse_non_stream(text)
            calls = [
                {
                    "id": f"functions.{i.name}:{i.tool_index}",
                    "name": i.name,
                    "arguments": i.parameters,
                }
                for i in items
            ]
        return {"content": text or None, "reasoning": reasoning or None, "tool_calls": calls}
    return assemble(stream_events(case, request, tools, thinking))


def stream_events(case: Case, request: Any, tools: Any, thinking: bool) -> list[dict[str, Any]]:
    """_generate_chat_stream: per delta the reasoning parser, then the tool parser."""
    reasoning = (
        ReasoningParser("kimi_k2", request.stream_reasoning, True, request) if thinking else None
    )
    events: list[dict[str, Any]] = []
    for text, _ids in case.deltas:
        if reasoning is not None:
            thought, text = reasoning.parse_stream_chunk(text)
            events.append({"reasoning": thought or None})
        if tools is None:
            events.append({"content": text or None})
            continue
        normal, items = tools.parse_stream_chunk(text)
        events.append({"content": normal or None})
        events.extend(
            {
                "tool_calls": [
                    {
                        "index": i.tool_index,
                        "name": i.name or None,
                        "id": f"functions.{i.name}:{i.tool_index}" if i.name else None,
                        "arguments": i.parameters,
                    }
                ]
            }
            for i in items
        )
    if tools is not None:
        events.append(unstreamed_arguments(tools.detector))
    return events


def unstreamed_arguments(detector: Any) -> dict[str, Any]:
    """_check_for_unstreamed_tool_args after the finishing delta."""
    recorded, streamed = detector.prev_tool_call_arr, detector.streamed_args_for_tool
    index = len(recorded) - 1
    if not recorded or not streamed or index >= len(streamed):
        return {}
    expected = json.dumps(recorded[index].get("arguments", {}), ensure_ascii=False)
    rest = expected.replace(streamed[index], "", 1) if streamed[index] in expected else ""
    return {"tool_calls": [{"index": index, "arguments": rest}]} if rest else {}
