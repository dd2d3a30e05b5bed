"""easydel 0.3.0's ``kimi_k2`` tool parser, driven the way its eSurge OpenAI server drives it.

What the server does:

* at start-up (``easydel/inference/esurge/esurge_engine.py``): the tool parser class is
  ``ToolParserManager.get_tool_parser("kimi_k2")`` and, auto-detected for a Kimi model,
  the reasoning parser class ``ReasoningParserManager.get_reasoning_parser("kimi_k2")``
  (``DeepSeekV3ReasoningParser``: ``<think>``/``</think>`` when the chat template or the
  prompt starts reasoning, a pass-through otherwise);
* per request (``esurge/mixins/requests.py``, ``_add_request``): both parsers are built
  on the model's tokenizer, the reasoning parser gets ``configure_prompt_context(prompt,
  prompt_ids)`` (a prompt ending in ``<think>`` starts inside reasoning: thinking on),
  and ``DelegatingParser(reasoning_parser, tool_parser, tool_request)`` is the request's
  parser; ``tool_request`` is ``_build_tool_parser_request`` (``esurge/mixins/io.py``):
  ``None`` when the request has neither tools nor tool_choice;
* per decode step (``esurge/mixins/parsing.py``): ``process_delta(text, delta, ids,
  prev_text, prev_ids)``; the finishing step calls ``process_final(text, ids)`` instead
  (the EOS token adds no text); ``_update_outputs`` and ``stream()`` (``mixins/io.py``)
  turn each result into a snapshot whose text deltas are ``compute_stream_delta_text``
  of the accumulated content and reasoning;
* streaming (``stream_protocol.iter_chat_completion_stream_responses``): one chunk per
  snapshot, ``coerce_stream_delta_message`` of its deltas (content dropped when the chunk
  carries tool calls); one-shot (``esurge/server/api_server.py``,
  ``_build_chat_completion_response``): ``content=None`` and the tool calls when there
  are any, the accumulated content otherwise.  A one-shot output the engine finished
  before its first decode interval reaches ``process_final`` alone, as here.

``import easydel`` (and each sub-package's ``__init__``) imports JAX, flax and ray, so the
adapter imports the parser's modules with two stubs that keep their code intact:

* the packages ``easydel``, ``easydel.inference`` and the sub-packages on the way are
  empty package modules pointing at the installed folders: their ``__init__`` files (the
  JAX imports and every other model's parser) are not run, each module the Kimi path
  imports is the release's own file;
* ``eformer.loggings`` (``get_logger``, which imports JAX for ``process_index``) is
  ``logging.getLogger``: the Kimi parser only logs through it.

The tokenizer is k2conform's stand-in Kimi tokenizer (``get_vocab`` for the marker ids,
``encode`` for the tool parser's re-tokenised view of the text).
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

from k2conform import markers
from k2conform.adapter import glue
from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    call_parser,
    glue_imports,
    require_api,
)
from k2conform.model import Delta, Request, Result, StreamEvent

from k2conform_adapters.reproducible import Reproducible

PARSER = "kimi_k2"
#: What ``add_generation_prompt`` leaves at the end of a Kimi prompt.
GENERATION_PROMPT = f"{markers.IM_ASSISTANT}assistant{markers.IM_MIDDLE}"
#: The sub-packages whose ``__init__`` is skipped, and the modules the Kimi path imports.
SHELLS = (
    "",
    "inference",
    "inference.tools",
    "inference.tools.parsers",
    "inference.reasoning",
    "inference.reasoning.parsers",
    "inference.parsing",
)
#: The modules the Kimi path imports (under easydel.inference), and what the glue takes from each.
MODULES = {
    "tools.parsers.kimi_k2_tool_parser": (),
    "reasoning.parsers.deepseek_v3_reasoning_parser": (),
    "tools.abstract_tool": ("ToolParserManager",),
    "reasoning.abstract_reasoning": ("ReasoningParserManager",),
    "parsing.delegating_parser": ("DelegatingParser",),
    "stream_protocol": (
        "compute_stream_delta_text",
        "coerce_stream_delta_message",
        "normalize_delta_tool_calls",
    ),
    "openai_api_modules": ("ChatCompletionRequest", "DeltaMessage"),
}


def _install_stubs(root: Path) -> None:
    """The package shells and ``eformer.loggings`` (see the module docstring)."""
    for sub in SHELLS:
        name = ".".join(filter(None, ("easydel", sub)))
        folder = root.joinpath(*sub.split(".")) if sub else root
        shell = types.ModuleType(name)
        shell.__path__ = [str(folder)]
        shell.__spec__ = ModuleSpec(name, None, is_package=True)
        shell.__spec__.submodule_search_locations = shell.__path__
        sys.modules.setdefault(name, shell)
    loggings = types.ModuleType("eformer.loggings")
    loggings.get_logger = logging.getLogger
    sys.modules.setdefault("eformer", types.ModuleType("eformer"))
    sys.modules.setdefault("eformer.loggings", loggings)


class EasydelAdapter(Reproducible, Adapter):
    """easydel's ``KimiK2ToolParser`` behind eSurge's ``DelegatingParser``."""

    repro_driver = "easydel"
    name = "easydel"
    package = "easydel"
    supported_versions = ("0.3.0",)
    description = "easydel eSurge server: tool_parser kimi_k2, reasoning_parser kimi_k2 (auto)"
    coverage_files = ("easydel/inference/tools/parsers/kimi_k2_tool_parser.py",)
    coverage_shared_files = ("easydel/inference/parsing/delegating_parser.py",)
    #: The DelegatingParser tokenises the whole accumulated text again on every delta
    #: (``delegating_parser.py:629-649``, ``_tokenize_for_tool_view``): a 10,000-token argument
    #: streams in 27 s on one core, so the 20 s default would judge the machine's load, not
    #: the parser.  Its cells get 300 s (and the usual slower retry).
    cell_timeout = 300.0

    @glue.load_once
    def load(self) -> None:
        root = glue.package_dir("easydel", "easydel")
        _install_stubs(root)
        with glue_imports("easydel"):
            modules = {m: importlib.import_module(f"easydel.inference.{m}") for m in MODULES}
        for module, names in MODULES.items():
            require_api(modules[module], *names, owner_name=module)
        try:
            tools = modules["tools.abstract_tool"].ToolParserManager
            reasoning = modules["reasoning.abstract_reasoning"].ReasoningParserManager
            self._tool_cls = tools.get_tool_parser(PARSER)
            self._reasoning_cls = reasoning.get_reasoning_parser(PARSER)
        except KeyError as exc:
            raise AdapterGlueError(f"ParserManager[{PARSER!r}]", "not registered") from exc
        self._delegating_cls = modules["parsing.delegating_parser"].DelegatingParser
        require_api(
            self._delegating_cls, "process_delta", "process_final", owner_name="DelegatingParser"
        )
        self._api, self._protocol = modules["openai_api_modules"], modules["stream_protocol"]
        from k2conform.delivery.tokenizer import load_tokenizer

        self._tokenizer = load_tokenizer()

    def _parser(self, request: Request) -> Any:
        """``_add_request``: the request's ``DelegatingParser``."""
        self.load()
        prompt = GENERATION_PROMPT + (markers.THINK_BEGIN if request.thinking else "")
        reasoning = call_parser(self._reasoning_cls, self._tokenizer)
        call_parser(reasoning.configure_prompt_context, prompt, self._tokenizer.encode(prompt))
        tool_request = (
            glue.build_chat_request(
                self._api.ChatCompletionRequest,
                request,
                choice_without_tools=None,
                template_kwargs=False,
            )
            if request.tools
            else None
        )
        return call_parser(
            self._delegating_cls,
            reasoning_parser=reasoning,
            tool_parser=call_parser(self._tool_cls, self._tokenizer),
            tool_request=tool_request,
        )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        parsed = call_parser(
            self._parser(request).process_final, output.text, list(output.token_ids)
        )
        calls = glue.tool_calls_of(parsed.tool_calls, glue.RandomIds.chatcmpl())
        return Result(
            content=None if calls else parsed.accumulated_content,
            reasoning=parsed.accumulated_reasoning or None,
            tool_calls=calls,
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = self._parser(request)
        text, ids = "", []
        seen = {"content": "", "reasoning": ""}
        events = []
        for delta in deltas:
            previous, previous_ids = text, ids
            text, ids = text + delta.text, ids + list(delta.token_ids)
            parsed = call_parser(
                parser.process_delta, text, delta.text, ids, previous, previous_ids
            )
            events.append(self._chunk(parsed, seen))
        events.append(self._chunk(call_parser(parser.process_final, text, ids), seen))
        return [event for event in events if event is not None]

    def _chunk(self, parsed: Any, seen: dict[str, str]) -> StreamEvent | None:
        """One snapshot's chunk: the content delta as ``_update_outputs`` then ``stream()``
        take it, the reasoning delta as ``stream()`` does, then
        ``iter_chat_completion_stream_responses``'s message."""
        delta_text = self._protocol.compute_stream_delta_text
        content = parsed.accumulated_content or ""
        step = call_parser(delta_text, content, seen["content"], parsed.delta_content or "")
        content_delta = call_parser(delta_text, content, seen["content"], step)
        reasoning = parsed.accumulated_reasoning or ""
        reasoning_delta = call_parser(
            delta_text, reasoning, seen["reasoning"], parsed.delta_reasoning or ""
        )
        seen.update(content=content, reasoning=reasoning)
        message = call_parser(
            self._protocol.coerce_stream_delta_message,
            self._api.DeltaMessage(
                role="assistant",
                content=content_delta or None,
                reasoning_content=reasoning_delta or None,
                tool_calls=call_parser(
                    self._protocol.normalize_delta_tool_calls, parsed.delta_tool_calls
                ),
            ),
            fallback_text=content_delta,
            default_role="assistant",
        )
        return glue.event_of(
            message, glue.RandomIds.chatcmpl(), reasoning_field="reasoning_content"
        )
