"""vLLM 0.10.x–0.11.x's regex-based ``kimi_k2`` tool parser, driven the way that server did.

Minimal glue for the release gate (another environment, served over the adapter protocol
with ``k2conform serve-adapter vllm-legacy``); the 0.33 glue (``vllm``) does not fit these
releases, whose parser lives in ``vllm.entrypoints.openai.tool_parsers`` and is called
directly by ``OpenAIServingChat`` (``entrypoints/openai/serving_chat.py`` of 0.11.0):

* at start-up ``ToolParserManager.get_tool_parser("kimi_k2")``; per request
  ``tool_parser(tokenizer).adjust_request(request)`` (``serving_engine._preprocess_chat``);
* one-shot (``chat_completion_full_generator``), tool_choice ``auto`` with tools: a fresh
  parser's ``extract_tool_calls(text, request)``; when it reports ``tools_called`` the message
  is its ``content`` and ``tool_calls``, otherwise its content if non-empty, else the text.
  tool_choice ``none`` or no tools: the text is the content;
* streaming (``chat_completion_stream_generator``), tool_choice ``auto`` with tools: one
  parser per choice, ``extract_tool_calls_streaming(previous_text, current_text, delta_text,
  previous_token_ids, current_token_ids, delta_token_ids, request)`` per engine output; on
  the last output (the one with ``finish_reason``), when that delta carries arguments, the
  server's "unstreamed tool arg tokens" check appends what ``prev_tool_call_arr`` holds
  beyond ``streamed_args_for_tool``; otherwise every delta is plain content.

These releases have no ``kimi_k2`` reasoning parser, so ``thinking`` changes nothing: a
``<think>`` block stays in the text the tool parser sees.  A named or ``required``
tool_choice is answered with structured outputs (guided JSON), not with the kimi_k2 parser,
so such cases are ``unavailable`` here (as for ``sglang-kt``): there is no parser behaviour to
test, and the adapter's glue is not at fault.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import RandomIds, build_chat_request, event_of, load_once, tool_calls_of
from k2conform.model import Delta, Request, Result, StreamEvent

from k2conform_adapters.vllm_parser import load_kimi_tokenizer

#: The release series whose server drove the regex-based KimiK2ToolParser this way.
LEGACY_SERIES = ("0.10.", "0.11.")


class VllmLegacyAdapter(Adapter):
    name = "vllm-legacy"
    package = "vllm"
    supported_versions = ("0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0")
    description = (
        "vLLM 0.10-0.11 OpenAI server: --tool-call-parser kimi_k2 (the regex-based parser)"
    )

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer

    @load_once
    def load(self) -> None:
        installed = self.version()
        if installed is not None and not installed.startswith(LEGACY_SERIES):
            raise AdapterUnavailable(
                f"vllm {installed} is installed here; the regex-based kimi_k2 parser is in vllm "
                f"{'/'.join(s.rstrip('.') for s in LEGACY_SERIES)}: run it in its own environment "
                "with --adapter 'cmd:/that/venv/bin/k2conform serve-adapter vllm-legacy'"
            )
        vllm = import_parser_package("vllm")
        with glue_imports("vllm (0.10/0.11)"):
            from vllm.entrypoints.openai import protocol
            from vllm.entrypoints.openai.tool_parsers import ToolParserManager
        require_api(
            protocol, "ChatCompletionRequest", owner_name="vllm.entrypoints.openai.protocol"
        )
        require_api(ToolParserManager, "get_tool_parser", owner_name="ToolParserManager")
        try:
            self._parser_cls = ToolParserManager.get_tool_parser("kimi_k2")
        except KeyError as exc:
            raise AdapterGlueError(
                "ToolParserManager.get_tool_parser('kimi_k2')", str(exc)
            ) from exc
        require_api(
            self._parser_cls,
            "extract_tool_calls",
            "extract_tool_calls_streaming",
            "adjust_request",
            owner_name="KimiK2ToolParser",
        )
        if self._tokenizer is None:
            self._tokenizer = load_kimi_tokenizer()
        self._request_cls = protocol.ChatCompletionRequest
        self._version = vllm.__version__

    def _chat_request(self, request: Request) -> Any:
        if not isinstance(request.tool_choice, str) or request.tool_choice == "required":
            raise AdapterUnavailable(
                f"tool_choice {json.dumps(request.tool_choice)}: vLLM 0.11 answers it with "
                "structured outputs, not the kimi_k2 parser"
            )
        # These releases read no thinking switch: no chat_template_kwargs.
        return build_chat_request(
            self._request_cls, request, choice_without_tools=None, template_kwargs=False
        )

    def _prepare(self, request: Request) -> tuple[Any, bool]:
        self.load()
        chat_request = self._chat_request(request)
        auto = bool(chat_request.tools) and chat_request.tool_choice in ("auto", None)
        if chat_request.tool_choice != "none":
            parser = call_parser(self._parser_cls, self._tokenizer)
            chat_request = call_parser(parser.adjust_request, request=chat_request)
        return chat_request, auto

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat_request, auto = self._prepare(request)
        meta = {"version": self._version}
        if not auto:
            return Result(content=output.text, meta=meta)
        parser = call_parser(self._parser_cls, self._tokenizer)
        info = call_parser(parser.extract_tool_calls, output.text, request=chat_request)
        if info.tools_called:
            calls = tool_calls_of(info.tool_calls, RandomIds.chatcmpl())
            return Result(content=info.content, tool_calls=calls, meta=meta)
        content = info.content if info.content else output.text
        return Result(content=content, meta=meta)

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        chat_request, auto = self._prepare(request)
        steps = list(deltas) or [Delta("")]
        if not auto:
            return [StreamEvent(content=d.text) for d in steps if d.text]
        parser = call_parser(self._parser_cls, self._tokenizer)
        previous_text, previous_ids = "", []
        events: list[StreamEvent] = []
        ids = RandomIds.chatcmpl()
        for n, delta in enumerate(steps):
            last = n == len(steps) - 1
            current_text = previous_text + delta.text
            current_ids = previous_ids + list(delta.token_ids)
            message = call_parser(
                parser.extract_tool_calls_streaming,
                previous_text=previous_text,
                current_text=current_text,
                delta_text=delta.text,
                previous_token_ids=previous_ids,
                current_token_ids=current_ids,
                delta_token_ids=list(delta.token_ids),
                request=chat_request,
            )
            previous_text, previous_ids = current_text, current_ids
            if (
                last
                and message is not None
                and message.tool_calls
                and message.tool_calls[0].function
                and message.tool_calls[0].function.arguments is not None
            ):
                message = self._unstreamed_args(parser, message)
            event = event_of(message, ids, reasoning_field="reasoning_content")
            if event is not None:
                events.append(event)
        return events

    @staticmethod
    def _unstreamed_args(parser: Any, message: Any) -> Any:
        """The 0.11 server's end-of-stream step: send what partial-JSON parsing autocompleted."""
        from vllm.entrypoints.openai.protocol import DeltaFunctionCall, DeltaMessage, DeltaToolCall

        called = len(parser.prev_tool_call_arr) > 0
        index = len(parser.prev_tool_call_arr) - 1 if called else 0
        latest = message.tool_calls[0].function.arguments
        latest_len = len(latest) if isinstance(latest, str) else 0
        expected_call = json.dumps(
            parser.prev_tool_call_arr[index].get("arguments", {}), ensure_ascii=False
        )
        actual_call = parser.streamed_args_for_tool[index]
        if latest_len > 0:
            actual_call = actual_call[:-latest_len]
        remaining = expected_call.replace(actual_call, "", 1)
        return DeltaMessage(
            tool_calls=[
                DeltaToolCall(
                    index=index,
                    function=DeltaFunctionCall(arguments=remaining).model_dump(exclude_none=True),
                )
            ]
        )
