"""SGLang's Kimi K3 parsers as its OpenAI server composes them (``--tool-call-parser kimi_k3
--reasoning-parser kimi_k3``), SGLang 0.5.23.

``serving_chat.py`` has no chat-encoding adapter for ``kimi_k3``, so a reply takes the same
branches as any model's: ``ReasoningParser("kimi_k3")`` when ``separate_reasoning`` (reasoning
forced unless ``chat_template_kwargs.thinking`` is False: the detector's
``reasoning_default="thinking"``, ``_get_reasoning_from_request``), then, with tools declared
and ``tool_choice`` not "none", ``FunctionCallParser(tools, "kimi_k3")`` when
``has_tool_call``; each call's id is ``NAME:<calls in the history + tool_index>``
(``_process_tool_call_id``).  A stream feeds both parsers chunk by chunk and ends them with
``parse_stream_end``.  Neither parser needs a tokenizer.
"""

from __future__ import annotations

from typing import Any

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    StreamStep,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import build_chat_request, load_once
from k2conform.k3 import markers as k3
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

from k2conform_adapters.reproducible import Reproducible

PARSER = "kimi_k3"


class SglangK3Adapter(Reproducible, Adapter):
    name = "sglang-k3"
    #: repro/sglang.py drives kimi_k3 for a K3 output
    repro_driver = "sglang"
    package = "sglang"
    supported_versions = ("0.5.23",)
    formats = (k3.FORMAT,)
    description = "SGLang server: --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
    coverage_files = (
        "sglang/srt/function_call/kimik3_detector.py",
        "sglang/srt/function_call/kimik3_format.py",
    )
    coverage_shared_files = (
        "sglang/srt/function_call/base_format_detector.py",
        "sglang/srt/function_call/function_call_parser.py",
        "sglang/srt/parser/reasoning_parser.py",
    )
    serving_files = ("sglang/srt/entrypoints/openai/serving_chat.py",)

    @load_once
    def load(self) -> None:
        sglang = import_parser_package("sglang")
        self._version = sglang.__version__
        with glue_imports("sglang"):
            from sglang.srt.entrypoints.openai import protocol
            from sglang.srt.function_call.function_call_parser import FunctionCallParser
            from sglang.srt.parser.reasoning_parser import ReasoningParser
        require_api(
            FunctionCallParser,
            "has_tool_call",
            "parse_non_stream",
            "parse_stream_chunk",
            "parse_stream_end",
            owner_name="FunctionCallParser",
        )
        require_api(
            ReasoningParser,
            "parse_non_stream",
            "parse_stream_chunk",
            "parse_stream_end",
            owner_name="ReasoningParser",
        )
        if PARSER not in FunctionCallParser.ToolCallParserEnum:
            raise AdapterGlueError("FunctionCallParser.ToolCallParserEnum['kimi_k3']", "missing")
        if PARSER not in ReasoningParser.DetectorMap:
            raise AdapterGlueError("ReasoningParser.DetectorMap['kimi_k3']", "missing")
        self._fcp_cls, self._rp_cls = FunctionCallParser, ReasoningParser
        self._request_cls = protocol.ChatCompletionRequest

    def _chat_request(self, request: Request) -> Any:
        self.load()
        return build_chat_request(self._request_cls, request, choice_without_tools="none")

    def _reasoning_parser(self, chat_request: Any, *, stream: bool) -> Any | None:
        if not chat_request.separate_reasoning:
            return None
        thinking = (chat_request.chat_template_kwargs or {}).get("thinking") is not False
        return call_parser(
            self._rp_cls,
            model_type=PARSER,
            stream_reasoning=chat_request.stream_reasoning if stream else False,
            force_reasoning=thinking,
            request=chat_request,
            tool_call_parser_active=self._tools_active(chat_request),
        )

    @staticmethod
    def _tools_active(chat_request: Any) -> bool:
        """``_tool_call_parsing_active``: tools declared and tool_choice is not "none"."""
        return bool(chat_request.tools) and chat_request.tool_choice != "none"

    def _tool_parser(self, chat_request: Any) -> Any:
        parser = call_parser(
            self._fcp_cls, chat_request.tools, PARSER, tool_choice=chat_request.tool_choice
        )
        required = chat_request.tool_choice == "required" or not isinstance(
            chat_request.tool_choice, str
        )
        if required and not call_parser(parser.owns_tool_format):
            raise AdapterUnavailable(
                "a required or named tool_choice goes to SGLang's JSON-array parser, "
                "not the kimi_k3 detector"
            )
        return parser

    @staticmethod
    def _history(chat_request: Any) -> int:
        """``_get_history_tool_calls_cnt``: the calls of the conversation's assistant turns."""
        return sum(
            len(list(getattr(m, "tool_calls", None) or ()))
            for m in chat_request.messages
            if m.role == "assistant"
        )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat_request = self._chat_request(request)
        text, reasoning = output.text, None
        parser = self._reasoning_parser(chat_request, stream=False)
        if parser is not None:
            reasoning, text = call_parser(parser.parse_non_stream, text)
        calls: tuple[ToolCall, ...] = ()
        if self._tools_active(chat_request):
            tools = self._tool_parser(chat_request)
            if call_parser(tools.has_tool_call, text):
                text, items = call_parser(tools.parse_non_stream, text)
                history = self._history(chat_request)
                calls = tuple(
                    ToolCall(item.name, item.parameters, f"{item.name}:{history + item.tool_index}")
                    for item in items
                )
        return Result(
            content=text or "",
            reasoning=reasoning or None,
            tool_calls=calls,
            meta={"version": self._version},
        )

    def open_stream(self, request: Request) -> StreamStep:
        chat_request = self._chat_request(request)
        reasoning_parser = self._reasoning_parser(chat_request, stream=True)
        tools = self._tool_parser(chat_request) if self._tools_active(chat_request) else None
        history = self._history(chat_request)

        def step(delta: Delta, finished: bool) -> list[StreamEvent]:
            events: list[StreamEvent] = []
            text = delta.text
            if reasoning_parser is not None:
                reasoning, text = call_parser(reasoning_parser.parse_stream_chunk, text)
                if finished:
                    more_reasoning, more_text = call_parser(reasoning_parser.parse_stream_end)
                    reasoning = (reasoning or "") + (more_reasoning or "")
                    text = (text or "") + (more_text or "")
                if reasoning:
                    events.append(StreamEvent(reasoning=reasoning))
            if tools is None:
                if text:
                    events.append(StreamEvent(content=text))
                return events
            normal, items = call_parser(tools.parse_stream_chunk, text)
            if finished:
                end_text, end_items = call_parser(tools.parse_stream_end)
                normal = (normal or "") + (end_text or "")
                items = list(items) + list(end_items)
            if normal:
                events.append(StreamEvent(content=normal))
            events.extend(
                StreamEvent(
                    tool_calls=(
                        ToolCallDelta(
                            index=item.tool_index,
                            id=f"{item.name}:{history + item.tool_index}" if item.name else None,
                            name=item.name or None,
                            arguments=item.parameters,
                        ),
                    )
                )
                for item in items
            )
            return events

        return step
