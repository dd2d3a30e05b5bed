"""vllm-mlx 0.6.0's ``kimi_k2`` tool parser, driven by its own server's chat-completion code.

What the server does (``vllm-mlx serve ... --enable-auto-tool-choice --tool-call-parser kimi_k2``,
``vllm_mlx/server.py``; no ``--reasoning-parser``: vllm-mlx registers none for Kimi, see
``vllm_mlx/reasoning/__init__.py``, so thinking requests are ``unavailable`` here):

* one-shot (``create_chat_completion``): ``_extract_reasoning_and_tool_calls(output.text,
  request, ...)`` → ``_parse_tool_calls_with_parser``: no tools or ``tool_choice="none"``
  returns the text as it is; otherwise the process-wide ``KimiToolParser`` (made once by
  ``_get_or_init_tool_parser``) is ``reset()`` and ``extract_tool_calls(text, request_dict)``
  runs, arguments go through ``_coerce_tool_arguments``; a parse that finds no call falls back
  to the generic ``api/tool_calling.parse_tool_calls``.  The message's content is
  ``clean_output_text(cleaned_text) if cleaned_text else None``;
* streaming (``stream_chat_completion``): a fresh parser per request (``_build_tool_parser``);
  each engine output's ``new_text`` goes to ``extract_tool_calls_streaming`` only once
  ``_streaming_tool_markup_possible_after_delta`` has seen one of the server's tool markers;
  before that it is sent as content; after the engine's last output (``finished``), a stream
  whose text holds a marker but sent no call is parsed whole once more.

``server.py`` cannot be imported here (it imports the MLX engines), so the adapter runs the
release's own definitions of those steps, read from the installed ``server.py``
(``glue.definitions_from_source``: the two entry points and everything they name, with the
server's own imports of the API models, the tool parsers and fastapi).  The engine is the
only stand-in: it yields each delta as a ``GenerationOutput`` (the release's class), then the
end-of-stream output (``new_text=""``, ``finished=True``, ``finish_reason="stop"``), as
``SimpleEngine.stream_generate`` does; it has no tokenizer, which ``KimiToolParser`` never
reads.  Streamed chunks are the server's SSE ``data:`` lines, read back as JSON.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
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
    definitions_from_source,
    event_of,
    load_once,
    package_dir,
    tool_calls_of,
)
from k2conform.model import Delta, Request, Result, StreamEvent

from k2conform_adapters.reproducible import Reproducible

#: The server's entry points whose definitions are run from ``server.py``.
SERVER_STEPS = ("_extract_reasoning_and_tool_calls", "stream_chat_completion", "clean_output_text")


class VllmMlxAdapter(Reproducible, Adapter):
    """vllm-mlx's OpenAI server with ``--tool-call-parser kimi_k2``."""

    repro_driver = "vllm_mlx"
    #: One-shot only: the stream's steps live in server.py, which needs MLX to import.
    repro_modes = ("whole",)

    name = "vllm-mlx"
    package = "vllm-mlx"
    supported_versions = ("0.6.0",)
    description = "vllm-mlx serve: --enable-auto-tool-choice --tool-call-parser kimi_k2"
    coverage_files = ("vllm_mlx/tool_parsers/kimi_tool_parser.py",)

    @load_once
    def load(self) -> None:
        import_parser_package("vllm_mlx")
        with glue_imports("vllm-mlx"):
            from pydantic import ValidationError
            from vllm_mlx.engine.base import GenerationOutput
            from vllm_mlx.tool_parsers import ToolParserManager
        require_api(ToolParserManager, "get_tool_parser")
        if "kimi_k2" not in ToolParserManager.list_registered():
            raise AdapterGlueError("ToolParserManager 'kimi_k2'", "not registered in this release")
        server = definitions_from_source(
            package_dir("vllm-mlx", "vllm_mlx") / "server.py",
            SERVER_STEPS,
            module_name="vllm_mlx.server",
            package="vllm_mlx",
        )
        server.__dict__.update(_enable_auto_tool_choice=True, _tool_call_parser="kimi_k2")
        self._server = server.__dict__
        self._output_cls = GenerationOutput
        self._validation_error = ValidationError

    def _request(self, request: Request) -> Any:
        """The case as the server's ``ChatCompletionRequest``; one it answers with 400 (its
        tool names must match ``^[A-Za-z0-9_-]{1,64}$``) is a request it does not take."""
        self.load()
        if request.thinking:
            raise AdapterUnavailable("vllm-mlx 0.6.0 has no Kimi reasoning parser")
        try:
            return build_chat_request(
                self._server["ChatCompletionRequest"],
                request,
                choice_without_tools=None,
                template_kwargs=False,
            )
        except AdapterGlueError as exc:
            cause = exc.__cause__
            if isinstance(cause, self._validation_error) and all(
                error["loc"][:1] == ("tools",) for error in cause.errors()
            ):
                reason = cause.errors()[0]["msg"]
                raise AdapterUnavailable(f"the server rejects the request: {reason}") from exc
            raise

    def parse_whole(self, request: Request, output: Delta) -> Result:
        chat = self._request(request)
        _reasoning, cleaned, calls = call_parser(
            self._server["_extract_reasoning_and_tool_calls"],
            output.text,
            chat,
            allow_reasoning=True,
        )
        ids = _call_ids()
        content = call_parser(self._server["clean_output_text"], cleaned) if cleaned else None
        return Result(content=content, tool_calls=tool_calls_of(calls, ids), meta=ids.meta())

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        chat = self._request(request)
        engine = _ScriptedEngine(self._output_cls, [d.text for d in deltas])
        lines = call_parser(
            asyncio.run,
            _collect(
                self._server["stream_chat_completion"](
                    engine, [dict(m) for m in CASE_MESSAGES], chat
                )
            ),
        )
        ids = _call_ids()
        events = (
            event_of(_delta_of(line), ids, reasoning_field="reasoning_content") for line in lines
        )
        return [event for event in events if event is not None]


class _ScriptedEngine:
    """The engine's ``stream_chat``: the case's deltas, then the end-of-stream output."""

    model_name = MODEL_NAME

    def __init__(self, output_cls: Any, pieces: list[str]) -> None:
        self._outputs = [
            output_cls(text="", new_text=p, finished=False, finish_reason=None) for p in pieces
        ]
        self._outputs.append(output_cls(text="", new_text="", finished=True, finish_reason="stop"))

    async def stream_chat(self, messages: list[dict], **_kwargs: Any) -> Any:
        for output in self._outputs:
            yield output


async def _collect(stream: Any) -> list[str]:
    return [line async for line in stream]


def _call_ids() -> RandomIds:
    """``call_<8 hex>``: ``generate_tool_id()`` of the parser and the generic fallback."""
    return RandomIds(re.compile(r"^call_[0-9a-f]{8}$"), "call_<random>")


def _delta_of(line: str) -> Any:
    """One SSE line's delta message (None for ``[DONE]`` and chunks without a choice)."""
    payload = line.removeprefix("data: ").strip()
    choices = json.loads(payload).get("choices") if payload != "[DONE]" else None
    if not choices:
        return None
    delta = choices[0]["delta"]
    calls = [
        SimpleNamespace(index=c["index"], id=c.get("id"), function=c.get("function"))
        for c in delta.get("tool_calls") or ()
    ]
    return SimpleNamespace(
        content=delta.get("content"),
        tool_calls=calls,
        reasoning_content=delta.get("reasoning_content"),
    )
