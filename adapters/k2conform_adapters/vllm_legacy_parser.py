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
so such cases are ``adapter-error`` here: there is no parser behaviour to test.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from k2conform.adapter.contract import Adapter, AdapterGlueError, AdapterUnavailable, call_parser, require_api, glue_imports, import_parser_package
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta
from k2conform_adapters.vllm_parser import MODEL_NAME, _mask_id, load_kimi_tokenizer


#: The release series whose server drove the regex-based KimiK2ToolParser this way.
LEGACY_SERIES = ("0.10.", "0.11.")


class VllmLegacyAdapter(Adapter):
    name = "vllm-legacy"
    package = "vllm"
    supported_versions = ("0.10.0", "0.10.1", "0.10.1.1", "0.10.2", "0.11.0")
    description = "vLLM 0.10-0.11 OpenAI server: --tool-call-parser kimi_k2 (the regex-based parser)"

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer
        self._loaded = False

    def load(self) -> None:
        if self._loaded:
            return
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
        require_api(protocol, "ChatCompletionRequest", owner_name="vllm.entrypoints.openai.protocol")
        require_api(ToolParserManager, "get_tool_parser", owner_name="ToolParserManager")
        try:
            self._parser_cls = ToolParserManager.get_tool_parser("kimi_k2")
        except KeyError as exc:
            raise AdapterGlueError("ToolParserManager.get_tool_parser('kimi_k2')", str(exc)) from exc
        require_api(self._parser_cls, "extract_tool_calls", "extract_tool_calls_streaming", "adjust_request",
                    owner_name="KimiK2ToolParser")
        if self._tokenizer is None:
            self._tokenizer = load_kimi_tokenizer()
        self._request_cls = protocol.ChatCompletionRequest
        self._version = vllm.__version__
        self._loaded = True

    def _chat_request(self, request: Request) -> Any:
        if not isinstance(request.tool_choice, str) or request.tool_choice == "required":
            raise AdapterGlueError(
                f"tool_choice {json.dumps(request.tool_choice)}",
                "vLLM 0.11 answers it with structured outputs, not the kimi_k2 parser",
            )
        try:
            return self._request_cls(
                model=MODEL_NAME,
                messages=[{"role": "user", "content": "(conformance case)"}],
                tools=[dict(t) for t in request.tools] or None,
                tool_choice=request.tool_choice if request.tools else None,
            )
        except Exception as exc:  # noqa: BLE001 - the request model rejected our glue
            raise AdapterGlueError("ChatCompletionRequest", f"{type(exc).__name__}: {exc}") from exc

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
        masked: list[str] = []
        if info.tools_called:
            calls = tuple(
                ToolCall(name=tc.function.name, arguments=tc.function.arguments, id=_mask_id(tc.id, masked))
                for tc in info.tool_calls
            )
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
        masked: list[str] = []
        for n, delta in enumerate(steps):
            last = n == len(steps) - 1
            current_text = previous_text + delta.text
            current_ids = previous_ids + list(delta.token_ids)
            message = call_parser(
                parser.extract_tool_calls_streaming,
                previous_text=previous_text, current_text=current_text, delta_text=delta.text,
                previous_token_ids=previous_ids, current_token_ids=current_ids,
                delta_token_ids=list(delta.token_ids), request=chat_request,
            )
            previous_text, previous_ids = current_text, current_ids
            if last and message is not None and message.tool_calls and message.tool_calls[0].function \
                    and message.tool_calls[0].function.arguments is not None:
                message = self._unstreamed_args(parser, message)
            event = _to_event(message, masked)
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
        expected_call = json.dumps(parser.prev_tool_call_arr[index].get("arguments", {}), ensure_ascii=False)
        actual_call = parser.streamed_args_for_tool[index]
        if latest_len > 0:
            actual_call = actual_call[:-latest_len]
        remaining = expected_call.replace(actual_call, "", 1)
        return DeltaMessage(tool_calls=[DeltaToolCall(
            index=index, function=DeltaFunctionCall(arguments=remaining).model_dump(exclude_none=True))])


def _to_event(message: Any, masked: list[str]) -> StreamEvent | None:
    if message is None:
        return None
    calls = []
    for tc in message.tool_calls or ():
        function = tc.function
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
        elif function is not None:
            name, arguments = function.name, function.arguments
        else:
            name = arguments = None
        calls.append(ToolCallDelta(index=tc.index, id=_mask_id(tc.id, masked), name=name, arguments=arguments))
    content = message.content
    reasoning = getattr(message, "reasoning_content", None)
    if content is None and reasoning is None and not calls:
        return None
    return StreamEvent(content=content, reasoning=reasoning, tool_calls=tuple(calls))
