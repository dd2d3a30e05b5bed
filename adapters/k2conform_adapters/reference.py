"""The reference adapter: k2conform's own parser, the oracle the corpus is written against."""

from __future__ import annotations

from k2conform.adapter.contract import Adapter, StreamStep, call_parser
from k2conform.model import Delta, Request, Result, StreamEvent
from k2conform.k3.parser import K3Parser
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

    def open_stream(self, request: Request) -> StreamStep:
        return stepper(ReferenceParser(request))


def stepper(parser: ReferenceParser | K3Parser) -> StreamStep:
    """Feed a reference parser (K2's or K3's) one delta; the finishing one also ends the stream."""
    feed, finish = parser.feed, parser.finish

    def step(delta: Delta, finished: bool) -> list[StreamEvent]:
        event = call_parser(feed, delta.text)
        end = call_parser(finish) if finished else None
        return [e for e in (event, end) if e is not None]

    return step
