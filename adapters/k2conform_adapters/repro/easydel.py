"""easydel kimi_k2 tool parser (eSurge server)

Drives easydel's KimiK2ToolParser behind eSurge's DelegatingParser as its OpenAI server does:
process_final on the whole output one-shot; process_delta per delta then process_final when
streaming, each chunk as stream_protocol builds it.  easydel's package __init__ files (they
import JAX) are skipped, eformer.loggings (it imports JAX) is logging.getLogger; the tokenizer
matches the case's own tokens and Kimi's special tokens greedily.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import pathlib
import sys
import types
from typing import Any

from k2conform_adapters.repro.shared import (
    Case,
    KimiVocabulary,
    assemble,
    openai_call_deltas,
    openai_calls,
)

PACKAGE = "easydel"
SHELLS = (
    "",
    "inference",
    "inference/tools",
    "inference/tools/parsers",
    "inference/reasoning",
    "inference/reasoning/parsers",
    "inference/parsing",
)


def import_parser_modules() -> dict[str, Any]:
    """The Kimi path's modules of the installed easydel, its package __init__ files skipped."""
    root = pathlib.Path(next(iter(importlib.util.find_spec("easydel").submodule_search_locations)))
    for sub in SHELLS:
        shell = types.ModuleType(".".join(["easydel", *filter(None, sub.split("/"))]))
        shell.__path__ = [str(root / sub)]
        sys.modules.setdefault(shell.__name__, shell)
    loggings = types.ModuleType("eformer.loggings")
    loggings.get_logger = logging.getLogger
    sys.modules.setdefault("eformer", types.ModuleType("eformer"))
    sys.modules.setdefault("eformer.loggings", loggings)
    names = (
        "tools.parsers.kimi_k2_tool_parser",
        "reasoning.parsers.deepseek_v3_reasoning_parser",
        "parsing.delegating_parser",
        "stream_protocol",
        "openai_api_modules",
    )
    return {n.rsplit(".", 1)[-1]: importlib.import_module(f"easydel.inference.{n}") for n in names}


modules = import_parser_modules()


class Tokenizer(KimiVocabulary):
    """The model tokenizer the parsers read: the vocabulary and a greedy encode."""

    chat_template = ""

    def __init__(self, case: Case) -> None:
        super().__init__(case)
        self._pieces = {**{t: i for i, t in case.token_text.items() if t}, **case.special_tokens}
        self._longest = max(map(len, self._pieces), default=1)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        ids, at = [], 0
        while at < len(text):
            size = next(
                (
                    n
                    for n in range(min(self._longest, len(text) - at), 0, -1)
                    if text[at : at + n] in self._pieces
                ),
                0,
            )
            ids.append(self._pieces[text[at : at + size]] if size else ord(text[at]))
            at += size or 1
        return ids


def run(case: Case) -> dict[str, Any]:
    """eSurge's message for the case, one-shot or streamed."""
    tokenizer = Tokenizer(case)
    prompt = "<|im_assistant|>assistant<|im_middle|>" + ("<think>" if case.thinking else "")
    reasoning = modules["deepseek_v3_reasoning_parser"].DeepSeekV3ReasoningParser(tokenizer)
    reasoning.configure_prompt_context(prompt, tokenizer.encode(prompt))
    request = (
        modules["openai_api_modules"].ChatCompletionRequest(
            model="moonshotai/Kimi-K2-Instruct",
            messages=[{"role": "user", "content": "hi"}],
            tools=case.tools,
            tool_choice=case.tool_choice,
        )
        if case.tools
        else None
    )
    parser = modules["delegating_parser"].DelegatingParser(
        reasoning_parser=reasoning,
        tool_request=request,
        tool_parser=modules["kimi_k2_tool_parser"].KimiK2ToolParser(tokenizer),
    )
    if case.mode == "whole":
        result = parser.process_final(case.text, case.token_ids)
        calls = openai_calls(result.tool_calls)
        return {
            "content": None if calls else result.accumulated_content,
            "reasoning": result.accumulated_reasoning or None,
            "tool_calls": calls,
        }
    text, ids, seen, events = "", [], {"content": "", "reasoning": ""}, []
    for delta_text, delta_ids in case.deltas:
        previous, previous_ids = text, ids
        text, ids = text + delta_text, ids + list(delta_ids)
        events.append(
            chunk(parser.process_delta(text, delta_text, ids, previous, previous_ids), seen)
        )
    events.append(chunk(parser.process_final(text, ids), seen))
    return assemble(events)


def chunk(result: Any, seen: dict[str, str]) -> dict[str, Any]:
    """One snapshot's chunk: _update_outputs' and stream()'s text deltas, then
    iter_chat_completion_stream_responses' message."""
    protocol = modules["stream_protocol"]
    content = result.accumulated_content or ""
    step = protocol.compute_stream_delta_text(content, seen["content"], result.delta_content or "")
    content_delta = protocol.compute_stream_delta_text(content, seen["content"], step)
    thought = result.accumulated_reasoning or ""
    thought_delta = protocol.compute_stream_delta_text(
        thought, seen["reasoning"], result.delta_reasoning or ""
    )
    seen.update(content=content, reasoning=thought)
    message = protocol.coerce_stream_delta_message(
        modules["openai_api_modules"].DeltaMessage(
            role="assistant",
            content=content_delta or None,
            reasoning_content=thought_delta or None,
            tool_calls=protocol.normalize_delta_tool_calls(result.delta_tool_calls),
        ),
        fallback_text=content_delta,
        default_role="assistant",
    )
    return {
        "content": message.content,
        "reasoning": message.reasoning_content,
        "tool_calls": openai_call_deltas(message.tool_calls),
    }
