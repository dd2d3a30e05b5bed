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

from typing import Any, Sequence

from k2conform import markers
from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    call_parser,
    glue_imports,
    import_parser_package,
    require_api,
)
from k2conform.adapter.glue import RandomIds, build_chat_request, event_of, load_once, tool_calls_of
from k2conform.model import Delta, Request, Result, StreamEvent

from k2conform_adapters.reproducible import Reproducible

#: lmdeploy's ids: ``chatcmpl-tool-`` + ``shortuuid.random()`` (letters and digits).
RANDOM_ID_ALPHABET = "0-9A-Za-z"


class _KimiVocabulary:
    """What ``set_parsers`` reads from the tokenizer: ``get_vocab()`` (the reasoning tags)."""

    def get_vocab(self) -> dict[str, int]:
        return dict(markers.SPECIAL_TOKEN_IDS)


class LmdeployAdapter(Reproducible, Adapter):
    """lmdeploy's default ``ResponseParser`` with ``--tool-call-parser kimi_k2``."""

    repro_driver = "lmdeploy"
    name = "lmdeploy"
    package = "lmdeploy"
    supported_versions = ("0.18.0",)
    description = "lmdeploy api_server: --tool-call-parser kimi_k2 [--reasoning-parser default]"

    @load_once
    def load(self) -> None:
        lmdeploy = import_parser_package("lmdeploy")
        with glue_imports("lmdeploy"):
            from lmdeploy.serve.openai import protocol
            from lmdeploy.serve.parsers import ResponseParserManager
            from lmdeploy.serve.parsers.tool_parser import ToolParserManager
        require_api(protocol, "ChatCompletionRequest", owner_name="lmdeploy.serve.openai.protocol")
        base = ResponseParserManager.get("default")
        if base is None:
            raise AdapterGlueError("ResponseParserManager['default']", "not registered")
        require_api(
            base, "set_parsers", "stream_chunk", "parse_complete", owner_name="ResponseParser"
        )
        if ToolParserManager.get("kimi_k2") is None:
            raise AdapterGlueError("ToolParserManager['kimi_k2']", "not registered")
        self._classes = {}
        for thinking in (False, True):
            # A subclass per server configuration: set_parsers writes class attributes.
            cls = type(f"K2Conform{'Thinking' if thinking else ''}ResponseParser", (base,), {})
            try:
                cls.set_parsers(
                    reasoning_parser_name="default" if thinking else None,
                    tool_parser_name="kimi_k2",
                    tokenizer=_KimiVocabulary(),
                )
            except Exception as exc:  # noqa: BLE001 - the server would not start: glue
                raise AdapterGlueError(
                    "ResponseParser.set_parsers", f"{type(exc).__name__}: {exc}"
                ) from exc
            self._classes[thinking] = cls
        self._request_cls = protocol.ChatCompletionRequest
        self._version = getattr(lmdeploy, "__version__", None)

    def _parser(self, request: Request) -> Any:
        self.load()
        chat_request = build_chat_request(self._request_cls, request, choice_without_tools="none")
        return call_parser(self._classes[request.thinking], chat_request)

    def parse_whole(self, request: Request, output: Delta) -> Result:
        parser = self._parser(request)
        content, calls, reasoning = call_parser(
            parser.parse_complete, output.text, list(output.token_ids)
        )
        ids = RandomIds.chatcmpl(RANDOM_ID_ALPHABET)
        return Result(
            content=content,
            reasoning=reasoning,
            tool_calls=tool_calls_of(calls, ids),
            meta=ids.meta(version=self._version),
        )

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = self._parser(request)
        steps = list(deltas) or [Delta("")]
        events: list[StreamEvent] = []
        ids = RandomIds.chatcmpl(RANDOM_ID_ALPHABET)
        for n, delta in enumerate(steps):
            final = n == len(steps) - 1
            messages = call_parser(
                parser.stream_chunk, delta.text, list(delta.token_ids), final=final
            )
            for message, _tool_emitted in messages:
                event = event_of(
                    message, ids, reasoning_field="reasoning_content", blank_is_absent=True
                )
                if event is not None:
                    events.append(event)
        return events
