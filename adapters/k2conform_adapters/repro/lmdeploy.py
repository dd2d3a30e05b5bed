"""lmdeploy kimi_k2 tool parser

Drives lmdeploy's default ResponseParser with the kimi_k2 tool parser as the api_server
does.
"""

from __future__ import annotations

from typing import Any

from lmdeploy.serve.openai.protocol import ChatCompletionRequest
from lmdeploy.serve.parsers import ResponseParserManager

from k2conform_adapters.repro.shared import (
    Case,
    KimiVocabulary,
    assemble,
    openai_call_deltas,
    openai_calls,
)

PACKAGE = "lmdeploy"


def run(case: Case) -> dict[str, Any]:
    """lmdeploy's message for the case, one-shot or streamed."""
    # As `lmdeploy serve api_server --tool-call-parser kimi_k2 [--reasoning-parser default]`.
    cls = ResponseParserManager.get("default")
    cls.set_parsers(
        reasoning_parser_name="default" if case.thinking else None,
        tool_parser_name="kimi_k2",
        tokenizer=KimiVocabulary(case),
    )
    request = ChatCompletionRequest(
        model="moonshotai/Kimi-K2-Instruct",
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools or None,
        tool_choice=case.tool_choice if case.tools else "none",
        chat_template_kwargs={"thinking": case.thinking},
    )
    parser = cls(request)
    if case.mode == "whole":
        content, calls, reasoning = parser.parse_complete(case.text, case.token_ids)
        return {"content": content, "reasoning": reasoning, "tool_calls": openai_calls(calls)}
    events = []
    for n, (text, token_ids) in enumerate(case.deltas):
        for message, _ in parser.stream_chunk(
            text, list(token_ids), final=n == len(case.deltas) - 1
        ):
            events.append(
                {
                    "content": message.content or None,
                    "reasoning": getattr(message, "reasoning_content", None),
                    "tool_calls": openai_call_deltas(message.tool_calls),
                }
            )
    return assemble(events)
