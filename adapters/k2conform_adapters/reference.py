"""The reference adapter: k2conform's own parser, the oracle the corpus is written against."""

from __future__ import annotations

from typing import Sequence

from k2conform.adapter.contract import Adapter, call_parser
from k2conform.model import Delta, Request, Result, StreamEvent
from k2conform.reference.parser import ReferenceParser, parse


class ReferenceAdapter(Adapter):
    name = "reference"
    description = "k2conform's reference parser (named policies for every open point of the spec)"
    coverage_files = ("k2conform/reference/parser.py",)
    stop_string_holdback = True  # the spec's parser: any server's deltas
    #: The options its REQUEST.* policies read, and those that change no reply
    #: (``stream_reasoning`` only regroups the deltas; ``messages`` matter as
    #: ``continue_final_message``'s last message)
    request_options = frozenset(
        {"messages", "continue_final_message", "stream_reasoning", "chat_template_kwargs"}
    )

    def parse_whole(self, request: Request, output: Delta) -> Result:
        return call_parser(parse, output.text, request)

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = ReferenceParser(request)
        return call_parser(_feed_all, parser, deltas)


def _feed_all(parser: ReferenceParser, deltas: Sequence[Delta]) -> list[StreamEvent]:
    """Every delta, then the end of the stream; the events sent (one parser call, not one per
    delta)."""
    feed = parser.feed
    events = [feed(delta.text) for delta in deltas]
    events.append(parser.finish())
    return [event for event in events if event is not None]
