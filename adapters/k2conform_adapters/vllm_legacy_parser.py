"""vLLM 0.10–0.19's ``kimi_k2`` tool parser, driven the way those releases' servers did.

Glue for the release gate (another environment, served over the adapter protocol with
``k2conform serve-adapter vllm-legacy``).  In these releases ``OpenAIServingChat`` calls the
tool parser (and, from 0.11.1, the ``kimi_k2`` reasoning parser) directly; ``SERVING`` says,
per release run, where it finds them and which of its steps it takes:

* at start-up ``ToolParserManager.get_tool_parser("kimi_k2")`` (``vllm.entrypoints.openai.
  tool_parsers``, from 0.13.0 ``vllm.tool_parsers``) and, with ``--reasoning-parser kimi_k2``,
  ``ReasoningParserManager.get_reasoning_parser("kimi_k2")`` (0.11.1 on, where ``kimi_k2``
  maps to DeepSeek-R1's parser until 0.14.0; from 0.16.0 the
  server asks ``vllm.parser.ParserManager``, which returns these same registry classes); per
  request ``tool_parser(tokenizer).adjust_request(request)`` (``serving_engine._preprocess_chat``;
  from 0.19.0 every tool parser is built with the request's tools too);
* one-shot (``chat_completion_full_generator``): with a reasoning parser, a fresh one's
  ``extract_reasoning(text, request)`` first, the tools parsed from its content.  0.10.0–
  0.11.0, tool_choice ``auto`` with tools: a fresh tool parser's ``extract_tool_calls``; when
  it reports ``tools_called`` the message is its content and calls (its ids), otherwise its
  content if non-empty, else the text.  From 0.11.1 the server's own
  ``OpenAIServing._parse_tool_calls_from_content`` (called here) does that step and the
  message's ``ToolCall(function=...)`` mints a fresh ``chatcmpl-tool-`` id for each call;
* streaming (``chat_completion_stream_generator``): one tool parser per choice when
  tool_choice is ``auto`` with tools, ``extract_tool_calls_streaming(previous_text,
  current_text, delta_text, previous_token_ids, current_token_ids, delta_token_ids, request)``
  per engine output (an empty output before the first token skipped); with a reasoning
  parser too, ``extract_reasoning_streaming`` until ``is_reasoning_end`` of the output's ids,
  then the tool parser from the content of that output on (``_reasoning_then_tools``; in
  0.11.1-0.12.0 from the next output on, the content of the ending one handed over); with a
  reasoning parser alone, ``extract_reasoning_streaming``.  On the last output, when that
  delta carries arguments, the "unstreamed tool arg tokens" check appends what
  ``prev_tool_call_arr`` holds beyond ``streamed_args_for_tool`` (from 0.14.0 through the
  server's own ``_create_remaining_args_delta``, which keeps that delta's id and name; the
  expected arguments are ``json.dumps`` of what the parser stored, from 0.17.0 a string as it
  is; 0.19.0 checks only once the parser has parsed a call).
  ``maybe_filter_parallel_tool_calls`` (0.12.0 on) changes nothing here: the parser cases do
  not send ``parallel_tool_calls=false``.

The server modelled is started with ``--reasoning-parser kimi_k2`` where the release has one
(as ``vllm``'s, ``K2CONFORM_VLLM_REASONING=0``: without it, for thinking-off requests).  A
named or ``required`` tool_choice is answered with structured outputs (guided JSON), not with
the kimi_k2 parser, so such cases are ``unavailable`` here (as for ``sglang-kt``): there is no
parser behaviour to test, and the adapter's glue is not at fault.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
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
from k2conform.adapter.glue import RandomIds, build_chat_request, event_of, load_once, tool_calls_of
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall

from k2conform_adapters.vllm_parser import (
    PROMPT_TOKEN_IDS,
    calls_from_content,
    carries_arguments,
    load_kimi_tokenizer,
    refuse_forced_choice,
    server_reasoning_parser,
)


@dataclasses.dataclass(frozen=True)
class ServingChat:
    """Where one release's ``OpenAIServingChat`` finds the Kimi parsers, and its steps."""

    #: The module of ``DeltaMessage``, ``DeltaToolCall`` and ``ToolCall``.
    protocol: str
    #: The module of ``ToolParserManager``.
    tool_parsers: str
    #: The module of ``OpenAIServing`` whose ``_parse_tool_calls_from_content`` the one-shot
    #: path calls; None: the message is built from ``extract_tool_calls`` itself (0.10-0.11.0).
    serving_engine: str | None
    #: Whether the release registers a ``kimi_k2`` reasoning parser (0.11.1 on).
    reasoning: bool
    #: The module of ``OpenAIServingChat`` whose ``_create_remaining_args_delta`` builds the
    #: end-of-stream arguments delta (0.14.0 on: it keeps the delta's id and name); None: a
    #: delta of the arguments alone.
    serving_chat: str | None = None
    #: The module of ``ChatCompletionRequest``; None: ``protocol`` (before 0.15.0).
    request_protocol: str | None = None
    #: Whether the tool parser is built with the request's tools (0.19.0 on).
    parser_takes_tools: bool = False
    #: Whether a one-shot call keeps the parser's id, else gets ``make_tool_call_id`` of the
    #: model's id type, ``functions.NAME:IDX`` for Kimi (0.16.0 on); otherwise every call
    #: gets ``ToolCall``'s fresh ``chatcmpl-tool-`` id.
    native_ids: bool = False
    #: Whether, with both parsers, every output until the reasoning has ended goes to the
    #: reasoning parser and the tool parser starts at the next output (0.11.1-0.12.0); from
    #: 0.13.0 the output that ends the reasoning goes on to the tool parser.
    tools_from_next_output: bool = False
    #: Whether the end-of-stream step takes an arguments string as it is (0.17.0 on; the
    #: kimi_k2 parser stores strings), not ``json.dumps`` of it.
    raw_string_arguments: bool = False
    #: Whether that step runs only when the tool parser has parsed a call (0.19.0).
    needs_parsed_call: bool = False


_OPENAI = "vllm.entrypoints.openai"
_REGEX_PARSER = ServingChat(f"{_OPENAI}.protocol", f"{_OPENAI}.tool_parsers", None, False)
_SERVING_ENGINE = ServingChat(
    f"{_OPENAI}.protocol",
    f"{_OPENAI}.tool_parsers",
    f"{_OPENAI}.serving_engine",
    True,
    tools_from_next_output=True,
)
_TOOL_PARSERS_MOVED = ServingChat(
    f"{_OPENAI}.protocol", "vllm.tool_parsers", f"{_OPENAI}.serving_engine", True
)
_CHAT_COMPLETION = ServingChat(
    f"{_OPENAI}.engine.protocol",
    "vllm.tool_parsers",
    f"{_OPENAI}.engine.serving",
    True,
    f"{_OPENAI}.chat_completion.serving",
    f"{_OPENAI}.chat_completion.protocol",
)
_NATIVE_IDS = dataclasses.replace(_CHAT_COMPLETION, native_ids=True)
_RAW_STRINGS = dataclasses.replace(_NATIVE_IDS, raw_string_arguments=True)
#: The releases run with this glue (docs/releases.md), each with its server's steps.
SERVING = {
    "0.10.0": _REGEX_PARSER,
    "0.10.1": _REGEX_PARSER,
    "0.11.0": _REGEX_PARSER,
    "0.11.1": _SERVING_ENGINE,
    "0.12.0": _SERVING_ENGINE,
    "0.13.0": _TOOL_PARSERS_MOVED,
    "0.14.0": dataclasses.replace(_TOOL_PARSERS_MOVED, serving_chat=f"{_OPENAI}.serving_chat"),
    "0.15.0": _CHAT_COMPLETION,
    "0.16.0": _NATIVE_IDS,
    "0.17.0": _RAW_STRINGS,
    "0.18.0": _RAW_STRINGS,
    "0.19.0": dataclasses.replace(_RAW_STRINGS, parser_takes_tools=True, needs_parsed_call=True),
}


class VllmLegacyAdapter(Adapter):
    name = "vllm-legacy"
    package = "vllm"
    supported_versions = tuple(SERVING)
    description = "vLLM 0.10-0.19 OpenAI server: --tool-call-parser kimi_k2, called directly"
    stop_string_holdback = True  # the v1 engine's detokenizer (stop_buffer_length)

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer

    @load_once
    def load(self) -> None:
        installed = self.version()
        if installed not in SERVING:
            raise AdapterUnavailable(
                f"vllm {installed} is installed here; this glue drives vllm "
                f"{', '.join(SERVING)}: run one in its own environment with --adapter "
                "'cmd:/that/venv/bin/k2conform serve-adapter vllm-legacy'"
            )
        self._serving = SERVING[installed]
        vllm = import_parser_package("vllm")
        with glue_imports(f"vllm {installed}"):
            protocol = importlib.import_module(self._serving.protocol)
            requests = importlib.import_module(self._serving.request_protocol or protocol.__name__)
            tool_parsers = importlib.import_module(self._serving.tool_parsers)
        require_api(requests, "ChatCompletionRequest", owner_name=requests.__name__)
        require_api(
            protocol,
            "DeltaMessage",
            "DeltaToolCall",
            "DeltaFunctionCall",
            owner_name=protocol.__name__,
        )
        require_api(tool_parsers, "ToolParserManager", owner_name=tool_parsers.__name__)
        self._parser_cls = _registered(tool_parsers.ToolParserManager, "get_tool_parser")
        require_api(
            self._parser_cls,
            "extract_tool_calls",
            "extract_tool_calls_streaming",
            "adjust_request",
            owner_name="KimiK2ToolParser",
        )
        self._parse_from_content = self._reasoning_cls = None
        if self._serving.serving_engine is not None:
            with glue_imports(f"vllm {installed}"):
                engine = importlib.import_module(self._serving.serving_engine)
            require_api(engine, "OpenAIServing", owner_name=engine.__name__)
            require_api(
                engine.OpenAIServing, "_parse_tool_calls_from_content", owner_name="OpenAIServing"
            )
            require_api(protocol, "ToolCall", owner_name=protocol.__name__)
            self._parse_from_content = engine.OpenAIServing._parse_tool_calls_from_content
        if self._serving.reasoning:
            with glue_imports(f"vllm {installed}"):
                from vllm.reasoning import ReasoningParserManager
            self._reasoning_cls = _registered(ReasoningParserManager, "get_reasoning_parser")
            require_api(
                self._reasoning_cls,
                "extract_reasoning",
                "extract_reasoning_streaming",
                "is_reasoning_end",
                "extract_content_ids",
                owner_name="kimi_k2 reasoning parser",
            )
        if self._serving.native_ids:
            with glue_imports(f"vllm {installed}"):
                from vllm.entrypoints import chat_utils
            require_api(chat_utils, "make_tool_call_id", owner_name="vllm.entrypoints.chat_utils")
            self._make_tool_call_id = chat_utils.make_tool_call_id
        self._remaining_args_delta = None
        if self._serving.serving_chat is not None:
            with glue_imports(f"vllm {installed}"):
                serving_chat = importlib.import_module(self._serving.serving_chat)
            require_api(serving_chat, "OpenAIServingChat", owner_name=serving_chat.__name__)
            chat_cls = serving_chat.OpenAIServingChat
            require_api(chat_cls, "_create_remaining_args_delta", owner_name="OpenAIServingChat")
            self._remaining_args_delta = chat_cls._create_remaining_args_delta
        self._tokenizer = load_kimi_tokenizer(self._tokenizer)
        self._protocol = protocol
        self._request_cls = requests.ChatCompletionRequest
        fields = protocol.DeltaMessage.model_fields
        self._reasoning_field = "reasoning" if "reasoning" in fields else "reasoning_content"
        self._version = vllm.__version__

    def _chat_request(self, request: Request) -> Any:
        refuse_forced_choice(request.tool_choice, self._version)
        # Before the kimi_k2 reasoning parser nothing read the thinking switch.
        return build_chat_request(
            self._request_cls,
            request,
            choice_without_tools=None,
            template_kwargs=self._serving.reasoning,
        )

    def _prepare(self, request: Request) -> tuple[Any, bool, Any]:
        """The request after ``adjust_request``, whether tools are parsed ("auto" with tools),
        and a fresh reasoning parser when the modelled server runs one."""
        self.load()
        chat_request = self._chat_request(request)
        auto = bool(chat_request.tools) and chat_request.tool_choice in ("auto", None)
        if chat_request.tool_choice != "none":
            parser = self._new_tool_parser(chat_request)
            chat_request = call_parser(parser.adjust_request, request=chat_request)
        reasoning = None
        if self._reasoning_cls is not None and (request.thinking or server_reasoning_parser()):
            reasoning = call_parser(
                self._reasoning_cls,
                self._tokenizer,
                chat_template_kwargs=chat_request.chat_template_kwargs,
            )
        return chat_request, auto, reasoning

    def _new_tool_parser(self, chat_request: Any) -> Any:
        tools = (chat_request.tools,) if self._serving.parser_takes_tools else ()
        return call_parser(self._parser_cls, self._tokenizer, *tools)

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat_request, auto, reasoning_parser = self._prepare(request)
        meta = {"version": self._version}
        reasoning, content = None, output.text
        if reasoning_parser is not None:
            reasoning, content = call_parser(
                reasoning_parser.extract_reasoning, output.text, request=chat_request
            )
            if not chat_request.include_reasoning:
                reasoning = None
        if self._parse_from_content is None:
            return self._regex_parser_message(chat_request, auto, content, meta)
        calls, content = calls_from_content(
            self._parse_from_content, chat_request, self._tokenizer, content, self._parser_cls
        )
        ids = RandomIds.chatcmpl()
        tool_calls: tuple[ToolCall, ...] = ()
        if auto and calls:  # the "auto" branch; "none" or no tools keep the content
            made = [self._message_call(n, call) for n, call in enumerate(calls)]
            tool_calls = tool_calls_of(made, ids)
        return Result(
            content=content, reasoning=reasoning, tool_calls=tool_calls, meta=ids.meta(**meta)
        )

    def _message_call(self, history_count: int, call: Any) -> Any:
        """The message's ``ToolCall`` for one parsed call (the conversation has no earlier
        calls, so ``get_history_tool_calls_cnt`` starts the count at 0)."""
        if not self._serving.native_ids:
            return self._protocol.ToolCall(function=call, type="function")
        tool_id = call.id or call_parser(
            self._make_tool_call_id, id_type="kimi_k2", func_name=call.name, idx=history_count
        )
        return self._protocol.ToolCall(id=tool_id, function=call)

    def _regex_parser_message(
        self, chat_request: Any, auto: bool, content: str | None, meta: dict[str, Any]
    ) -> Result:
        """0.10.0-0.11.0's message: the parser's own calls and ids, else its content."""
        if not auto:
            return Result(content=content, meta=meta)
        parser = self._new_tool_parser(chat_request)
        info = call_parser(parser.extract_tool_calls, content, request=chat_request)
        if info.tools_called:
            calls = tool_calls_of(info.tool_calls, RandomIds.chatcmpl())
            return Result(content=info.content, tool_calls=calls, meta=meta)
        return Result(content=info.content if info.content else content, meta=meta)

    def open_stream(self, request: Request) -> StreamStep:
        chat_request, auto, reasoning_parser = self._prepare(request)
        tool_parser = self._new_tool_parser(chat_request) if auto else None
        stream = _ServerStream(
            chat_request,
            tool_parser,
            reasoning_parser,
            self._protocol,
            self._remaining_args_delta,
            self._serving,
        )
        ids = RandomIds.chatcmpl()
        reasoning_field = self._reasoning_field

        def step(delta: Delta, finished: bool) -> list[StreamEvent]:
            event = event_of(
                stream.step(delta, last=finished), ids, reasoning_field=reasoning_field
            )
            return [event] if event is not None else []

        return step


def _take_content(message: Any) -> str:
    """The content a reasoning step split off, taken out of its message: the server hands it
    to the tool parser as the start of its text."""
    if message is None or not message.content:
        return ""
    content, message.content = message.content, None
    return content


def _registered(manager: Any, getter: str) -> Any:
    """``manager.getter("kimi_k2")`` as the server calls it at start-up."""
    require_api(manager, getter, owner_name=manager.__name__)
    try:
        return getattr(manager, getter)("kimi_k2")
    except (KeyError, TypeError) as exc:
        raise AdapterGlueError(f"{manager.__name__}.{getter}('kimi_k2')", str(exc)) from exc


class _ServerStream:
    """One choice of ``chat_completion_stream_generator``: its running texts and token ids,
    and which parser each engine output goes to."""

    def __init__(
        self,
        chat_request: Any,
        tool_parser: Any,
        reasoning_parser: Any,
        protocol: Any,
        remaining_args_delta: Any,
        serving: ServingChat,
    ) -> None:
        self._request = chat_request
        self._serving = serving
        self._remaining_args_delta = remaining_args_delta
        self._tools = tool_parser
        self._reasoning = reasoning_parser
        self._protocol = protocol
        self._text, self._ids = "", []
        self._tokens_seen = 0
        self._reasoning_ended = False
        self._content_handed_over = False

    def step(self, delta: Delta, last: bool) -> Any:
        if not delta.text and not delta.token_ids and not self._tokens_seen:
            return None  # "chunked prefill": no chunk before the first token
        token_ids = list(delta.token_ids)
        tracked = self._tools is not None or self._reasoning is not None
        current_text, current_ids = self._text + delta.text, self._ids + token_ids
        if self._tools is not None and self._reasoning is not None:
            message, current_text, current_ids = self._reasoning_then_tools(
                delta.text, token_ids, current_text, current_ids
            )
        elif self._tools is not None:
            message = self._tool_delta(delta.text, current_text, current_ids, token_ids)
        elif self._reasoning is not None:
            message = call_parser(
                self._reasoning.extract_reasoning_streaming,
                self._text,
                current_text,
                delta.text,
                self._ids,
                current_ids,
                token_ids,
            )
        elif delta.text:
            message = self._protocol.DeltaMessage(content=delta.text)
        else:
            message = None  # a chunk with nothing in it
        if tracked:
            self._text, self._ids = current_text, current_ids
        self._tokens_seen += len(token_ids)
        if last and self._tools is not None and carries_arguments(message):
            message = self._unstreamed_args(message)
        return message

    def _tool_delta(
        self, delta_text: str, current_text: str, current_ids: list[int], token_ids: list[int]
    ) -> Any:
        return call_parser(
            self._tools.extract_tool_calls_streaming,
            previous_text=self._text,
            current_text=current_text,
            delta_text=delta_text,
            previous_token_ids=self._ids,
            current_token_ids=current_ids,
            delta_token_ids=token_ids,
            request=self._request,
        )

    def _reasoning_then_tools(
        self, delta_text: str, token_ids: list[int], current_text: str, current_ids: list[int]
    ) -> tuple[Any, str, list[int]]:
        """Reasoning until its end shows in an output's ids; from that output on, the tool
        parser, first handed everything after the reasoning as one delta (0.13)."""
        message = None
        next_output = self._serving.tools_from_next_output
        if not self._reasoning_ended:
            prompt_ended = call_parser(self._reasoning.is_reasoning_end, PROMPT_TOKEN_IDS)
            if prompt_ended and not next_output:
                self._reasoning_ended, current_ids = True, token_ids
            else:
                message = call_parser(
                    self._reasoning.extract_reasoning_streaming,
                    self._text,
                    current_text,
                    delta_text,
                    self._ids,
                    current_ids,
                    token_ids,
                )
                if prompt_ended:  # 0.11.1-0.12.0 look at the prompt after the reasoning step
                    self._reasoning_ended, current_ids = True, token_ids
                    current_text = _take_content(message)
                if call_parser(self._reasoning.is_reasoning_end, token_ids):
                    self._reasoning_ended = True
                    current_ids = call_parser(self._reasoning.extract_content_ids, token_ids)
                    current_text = _take_content(message)
            if next_output:  # this output was the reasoning parser's
                return message, current_text, current_ids
        if self._reasoning_ended:
            if not self._content_handed_over:
                self._content_handed_over = True
                self._text, self._ids = "", []
                delta_text, token_ids = current_text, current_ids
            message = self._tool_delta(delta_text, current_text, current_ids, token_ids)
        return message, current_text, current_ids

    def _unstreamed_args(self, message: Any) -> Any:
        """The server's end-of-stream step: send what partial-JSON parsing autocompleted."""
        parser, protocol = self._tools, self._protocol
        called = len(parser.prev_tool_call_arr) > 0
        if self._serving.needs_parsed_call and not called:
            return message
        index = len(parser.prev_tool_call_arr) - 1 if called else 0
        latest = message.tool_calls[0].function.arguments
        latest_len = len(latest) if isinstance(latest, str) else 0
        args = parser.prev_tool_call_arr[index].get("arguments", {})
        raw = self._serving.raw_string_arguments and isinstance(args, str)
        expected_call = args if raw else json.dumps(args, ensure_ascii=False)
        actual_call = parser.streamed_args_for_tool[index]
        if latest_len > 0:
            actual_call = actual_call[:-latest_len]
        remaining = expected_call.replace(actual_call, "", 1)
        if self._remaining_args_delta is not None:
            return call_parser(self._remaining_args_delta, message, remaining, index)
        function = protocol.DeltaFunctionCall(arguments=remaining).model_dump(exclude_none=True)
        return protocol.DeltaMessage(
            tool_calls=[protocol.DeltaToolCall(index=index, function=function)]
        )
