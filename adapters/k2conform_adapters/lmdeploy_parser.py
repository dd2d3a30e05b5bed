"""lmdeploy 0.18.0's ``kimi_k2`` tool parser, driven the way its OpenAI server drives it.

What the server does:

* at start-up (``lmdeploy/serve/openai/api_server.py``, ``set_parsers``):
  ``ResponseParserManager.get("default").set_parsers(reasoning_parser_name=...,
  tool_parser_name="kimi_k2", tokenizer=...)``.  ``set_parsers`` stores the parser
  classes and the tokenizer as **class attributes** of the response parser class, once per
  process, and never resets a name that is not given: a process configured with a
  reasoning parser keeps it.  The adapter therefore configures two private subclasses of
  the registered class (one without, one with ``--reasoning-parser default``) so each
  request sees exactly the server configuration it stands for;
* per request (``lmdeploy/serve/core/chat_runner.py``, ``ChatRunner.prepare``):
  ``parser_cls(request)`` (it calls the tool parser's ``adjust_request``);
* streaming (``ChatRunner.stream``): ``stream_chunk(delta_text, delta_token_ids,
  final=finish_reason is not None)`` per engine output; the last output carries the
  finish reason; every returned ``DeltaMessage`` is one chunk;
* one-shot (``ChatRunner.collect``): ``parse_complete(text, token_ids)`` then the
  message's ``content``, ``tool_calls`` (ids as the parser built them: the model's own id,
  or ``chatcmpl-tool-<shortuuid>``) and ``reasoning_content``.

Thinking on means ``--reasoning-parser default`` (``<think>``/``</think>``) and
``chat_template_kwargs={"thinking": true}``; thinking off means no reasoning parser.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from k2conform import markers
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
RANDOM_ID = re.compile(r"^chatcmpl-tool-[0-9A-Za-z]{16,32}$")
MASKED_RANDOM_ID = "chatcmpl-tool-<random>"


class _KimiVocabulary:
    """What ``set_parsers`` reads from the tokenizer: ``get_vocab()`` (the reasoning tags)."""

    def get_vocab(self) -> dict[str, int]:
        return dict(markers.SPECIAL_TOKEN_IDS)


class LmdeployAdapter(Adapter):
    """lmdeploy's default ``ResponseParser`` with ``--tool-call-parser kimi_k2``."""

    name = "lmdeploy"
    package = "lmdeploy"
    supported_versions = ("0.18.0",)
    description = "lmdeploy api_server: --tool-call-parser kimi_k2 [--reasoning-parser default]"

    def __init__(self) -> None:
        self._loaded = False

    def load(self) -> None:
        if self._loaded:
            return
        lmdeploy = import_parser_package("lmdeploy")
        with glue_imports("lmdeploy"):
            from lmdeploy.serve.openai import protocol
            from lmdeploy.serve.parsers import ResponseParserManager
            from lmdeploy.serve.parsers.tool_parser import ToolParserManager
        require_api(protocol, "ChatCompletionRequest", owner_name="lmdeploy.serve.openai.protocol")
        base = ResponseParserManager.get("default")
        if base is None:
            raise AdapterGlueError("ResponseParserManager['default']", "not registered")
        require_api(base, "set_parsers", "stream_chunk", "parse_complete", owner_name="ResponseParser")
        if ToolParserManager.get("kimi_k2") is None:
            raise AdapterGlueError("ToolParserManager['kimi_k2']", "not registered")
        self._classes = {}
        for thinking in (False, True):
            # A subclass per server configuration: set_parsers writes class attributes.
            cls = type(f"K2Conform{'Thinking' if thinking else ''}ResponseParser", (base,), {})
            try:
                cls.set_parsers(reasoning_parser_name="default" if thinking else None,
                                tool_parser_name="kimi_k2", tokenizer=_KimiVocabulary())
            except Exception as exc:  # noqa: BLE001 - the server would not start: glue
                raise AdapterGlueError("ResponseParser.set_parsers", f"{type(exc).__name__}: {exc}") from exc
            self._classes[thinking] = cls
        self._request_cls = protocol.ChatCompletionRequest
        self._version = getattr(lmdeploy, "__version__", None)
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

    def _parser(self, request: Request) -> Any:
        self.load()
        return call_parser(self._classes[request.thinking], self._chat_request(request))

    def parse_whole(self, request: Request, output: Delta) -> Result:
        parser = self._parser(request)
        content, calls, reasoning = call_parser(parser.parse_complete, output.text, list(output.token_ids))
        masked: list[str] = []
        tool_calls = tuple(
            ToolCall(name=c.function.name, arguments=c.function.arguments, id=_mask(c.id, masked))
            for c in (calls or ())
        )
        meta: dict[str, Any] = {"version": self._version}
        if masked:
            meta["masked_random_ids"] = len(masked)
        return Result(content=content, reasoning=reasoning, tool_calls=tool_calls, meta=meta)

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = self._parser(request)
        steps = list(deltas) or [Delta("")]
        events: list[StreamEvent] = []
        masked: list[str] = []
        for n, delta in enumerate(steps):
            final = n == len(steps) - 1
            messages = call_parser(parser.stream_chunk, delta.text, list(delta.token_ids), final=final)
            for message, _tool_emitted in messages:
                calls = tuple(
                    ToolCallDelta(
                        index=tc.index, id=_mask(tc.id, masked),
                        name=tc.function.name if tc.function else None,
                        arguments=tc.function.arguments if tc.function else None,
                    )
                    for tc in (message.tool_calls or ())
                )
                content = message.content or None
                reasoning = getattr(message, "reasoning_content", None) or None
                if content is None and reasoning is None and not calls:
                    continue
                events.append(StreamEvent(content=content, reasoning=reasoning, tool_calls=calls))
        return events

    def repro_script(self, request: Request, deltas: Sequence[Delta], mode: str, *,
                     expected: dict | None = None, case_id: str = "case") -> str:
        """A standalone script that drives the parser the same way, importing only its package."""
        from k2conform_adapters._repro import lmdeploy_script

        return lmdeploy_script(request, deltas, mode, expected, case_id)


def _mask(tool_id: str | None, masked: list[str]) -> str | None:
    if tool_id is not None and RANDOM_ID.match(tool_id):
        masked.append(tool_id)
        return MASKED_RANDOM_ID
    return tool_id
