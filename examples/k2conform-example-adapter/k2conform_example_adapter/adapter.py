"""The k2conform adapter for ``tinyparser``: glue only, every parser call through
``call_parser``."""

from __future__ import annotations

from typing import Sequence

from k2conform.adapter import Adapter, AdapterUnavailable, StreamStep, call_parser, require_api
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta


class TinyAdapter(Adapter):
    name = "example-tiny"
    package = "k2conform-example-adapter"  # the distribution whose version is reported
    supported_versions = ("0.1.0",)
    description = "example plugin: a tiny regex-based Kimi K2 parser"

    def load(self) -> None:
        try:
            from k2conform_example_adapter import tinyparser
        except ModuleNotFoundError as exc:  # the parser's package is not installed
            raise AdapterUnavailable(str(exc)) from exc
        require_api(tinyparser, "parse", "StreamingParser")  # the API this glue needs
        self._parser = tinyparser

    def parse_whole(self, request: Request, output: Delta) -> Result:
        content, calls = call_parser(self._parser.parse, output.text)
        return Result(
            content=content,
            tool_calls=tuple(
                ToolCall(name=c["name"], arguments=c["arguments"], id=c["id"]) for c in calls
            ),
        )

    def open_stream(self, request: Request) -> StreamStep:
        """One stream's parser state; the step feeds it a delta (the whole stream through
        ``parse_stream``, or beside another one in ``stream-interleaved``)."""
        parser = call_parser(self._parser.StreamingParser)

        def step(delta: Delta, finished: bool) -> list[StreamEvent]:
            call_parser(parser.feed, delta.text)
            if not finished:
                return []
            content, calls = call_parser(parser.finish)
            return [
                StreamEvent(
                    content=content,
                    tool_calls=tuple(
                        ToolCallDelta(index=i, id=c["id"], name=c["name"], arguments=c["arguments"])
                        for i, c in enumerate(calls)
                    ),
                )
            ]

        return step

    def repro_script(
        self, request: Request, deltas: Sequence[Delta], mode: str, **context: object
    ) -> str:
        """A standalone script for ``k2conform report-finding`` (only this package imported);
        ``context`` holds ``expected`` and ``case_id``."""
        text = "".join(d.text for d in deltas)
        return "\n".join(
            [
                "import json",
                "from k2conform_example_adapter import tinyparser",
                f"text = {text!r}",
                "print(json.dumps(tinyparser.parse(text)))",
                "",
            ]
        )
