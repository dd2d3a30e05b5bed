"""The K3 reference adapter: k2conform's own Kimi K3 parser, the oracle of the K3 corpus."""

from __future__ import annotations

from k2conform.adapter.contract import Adapter, StreamStep, call_parser
from k2conform.k3 import markers as k3
from k2conform.k3.parser import K3Parser, parse
from k2conform.model import Delta, Request, Result
from k2conform_adapters.reference import stepper


class ReferenceK3Adapter(Adapter):
    name = "reference-k3"
    formats = (k3.FORMAT,)
    description = "k2conform's Kimi K3 reference parser (named policies for every open point)"
    coverage_files = ("k2conform/k3/parser.py",)
    stop_string_holdback = True  # the format's parser: any server's deltas

    def parse_whole(self, request: Request, output: Delta) -> Result:
        return call_parser(parse, output.text, request)

    def open_stream(self, request: Request) -> StreamStep:
        return stepper(K3Parser(request))
