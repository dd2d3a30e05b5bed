"""SGLang's Kimi K3 parsers as its OpenAI server composes them (``--tool-call-parser kimi_k3
--reasoning-parser kimi_k3``), SGLang 0.5.23 and the releases before it that have them (0.5.17
on: their ``serving_chat`` steps are the K2 adapter's ``GLUE``).

``serving_chat.py`` has no chat-encoding adapter for ``kimi_k3``, so a reply takes the same
branches as any model's: ``ReasoningParser("kimi_k3")`` when ``separate_reasoning`` (reasoning
forced unless ``chat_template_kwargs.thinking`` is False: the detector's
``reasoning_default="thinking"``, ``_get_reasoning_from_request``), then, with tools declared
and ``tool_choice`` not "none", ``FunctionCallParser(tools, "kimi_k3")`` when
``has_tool_call``; each call's id is ``NAME:<calls in the history + tool_index>``
(``_process_tool_call_id``).  A stream feeds both parsers chunk by chunk and ends them with
``parse_stream_end``.  Neither parser needs a tokenizer.

With tools, the server adds the tools closer ``<|close|>tools<|sep|>`` to the request's stop
strings (``tool_call_stop``): the engine ends the reply there, cut before it, and a stream
holds each ``<|close|>`` back until the next token shows it is not the closer
(:mod:`k2conform_adapters.sglang_stop`).
"""

from __future__ import annotations

from typing import Any

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    GrammarUse,
    StreamStep,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import build_chat_request, load_once
from k2conform.k3 import markers as k3
from k2conform.model import Delta, Request, Result, ToolCall

from k2conform_adapters.reproducible import Reproducible
from k2conform_adapters.sglang_parser import (
    GLUE,
    history_tool_calls,
    server_structural_tag,
    serving_step,
    stand_in_torchvision,
    tool_parsing_active,
)
from k2conform_adapters.sglang_stop import request_stops, served_text, stopping

PARSER = "kimi_k3"


class SglangK3Adapter(Reproducible, Adapter):
    name = "sglang-k3"
    #: repro/sglang.py drives kimi_k3 for a K3 output
    repro_driver = "sglang"
    package = "sglang"
    #: the releases with ``kimi_k3`` (0.5.17 on), each run on the whole K3 corpus
    supported_versions = ("0.5.17", "0.5.18", "0.5.19", "0.5.21", "0.5.22", "0.5.23")
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
    #: The conversation (its assistant turns' calls count in each id: ``_process_tool_call_id``)
    #: and ``separate_reasoning`` (False: no reasoning parser runs).
    request_options = frozenset({"messages", "separate_reasoning"})

    @load_once
    def load(self) -> None:
        #: serving_chat's steps around the parsers: the K2 adapter's table's
        self._glue = GLUE.get(self.version() or "", GLUE[self.supported_versions[-1]])
        if self._glue.imports_torchvision:
            stand_in_torchvision()
        sglang = import_parser_package("sglang")
        self._version = sglang.__version__
        with glue_imports("sglang"):
            from sglang.srt.entrypoints.openai import protocol
            from sglang.srt.function_call.function_call_parser import FunctionCallParser
            from sglang.srt.parser.reasoning_parser import ReasoningParser
        # the end-of-stream calls the release's serving_chat makes
        tool_end = ("parse_stream_end",) if self._glue.stream_end else ()
        reasoning_end = ("parse_stream_end",) if self._glue.reasoning_stream_end else ()
        require_api(
            FunctionCallParser,
            "has_tool_call",
            "parse_non_stream",
            "parse_stream_chunk",
            *tool_end,
            owner_name="FunctionCallParser",
        )
        require_api(
            ReasoningParser,
            "parse_non_stream",
            "parse_stream_chunk",
            *reasoning_end,
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
        return build_chat_request(
            self._request_cls, request, choice_without_tools="none", options=self.request_options
        )

    def _reasoning_parser(self, chat_request: Any, *, stream: bool) -> Any | None:
        if not chat_request.separate_reasoning:
            return None
        thinking = (chat_request.chat_template_kwargs or {}).get("thinking") is not False
        # ReasoningParser(tool_call_parser_active=) from 0.5.18 (the glue's stream_end)
        active = (
            {"tool_call_parser_active": tool_parsing_active(chat_request)}
            if self._glue.stream_end
            else {}
        )
        return call_parser(
            self._rp_cls,
            model_type=PARSER,
            stream_reasoning=chat_request.stream_reasoning if stream else False,
            force_reasoning=thinking,
            request=chat_request,
            **active,
        )

    def _tool_parser(self, chat_request: Any) -> Any:
        """``FunctionCallParser(tools, "kimi_k3")``; a required or named tool_choice goes to
        the detector only when it says it parses that format: ``owns_tool_format()`` from
        0.5.21 (the parser told the tool_choice), before that ``supports_structural_tag()``
        or ``parses_required_natively()`` (0.5.17-0.5.19 ``serving_chat``'s probe)."""
        if self._glue.owns_tool_format:
            parser = call_parser(
                self._fcp_cls, chat_request.tools, PARSER, tool_choice=chat_request.tool_choice
            )
            native = [parser.owns_tool_format]
        else:
            parser = call_parser(self._fcp_cls, chat_request.tools, PARSER)
            native = [
                parser.detector.supports_structural_tag,
                parser.detector.parses_required_natively,
            ]
        required = chat_request.tool_choice == "required" or not isinstance(
            chat_request.tool_choice, str
        )
        if required and not any(call_parser(check) for check in native):
            raise AdapterUnavailable(
                "a required or named tool_choice goes to SGLang's JSON-array parser, "
                "not the kimi_k3 detector"
            )
        return parser

    def _active_tool_parser(self, chat_request: Any) -> Any | None:
        """The tool parser the server runs for this request; None when it runs none."""
        return self._tool_parser(chat_request) if tool_parsing_active(chat_request) else None

    def _reasoning_detector(self) -> Any:
        """The server's reasoning detector (``serving_chat._reasoning_detector``): its think
        markers."""
        self.load()
        return call_parser(self._rp_cls, model_type=PARSER).detector

    def _stops(self, chat_request: Any, tools: Any | None) -> list[str]:
        """The stop strings the server sends the engine: the request's, then, with tools, the
        tool parser's closer (``serving_chat``: ``tool_call_stop``)."""
        stops = request_stops(chat_request.stop)
        if tools is not None and tools.detector.eot_token not in stops:
            stops.append(tools.detector.eot_token)
        return stops

    def structural_tag(self, request: Request) -> str | None:
        """The tag ``serving_chat`` hands the xgrammar backend, the think markers taken out of
        its excludes since the reasoning parser is on (:func:`server_structural_tag`); None
        when decoding is not constrained.  It constrains ``auto`` requests too: its tools
        channel is triggered by the tools opener."""
        detector = self._reasoning_detector()
        return server_structural_tag(
            self._fcp_cls,
            self._chat_request(request),
            PARSER,
            (detector.think_start_token, detector.think_end_token),
        )

    def grammar_use(self, request: Request) -> GrammarUse:
        """SGLang applies the grammar after the reasoning parser's think closer when the request
        thinks (``ReasonerGrammarObject``: the closer's token ids), stops at the tools closer
        (``tool_call_stop``), and the tag names ``<|close|>`` as a token."""
        chat_request = self._chat_request(request)
        tools = self._active_tool_parser(chat_request)
        return GrammarUse(
            think_end=self._reasoning_detector().think_end_token,
            stops=tuple(self._stops(chat_request, tools)),
            tokens=k3.MARKERS,
        )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat_request = self._chat_request(request)
        tools = self._active_tool_parser(chat_request)
        text, reasoning = served_text(output.text, self._stops(chat_request, tools)), None
        parser = self._reasoning_parser(chat_request, stream=False)
        if parser is not None:
            reasoning, text = call_parser(parser.parse_non_stream, text)
        calls: tuple[ToolCall, ...] = ()
        if tools is not None:
            if call_parser(tools.has_tool_call, text):
                text, items = call_parser(tools.parse_non_stream, text)
                history = history_tool_calls(chat_request)
                calls = tuple(
                    ToolCall(
                        item.name, item.parameters, call_id(item.name, item.tool_index, history)
                    )
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
        tools = self._active_tool_parser(chat_request)
        history = history_tool_calls(chat_request)
        step = serving_step(
            reasoning_parser,
            tools,
            self._glue,
            lambda name, index: call_id(name, index, history),
        )
        return stopping(step, self._stops(chat_request, tools))


class SglangK3ParseFunctionCallAdapter(SglangK3Adapter):
    """SGLang's native ``/parse_function_call`` endpoint with ``"tool_call_parser": "kimi_k3"``
    (``http_server.py``: no native text parser serves kimi_k3, so ``FunctionCallParser(tools,
    "kimi_k3").parse_non_stream`` on the whole text): no reasoning parser, no stop, no
    ``has_tool_call`` first; the reply is the normal text and the calls, without ids.  One-shot
    only.  Opt-in: what ``k2conform coverage`` runs to reach the detector's parse of a text
    without a tools channel, which the chat server never asks for."""

    name = "sglang-k3-parse-function-call"
    description = "SGLang /parse_function_call with tool_call_parser kimi_k3 (one-shot)"
    run_by_default = False
    delivery_modes = ("whole",)
    request_options = frozenset()
    #: one-shot only: no stream to open
    open_stream = Adapter.open_stream
    #: the endpoint parses text it did not generate: no grammar constrains it
    structural_tag = Adapter.structural_tag
    grammar_use = Adapter.grammar_use

    def parse_whole(self, request: Request, output: Delta) -> Result:
        tools = self._chat_request(request).tools or []
        parser = call_parser(self._fcp_cls, tools, PARSER)
        text, items = call_parser(parser.parse_non_stream, output.text)
        return Result(
            content=text,
            reasoning=None,
            tool_calls=tuple(ToolCall(item.name, item.parameters, None) for item in items),
            meta={"version": self._version},
        )


def call_id(name: str, tool_index: int, history: int) -> str:
    """``_process_tool_call_id`` for kimi_k3: ``NAME:<calls in the history + tool_index>``."""
    return f"{name}:{history + tool_index}"
