"""sglang-kt 0.7.2 (KTransformers' SGLang fork): its own ``kimi_k2`` detector
(``sglang/srt/function_call/kimik2_detector.py``), driven the way the fork's
``sglang/srt/entrypoints/openai/serving_chat.py`` drives it.

The fork keeps SGLang's parser classes (``FunctionCallParser(tools, "kimi_k2",
tool_choice=...)``, ``ReasoningParser``) and its id rule (``_process_tool_call_id``:
``functions.{name}:{history_count + tool_index}``), so this adapter is
:class:`~k2conform_adapters.sglang_parser.SglangAdapter` with the fork's server steps:

* streaming (``_generate_chat_stream``) as SGLang's older line does (``ServingGlue``): per
  delta the reasoning parser's and the tool parser's ``parse_stream_chunk`` only (no end
  steps, no ``tool_call_parser_active``), then ``_check_for_unstreamed_tool_args``:
  ``json.dumps`` of the last call's recorded arguments with the streamed part removed
  (``str.replace``);
* one-shot (``_build_chat_response``): the same reasoning and tool parsers as upstream, but
  the message's content is ``text if text else None``;
* ``tool_choice`` required or a named tool: ``_process_tool_calls`` and
  ``_process_tool_call_stream`` route the output to the JSON-array path (``orjson.loads``,
  ``JsonArrayParser``), never to the ``kimi_k2`` detector, so such requests are
  ``unavailable`` here; so is the constrained-decoding grammar (``structural_tag``).

``serving_chat`` itself is not imported (it pulls torch and the engine); the steps above
that are not parser calls are re-stated from that file, as in ``sglang_parser``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from k2conform.adapter import glue
from k2conform.adapter.contract import (
    AdapterGlueError,
    AdapterUnavailable,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.model import Delta, Request, Result

from k2conform_adapters.sglang_parser import PARSER, ServingGlue, SglangAdapter

#: The fork's serving_chat around the parsers: SGLang's line before parse_stream_end.
FORK_GLUE = ServingGlue(stream_end=False, owns_tool_format=False, prefix_unstreamed=False)


class SglangKtAdapter(SglangAdapter):
    """The fork's ``FunctionCallParser(tools, "kimi_k2")`` behind its ``kimi_k2`` reasoning
    parser, as the fork's ``serving_chat`` calls them."""

    repro_driver = "sglang_kt"
    name = "sglang-kt"
    package = "sglang-kt"
    supported_versions = ("0.7.2",)
    description = "sglang-kt (KTransformers SGLang fork): --tool-call-parser kimi_k2"

    @glue.load_once
    def load(self) -> None:
        if self.version() is None:  # an `sglang` of another distribution is not the fork
            raise AdapterUnavailable("sglang-kt is not installed")
        import_parser_package("sglang")
        with glue_imports("sglang-kt"):
            from sglang.srt.entrypoints.openai import protocol
            from sglang.srt.function_call.function_call_parser import FunctionCallParser
            from sglang.srt.parser.reasoning_parser import ReasoningParser
        require_api(
            FunctionCallParser,
            "has_tool_call",
            "parse_non_stream",
            "parse_stream_chunk",
            "ToolCallParserEnum",
            owner_name="FunctionCallParser",
        )
        require_api(
            ReasoningParser,
            "parse_non_stream",
            "parse_stream_chunk",
            "DetectorMap",
            owner_name="ReasoningParser",
        )
        require_api(protocol, "ChatCompletionRequest", owner_name="openai.protocol")
        for registry, label in (
            (FunctionCallParser.ToolCallParserEnum, "FunctionCallParser"),
            (ReasoningParser.DetectorMap, "ReasoningParser"),
        ):
            if PARSER not in registry:
                raise AdapterGlueError(f"{label}[{PARSER!r}]", "not registered")
        self._version = self.version()  # sglang.__version__ is 0.0.0.dev0 in the fork
        self._glue = FORK_GLUE
        self._bind(FunctionCallParser, ReasoningParser, protocol.ChatCompletionRequest)

    def _tool_parser(self, chat_request: Any) -> Any:
        if self._is_required(chat_request):
            raise AdapterUnavailable(
                "sglang-kt parses required/named tool_choice as a JSON "
                "array, not with the kimi_k2 detector"
            )
        return call_parser(
            self._fcp_cls, chat_request.tools, PARSER, tool_choice=chat_request.tool_choice
        )

    def structural_tag(self, request: Request) -> str | None:
        """Not driven: the fork's ``get_structure_constraint(tool_choice)`` has the older
        signature and constrains required/named tool_choice with a JSON schema."""
        raise AdapterUnavailable("sglang-kt's constrained-decoding path is not driven")

    def parse_whole(self, request: Request, output: Delta) -> Result:
        result = super().parse_whole(request, output)
        return dataclasses.replace(result, content=result.content or None)
