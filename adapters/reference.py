"""The reference adapter: k2conform's own parser, the oracle the corpus is written against."""

from __future__ import annotations

from typing import Sequence

from k2conform.adapter import Adapter, call_parser
from k2conform.model import Delta, Request, Result, StreamEvent
from k2conform.reference.parser import ReferenceParser, parse


class ReferenceAdapter(Adapter):
    name = "reference"
    description = "k2conform's reference parser (named policies for every open point of the spec)"

    def parse_whole(self, request: Request, output: Delta) -> Result:
        return call_parser(parse, output.text, request)

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = ReferenceParser(request)
        events = [call_parser(parser.feed, delta.text) for delta in deltas]
        events.append(call_parser(parser.finish))
        return [event for event in events if event is not None]
