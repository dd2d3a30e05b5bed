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
Older releases (``GLUE``, one ``ServingGlue`` per generation, each read from that release's
``serving_chat.py``): before 0.5.21 ``FunctionCallParser`` takes no ``tool_choice`` and
has no ``owns_tool_format`` (a ``required`` or named choice uses the native parser when its
detector ``supports_structural_tag()``); before 0.5.18 there is no tool-parser
``parse_stream_end`` and no ``tool_call_parser_active``; before 0.5.16 neither parser's
``parse_stream_end`` is called, and the unstreamed-arguments check removes the streamed part
with ``str.replace`` from ``json.dumps`` of the recorded arguments; before 0.5.13 a message
without text has content null; 0.5.3-0.5.10 parse a ``required`` or named choice as a JSON
array (``unavailable`` here), 0.5.1-0.5.2 with the detector under its own grammar; before
0.5.9 ``force_reasoning`` is False for kimi_k2 and ``ReasoningParser`` takes no ``request``;
before 0.5.5 there is no ``kimi_k2`` reasoning parser at all (``--reasoning-parser kimi_k2``
is refused), so a thinking request's think block stays in the text the tool parser sees;
0.5.1 mints ``call_<uuid>`` ids.

Thinking on: ``force_reasoning`` is what the server computes for a Kimi template without
a reasoning config: the detector's ``reasoning_default="thinking"`` with
``chat_template_kwargs={"thinking": true}`` gives True.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import re
import sys
import types
import uuid
from dataclasses import dataclass, replace
from collections.abc import Callable, Sequence
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
from k2conform.adapter.glue import RandomIds, build_chat_request, load_once
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

from k2conform_adapters.reproducible import Reproducible

PARSER = "kimi_k2"
#: What ``serving_chat`` reads from the request besides tools and thinking: the conversation
#: (the history's call count in ids; with ``continue_final_message`` its last assistant
#: message is the reasoning parser's ``previous_content``), ``stream_reasoning``, and the
#: template arguments the reasoning parser reads (``force_nonempty_content``).
SERVING_CHAT_OPTIONS = frozenset(
    {"messages", "continue_final_message", "stream_reasoning", "chat_template_kwargs"}
)


@dataclass(frozen=True)
class ServingGlue:
    """What one release's ``serving_chat`` does around the two parsers."""

    stream_end: bool  #: ``FunctionCallParser.parse_stream_end`` on the finishing delta, and
    #: ``ReasoningParser(tool_call_parser_active=)``
    owns_tool_format: bool  #: ``FunctionCallParser(..., tool_choice=)``, ``owns_tool_format()``
    prefix_unstreamed: bool  #: the unstreamed rest is a suffix (else ``str.replace``)
    #: ``sglang.srt.utils.common`` imports ``torchvision.io.decode_jpeg`` at module level
    imports_torchvision: bool = False
    #: the one-shot message's content when there is no text ("" from 0.5.13 on, else null)
    no_content: str | None = ""
    #: ``ReasoningParser.parse_stream_end`` on the finishing delta (0.5.16 on)
    reasoning_stream_end: bool = False
    #: ``--reasoning-parser kimi_k2`` exists (0.5.5 on); before, a Kimi K2 server runs without
    #: a reasoning parser (``server_args`` refuses the name), so the think block stays in the
    #: text the tool parser sees and ``thinking`` changes nothing
    kimi_reasoning: bool = True
    #: ``force_reasoning`` from the request's thinking switch (``_get_reasoning_from_request``)
    #: and ``ReasoningParser(request=)``, 0.5.9 on; before, ``_get_enable_thinking_from_request``
    #: reads no switch for kimi_k2: ``force_reasoning=False``
    reasoning_from_request: bool = True
    #: a ``required`` or named tool_choice: "native" (the kimi_k2 detector under its own
    #: constraint, 0.5.1-0.5.2), "json-array" (``JsonArrayParser``, never the detector:
    #: 0.5.3-0.5.10), "probe" (the detector when it ``supports_structural_tag()`` /
    #: ``owns_tool_format()``)
    required_route: str = "probe"
    #: ids ``functions.{name}:{n}`` (0.5.2 on); before, ``call_{uuid4().hex[:24]}``
    kimi_ids: bool = True


#: Each generation of serving_chat's steps around the parsers, oldest first (docs/releases.md).
UUID_IDS = ServingGlue(
    stream_end=False,
    owns_tool_format=False,
    prefix_unstreamed=False,
    no_content=None,
    kimi_reasoning=False,
    reasoning_from_request=False,
    required_route="native",
    kimi_ids=False,
)
KIMI_IDS = replace(UUID_IDS, kimi_ids=True)
JSON_ARRAY_REQUIRED = replace(KIMI_IDS, required_route="json-array")
KIMI_K2_REASONING = replace(JSON_ARRAY_REQUIRED, kimi_reasoning=True)
REASONING_FROM_REQUEST = replace(KIMI_K2_REASONING, reasoning_from_request=True)
NATIVE_REQUIRED = replace(REASONING_FROM_REQUEST, required_route="probe", imports_torchvision=True)
EMPTY_CONTENT = replace(NATIVE_REQUIRED, no_content="")
SUFFIX_UNSTREAMED = replace(EMPTY_CONTENT, prefix_unstreamed=True, reasoning_stream_end=True)
TOOL_STREAM_END = replace(SUFFIX_UNSTREAMED, stream_end=True)
OWNS_TOOL_FORMAT = replace(TOOL_STREAM_END, owns_tool_format=True, imports_torchvision=False)

#: The releases the glue was checked against (each run on the whole corpus), and their glue.
GLUE = {
    "0.5.1": UUID_IDS,
    "0.5.2": KIMI_IDS,
    "0.5.3": JSON_ARRAY_REQUIRED,
    "0.5.5": KIMI_K2_REASONING,
    "0.5.5.post3": KIMI_K2_REASONING,
    "0.5.9": REASONING_FROM_REQUEST,
    "0.5.10": replace(REASONING_FROM_REQUEST, imports_torchvision=True),
    "0.5.12": NATIVE_REQUIRED,
    "0.5.13": EMPTY_CONTENT,
    "0.5.14": EMPTY_CONTENT,
    "0.5.15": EMPTY_CONTENT,
    "0.5.16": SUFFIX_UNSTREAMED,
    "0.5.17": SUFFIX_UNSTREAMED,
    "0.5.18": TOOL_STREAM_END,
    "0.5.19": TOOL_STREAM_END,
    "0.5.21": OWNS_TOOL_FORMAT,
    "0.5.22": OWNS_TOOL_FORMAT,
    "0.5.23": OWNS_TOOL_FORMAT,
}


class SglangAdapter(Reproducible, Adapter):
    """SGLang's ``FunctionCallParser(tools, "kimi_k2")`` behind its ``kimi_k2`` reasoning parser."""

    repro_driver = "sglang"
    name = "sglang"
    package = "sglang"
    supported_versions = tuple(GLUE)  # each ran the whole corpus with no adapter-error cell
    _glue = GLUE[supported_versions[-1]]  #: the installed release's, set by ``load``
    description = "SGLang server: --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]"
    coverage_files = ("sglang/srt/function_call/kimik2_detector.py",)
    coverage_shared_files = (
        "sglang/srt/function_call/base_format_detector.py",
        "sglang/srt/function_call/function_call_parser.py",
        # ReasoningParser("kimi_k2") and its KimiK2Detector (BaseReasoningFormatDetector)
        "sglang/srt/parser/reasoning_parser.py",
    )
    serving_files = ("sglang/srt/entrypoints/openai/serving_chat.py",)
    request_options = SERVING_CHAT_OPTIONS

    # --- glue ---------------------------------------------------------------------------

    @load_once
    def load(self) -> None:
        self._glue = GLUE.get(self.version() or "", self._glue)
        if self._glue.imports_torchvision:
            stand_in_torchvision()
        sglang = import_parser_package("sglang")
        self._version = sglang.__version__
        ends = ("parse_stream_end",) if self._glue.stream_end else ()
        with glue_imports("sglang"):
            from sglang.srt.entrypoints.openai import protocol
            from sglang.srt.function_call import function_call_parser

        require_api(function_call_parser, "FunctionCallParser", owner_name="function_call_parser")
        fcp = function_call_parser.FunctionCallParser
        require_api(
            fcp,
            "has_tool_call",
            "parse_non_stream",
            "parse_stream_chunk",
            *ends,
            *(("owns_tool_format",) if self._glue.owns_tool_format else ()),
            "ToolCallParserEnum",
            owner_name="FunctionCallParser",
        )
        if PARSER not in fcp.ToolCallParserEnum:
            raise AdapterGlueError(
                "FunctionCallParser.ToolCallParserEnum['kimi_k2']", "not registered"
            )
        require_api(protocol, "ChatCompletionRequest", owner_name="openai.protocol")

        reasoning = self._load_reasoning_parser() if self._glue.kimi_reasoning else None
        self._bind(fcp, reasoning, protocol.ChatCompletionRequest)

    def _bind(self, fcp: Any, reasoning: Any, request_cls: Any) -> None:
        """Keep the loaded parser classes; serving_chat's tool and reasoning parsers get the
        server's tokenizer (``tokenizer=self.tokenizer_manager.tokenizer``) where the release
        takes one.  Every SGLang-line adapter's ``load`` ends here."""
        self._fcp_cls, self._rp_cls = fcp, reasoning
        self._fcp_tokenizer = _tokenizer_argument(fcp)
        self._rp_tokenizer = _tokenizer_argument(reasoning) if reasoning else {}
        self._request_cls = request_cls

    def _load_reasoning_parser(self) -> Any:
        """``ReasoningParser`` with its ``kimi_k2`` entry and the calls this release's server
        makes (``sglang/srt/parser/reasoning_parser.py``, 0.5.2 on)."""
        ends = ("parse_stream_end",) if self._glue.reasoning_stream_end else ()
        with glue_imports("sglang"):
            from sglang.srt.parser import reasoning_parser
        require_api(reasoning_parser, "ReasoningParser", owner_name="reasoning_parser")
        rp = reasoning_parser.ReasoningParser
        require_api(
            rp,
            "parse_non_stream",
            "parse_stream_chunk",
            *ends,
            "DetectorMap",
            owner_name="ReasoningParser",
        )
        if PARSER not in rp.DetectorMap:
            raise AdapterGlueError("ReasoningParser.DetectorMap['kimi_k2']", "not registered")
        return rp

    def _chat_request(self, request: Request) -> Any:
        fields = getattr(self._request_cls, "model_fields", {})
        missing = sorted(k for k in request.server_options if k not in fields)
        if missing:
            raise AdapterUnavailable(
                f"SGLang {self._version}'s ChatCompletionRequest has no {', '.join(missing)}"
            )
        return build_chat_request(
            self._request_cls, request, choice_without_tools="none", options=self.request_options
        )

    @staticmethod
    def _is_required(chat_request: Any) -> bool:
        return chat_request.tool_choice == "required" or not isinstance(
            chat_request.tool_choice, str
        )

    def _separates_reasoning(self, request: Request, chat_request: Any) -> bool:
        """The server runs the kimi_k2 reasoning parser: thinking on, ``separate_reasoning``,
        and a release that has one (``ServingGlue.kimi_reasoning``)."""
        return request.thinking and chat_request.separate_reasoning and self._glue.kimi_reasoning

    def _reasoning_parser(self, chat_request: Any, *, stream: bool) -> Any:
        glue = self._glue
        extra = {"request": chat_request} if glue.reasoning_from_request else {}
        if glue.stream_end:
            extra["tool_call_parser_active"] = tool_parsing_active(chat_request)
        return call_parser(
            self._rp_cls,
            model_type=PARSER,
            stream_reasoning=chat_request.stream_reasoning if stream else False,
            # thinking on: see the module docstring; before 0.5.9 False for kimi_k2
            force_reasoning=glue.reasoning_from_request,
            **extra,
            **self._rp_tokenizer,
        )

    def _tool_parser(self, chat_request: Any) -> Any:
        route = self._glue.required_route if self._is_required(chat_request) else "auto"
        if route == "json-array":
            raise AdapterUnavailable(
                f"SGLang {self._version} parses a required or named tool_choice as a JSON "
                "array (JsonArrayParser), not with the kimi_k2 detector"
            )
        if route == "native":  # constrained by the detector's own grammar, then parsed by it
            return call_parser(self._fcp_cls, chat_request.tools, PARSER)
        if self._glue.owns_tool_format:
            parser = call_parser(
                self._fcp_cls,
                chat_request.tools,
                PARSER,
                tool_choice=chat_request.tool_choice,
                **self._fcp_tokenizer,
            )
            native, check = parser.owns_tool_format, "owns_tool_format"
        else:
            parser = call_parser(self._fcp_cls, chat_request.tools, PARSER)
            native = parser.detector.supports_structural_tag
            check = "detector.supports_structural_tag"
        if self._is_required(chat_request) and not call_parser(native):
            # The server would switch to its JSON-array parser here; not driven.
            raise AdapterGlueError(f"FunctionCallParser.{check}", "False for kimi_k2")
        return parser

    def _tool_call_id(
        self, name: str, tool_index: int, ids: RandomIds, history_count: int
    ) -> str | None:
        """``_process_tool_call_id`` for kimi_k2 (history_count: calls in earlier turns);
        0.5.1 mints ``call_{uuid4().hex[:24]}`` for every parser, reported by its shape."""
        if not self._glue.kimi_ids:
            return ids.mask(f"call_{uuid.uuid4().hex[:24]}")
        return f"functions.{name}:{history_count + tool_index}"

    def structural_tag(self, request: Request) -> str | None:
        """The structural tag the server compiles for this request, for ``k2conform grammar``
        (:func:`server_structural_tag`; this server runs no reasoning parser for a request
        that does not think); None when decoding is not constrained."""
        self.load()
        return server_structural_tag(self._fcp_cls, self._chat_request(request), PARSER)

    # --- the two parse modes --------------------------------------------------------------

    def parse_whole(self, request: Request, output: Delta) -> Result:
        self.load()
        chat_request = self._chat_request(request)
        text: str | None = output.text
        reasoning = None
        ids = _uuid_ids()
        if self._separates_reasoning(request, chat_request):
            parser = self._reasoning_parser(chat_request, stream=False)
            reasoning, text = call_parser(parser.parse_non_stream, text)
        calls: tuple[ToolCall, ...] = ()
        if tool_parsing_active(chat_request):
            parser = self._tool_parser(chat_request)
            if call_parser(parser.has_tool_call, text):
                # The server catches an exception here and keeps the raw text; we report
                # it as the parser's crash instead, which is the finding.
                text, items = call_parser(parser.parse_non_stream, text)
                history = history_tool_calls(chat_request)
                calls = tuple(
                    ToolCall(
                        name=item.name,
                        arguments=item.parameters,
                        id=self._tool_call_id(item.name, item.tool_index, ids, history),
                    )
                    for item in items
                )
        return Result(
            content=text if text else self._glue.no_content,  # 0.5.13 on: "", not null
            reasoning=reasoning if reasoning else None,
            tool_calls=calls,
            meta=ids.meta(version=self._version),
        )

    def open_stream(self, request: Request) -> StreamStep:
        """Chunks in the server's order; the finishing delta is the one with ``finish_reason``."""
        self.load()
        chat_request = self._chat_request(request)
        tools_active = tool_parsing_active(chat_request)
        reasoning_parser = (
            self._reasoning_parser(chat_request, stream=True)
            if self._separates_reasoning(request, chat_request)
            else None
        )
        ids = _uuid_ids()
        tool_parser = self._tool_parser(chat_request) if tools_active else None
        history = history_tool_calls(chat_request)
        return serving_step(
            reasoning_parser,
            tool_parser,
            self._glue,
            lambda name, index: self._tool_call_id(name, index, ids, history),
        )


def serving_step(
    reasoning_parser: Any | None,
    tool_parser: Any | None,
    glue: ServingGlue,
    call_id: Callable[[str, int], str | None],
) -> StreamStep:
    """``serving_chat``'s stream over its two parsers, chunk by chunk: the reasoning parser's
    reasoning, then the tool parser's text and calls (``call_id(name, tool_index)`` for a
    call's first delta), both ended on the finishing delta where the release ends them
    (``glue``), then the last call's unstreamed arguments (``_check_for_unstreamed_tool_args``)."""

    def step(delta: Delta, finished: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        text = delta.text
        if reasoning_parser is not None:
            reasoning, text = call_parser(reasoning_parser.parse_stream_chunk, text)
            if finished and glue.reasoning_stream_end:
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
            return events
        normal, items = call_parser(tool_parser.parse_stream_chunk, text)
        if finished and glue.stream_end:
            end_text, end_items = call_parser(tool_parser.parse_stream_end)
            normal = (normal or "") + (end_text or "")
            items = list(items) + list(end_items)
        if normal:
            events.append(StreamEvent(content=normal))
        for item in items:
            events.append(
                StreamEvent(
                    tool_calls=(
                        ToolCallDelta(
                            index=item.tool_index,
                            id=call_id(item.name, item.tool_index) if item.name else None,
                            name=item.name or None,
                            arguments=item.parameters,
                        ),
                    )
                )
            )
        if finished:
            rest = _unstreamed_arguments(tool_parser, prefix=glue.prefix_unstreamed)
            if rest is not None:
                events.append(StreamEvent(tool_calls=(rest,)))
        return events

    return step


def server_structural_tag(
    fcp_cls: Any, chat_request: Any, parser_name: str, reasoning_markers: Sequence[str] = ()
) -> str | None:
    """``serving_chat``'s tool-call constraint for a request, as its xgrammar backend gets it:
    ``get_structure_constraint`` (thinking_mode False: the reasoning parser owns the think
    block), the reasoning parser's markers (``reasoning_markers``, when one is on) taken out
    of its free text's excludes (``strip_structural_tag_excludes``), dumped as
    ``to_sampling_params`` does and sanitised as the backend does; None when decoding is not
    constrained."""
    if not tool_parsing_active(chat_request):
        return None
    parser = call_parser(fcp_cls, chat_request.tools, parser_name)
    constraint = call_parser(
        parser.get_structure_constraint,
        chat_request.tool_choice,
        parallel_tool_calls=chat_request.parallel_tool_calls,
        thinking_mode=False,
    )
    if constraint is None:
        return None
    if constraint[0] != "structural_tag":
        raise AdapterGlueError(
            "FunctionCallParser.get_structure_constraint",
            f"gave a {constraint[0]} constraint for {parser_name}, not a structural tag",
        )
    with glue_imports("sglang"):
        from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
        from sglang.srt.function_call.utils import strip_structural_tag_excludes
    if reasoning_markers:
        strip_structural_tag_excludes(constraint[1], reasoning_markers)
    tag = constraint[1].model_dump(by_alias=True)
    XGrammarGrammarBackend._sanitize_structural_format(tag.get("format"))
    return json.dumps(tag)


def history_tool_calls(chat_request: Any) -> int:
    """``_get_history_tool_calls_cnt``: the calls of the conversation's assistant turns."""
    return sum(
        len(list(getattr(m, "tool_calls", None) or ()))
        for m in chat_request.messages
        if m.role == "assistant"
    )


def tool_parsing_active(chat_request: Any) -> bool:
    """``_tool_call_parsing_active``: tools declared and tool_choice is not "none"."""
    return bool(chat_request.tools) and chat_request.tool_choice != "none"


def _tokenizer_argument(parser_cls: Any) -> dict[str, Any]:
    """``{"tokenizer": ...}`` for a parser class that takes the server's tokenizer, else {}."""
    if "tokenizer" in inspect.signature(parser_cls).parameters:
        return {"tokenizer": _kimi_tokenizer()}
    return {}


def _kimi_tokenizer() -> Any:
    """The project's Kimi tokenizer (markers at their real ids), standing in for the server's."""
    from k2conform.delivery.tokenizer import load_tokenizer

    return load_tokenizer()


def _uuid_ids() -> RandomIds:
    """``call_{uuid4().hex[:24]}``, the ids SGLang 0.5.1 mints, reported by their shape."""
    return RandomIds(re.compile(r"^call_[0-9a-f]{24}$"), "call_<random>")


def _unstreamed_arguments(tool_parser: Any, *, prefix: bool) -> ToolCallDelta | None:
    """``_check_for_unstreamed_tool_args``: after the finishing delta, the part of the last
    call's arguments (as the detector recorded them in ``prev_tool_call_arr``) that was
    not streamed yet: with ``prefix``, the rest when what was streamed is a prefix of it;
    before 0.5.16, ``json.dumps`` of them with the streamed part replaced once."""
    detector = getattr(tool_parser, "detector", tool_parser)
    recorded = getattr(detector, "prev_tool_call_arr", None)
    streamed = getattr(detector, "streamed_args_for_tool", None)
    if not recorded or not streamed:
        return None
    index = len(recorded) - 1
    if index >= len(streamed):
        return None
    expected = recorded[index].get("arguments", {})
    sent = streamed[index]
    if not prefix:
        expected = json.dumps(expected, ensure_ascii=False)
        rest = expected.replace(sent, "", 1) if sent in expected else ""
        return ToolCallDelta(index=index, arguments=rest) if rest else None
    if not isinstance(expected, str):
        expected = json.dumps(expected, ensure_ascii=False)
    rest = expected[len(sent) :] if expected.startswith(sent) else ""
    return ToolCallDelta(index=index, arguments=rest) if rest else None


def stand_in_torchvision() -> None:
    """Before 0.5.2x, ``import sglang`` reaches ``from torchvision.io import decode_jpeg`` (an
    image decoder no Kimi path calls), and no torchvision on PyPI loads beside the CPU torch
    (its operators are built for CUDA): a module whose ``decode_jpeg`` refuses stands in."""
    if importlib.util.find_spec("torchvision") is not None:
        return

    def decode_jpeg(*args: Any, **kwargs: Any) -> Any:
        raise AdapterGlueError(
            "torchvision.io.decode_jpeg", "a stand-in: torchvision is not installed"
        )

    package, io = types.ModuleType("torchvision"), types.ModuleType("torchvision.io")
    package.__spec__ = importlib.machinery.ModuleSpec("torchvision", None, is_package=True)
    io.__spec__ = importlib.machinery.ModuleSpec("torchvision.io", None)
    io.decode_jpeg, package.io = decode_jpeg, io
    sys.modules.setdefault("torchvision", package)
    sys.modules.setdefault("torchvision.io", io)
