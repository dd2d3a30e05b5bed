"""SGLang Kimi FunctionCallParser (kimi_k2, or kimi_k3 for a K3 output)

Drives SGLang's FunctionCallParser(tools, 'kimi_k2') (and the kimi_k2 reasoning parser) as
serving_chat.py does; 'kimi_k3' (and its reasoning parser) for a Kimi K3 output.
"""

from __future__ import annotations

from typing import Any

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser

from k2conform_adapters.repro.shared import Case, assemble

PACKAGE = "sglang"
#: The tool and reasoning parsers per Kimi format.
PARSERS = {"k2": "kimi_k2", "k3": "kimi_k3"}


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


def call_id(case: Case, name: str, index: int) -> str:
    """serving_chat._process_tool_call_id: kimi_k2's functions.NAME:INDEX; kimi_k3's
    NAME:INDEX counted from the calls of the history (none: the script's one-turn chat)."""
    return f"{name}:{index}" if case.format == "k3" else f"functions.{name}:{index}"


def reasoning_parser(case: Case, request: Any, active: bool, stream: bool) -> Any:
    """The reasoning parser serving_chat.py runs, or None: kimi_k2's with thinking on; kimi_k3's
    whenever reasoning is separated, forced unless thinking is off."""
    if not request.separate_reasoning or (case.format != "k3" and not case.thinking):
        return None
    return ReasoningParser(
        model_type=PARSERS[case.format],
        stream_reasoning=request.stream_reasoning if stream else False,
        force_reasoning=case.thinking,
        request=request,
        tool_call_parser_active=active,
    )


def parse_whole(case: Case, request: Any, active: bool) -> dict[str, Any]:
    """The one-shot path: reasoning first (thinking on), then the tool calls."""
    text, reasoning = case.text, None
    parser = reasoning_parser(case, request, active, stream=False)
    if parser is not None:
        reasoning, text = parser.parse_non_stream(text)
    calls = []
    if active:
        parser = FunctionCallParser(
            request.tools, PARSERS[case.format], tool_choice=request.tool_choice
        )
        if parser.has_tool_call(text):
            text, items = parser.parse_non_stream(text)
            calls = [
                {
                    "id": call_id(case, i.name, i.tool_index),
                    "name": i.name,
                    "arguments": i.parameters,
                }
                for i in items
            ]
    return {"content": text or "", "reasoning": reasoning or None, "tool_calls": calls}


def parse_stream(case: Case, request: Any, active: bool) -> dict[str, Any]:
    """The streaming path: each delta through the reasoning parser, then the tool parser;
    the last delta also ends both streams."""
    reasoner = reasoning_parser(case, request, active, stream=True)
    tool_parser = None
    if active:
        tool_parser = FunctionCallParser(
            request.tools, PARSERS[case.format], tool_choice=request.tool_choice
        )
    events: list[dict[str, Any]] = []
    for n, (text, _ids) in enumerate(case.deltas):
        finished = n == len(case.deltas) - 1
        if reasoner is not None:
            thought, text = reasoner.parse_stream_chunk(text)
            if finished:
                end_reasoning, end_text = reasoner.parse_stream_end()
                thought = (thought or "") + (end_reasoning or "")
                text = (text or "") + (end_text or "")
            if thought:
                events.append({"reasoning": thought})
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
                            "id": call_id(case, i.name, i.tool_index) if i.name else None,
                            "arguments": i.parameters,
                        }
                    ]
                }
            )
    return assemble(events)
