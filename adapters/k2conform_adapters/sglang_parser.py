"""SGLang 0.5.23's ``kimi_k2`` parsers, driven the way ``serving_chat.py`` drives them.

What the server does (``sglang/srt/entrypoints/openai/serving_chat.py``):

* one-shot (``_build_chat_response``): with ``--reasoning-parser kimi_k2`` and
  ``separate_reasoning`` (default true), ``ReasoningParser("kimi_k2",
  stream_reasoning=False, force_reasoning=..., request=..., tool_call_parser_active=True)
  .parse_non_stream(text)`` first; then ``_process_tool_calls``: a fresh
  ``FunctionCallParser(tools, "kimi_k2", tool_choice=...)``, and only when
  ``has_tool_call(text)``, ``parse_non_stream(text)``; content is ``text or ""``;
* streaming (``_generate_stream_content``): per delta, the reasoning parser's
  ``parse_stream_chunk`` (plus ``parse_stream_end`` on the finishing delta), then the
  tool parser's ``parse_stream_chunk`` (plus ``parse_stream_end`` on the finishing delta),
  one chunk for the normal text and one chunk per ``ToolCallItem``; after the finishing
  delta, ``_check_for_unstreamed_tool_args`` may send the rest of the last call's
  arguments;
* ids (``_process_tool_call_id``): for ``kimi_k2`` the server *rebuilds* the id as
  ``functions.{name}:{history_count + tool_index}``, the model's own id is not used;
  ``tool_index`` is the call's 0-based position in this response.

``serving_chat`` itself does not import in the CPU closure (it pulls torchvision), so the
three small server steps above that are not parser calls (id building, the history
count, the unstreamed-arguments check) are re-stated here from that file's behaviour.
Thinking on: ``force_reasoning`` is what the server computes for a Kimi template without
a reasoning config: the detector's ``reasoning_default="thinking"`` with
``chat_template_kwargs={"thinking": true}`` gives True.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from k2conform.adapter.contract import (
    glue_imports,
    import_parser_package,
    Adapter,
    AdapterGlueError,
    call_parser,
    require_api,
)
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

MODEL_NAME = "moonshotai/Kimi-K2-Instruct"
PARSER = "kimi_k2"


class SglangAdapter(Adapter):
    """SGLang's ``FunctionCallParser(tools, "kimi_k2")`` behind its ``kimi_k2`` reasoning parser."""

    name = "sglang"
    package = "sglang"
    supported_versions = ("0.5.22", "0.5.23")  # 0.5.22 checked: identical results on every cell
    description = "SGLang server: --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]"

    def __init__(self) -> None:
        self._loaded = False

    # --- glue ---------------------------------------------------------------------------

    def load(self) -> None:
        if self._loaded:
            return
        sglang = import_parser_package("sglang")
        with glue_imports("sglang"):
            from sglang.srt.entrypoints.openai import protocol
            from sglang.srt.function_call import function_call_parser
            from sglang.srt.parser import reasoning_parser

        require_api(function_call_parser, "FunctionCallParser", owner_name="function_call_parser")
        fcp = function_call_parser.FunctionCallParser
        require_api(
            fcp, "has_tool_call", "parse_non_stream", "parse_stream_chunk", "parse_stream_end",
            "owns_tool_format", "ToolCallParserEnum", owner_name="FunctionCallParser",
        )
        if PARSER not in fcp.ToolCallParserEnum:
            raise AdapterGlueError("FunctionCallParser.ToolCallParserEnum['kimi_k2']", "not registered")
        require_api(reasoning_parser, "ReasoningParser", owner_name="reasoning_parser")
        rp = reasoning_parser.ReasoningParser
        require_api(
            rp, "parse_non_stream", "parse_stream_chunk", "parse_stream_end", "DetectorMap",
            owner_name="ReasoningParser",
        )
        if PARSER not in rp.DetectorMap:
            raise AdapterGlueError("ReasoningParser.DetectorMap['kimi_k2']", "not registered")
        require_api(protocol, "ChatCompletionRequest", owner_name="openai.protocol")

        self._version = sglang.__version__
        self._fcp_cls = fcp
        self._rp_cls = rp
        self._request_cls = protocol.ChatCompletionRequest
        self._loaded = True

    def _chat_request(self, request: Request) -> Any:
        try:
            return self._request_cls(
                model=MODEL_NAME,
                messages=[{"role": "user", "content": "(conformance case)"}],
                tools=[dict(t) for t in request.tools] or None,
                tool_choice=request.tool_choice if request.tools else "none",
                chat_template_kwargs={"thinking": request.thinking},
            )
        except Exception as exc:  # noqa: BLE001 - the request model rejected our glue
            raise AdapterGlueError("ChatCompletionRequest", f"{type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _tool_parsing_active(chat_request: Any) -> bool:
        """``_tool_call_parsing_active``: tools declared and tool_choice is not "none"."""
        return bool(chat_request.tools) and chat_request.tool_choice != "none"

    @staticmethod
    def _is_required(chat_request: Any) -> bool:
        return chat_request.tool_choice == "required" or not isinstance(chat_request.tool_choice, str)

    def _reasoning_parser(self, chat_request: Any, *, stream: bool) -> Any:
        return call_parser(
            self._rp_cls,
            model_type=PARSER,
            stream_reasoning=chat_request.stream_reasoning if stream else False,
            force_reasoning=True,  # thinking on: see the module docstring
            request=chat_request,
            tool_call_parser_active=self._tool_parsing_active(chat_request),
        )

    def _tool_parser(self, chat_request: Any) -> Any:
        parser = call_parser(
            self._fcp_cls, chat_request.tools, PARSER, tool_choice=chat_request.tool_choice
        )
        if self._is_required(chat_request) and not call_parser(parser.owns_tool_format):
            # The server would switch to its JSON-array parser here; not driven.
            raise AdapterGlueError("FunctionCallParser.owns_tool_format", "False for kimi_k2")
        return parser

    @staticmethod
    def _tool_call_id(name: str, tool_index: int, history_count: int = 0) -> str:
        """``_process_tool_call_id`` for kimi_k2 (history_count: calls in earlier turns; 0)."""
        return f"functions.{name}:{history_count + tool_index}"

    # --- the two parse modes --------------------------------------------------------------

    def parse_whole(self, request: Request, output: Delta) -> Result:
        self.load()
        chat_request = self._chat_request(request)
        text: str | None = output.text
        reasoning = None
        if request.thinking and chat_request.separate_reasoning:
            parser = self._reasoning_parser(chat_request, stream=False)
            reasoning, text = call_parser(parser.parse_non_stream, text)
        calls: tuple[ToolCall, ...] = ()
        if self._tool_parsing_active(chat_request):
            parser = self._tool_parser(chat_request)
            if call_parser(parser.has_tool_call, text):
                # The server catches an exception here and keeps the raw text; we report
                # it as the parser's crash instead, which is the finding.
                text, items = call_parser(parser.parse_non_stream, text)
                calls = tuple(
                    ToolCall(
                        name=item.name,
                        arguments=item.parameters,
                        id=self._tool_call_id(item.name, item.tool_index),
                    )
                    for item in items
                )
        return Result(
            content=text if text else "",  # the server sends "" rather than null
            reasoning=reasoning if reasoning else None,
            tool_calls=calls,
            meta={"version": self._version},
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        """Chunks in the server's order; the last delta is the one with ``finish_reason``."""
        self.load()
        chat_request = self._chat_request(request)
        use_reasoning = request.thinking and chat_request.separate_reasoning
        tools_active = self._tool_parsing_active(chat_request)
        reasoning_parser = self._reasoning_parser(chat_request, stream=True) if use_reasoning else None
        tool_parser = self._tool_parser(chat_request) if tools_active else None
        steps = list(deltas) or [Delta("")]
        events: list[StreamEvent] = []
        for n, delta in enumerate(steps):
            finished = n == len(steps) - 1
            text = delta.text
            if reasoning_parser is not None:
                reasoning, text = call_parser(reasoning_parser.parse_stream_chunk, text)
                if finished:
                    end_reasoning, end_text = call_parser(reasoning_parser.parse_stream_end)
                    if end_reasoning:
                        reasoning = (reasoning or "") + end_reasoning
                    if end_text:
                        text = (text or "") + end_text
                if reasoning:
                    events.append(StreamEvent(reasoning=reasoning))
            if tool_parser is None:
                if text:
                    events.append(StreamEvent(content=text))
                continue
            normal, items = call_parser(tool_parser.parse_stream_chunk, text)
            if finished:
                end_text, end_items = call_parser(tool_parser.parse_stream_end)
                normal = (normal or "") + end_text
                items = list(items) + list(end_items)
            if normal:
                events.append(StreamEvent(content=normal))
            for item in items:
                events.append(
                    StreamEvent(
                        tool_calls=(
                            ToolCallDelta(
                                index=item.tool_index,
                                id=self._tool_call_id(item.name, item.tool_index) if item.name else None,
                                name=item.name or None,
                                arguments=item.parameters,
                            ),
                        )
                    )
                )
            if finished:
                rest = _unstreamed_arguments(tool_parser)
                if rest is not None:
                    events.append(StreamEvent(tool_calls=(rest,)))
        return events

    def repro_script(self, request: Request, deltas: Sequence[Delta], mode: str, *,
                     expected: dict | None = None, case_id: str = "case") -> str:
        """A standalone script that drives sglang the same way, importing only sglang
        (for ``k2conform report-finding``; templates in k2conform_adapters._repro)."""
        from k2conform_adapters._repro import sglang_script

        return sglang_script(request, deltas, mode, expected, case_id)


def _unstreamed_arguments(tool_parser: Any) -> ToolCallDelta | None:
    """``_check_for_unstreamed_tool_args``: after the finishing delta, the part of the last
    call's arguments (as the detector recorded them in ``prev_tool_call_arr``) that was
    not streamed yet, when what was streamed is a prefix of it."""
    detector = getattr(tool_parser, "detector", tool_parser)
    recorded = getattr(detector, "prev_tool_call_arr", None)
    streamed = getattr(detector, "streamed_args_for_tool", None)
    if not recorded or not streamed:
        return None
    index = len(recorded) - 1
    if index >= len(streamed):
        return None
    expected = recorded[index].get("arguments", {})
    if not isinstance(expected, str):
        expected = json.dumps(expected, ensure_ascii=False)
    sent = streamed[index]
    rest = expected[len(sent):] if expected.startswith(sent) else ""
    return ToolCallDelta(index=index, arguments=rest) if rest else None
