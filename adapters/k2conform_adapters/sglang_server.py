"""SGLang 0.5.23's real OpenAI serving code, ``OpenAIServingChat``, with a scripted engine.

Real SGLang code, run as its HTTP server runs it: ``ServerArgs(tool_call_parser="kimi_k2",
reasoning_parser="kimi_k2" or None)`` published as the ``tokenizer`` role's runtime context
(one context per setting: thinking on/off), ``ModelConfig.from_server_args``, the tokenizer
loaded by ``get_tokenizer`` with ``trust_remote_code``, ``TemplateManager.initialize_templates``,
``OpenAIServingChat.handle_request`` with a ``ChatCompletionRequest`` (validation, chat
template rendering, ``GenerateReqInput``, then ``_build_chat_response`` / ``_process_tool_calls``
or ``_generate_chat_stream`` / ``_process_tool_call_stream`` / ``_check_for_unstreamed_tool_args``,
ids by ``_process_tool_call_id``, finish_reason, the SSE chunks).

Stood in: the TokenizerManager (an engine client: IPC to a scheduler that cannot run on
this CPU) by :class:`_ScriptedTokenizerManager`, whose ``generate_request`` yields the output
dicts ``TokenizerManager._handle_batch_output`` builds (non-incremental: cumulative ``text``
and ``output_ids``; ``meta_info`` id/finish_reason/prompt_tokens/completion_tokens/...;
finish_reason from the real ``FINISH_MATCHED_TOKEN(<|im_end|>)``), one dict per delta, and whose
``config_value`` does what the real one does (two fields on the manager, the rest from the
runtime context).  It ends a reply at the request's stop strings as SGLang's engine does
(:mod:`k2conform_adapters.sglang_stop`: cut before the first matched, ``FINISH_MATCHED_STR``;
a stream holds back what may begin one).  The
detokenizer is part of the stand-in: a dict's text is the delivery's text verbatim, so
``skip_special_tokens`` / ``spaces_between_special_tokens`` are not applied.  The served
model directory is the one ``k2conform_adapters.vllm_model`` builds (the project's Kimi
stand-in tokenizer, real ids for the markers, the project's chat template).  ``torchvision``
(imported, never called, by SGLang's vision configs; no CPU wheel for torch 2.13 here) is
replaced by an import-only placeholder when it is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from k2conform import markers
from k2conform.adapter import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    ParserCrash,
    RequestRefused,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import case_request_fields
from k2conform.judge.wire import check_stream, check_whole, parse_sse
from k2conform.model import (
    Delta,
    Request,
    RequestFate,
    Result,
    StreamEvent,
    StreamReply,
    ToolCall,
    ToolCallDelta,
)

from k2conform_adapters.sglang_parser import SERVING_CHAT_OPTIONS
from k2conform_adapters.sglang_stop import holds_back, matched_stop, request_stops, served_text

MODEL_DIR = Path(tempfile.gettempdir()) / "k2conform-sglang-server-model"
SERVING_API = (
    "handle_request",
    "_build_chat_response",
    "_process_tool_calls",
    "_generate_chat_stream",
    "_process_tool_call_stream",
    "_check_for_unstreamed_tool_args",
    "_process_tool_call_id",
)


class _ScriptedTokenizerManager:
    """What ``OpenAIServingChat`` reads from its TokenizerManager; ``generate_request`` scripted."""

    def __init__(self, sg: Any, server_args: Any) -> None:
        rc = sg.runtime_context
        self.server_args, self.script = server_args, [Delta("")]
        self.model_path, self.served_model_name = (
            rc.get_model().model_path,
            rc.get_serving().served_model_name,
        )
        self.model_config = sg.ModelConfig.from_server_args(server_args)
        self.tokenizer = sg.get_tokenizer(rc.get_serving().tokenizer_path, trust_remote_code=True)
        obs = rc.get_observability()
        self.request_logger = sg.RequestLogger(
            log_requests=obs.log_requests,
            log_requests_level=obs.log_requests_level,
            log_requests_format=obs.log_requests_format,
            log_requests_target=obs.log_requests_target,
        )
        self._context = rc.get_context
        self._finish_token, self._finish_stop = sg.FINISH_MATCHED_TOKEN, sg.FINISH_MATCHED_STR
        self.processor, self.last_request, self.missing = (
            None,
            None,
            [],
        )  # text-only model: no processor

    def __getattr__(self, name: str) -> Any:
        """An attribute the serving code reads that the stand-in lacks: glue drift, recorded."""
        if not name.startswith("__"):
            self.missing.append(name)
        raise AttributeError(name)

    def config_value(self, name: str) -> Any:
        """As ``TokenizerManager.config_value``: two fields live on the manager, the rest in the
        context."""
        if name in ("model_path", "served_model_name"):
            return getattr(self, name)
        return self._context().config_leaf(name)

    def create_abort_task(self, obj: Any) -> None:
        return None

    async def generate_request(self, obj: Any, request: Any = None):
        obj.normalize_batch_and_arguments()
        self.last_request, text, ids = obj, "", []
        stops = request_stops((obj.sampling_params or {}).get("stop"))
        for n, delta in enumerate(self.script):
            text, ids = text + delta.text, ids + list(delta.token_ids)
            stop = matched_stop(text, stops)
            last = stop is not None or n == len(self.script) - 1
            finish = None
            if stop is not None:
                text = served_text(text, stops)
                finish = self._finish_stop(matched=stop).to_json()
            elif last:
                finish = self._finish_token(
                    matched=markers.SPECIAL_TOKEN_IDS[markers.IM_END]
                ).to_json()
            meta = {
                "id": obj.rid,
                "finish_reason": finish,
                "prompt_tokens": len(obj.input_ids or ()),
                "weight_version": self.config_value("weight_version"),
                "num_retractions": 0,
                "reasoning_tokens": 0,
                "completion_tokens": len(ids),
                "cached_tokens": 0,
            }
            if last or (obj.stream and not holds_back(text, stops)):
                yield {"text": text, "output_ids": list(ids), "meta_info": meta}
            if last:
                return


class SglangServerAdapter(Adapter):
    name = "sglang-server"
    package = "sglang"
    supported_versions = ("0.5.23",)
    description = "SGLang OpenAIServingChat (real serving code; scripted TokenizerManager)"
    #: Opt-in (``--adapter sglang-server``): on the whole corpus it agrees with ``sglang`` cell for
    #: cell (docs/sglang-serving.md), so the default run keeps one SGLang column.
    run_by_default = False
    request_options = SERVING_CHAT_OPTIONS
    #: ``--tool-call-parser``, and the ``--reasoning-parser`` of a thinking request's server
    parser = "kimi_k2"

    def __init__(self) -> None:
        self._servers: dict[bool, tuple[Any, Any, Any]] = {}

    def load(self) -> None:
        if self._servers:
            return
        sglang = import_parser_package("sglang")
        _install_torchvision_placeholder()
        from k2conform_adapters import vllm_model  # the served model directory (project code)

        try:
            with glue_imports("sglang"):
                from sglang.srt import runtime_context
                from sglang.srt.configs.model_config import ModelConfig
                from sglang.srt.entrypoints.openai import protocol, serving_chat
                from sglang.srt.managers.schedule_batch import (
                    FINISH_MATCHED_STR,
                    FINISH_MATCHED_TOKEN,
                )
                from sglang.srt.parser.template_manager import TemplateManager
                from sglang.srt.server_args import ServerArgs
                from sglang.srt.utils.hf_transformers_utils import get_tokenizer
                from sglang.srt.utils.request_logger import RequestLogger
        except AdapterGlueError as exc:
            missing = getattr(exc.__cause__, "name", None) or ""
            if isinstance(exc.__cause__, ModuleNotFoundError) and not missing.startswith("sglang"):
                raise AdapterUnavailable(
                    f"SGLang's serving code needs {missing!r}, not installed"
                ) from exc
            raise
        require_api(serving_chat.OpenAIServingChat, *SERVING_API)
        require_api(
            runtime_context,
            "create_context",
            "use_context",
            "get_context",
            "get_serving",
            "get_model",
        )
        sg = types.SimpleNamespace(
            runtime_context=runtime_context,
            ModelConfig=ModelConfig,
            get_tokenizer=get_tokenizer,
            RequestLogger=RequestLogger,
            FINISH_MATCHED_TOKEN=FINISH_MATCHED_TOKEN,
            FINISH_MATCHED_STR=FINISH_MATCHED_STR,
        )
        self._version, self._protocol, self._use = (
            sglang.__version__,
            protocol,
            runtime_context.use_context,
        )
        MODEL_DIR.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{MODEL_DIR}.lock", "w") as lock:  # workers start together: build once
            fcntl.flock(lock, fcntl.LOCK_EX)
            vllm_model.build(MODEL_DIR)
        for thinking in (False, True):
            try:
                args = ServerArgs(
                    model_path=str(MODEL_DIR),
                    trust_remote_code=True,
                    device="cpu",
                    tool_call_parser=self.parser,
                    reasoning_parser=self.reasoning_parser(thinking),
                )
                context = runtime_context.create_context(args, role="tokenizer")
                with runtime_context.use_context(context):
                    manager = _ScriptedTokenizerManager(sg, args)
                    templates = TemplateManager()
                    templates.initialize_templates(
                        tokenizer_manager=manager, model_path=str(MODEL_DIR)
                    )
                    server = serving_chat.OpenAIServingChat(manager, templates)
            except Exception as exc:  # the release no longer fits the glue
                raise AdapterGlueError(
                    "OpenAIServingChat set-up", f"{type(exc).__name__}: {exc}"
                ) from exc
            if manager.missing:  # read during set-up and caught there (TemplateManager logs it)
                raise AdapterGlueError(
                    f"TokenizerManager.{manager.missing[0]}", "not on the stand-in"
                )
            self._servers[thinking] = (context, manager, server)

    def reasoning_parser(self, thinking: bool) -> str | None:
        """K2: a thinking request goes to a server started with ``--reasoning-parser kimi_k2``,
        any other to one started without."""
        return self.parser if thinking else None

    def _serve(self, request: Request, deltas: Sequence[Delta], stream: bool) -> tuple[Any, Any]:
        self.load()
        options = dict(request.server_options)
        prior = options.pop("prior_tools", None)
        if prior:  # the request before the case's, with other tools; its answer is not judged
            with contextlib.suppress(ParserCrash):
                self._serve(
                    replace(request, tools=tuple(prior), server_options=options), deltas, False
                )
        context, manager, server = self._servers[bool(request.thinking)]
        body = {
            "model": manager.served_model_name,
            "stream": stream,
            **case_request_fields(request, self.request_options),
        }
        if request.tools or request.server_options.get("empty_tools"):
            body.update(tools=[dict(t) for t in request.tools], tool_choice=request.tool_choice)
        elif request.tool_choice != "auto":
            body.update(tool_choice=request.tool_choice)
        try:
            chat_request = self._protocol.ChatCompletionRequest.model_validate(body)
        except Exception as exc:
            raise AdapterGlueError("ChatCompletionRequest", f"{type(exc).__name__}: {exc}") from exc
        manager.script = list(deltas) or [Delta("")]

        async def run() -> Any:
            response = await server.handle_request(chat_request, None)
            if stream and hasattr(response, "body_iterator"):
                return [chunk async for chunk in response.body_iterator]
            return response

        with self._use(context):
            manager.missing.clear()
            try:
                return call_parser(asyncio.run, run()), manager
            finally:
                if manager.missing:  # the serving code caught the AttributeError; the glue is stale
                    raise AdapterGlueError(
                        f"TokenizerManager.{manager.missing[0]}", "not on the stand-in"
                    )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        response, manager = self._serve(request, [output], stream=False)
        if not hasattr(response, "choices"):
            _raise_error_response(response)
        message = response.choices[0].message
        calls = tuple(
            ToolCall(name=c.function.name, arguments=c.function.arguments, id=c.id)
            for c in message.tool_calls or ()
        )
        meta = _meta(self._version, manager, response.choices[0].finish_reason)
        wire = [v.to_json() for v in check_whole(response.model_dump(mode="json"))]
        if wire:
            meta["wire_violations"] = wire
        return Result(
            content=message.content,
            reasoning=message.reasoning_content or None,
            tool_calls=calls,
            meta=meta,
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> StreamReply:
        chunks, _ = self._serve(request, deltas, stream=True)
        if not isinstance(chunks, list):
            _raise_error_response(chunks)
        events = sse_events(chunks)
        options = case_request_fields(request, self.request_options)
        stream_options = options.get("stream_options") or {}
        data, wire = parse_sse("".join(chunks))
        wire += check_stream(
            data,
            include_usage=bool(stream_options.get("include_usage")),
            continuous_usage=bool(stream_options.get("continuous_usage_stats")),
        )
        return StreamReply(events, tuple(wire))


def sse_events(chunks: Sequence[str]) -> list[StreamEvent]:
    """OpenAI chat-completion SSE ``data:`` chunks → stream events (an error chunk is a crash)."""
    events = []
    for chunk in chunks:
        for line in chunk.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[len("data: ") :])
            if "error" in data:
                raise ParserCrash(RuntimeError(f"error chunk: {data['error'].get('message')}"))
            for choice in data.get("choices") or ():
                delta = choice.get("delta") or {}
                calls = tuple(
                    ToolCallDelta(
                        index=c["index"],
                        id=c.get("id"),
                        name=(c.get("function") or {}).get("name"),
                        arguments=(c.get("function") or {}).get("arguments"),
                    )
                    for c in delta.get("tool_calls") or ()
                )
                finish = choice.get("finish_reason")
                if (
                    delta.get("content") is not None
                    or delta.get("reasoning_content") is not None
                    or calls
                    or finish
                ):
                    events.append(
                        StreamEvent(
                            delta.get("content"), delta.get("reasoning_content"), calls, finish
                        )
                    )
    return events


def _raise_error_response(response: Any) -> None:
    """The server answered with an error: a 4xx refused the request (its fate, judged against
    the case's), a 500 is what its handler turns an exception into (a crash)."""
    body = getattr(response, "body", b"")
    detail = json.loads(body) if body else {"message": repr(response)}
    status = getattr(response, "status_code", None)
    said = f"HTTP {status if status is not None else '?'}: {detail.get('message')}"
    if isinstance(status, int) and 400 <= status < 500:
        raise RequestRefused(RequestFate.REJECTED, said)
    raise ParserCrash(RuntimeError(said))


def _meta(
    version: str, manager: _ScriptedTokenizerManager, finish_reason: str | None
) -> dict[str, Any]:
    sampling = getattr(manager.last_request, "sampling_params", None) or {}
    return {
        "version": version,
        "finish_reason": finish_reason,
        "skip_special_tokens": sampling.get("skip_special_tokens"),
    }


class _Placeholder(types.ModuleType):
    """An import-only torchvision: any attribute is another placeholder; calling one raises."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.__name__}: k2conform's import-only torchvision placeholder")


class _TorchvisionPlaceholder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = _Placeholder(spec.name)
        module.__path__, module.__version__, module.__file__ = [], "0.0", __file__
        return module

    def exec_module(self, module: Any) -> None:
        pass


def _install_torchvision_placeholder() -> None:
    if importlib.util.find_spec("torchvision") is None:
        sys.meta_path.append(_TorchvisionPlaceholder())
