"""vLLM Kimi tool parser (kimi_k2, or kimi_k3 for a K3 output)

Drives vLLM's composed Kimi parser as the OpenAI server does (ParserManager,
ChatStreamProcessor): kimi_k2, or kimi_k3 for a Kimi K3 output.
"""

from __future__ import annotations

import types
from typing import Any

from vllm.entrypoints.openai.chat_completion import message_assembly, protocol, stream_processor
from vllm.parser.parser_manager import ParserManager

from k2conform_adapters.repro.shared import (
    Case,
    KimiVocabulary,
    assemble,
    openai_call_deltas,
    openai_calls,
)

PACKAGE = "vllm"
MODEL = "moonshotai/Kimi-K2-Instruct"
#: The tool and reasoning parsers (and the model type) per Kimi format.
PARSERS = {"k2": "kimi_k2", "k3": "kimi_k3"}


def model_config(parser: str) -> Any:
    """get_tool_call_id_type() reads hf_config.model_type: "kimi_k2" makes ids
    functions.NAME:IDX."""
    return types.SimpleNamespace(
        model=MODEL,
        hf_config=types.SimpleNamespace(model_type=parser),
        hf_text_config=types.SimpleNamespace(model_type=parser),
        hf_overrides={},
    )


def run(case: Case) -> dict[str, Any]:
    """vLLM's message for the case, one-shot or streamed."""
    tokenizer = KimiVocabulary(case)
    parser = PARSERS[case.format]
    # As `vllm serve --tool-call-parser kimi_k2 --reasoning-parser kimi_k2` composes it (the
    # request's `thinking` reaches the parser through chat_template_kwargs).
    cls = ParserManager.get_parser(
        tool_parser_name=parser,
        reasoning_parser_name=parser,
        enable_auto_tools=True,
        model_name=MODEL,
        is_harmony=False,
        tokenizer=tokenizer,
    )
    request = protocol.ChatCompletionRequest(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools or None,
        tool_choice=case.tool_choice if case.tools else None,
        chat_template_kwargs={"thinking": case.thinking},
    )
    # The renderer adjusts the request on a parser of its own, as the server does.
    config = model_config(parser)
    request = new_parser(cls, tokenizer, request, config).adjust_request(request)
    if case.format == "k3":  # the generation prompt opens the think (or response) channel
        channel = "think" if case.thinking else "response"
        prompt_ids = tokenizer.encode(f"<|open|>{channel}<|sep|>", add_special_tokens=False)
    else:  # the generation prompt's tail: <|im_assistant|>, <|im_middle|>
        prompt_ids = [case.special_tokens[t] for t in ("<|im_assistant|>", "<|im_middle|>")]
    chosen = new_parser(cls, tokenizer, request, config)
    if case.mode == "whole":
        return parse_whole(case, cls, chosen, request, prompt_ids)
    return parse_stream(case, cls, chosen, request, prompt_ids)


def new_parser(cls: Any, tokenizer: KimiVocabulary, request: Any, config: Any) -> Any:
    """A fresh parser per choice, with the request's tools and template kwargs."""
    return cls(
        tokenizer,
        request.tools,
        chat_template_kwargs=request.chat_template_kwargs,
        model_config=config,
    )


def parse_whole(
    case: Case, cls: Any, parser: Any, request: Any, prompt_ids: list[int]
) -> dict[str, Any]:
    """The one-shot path: parse, then assemble the chat message fields."""
    parser.set_prompt_token_ids(prompt_ids)
    reasoning, content, calls = parser.parse(
        case.text, request, enable_auto_tools=True, model_output_token_ids=case.token_ids
    )
    # chat_completion_full_generator counts the reasoning tokens right after parse.
    parser.count_reasoning_tokens(list(case.token_ids))
    fields = message_assembly.assemble_chat_message_fields(
        request, reasoning, content, calls, enable_auto_tools=True, parser_cls=cls
    )
    return {
        "content": fields.content,
        "reasoning": fields.reasoning,
        "tool_calls": openai_calls(fields.tool_calls),
    }


def parse_stream(
    case: Case, cls: Any, parser: Any, request: Any, prompt_ids: list[int]
) -> dict[str, Any]:
    """The streaming path: one step per delta, the last one carrying the finish reason."""
    processor = stream_processor.ChatStreamProcessor(
        request, parser, enable_auto_tools=True, parser_cls=cls
    )
    events = []
    for n, (text, token_ids) in enumerate(case.deltas):
        finish_reason = "stop" if n == len(case.deltas) - 1 else None
        message = processor.step(text, list(token_ids), finish_reason, prompt_ids).delta
        if message is None:
            continue
        events.append(
            {
                "content": message.content,
                "reasoning": message.reasoning,
                "tool_calls": openai_call_deltas(message.tool_calls),
            }
        )
    generated = [i for _, token_ids in case.deltas for i in token_ids]
    if generated:  # with a reasoning parser, the server counts after the last output
        parser.count_reasoning_tokens(tuple(generated))
    return assemble(events)
