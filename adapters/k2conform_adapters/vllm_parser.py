"""vLLM 0.33.0's ``kimi_k2`` parser, driven the way its OpenAI chat server drives it.

What the server does (``vllm/entrypoints/openai/chat_completion/serving.py``):

* at start-up, ``ParserManager.get_parser(tool_parser_name="kimi_k2",
  reasoning_parser_name=..., enable_auto_tools=True, tokenizer=...)`` composes a
  ``DelegatingParser`` subclass around the tool-parser registry's ``KimiK2ToolParser``
  (and, with ``--reasoning-parser kimi_k2``, the ``kimi_k2`` reasoning parser);
* the tokenizer every parser gets is the one the server loaded, wrapped in
  ``get_cached_tokenizer`` (``all_special_ids``, ``all_special_tokens``, ``get_vocab()`` and
  ``len()`` computed once): the adapter wraps the project's stand-in with the release's own;
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

The adapter calls exactly those objects; :data:`RELEASES` says what each release's server
does.  In 0.20.0-0.32.0 (``inline``) those two steps were still inline in ``serving.py``:
one-shot, ``parse`` then the message rule of ``chat_completion_full_generator`` (re-stated in
``inline_message_fields``; the ids are that release's ``make_tool_call_id()``); streaming,
``parse_delta(..., finished=...)`` per engine output, empty outputs before the first token
skipped, no ``tool_choice`` filter after it; ``get_parser`` takes the tokenizer and the parser
``set_prompt_token_ids`` from 0.32.0 on. In 0.20.0-0.24.0 (``server_ids``) the server, not the
parser, applies the Kimi id type; 0.20.0-0.23.0 (``split_adjust``) adjust the request with the
two parsers separately. 0.20.0 and 0.21.0 (``separate_parsers``) have no ``parse``: their
``serving.py`` builds the one-shot message from ``extract_reasoning`` and
``_parse_tool_calls_from_content`` and streams through ``parse_delta`` without ``finished=``.
Before 0.24.0 (which gives the tool parser the ``kimi`` structural tag) ``KimiK2ToolParser``
keeps ``supports_required_and_named = True``: ``adjust_request`` constrains a named or
``required`` tool_choice to JSON from the tools' schema, and that JSON is parsed as JSON (by
``serving.py`` in 0.20.0, by ``DelegatingParser``'s JSON path in 0.21.0-0.23.0), so an output
in Kimi's format cannot occur and such cases are ``unavailable`` there, as in vllm-legacy's
releases. 0.28.0's ``get_parser`` returns the ``KimiK2Parser`` engine itself when both parsers
are kimi_k2 (``ParserManager._get_parser_engine_cls``): the server builds, adjusts with and
parses through that class as it does through a composition.

The server is the one ``vllm-server`` runs: started with ``--tool-call-parser kimi_k2
--reasoning-parser kimi_k2``, so every request's parser is the composition with the reasoning
parser, and ``thinking`` is the client's ``chat_template_kwargs={"thinking": ...}``
(``KimiK2Parser`` reads it: thinking off builds ``kimi_k2_config(thinking=False)`` and its
``extract_reasoning`` / ``extract_content_ids`` / ``count_reasoning_tokens`` pass everything
through).  ``K2CONFORM_VLLM_REASONING=0`` models a server started without
``--reasoning-parser`` instead, for thinking-off requests (thinking-on ones need it).

Usage counting, as 0.33.0's ``serving.py`` does it with a parser: one-shot,
``parser.count_reasoning_tokens(token_ids)`` right after ``parse`` (``chat_completion_full_
generator``, every request); streaming, with a reasoning parser configured
(``_include_reasoning_tokens_details``), ``count_reasoning_tokens(all generated ids)`` once after
the last output (no ``continuous_usage_stats``).  The count goes to ``meta``, not compared.
"""

from __future__ import annotations

import importlib
import json
import os
import types
from dataclasses import dataclass, replace
from collections.abc import Callable, Sequence
from typing import Any

from k2conform import markers
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
from k2conform.adapter.glue import (
    CASE_MESSAGES,
    MODEL_NAME,
    RandomIds,
    build_chat_request,
    event_of,
    load_once,
    tool_calls_of,
)
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall

from k2conform_adapters.reproducible import Reproducible

#: The rendered generation prompt's tail, ``<|im_assistant|>assistant<|im_middle|>``,
#: reduced to its marker ids: what ``parse_delta`` inspects for an open ``<think>``.
PROMPT_TOKEN_IDS = [
    markers.SPECIAL_TOKEN_IDS[markers.IM_ASSISTANT],
    markers.SPECIAL_TOKEN_IDS[markers.IM_MIDDLE],
]


@dataclass(frozen=True)
class ServingRelease:
    """What one release's server does around the composed parser (docs/releases.md)."""

    #: ``serving.py`` drives the parser itself (``parse`` then ``inline_message_fields``'s
    #: rule; ``parse_delta(..., finished=...)`` per output), not ``message_assembly`` and
    #: ``ChatStreamProcessor`` (0.33.0)
    inline: bool = True
    #: the server hands the tokenizer to ``get_parser`` and the prompt's token ids to
    #: ``set_prompt_token_ids``
    prompt_ids: bool = False
    #: where ``make_tool_call_id`` lives (``vllm.renderers.chat_utils`` from 0.32.0 on)
    chat_utils: str = "vllm.entrypoints.chat_utils"
    #: the renderer (``entrypoints/serve/render/serving.py``) adjusts the request with the
    #: reasoning parser's and then the tool parser's own ``adjust_request``, not the composed
    #: parser's; ``get_parser`` takes no ``is_harmony``; one-shot ``parse`` gets no token ids
    split_adjust: bool = False
    #: ``serving.py``, not the parser, knows the tool-call id type
    #: (``get_tool_call_id_type``): it builds the parsers without ``model_config`` and mints
    #: ``functions.NAME:IDX`` itself for a one-shot call that has no id
    server_ids: bool = False
    #: the server also tells each stream's ``_stream_state`` the id type and the history's
    #: call count (0.20.0's ``StreamState`` has neither field)
    stream_state_ids: bool = False
    #: no composed ``parse``: the one-shot message comes from the reasoning parser's
    #: ``extract_reasoning`` and ``OpenAIServing._parse_tool_calls_from_content`` (the tool
    #: parser class), streams go through ``parse_delta`` without ``finished=``, and the last
    #: output sends what ``prev_tool_call_arr`` holds beyond ``streamed_args_for_tool``
    #: (``_create_remaining_args_delta``)
    separate_parsers: bool = False


#: Each generation of the server's steps around the parser, oldest first.
SEPARATE_PARSERS = ServingRelease(split_adjust=True, server_ids=True, separate_parsers=True)
STREAM_STATE_IDS = replace(SEPARATE_PARSERS, stream_state_ids=True)
COMPOSED_PARSE = replace(STREAM_STATE_IDS, separate_parsers=False)
COMPOSED_ADJUST = replace(COMPOSED_PARSE, split_adjust=False)
PARSER_IDS = replace(COMPOSED_ADJUST, server_ids=False, stream_state_ids=False)
PROMPT_IDS = replace(PARSER_IDS, prompt_ids=True, chat_utils="vllm.renderers.chat_utils")
STREAM_PROCESSOR = replace(PROMPT_IDS, inline=False)

#: The releases the glue was checked against (each run on the whole corpus), and theirs.
RELEASES = {
    "0.20.0": SEPARATE_PARSERS,
    "0.21.0": STREAM_STATE_IDS,
    "0.23.0": COMPOSED_PARSE,
    "0.24.0": COMPOSED_ADJUST,
    "0.25.0": PARSER_IDS,
    "0.25.1": PARSER_IDS,
    "0.26.0": PARSER_IDS,
    "0.27.0": PARSER_IDS,
    "0.27.1": PARSER_IDS,
    "0.28.0": PARSER_IDS,
    "0.29.0": PARSER_IDS,
    "0.30.0": PARSER_IDS,
    "0.31.0": PARSER_IDS,
    "0.32.0": PROMPT_IDS,
    "0.33.0": STREAM_PROCESSOR,
}


#: Where a release keeps ``get_cached_tokenizer``, the wrapper vLLM's server puts around every
#: HF tokenizer it loads (0.33.0: ``CachedHfTokenizer.from_pretrained`` returns
#: ``vllm.tokenizers.hf.get_cached_tokenizer(tokenizer)``); older releases have it in
#: ``vllm.transformers_utils.tokenizer``.
CACHED_TOKENIZER_MODULES = ("vllm.tokenizers.hf", "vllm.transformers_utils.tokenizer")


def get_cached_tokenizer() -> Callable[[Any], Any]:
    """The installed release's ``get_cached_tokenizer``, or a glue error if neither module of
    :data:`CACHED_TOKENIZER_MODULES` has it."""
    for name in CACHED_TOKENIZER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        function = getattr(module, "get_cached_tokenizer", None)
        if callable(function):
            return function
    raise AdapterGlueError(
        "get_cached_tokenizer", f"in none of {', '.join(CACHED_TOKENIZER_MODULES)}"
    )


def load_kimi_tokenizer(tokenizer: Any | None = None) -> Any:
    """The tokenizer as vLLM's server holds it: ``tokenizer`` (default the project's Kimi
    tokenizer, markers at their real ids) wrapped in the release's own
    ``get_cached_tokenizer`` (:func:`get_cached_tokenizer`), which caches
    ``all_special_ids``, ``all_special_tokens``, ``get_vocab()`` and ``len()``."""
    if tokenizer is None:
        from k2conform.delivery.tokenizer import load_tokenizer

        tokenizer = load_tokenizer()
    wrap = get_cached_tokenizer()
    try:
        return wrap(tokenizer)
    except Exception as exc:  # noqa: BLE001 - the tokenizer lacks what this release's wrapper reads
        raise AdapterGlueError("get_cached_tokenizer", f"{type(exc).__name__}: {exc}") from exc


class VllmAdapter(Reproducible, Adapter):
    """vLLM's composed ``kimi_k2`` parser (tool parser + optional reasoning parser)."""

    repro_driver = "vllm"
    name = "vllm"
    package = "vllm"
    supported_versions = tuple(RELEASES)  # each ran the whole corpus with no adapter-error cell
    description = "vLLM OpenAI server: --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]"
    coverage_files = ("vllm/parser/kimi_k2.py", "vllm/tool_parsers/kimi_k2_tool_parser.py")
    #: vllm/v1/engine/detokenizer.py holds back ``stop_buffer_length`` characters of text.
    stop_string_holdback = True
    coverage_shared_files = (
        "vllm/parser/engine/parser_engine.py",
        "vllm/parser/engine/streaming_parser_engine.py",
        "vllm/parser/engine/token_id_scanner.py",
        "vllm/parser/engine/incremental_lexer.py",
        "vllm/parser/engine/adapters.py",
        "vllm/parser/engine/parser_engine_config.py",
    )
    serving_files = (
        "vllm/entrypoints/openai/chat_completion/serving.py",
        "vllm/entrypoints/openai/chat_completion/stream_processor.py",
        "vllm/entrypoints/openai/chat_completion/message_assembly.py",
        "vllm/parser/abstract_parser.py",
        "vllm/parser/parser_manager.py",
        "vllm/reasoning/kimi_k2_reasoning_parser.py",
    )

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer

    # --- glue ---------------------------------------------------------------------------

    @load_once
    def load(self) -> None:
        vllm = import_parser_package("vllm")
        self._version = vllm.__version__
        # a newer release than the table knows is taken to serve as its newest does
        release = self._release = RELEASES.get(self._version, RELEASES[self.supported_versions[-1]])
        self._inline, self._split, self._prompt_ids = (
            release.inline,
            release.split_adjust,
            release.prompt_ids,
        )
        with glue_imports("vllm"):
            from vllm.entrypoints.openai.chat_completion import protocol
            from vllm.parser import parser_manager
            from vllm.parser.abstract_parser import DelegatingParser
            from vllm.tool_parsers import ToolParserManager

        require_api(parser_manager, "ParserManager", owner_name="vllm.parser.parser_manager")
        require_api(parser_manager.ParserManager, "get_parser", owner_name="ParserManager")
        require_api(ToolParserManager, "get_tool_parser", owner_name="ToolParserManager")
        require_api(
            DelegatingParser,
            *(() if release.separate_parsers else ("parse",)),
            "parse_delta",
            "adjust_request",
            *(("set_prompt_token_ids",) if self._prompt_ids else ()),
            owner_name="DelegatingParser",
        )
        require_api(protocol, "ChatCompletionRequest", owner_name="chat_completion.protocol")
        # get_tool_call_id_type() reads hf_config.model_type: a Kimi K2 checkpoint says
        # "kimi_k2", which makes any id the parser itself mints ``functions.NAME:IDX``.
        self._model_config = types.SimpleNamespace(
            model=MODEL_NAME,
            hf_config=types.SimpleNamespace(model_type="kimi_k2"),
            hf_text_config=types.SimpleNamespace(model_type="kimi_k2"),
            hf_overrides={},
        )
        self._load_serving_steps()
        self._tokenizer = load_kimi_tokenizer(self._tokenizer)
        self._compose(parser_manager.ParserManager, ToolParserManager)
        self._request_cls = protocol.ChatCompletionRequest

    def _load_serving_steps(self) -> None:
        """The server's own steps around the parser: 0.33's helpers, or the id minting the
        inline generation's message rule needs."""
        self._server_ids: tuple[str, int] | None = None
        self._remaining_args_delta: Callable[..., Any] | None = None
        release = self._release
        if release.separate_parsers:
            with glue_imports(f"vllm {self._version}"):
                from vllm.entrypoints.openai.chat_completion import serving
                from vllm.entrypoints.openai.engine import serving as engine
            require_api(engine, "OpenAIServing", owner_name=engine.__name__)
            require_api(
                engine.OpenAIServing, "_parse_tool_calls_from_content", owner_name="OpenAIServing"
            )
            require_api(serving, "OpenAIServingChat", owner_name=serving.__name__)
            chat_cls = serving.OpenAIServingChat
            require_api(chat_cls, "_create_remaining_args_delta", owner_name="OpenAIServingChat")
            self._parse_from_content = engine.OpenAIServing._parse_tool_calls_from_content
            self._remaining_args_delta = chat_cls._create_remaining_args_delta
        if self._inline:
            with glue_imports(f"vllm {self._version}"):
                module = importlib.import_module(release.chat_utils)
            require_api(module, "make_tool_call_id", owner_name=module.__name__)
            self._make_tool_call_id = module.make_tool_call_id
            if release.server_ids:
                require_api(
                    module,
                    "get_tool_call_id_type",
                    "get_history_tool_calls_cnt",
                    owner_name=module.__name__,
                )
                id_type = module.get_tool_call_id_type(self._model_config)
                history = (
                    module.get_history_tool_calls_cnt(list(CASE_MESSAGES))
                    if id_type == "kimi_k2"
                    else 0
                )
                self._server_ids = (id_type, history)
            return
        with glue_imports("vllm"):
            from vllm.entrypoints.openai.chat_completion import message_assembly, stream_processor
        require_api(
            message_assembly,
            "assemble_chat_message_fields",
            owner_name="chat_completion.message_assembly",
        )
        require_api(
            stream_processor, "ChatStreamProcessor", owner_name="chat_completion.stream_processor"
        )
        require_api(stream_processor.ChatStreamProcessor, "step", owner_name="ChatStreamProcessor")
        self._assemble = message_assembly.assemble_chat_message_fields
        self._processor_cls = stream_processor.ChatStreamProcessor

    def _compose(self, manager: Any, tool_parsers: Any) -> None:
        """``ParserManager.get_parser`` as the server calls it at start-up, with and without
        the reasoning parser (it validates the tokenizer, too, where it takes one)."""
        tokenizer = {"tokenizer": self._tokenizer} if self._prompt_ids else {}
        harmony = {} if self._split else {"is_harmony": False}
        try:
            registered = tool_parsers.get_tool_parser("kimi_k2")
            self._parser_cls = {
                thinking: manager.get_parser(
                    tool_parser_name="kimi_k2",
                    reasoning_parser_name="kimi_k2" if thinking else None,
                    enable_auto_tools=True,
                    model_name=MODEL_NAME,
                    **harmony,
                    **tokenizer,
                )
                for thinking in (False, True)
            }
        except Exception as exc:  # the server would not start: glue
            raise AdapterGlueError(
                "ParserManager.get_parser", f"{type(exc).__name__}: {exc}"
            ) from exc
        # Before 0.24.0's structural tag the tool parser keeps the default True: adjust_request
        # then constrains a named or required tool_choice to JSON (guided decoding).
        self._json_forced_choice = getattr(registered, "supports_required_and_named", False)
        # 0.28.0's manager hands back the parser engine both kimi_k2 adapters share.
        engine = getattr(registered, "_parser_engine_cls", None)
        for cls in self._parser_cls.values():
            if cls is None or (cls.tool_parser_cls is not registered and cls is not engine):
                raise AdapterGlueError("ParserManager.get_parser", "did not compose kimi_k2")

    def _new_parser(self, cls: Any, chat_request: Any) -> Any:
        return call_parser(
            cls,
            self._tokenizer,
            chat_request.tools,
            chat_template_kwargs=chat_request.chat_template_kwargs,
            model_config=self._model_config,
        )

    def _serving_parser(self, cls: Any, chat_request: Any, *, stream: bool) -> Any:
        """The parser ``serving.py`` builds for a choice (``server_ids``: without
        ``model_config``; ``stream_state_ids``: a stream's is told the id type and the
        history's call count)."""
        if self._server_ids is None:
            return self._new_parser(cls, chat_request)
        parser = call_parser(
            cls,
            self._tokenizer,
            chat_request.tools,
            chat_template_kwargs=chat_request.chat_template_kwargs,
        )
        if stream and self._release.stream_state_ids:
            require_api(parser, "_stream_state", owner_name="DelegatingParser")
            state = parser._stream_state
            state.tool_call_id_type, state.history_tool_call_cnt = self._server_ids
        return parser

    def _mint_id(self, name: str, n: int) -> str:
        """``make_tool_call_id`` for the message's n-th kept call when it has no id."""
        if self._server_ids is None:
            return call_parser(self._make_tool_call_id)
        id_type, history = self._server_ids
        return call_parser(
            self._make_tool_call_id, id_type=id_type, func_name=name, idx=history + n
        )

    def _prepare(self, request: Request) -> tuple[Any, Any]:
        """The request after ``adjust_request`` (on its own instance, as the renderer does)."""
        self.load()
        cls = self._parser_cls[request.thinking or server_reasoning_parser()]
        chat_request = build_chat_request(self._request_cls, request, choice_without_tools=None)
        if self._json_forced_choice and chat_request.tools:
            refuse_forced_choice(request.tool_choice, self._version)
        if not self._split:
            chat_request = call_parser(
                self._new_parser(cls, chat_request).adjust_request, chat_request
            )
            return cls, chat_request
        if cls.reasoning_parser_cls is not None:
            reasoning_parser = call_parser(
                cls.reasoning_parser_cls,
                self._tokenizer,
                model_config=self._model_config,
                chat_template_kwargs=chat_request.chat_template_kwargs,
            )
            chat_request = call_parser(reasoning_parser.adjust_request, chat_request)
        if chat_request.tool_choice != "none":
            tool_parser = call_parser(cls.tool_parser_cls, self._tokenizer, chat_request.tools)
            chat_request = call_parser(tool_parser.adjust_request, chat_request)
        return cls, chat_request

    def structural_tag(self, request: Request) -> str | None:
        """The structural tag the server hands xgrammar for this request (``adjust_request`` →
        ``_apply_structural_tag`` → ``KimiK2ToolParser.get_structural_tag``), for ``k2conform
        grammar``; None when decoding is not constrained."""
        _, chat_request = self._prepare(request)
        outputs = chat_request.structured_outputs
        return None if outputs is None else outputs.structural_tag

    # --- the two parse modes --------------------------------------------------------------

    def parse_whole(self, request: Request, output: Delta) -> Result:
        cls, chat_request = self._prepare(request)
        if self._remaining_args_delta is not None:  # no composed parser in this generator
            reasoning, content, calls = self._parse_separately(cls, chat_request, output.text)
        else:
            parser = self._serving_parser(cls, chat_request, stream=False)
            if self._prompt_ids:
                call_parser(parser.set_prompt_token_ids, PROMPT_TOKEN_IDS)
            token_ids = {} if self._split else {"model_output_token_ids": list(output.token_ids)}
            reasoning, content, calls = call_parser(
                parser.parse, output.text, chat_request, enable_auto_tools=True, **token_ids
            )
        usage = {}
        if not self._inline:  # chat_completion_full_generator: right after parse
            usage["reasoning_tokens"] = call_parser(
                parser.count_reasoning_tokens, list(output.token_ids)
            )
        ids = RandomIds.chatcmpl()
        if self._inline:
            reasoning, content, kept = inline_message_fields(
                chat_request, reasoning, content, calls
            )
            tool_calls = tuple(
                ToolCall(
                    name=tc.name,
                    arguments=tc.arguments,
                    id=ids.mask(tc.id or self._mint_id(tc.name, n)),
                )
                for n, tc in enumerate(kept)
            )
            return Result(
                content=content,
                reasoning=reasoning,
                tool_calls=tool_calls,
                meta=ids.meta(version=self._version),
            )
        fields = call_parser(
            self._assemble,
            chat_request,
            reasoning,
            content,
            calls,
            enable_auto_tools=True,
            parser_cls=cls,
        )
        tool_calls = tool_calls_of(fields.tool_calls, ids)
        return Result(
            content=fields.content,
            reasoning=fields.reasoning,
            tool_calls=tool_calls,
            meta=ids.meta(version=self._version, **usage),
        )

    def _parse_separately(self, cls: Any, chat_request: Any, text: str) -> tuple[Any, Any, Any]:
        """``separate_parsers``' ``chat_completion_full_generator``: a fresh reasoning parser's
        ``extract_reasoning`` (with a reasoning parser), then the tools from its content."""
        reasoning, content = None, text
        if cls.reasoning_parser_cls is not None:
            reasoning_parser = call_parser(
                cls.reasoning_parser_cls,
                self._tokenizer,
                chat_template_kwargs=chat_request.chat_template_kwargs,
            )
            reasoning, content = call_parser(
                reasoning_parser.extract_reasoning, text, request=chat_request
            )
        calls, content = calls_from_content(
            self._parse_from_content, chat_request, self._tokenizer, content, cls.tool_parser_cls
        )
        return reasoning, content, calls

    def open_stream(self, request: Request) -> StreamStep:
        """One event per non-empty ``DeltaMessage``; the finishing delta carries
        ``finish_reason``."""
        cls, chat_request = self._prepare(request)
        parser = self._serving_parser(cls, chat_request, stream=True)
        ids = RandomIds.chatcmpl()
        if self._inline:
            return inline_step(parser, chat_request, self._remaining_args_delta, ids)
        processor = self._processor_cls(
            chat_request, parser, enable_auto_tools=True, parser_cls=cls
        )
        counts = cls.reasoning_parser_cls is not None
        return processor_step(processor, parser, PROMPT_TOKEN_IDS, ids, count_reasoning=counts)


def processor_step(
    processor: Any, parser: Any, prompt_ids: Sequence[int], ids: RandomIds, *, count_reasoning: bool
) -> StreamStep:
    """0.33 on: one ``ChatStreamProcessor`` per choice, stepped once per engine output; the
    finishing output says ``stop``, and (``count_reasoning``) the reasoning tokens are counted
    after it (``_include_reasoning_tokens_details``)."""
    generated: list[int] = []

    def step(delta: Delta, finished: bool) -> list[StreamEvent]:
        message = call_parser(
            processor.step,
            delta.text,
            list(delta.token_ids),
            "stop" if finished else None,
            prompt_ids,
        ).delta
        generated.extend(delta.token_ids)
        if finished and count_reasoning and generated:
            call_parser(parser.count_reasoning_tokens, tuple(generated))
        event = event_of(message, ids)
        return [event] if event is not None else []

    return step


def server_reasoning_parser() -> bool:
    """Whether the modelled server runs ``--reasoning-parser kimi_k2`` (default, as
    ``vllm-server``); ``K2CONFORM_VLLM_REASONING=0``: it does not."""
    return os.environ.get("K2CONFORM_VLLM_REASONING", "1") != "0"


def inline_step(
    parser: Any,
    chat_request: Any,
    remaining_args_delta: Callable[..., Any] | None,
    ids: RandomIds,
    prompt_ids: Sequence[int] = PROMPT_TOKEN_IDS,
) -> StreamStep:
    """0.20-0.32 ``chat_completion_stream_generator``: ``parse_delta`` per engine output, an
    empty output before the first token skipped ("chunked prefill"); ``separate_parsers``
    (``remaining_args_delta`` given): without ``finished=``, and the finishing delta, when it
    carries arguments, replaced by what partial-JSON parsing left unstreamed.  ``prompt_ids``:
    the prompt's tail (the generation prompt's markers)."""
    tokens_seen = 0

    def step(delta: Delta, finished: bool) -> list[StreamEvent]:
        nonlocal tokens_seen
        if not delta.text and not delta.token_ids and not tokens_seen:
            return []
        tokens_seen += len(delta.token_ids)
        end = {"finished": finished} if remaining_args_delta is None else {}
        message = call_parser(
            parser.parse_delta,
            delta_text=delta.text,
            delta_token_ids=list(delta.token_ids),
            request=chat_request,
            prompt_token_ids=list(prompt_ids),
            **end,
        )
        if finished and remaining_args_delta is not None and carries_arguments(message):
            message = _unstreamed_args(parser.tool_parser, message, remaining_args_delta)
        event = event_of(message, ids)
        return [event] if event is not None else []

    return step


def calls_from_content(
    parse_from_content: Any, chat_request: Any, tokenizer: Any, content: Any, tool_parser_cls: Any
) -> Any:
    """The server's ``_parse_tool_calls_from_content`` with auto tools on, as its one-shot
    message calls it: (the calls, the content left)."""
    return call_parser(
        parse_from_content,
        request=chat_request,
        tokenizer=tokenizer,
        content=content,
        enable_auto_tools=True,
        tool_parser_cls=tool_parser_cls,
    )


def carries_arguments(message: Any) -> bool:
    """``_should_check_for_unstreamed_tool_arg_tokens``: the finishing delta has arguments."""
    return bool(
        message is not None
        and message.tool_calls
        and message.tool_calls[0].function
        and message.tool_calls[0].function.arguments is not None
    )


def _unstreamed_args(tool_parser: Any, message: Any, remaining_args_delta: Any) -> Any:
    """The server's end-of-stream step: the arguments partial-JSON parsing autocompleted beyond
    what was streamed (a string ``arguments`` as it is, other values JSON-encoded)."""
    calls = tool_parser.prev_tool_call_arr
    if not calls:
        return message
    index = len(calls) - 1
    latest = message.tool_calls[0].function.arguments
    args = calls[index].get("arguments", {})
    expected_call = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    actual_call = tool_parser.streamed_args_for_tool[index]
    if isinstance(latest, str) and latest:
        actual_call = actual_call[: -len(latest)]
    remaining = expected_call.replace(actual_call, "", 1)
    return call_parser(remaining_args_delta, message, remaining, index)


def refuse_forced_choice(tool_choice: Any, version: str) -> None:
    """A required or named tool_choice in a release whose kimi_k2 tool parser keeps
    ``supports_required_and_named`` (every release before 0.24.0): ``adjust_request``
    constrains decoding to JSON from the tools' schema and the server parses that JSON, so
    such a request never reaches the Kimi parser: the cell is unavailable."""
    if tool_choice == "required" or not isinstance(tool_choice, str):
        raise AdapterUnavailable(
            f"tool_choice {json.dumps(tool_choice)}: vLLM {version} constrains it to JSON from "
            "the tools' schema (structured outputs) and parses that JSON, never Kimi's format"
        )


def inline_message_fields(
    chat_request: Any, reasoning: str | None, content: str | None, calls: Sequence[Any] | None
) -> tuple[str | None, str | None, list[Any]]:
    """0.23-0.32 ``chat_completion_full_generator``'s message, auto tools on: the reasoning
    (unless hidden), the content, and the parsed calls it keeps (a named or ``required``
    tool_choice keeps them with content ``or ""``; ``auto`` with tools keeps them)."""
    if not chat_request.include_reasoning:
        reasoning = None
    choice = chat_request.tool_choice
    if choice == "required" or not isinstance(choice, (str, type(None))):
        return reasoning, content or "", list(calls or ())
    if choice == "auto" and chat_request.tools:
        return reasoning, content, list(calls or ())
    return reasoning, content, []
