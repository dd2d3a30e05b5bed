"""vLLM's Kimi K3 parser as its OpenAI server composes it (``--tool-call-parser kimi_k3
--reasoning-parser kimi_k3``), vLLM 0.33.0 and the releases before it that have it (0.27.0 on).

The server builds ``ParserManager.get_parser("kimi_k3", "kimi_k3")`` (a ``KimiK3Parser``, a
delegating parser over ``KimiK3ReasoningParser`` and ``KimiK3ToolParser``) once, then per
request: ``adjust_request`` (which forces ``skip_special_tokens=False`` and
``spaces_between_special_tokens=False``), one parser per choice told the prompt's token ids, and
``parse`` with ``assemble_chat_message_fields`` for a whole reply, ``ChatStreamProcessor.step``
per engine output for a stream (``entrypoints/openai/chat_completion/serving.py``).  The
reasoning parser leaves the think channel on token ids (the ids of ``<|close|>think<|sep|>``),
so the deltas carry the stand-in's ids for the K3 markers.  0.27-0.32 (the K2 adapter's
``RELEASES``: ``inline``) drive the same parser from ``serving.py`` itself: ``parse`` then the
full generator's message rule, ``parse_delta(..., finished=)`` per output; the prompt's ids go to
``set_prompt_token_ids`` from 0.32 on, to each ``parse_delta`` always.
"""

from __future__ import annotations

import importlib
import os
import types
from typing import Any

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    ParserCrash,
    RequestRefused,
    StreamStep,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import (
    MODEL_NAME,
    RandomIds,
    build_chat_request,
    load_once,
    tool_calls_of,
)
from k2conform.k3 import markers as k3
from k2conform.model import Delta, Request, RequestFate, Result, ToolCall

from k2conform_adapters.reproducible import Reproducible
from k2conform_adapters.vllm_parser import (
    RELEASES,
    inline_message_fields,
    inline_step,
    load_kimi_tokenizer,
    processor_step,
)


#: vLLM's switch for its structural tags (read at each request, ``vllm/envs.py``).
STRICT_TOOL_CALLING = "VLLM_ENFORCE_STRICT_TOOL_CALLING"


class VllmK3Adapter(Reproducible, Adapter):
    name = "vllm-k3"
    #: repro/vllm.py drives kimi_k3 for a K3 output
    repro_driver = "vllm"
    package = "vllm"
    #: the releases with kimi_k3 (0.27.0 on), each run on the whole K3 corpus
    supported_versions = ("0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
    formats = (k3.FORMAT,)
    description = "vLLM OpenAI server: --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
    coverage_files = (
        "vllm/parser/kimi_k3.py",
        "vllm/tool_parsers/kimi_k3_tool_parser.py",
        "vllm/reasoning/kimi_k3_reasoning_parser.py",
    )
    serving_files = (
        "vllm/entrypoints/openai/chat_completion/serving.py",
        "vllm/entrypoints/openai/chat_completion/stream_processor.py",
        "vllm/entrypoints/openai/chat_completion/message_assembly.py",
        "vllm/parser/abstract_parser.py",
        "vllm/parser/parser_manager.py",
    )
    #: vllm/v1/engine/detokenizer.py holds back ``stop_buffer_length`` characters of text.
    stop_string_holdback = True
    #: The server's ``--enable-auto-tool-choice``.
    auto_tools = True
    #: The server's ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` (``vllm/envs.py``, default on): off, no
    #: structural tag constrains a tool call.
    strict_tool_calling = True

    def __init__(self, tokenizer: Any | None = None) -> None:
        self._tokenizer = tokenizer

    @load_once
    def load(self) -> None:
        vllm = import_parser_package("vllm")
        self._version = vllm.__version__
        # the server's steps around the parser: the K2 adapter's table's (a newer release than
        # it knows serves as its newest)
        self._release = RELEASES.get(self._version, RELEASES[self.supported_versions[-1]])
        with glue_imports("vllm"):
            from vllm.entrypoints.openai.chat_completion import protocol
            from vllm.exceptions import VLLMValidationError
            from vllm.parser.parser_manager import ParserManager
        require_api(ParserManager, "get_parser", owner_name="ParserManager")
        #: what the server answers with an HTTP 400
        self._validation_error = VLLMValidationError
        if self._release.inline:
            with glue_imports(f"vllm {self._version}"):
                chat_utils = importlib.import_module(self._release.chat_utils)
            require_api(chat_utils, "make_tool_call_id", owner_name=chat_utils.__name__)
            self._make_tool_call_id = chat_utils.make_tool_call_id
        else:
            with glue_imports("vllm"):
                from vllm.entrypoints.openai.chat_completion import (
                    message_assembly,
                    stream_processor,
                )
            require_api(
                message_assembly,
                "assemble_chat_message_fields",
                owner_name="chat_completion.message_assembly",
            )
            require_api(
                stream_processor,
                "ChatStreamProcessor",
                owner_name="chat_completion.stream_processor",
            )
            self._assemble = message_assembly.assemble_chat_message_fields
            self._processor_cls = stream_processor.ChatStreamProcessor
        self._request_cls = protocol.ChatCompletionRequest
        self._tokenizer = load_kimi_tokenizer(self._tokenizer)
        self._model_config = types.SimpleNamespace(
            model=MODEL_NAME,
            hf_config=types.SimpleNamespace(model_type="kimi_k3"),
            hf_text_config=types.SimpleNamespace(model_type="kimi_k3"),
            hf_overrides={},
        )
        try:
            # get_parser validates the tokenizer from 0.32 on (the release's prompt_ids)
            tokenizer = {"tokenizer": self._tokenizer} if self._release.prompt_ids else {}
            self._parser_cls = ParserManager.get_parser(
                tool_parser_name="kimi_k3",
                reasoning_parser_name="kimi_k3",
                enable_auto_tools=self.auto_tools,
                model_name=MODEL_NAME,
                is_harmony=False,
                **tokenizer,
            )
        except Exception as exc:  # the server would not start: glue
            raise AdapterGlueError(
                "ParserManager.get_parser", f"{type(exc).__name__}: {exc}"
            ) from exc
        require_api(
            self._parser_cls,
            "parse",
            "parse_delta",
            "adjust_request",
            *(("set_prompt_token_ids",) if self._release.prompt_ids else ()),
        )

    def _prepare(self, request: Request) -> tuple[Any, Any, list[int]]:
        """The request after ``adjust_request``, a fresh parser for the choice, and the token
        ids of the prompt's tail (the channel the generation prompt opens)."""
        self.load()
        chat_request = build_chat_request(self._request_cls, request, choice_without_tools=None)
        self._check_tool_choice(chat_request)
        chat_request = self._adjust(chat_request)
        opened = k3.opener("think" if request.thinking else "response")
        prompt_ids = list(self._tokenizer.encode(opened, add_special_tokens=False))
        parser = self._new_parser(chat_request)
        if self._release.prompt_ids:
            call_parser(parser.set_prompt_token_ids, prompt_ids)
        return chat_request, parser, prompt_ids

    def _adjust(self, chat_request: Any) -> Any:
        """``adjust_request`` as the renderer calls it, in the server's environment; a request
        the parser refuses there (``VLLMValidationError``) is the server's HTTP 400."""
        strict = "1" if self.strict_tool_calling else "0"
        saved = os.environ.get(STRICT_TOOL_CALLING)
        os.environ[STRICT_TOOL_CALLING] = strict
        try:
            return call_parser(self._new_parser(chat_request).adjust_request, chat_request)
        except ParserCrash as crash:
            if isinstance(crash.cause, self._validation_error):
                raise RequestRefused(RequestFate.REJECTED, f"HTTP 400: {crash.cause}") from None
            raise
        finally:
            if saved is None:
                os.environ.pop(STRICT_TOOL_CALLING)
            else:
                os.environ[STRICT_TOOL_CALLING] = saved

    def _check_tool_choice(self, chat_request: Any) -> None:
        """The renderer's refusal when the server has no tool parser (``online_renderer.py``:
        ``tool_parsing_unavailable``): a tool_choice other than none is an HTTP 400."""
        choice = chat_request.tool_choice
        if self._parser_cls.tool_parser_cls is not None or choice in (None, "none"):
            return
        if choice == "auto":
            said = (
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set"
            )
        else:
            named = (
                f'"{choice}"' if isinstance(choice, str) else f'function "{choice.function.name}"'
            )
            said = f"tool_choice={named} requires --tool-call-parser to be set"
        raise RequestRefused(RequestFate.REJECTED, f"HTTP 400: {said}")

    def structural_tag(self, request: Request) -> str | None:
        """The structural tag the server hands xgrammar for this request (``adjust_request`` ->
        ``_apply_structural_tag`` -> ``get_kimi_k3_structural_tag``, the tool parser's
        ``structural_tag_model``), for ``k2conform grammar``; None when decoding is not
        constrained."""
        chat_request, _, _ = self._prepare(request)
        outputs = chat_request.structured_outputs
        return None if outputs is None else outputs.structural_tag

    def _new_parser(self, chat_request: Any) -> Any:
        return call_parser(
            self._parser_cls,
            self._tokenizer,
            chat_request.tools,
            chat_template_kwargs=chat_request.chat_template_kwargs,
            model_config=self._model_config,
        )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat_request, parser, _ = self._prepare(request)
        reasoning, content, calls = call_parser(
            parser.parse,
            output.text,
            chat_request,
            enable_auto_tools=self.auto_tools,
            model_output_token_ids=list(output.token_ids),
        )
        ids = RandomIds.chatcmpl()
        if self._release.inline:  # chat_completion_full_generator's own message rule
            reasoning, content, kept = inline_message_fields(
                chat_request, reasoning, content, calls
            )
            return Result(
                content=content,
                reasoning=reasoning,
                tool_calls=tuple(
                    ToolCall(
                        tc.name,
                        tc.arguments,
                        ids.mask(tc.id or call_parser(self._make_tool_call_id)),
                    )
                    for tc in kept
                ),
                meta=ids.meta(version=self._version),
            )
        fields = call_parser(
            self._assemble,
            chat_request,
            reasoning,
            content,
            calls,
            enable_auto_tools=self.auto_tools,
            parser_cls=self._parser_cls,
        )
        # chat_completion_full_generator counts the reasoning tokens right after parse
        reasoning_tokens = call_parser(parser.count_reasoning_tokens, list(output.token_ids))
        return Result(
            content=fields.content,
            reasoning=fields.reasoning,
            tool_calls=tool_calls_of(fields.tool_calls, ids),
            meta=ids.meta(version=self._version, reasoning_tokens=reasoning_tokens),
        )

    def open_stream(self, request: Request) -> StreamStep:
        """One ``ChatStreamProcessor`` per choice (0.27-0.32: ``parse_delta`` per output); the
        finishing output says ``stop``."""
        chat_request, parser, prompt_ids = self._prepare(request)
        if self._release.inline:
            return inline_step(parser, chat_request, None, RandomIds.chatcmpl(), prompt_ids)
        processor = self._processor_cls(
            chat_request, parser, enable_auto_tools=self.auto_tools, parser_cls=self._parser_cls
        )
        return processor_step(
            processor, parser, prompt_ids, RandomIds.chatcmpl(), count_reasoning=True
        )


class VllmK3NoAutoToolsAdapter(VllmK3Adapter):
    """The same server started without ``--enable-auto-tool-choice``: no tool parser
    (``ParserManager.get_tool_parser``), so a request with a tool_choice other than none is
    refused and the reasoning parser alone splits the reply (``KimiK3Parser.parse_delta``
    strips the channel markup from the content).  Opt-in: what ``k2conform coverage`` runs
    to reach that configuration's branches."""

    name = "vllm-k3-no-auto-tools"
    description = (
        "vLLM OpenAI server: --tool-call-parser kimi_k3 --reasoning-parser kimi_k3, "
        "no --enable-auto-tool-choice"
    )
    run_by_default = False
    auto_tools = False


class VllmK3LenientToolsAdapter(VllmK3Adapter):
    """The same server started with ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``: no structural tag,
    so the K3 tool parser refuses a named tool_choice (``adjust_request``: HTTP 400, it cannot
    force the call) and a ``required`` one goes unconstrained; parsing is unchanged.  Opt-in:
    what ``k2conform coverage`` runs to reach that configuration's branch."""

    name = "vllm-k3-lenient-tools"
    description = (
        "vLLM OpenAI server: --tool-call-parser kimi_k3 --reasoning-parser kimi_k3, "
        "VLLM_ENFORCE_STRICT_TOOL_CALLING=0"
    )
    run_by_default = False
    strict_tool_calling = False
