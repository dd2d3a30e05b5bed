"""vLLM 0.33.0's ``kimi_k2`` parser, driven the way its OpenAI chat server drives it.

What the server does (``vllm/entrypoints/openai/chat_completion/serving.py``):

* at start-up, ``ParserManager.get_parser(tool_parser_name="kimi_k2",
  reasoning_parser_name=..., enable_auto_tools=True, tokenizer=...)`` composes a
  ``DelegatingParser`` subclass around the tool-parser registry's ``KimiK2ToolParser``
  (and, with ``--reasoning-parser kimi_k2``, the ``kimi_k2`` reasoning parser);
* per request, the renderer builds one parser instance only to call ``adjust_request``
  (``renderers/online_renderer.py``), and the serving layer builds a fresh one per
  choice with ``chat_template_kwargs`` and the model config;
* one-shot: ``parser.parse(text, request, enable_auto_tools=True, token_ids)`` then
  ``assemble_chat_message_fields`` (which mints ``chatcmpl-tool-<16 hex>`` for a call
  that has no id);
* streaming: one ``ChatStreamProcessor`` per choice, ``step(delta_text, token_ids,
  finish_reason, prompt_token_ids)`` per engine output; the last output carries the
  finish reason, and ``parse_delta(..., finished=True)`` is the end-of-stream call
  (it runs ``finalize_generation`` and flushes the engine parsers'
  ``finish_streaming``).  There is no separate end call in 0.33.0.

The adapter calls exactly those objects.  Thinking on means the server was started with
``--reasoning-parser kimi_k2`` and the client sent ``chat_template_kwargs={"thinking":
true}``; thinking off means no reasoning parser and ``{"thinking": false}``.
"""

from __future__ import annotations

import re
import types
from typing import Any, Sequence

from k2conform import markers
from k2conform.adapter.contract import (
    glue_imports,
    import_parser_package,
    Adapter,
    AdapterGlueError,
    call_parser,
    require_api,
)
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

#: What the server calls the model in requests; any name works.
MODEL_NAME = "moonshotai/Kimi-K2-Instruct"
#: The rendered generation prompt's tail, ``<|im_assistant|>assistant<|im_middle|>``,
#: reduced to its marker ids: what ``parse_delta`` inspects for an open ``<think>``.
PROMPT_TOKEN_IDS = [
    markers.SPECIAL_TOKEN_IDS[markers.IM_ASSISTANT],
    markers.SPECIAL_TOKEN_IDS[markers.IM_MIDDLE],
]
#: ``make_tool_call_id()``'s random form (``chatcmpl-tool-`` + ``random_uuid()``).
RANDOM_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{16,32}$")
#: What a random id is reported as, so results stay reproducible.
MASKED_RANDOM_ID = "chatcmpl-tool-<random>"


def _mask_id(tool_id: str | None, masked: list[str]) -> str | None:
    """Random ids differ on every run; keep their shape, drop the random part."""
    if tool_id is not None and RANDOM_ID.match(tool_id):
        masked.append(tool_id)
        return MASKED_RANDOM_ID
    return tool_id


def load_kimi_tokenizer() -> Any:
    """The project's Kimi tokenizer (markers at their real ids), as vLLM's parser needs."""
    from k2conform.delivery.tokenizer import load_tokenizer

    return load_tokenizer()


class VllmAdapter(Adapter):
    """vLLM's composed ``kimi_k2`` parser (tool parser + optional reasoning parser)."""

    name = "vllm"
    package = "vllm"
    supported_versions = ("0.33.0",)
    description = "vLLM OpenAI server: --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]"

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer
        self._loaded = False

    # --- glue ---------------------------------------------------------------------------

    def load(self) -> None:
        if self._loaded:
            return
        vllm = import_parser_package("vllm")
        with glue_imports("vllm"):
            from vllm.entrypoints.openai.chat_completion import message_assembly, protocol
            from vllm.entrypoints.openai.chat_completion import stream_processor
            from vllm.parser import parser_manager
            from vllm.parser.abstract_parser import DelegatingParser
            from vllm.tool_parsers import ToolParserManager

        require_api(parser_manager, "ParserManager", owner_name="vllm.parser.parser_manager")
        manager = parser_manager.ParserManager
        require_api(manager, "get_parser", owner_name="ParserManager")
        require_api(ToolParserManager, "get_tool_parser", owner_name="ToolParserManager")
        require_api(
            DelegatingParser, "parse", "parse_delta", "adjust_request", "set_prompt_token_ids",
            owner_name="DelegatingParser",
        )
        require_api(protocol, "ChatCompletionRequest", owner_name="chat_completion.protocol")
        require_api(
            message_assembly, "assemble_chat_message_fields",
            owner_name="chat_completion.message_assembly",
        )
        require_api(
            stream_processor, "ChatStreamProcessor", owner_name="chat_completion.stream_processor"
        )
        require_api(stream_processor.ChatStreamProcessor, "step", owner_name="ChatStreamProcessor")

        if self._tokenizer is None:
            self._tokenizer = load_kimi_tokenizer()
        try:
            registered = ToolParserManager.get_tool_parser("kimi_k2")
            # As the server composes it at start-up (validates the tokenizer, too).
            self._parser_cls = {
                thinking: manager.get_parser(
                    tool_parser_name="kimi_k2",
                    reasoning_parser_name="kimi_k2" if thinking else None,
                    enable_auto_tools=True,
                    model_name=MODEL_NAME,
                    is_harmony=False,
                    tokenizer=self._tokenizer,
                )
                for thinking in (False, True)
            }
        except Exception as exc:  # noqa: BLE001 - the server would not start: glue
            raise AdapterGlueError("ParserManager.get_parser", f"{type(exc).__name__}: {exc}") from exc
        for cls in self._parser_cls.values():
            if cls is None or cls.tool_parser_cls is not registered:
                raise AdapterGlueError("ParserManager.get_parser", "did not compose kimi_k2")

        self._version = vllm.__version__
        self._request_cls = protocol.ChatCompletionRequest
        self._assemble = message_assembly.assemble_chat_message_fields
        self._processor_cls = stream_processor.ChatStreamProcessor
        # get_tool_call_id_type() reads hf_config.model_type: a Kimi K2 checkpoint says
        # "kimi_k2", which makes any id the parser itself mints ``functions.NAME:IDX``.
        self._model_config = types.SimpleNamespace(
            model=MODEL_NAME,
            hf_config=types.SimpleNamespace(model_type="kimi_k2"),
            hf_text_config=types.SimpleNamespace(model_type="kimi_k2"),
            hf_overrides={},
        )
        self._loaded = True

    def _chat_request(self, request: Request) -> Any:
        try:
            return self._request_cls(
                model=MODEL_NAME,
                messages=[{"role": "user", "content": "(conformance case)"}],
                tools=[dict(t) for t in request.tools] or None,
                tool_choice=request.tool_choice if request.tools else None,
                chat_template_kwargs={"thinking": request.thinking},
            )
        except Exception as exc:  # noqa: BLE001 - the request model rejected our glue
            raise AdapterGlueError("ChatCompletionRequest", f"{type(exc).__name__}: {exc}") from exc

    def _new_parser(self, cls: Any, chat_request: Any) -> Any:
        return call_parser(
            cls,
            self._tokenizer,
            chat_request.tools,
            chat_template_kwargs=chat_request.chat_template_kwargs,
            model_config=self._model_config,
        )

    def _prepare(self, request: Request) -> tuple[Any, Any]:
        """The request after ``adjust_request`` (on its own instance, as the renderer does)."""
        self.load()
        cls = self._parser_cls[request.thinking]
        chat_request = self._chat_request(request)
        chat_request = call_parser(self._new_parser(cls, chat_request).adjust_request, chat_request)
        return cls, chat_request

    # --- the two parse modes --------------------------------------------------------------

    def parse_whole(self, request: Request, output: Delta) -> Result:
        cls, chat_request = self._prepare(request)
        parser = self._new_parser(cls, chat_request)
        call_parser(parser.set_prompt_token_ids, PROMPT_TOKEN_IDS)
        reasoning, content, calls = call_parser(
            parser.parse,
            output.text,
            chat_request,
            enable_auto_tools=True,
            model_output_token_ids=list(output.token_ids),
        )
        fields = call_parser(
            self._assemble, chat_request, reasoning, content, calls,
            enable_auto_tools=True, parser_cls=cls,
        )
        masked: list[str] = []
        tool_calls = tuple(
            ToolCall(
                name=tc.function.name,
                arguments=tc.function.arguments,
                id=_mask_id(tc.id, masked),
            )
            for tc in fields.tool_calls
        )
        meta: dict[str, Any] = {"version": self._version}
        if masked:
            meta["masked_random_ids"] = len(masked)
        return Result(
            content=fields.content, reasoning=fields.reasoning, tool_calls=tool_calls, meta=meta
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        """One event per non-empty ``DeltaMessage``; the last delta carries ``finish_reason``."""
        cls, chat_request = self._prepare(request)
        processor = self._processor_cls(
            chat_request,
            self._new_parser(cls, chat_request),
            enable_auto_tools=True,
            parser_cls=cls,
        )
        steps = list(deltas) or [Delta("")]
        events: list[StreamEvent] = []
        masked: list[str] = []
        for n, delta in enumerate(steps):
            finish_reason = "stop" if n == len(steps) - 1 else None
            step = call_parser(
                processor.step, delta.text, list(delta.token_ids), finish_reason, PROMPT_TOKEN_IDS
            )
            event = _to_event(step.delta, masked)
            if event is not None:
                events.append(event)
        return events

    def repro_script(self, request: Request, deltas: Sequence[Delta], mode: str, *,
                     expected: dict | None = None, case_id: str = "case") -> str:
        """A standalone script that drives vllm the same way, importing only vllm
        (for ``k2conform report-finding``; templates in k2conform_adapters._repro)."""
        from k2conform_adapters._repro import vllm_script

        return vllm_script(request, deltas, mode, expected, case_id)


def _to_event(message: Any, masked: list[str]) -> StreamEvent | None:
    """A ``DeltaMessage`` as a ``StreamEvent``; None for a message with nothing in it
    (the server still sends the final chunk then, only to carry ``finish_reason``)."""
    if message is None:
        return None
    calls = tuple(
        ToolCallDelta(
            index=tc.index,
            id=_mask_id(tc.id, masked),
            name=tc.function.name if tc.function else None,
            arguments=tc.function.arguments if tc.function else None,
        )
        for tc in (message.tool_calls or ())
    )
    if message.content is None and message.reasoning is None and not calls:
        return None
    return StreamEvent(content=message.content, reasoning=message.reasoning, tool_calls=calls)
