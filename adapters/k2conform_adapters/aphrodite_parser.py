"""aphrodite-engine 0.24.1's Rust ``KimiK2ToolParser`` (``aphrodite/_rust_tool_parser.abi3.so``).

A separate implementation of the format, written in Rust and shipped as a PyO3 extension
in the aphrodite-engine wheel.  The extension is self-contained: the adapter loads it by
file path from the installed distribution, without running ``aphrodite/__init__`` (which
needs torch and a GPU build).

How aphrodite's server drives a Rust parser (``aphrodite/tool_parsers/rust_tool_parser.py``,
``RustToolParser``; its subclasses only set ``rust_parser_name`` and
``tool_call_start_token``, as ``MinimaxM3ToolParser`` does):

* tools become ``Tool(name, description, parameters or {}, strict)``;
  ``ToolParser(rust_parser_name, tools)`` is the parser;
* one-shot (``extract_tool_calls``): when ``tool_call_start_token`` is not in the output,
  the whole output is the content; otherwise a throwaway parser does
  ``parse_into(output, out)``, records ``tool_call_id(index)`` for every call, then
  ``out.append(parser.finish())`` and ``out.coalesce()``; calls without a name are
  dropped, ``arguments or "{}"``, the id is the parser's or ``make_tool_call_id()``
  (``chatcmpl-tool-<random>``); no call means the raw output is the content; an
  exception means the raw output is the content (logged);
* streaming (``extract_tool_calls_streaming``): a fresh parser on the first delta, then
  ``parse_into(delta_text, out)`` per delta; ``normal_text`` is content, each call delta
  with a name gets the parser's ``tool_call_id(index)`` (or a random one).  The bridge
  never calls ``finish()`` on a stream (its own TODO says so), and neither does this
  adapter.

In aphrodite 0.24.1 ``--tool-call-parser kimi_k2`` still selects the Python
``KimiK2ParserToolAdapter``; the Rust ``KimiK2ToolParser`` is driven here through the
generic Rust bridge exactly as the server drives its Rust-backed parsers, with
``tool_call_start_token = "<|tool_calls_section_begin|>"``.  The server's tool parsing is
active only when tools are declared and ``tool_choice`` is not ``"none"``; otherwise the
output is content as it is.  Reasoning is separated by aphrodite's Python reasoning parser
(which imports torch), so thinking-on requests are reported ``unavailable`` here.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Sequence

from k2conform import markers
from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    AdapterUnavailable,
    call_parser,
    require_api,
)
from k2conform.adapter.glue import load_once, module_from_file, package_dir
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

from k2conform_adapters.reproducible import Reproducible

RUST_PARSER_NAME = "KimiK2ToolParser"
TOOL_CALL_START_TOKEN = markers.SECTION_BEGIN
EXTENSION = "_rust_tool_parser.abi3.so"
#: What ``make_tool_call_id()`` mints (``chatcmpl-tool-<random>``), reported in its shape.
MASKED_RANDOM_ID = "chatcmpl-tool-<random>"


class AphroditeRustAdapter(Reproducible, Adapter):
    """aphrodite's Rust ``KimiK2ToolParser`` through the server's ``RustToolParser`` bridge."""

    repro_driver = "aphrodite"
    name = "aphrodite"
    package = "aphrodite-engine"
    supported_versions = ("0.24.1",)
    description = (
        "aphrodite-engine Rust KimiK2ToolParser (_rust_tool_parser.abi3.so) via RustToolParser"
    )

    @load_once
    def load(self) -> None:
        try:
            importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError as exc:
            raise AdapterUnavailable("aphrodite-engine is not installed") from exc
        path = package_dir(self.package, "aphrodite") / EXTENSION
        if not path.is_file():
            raise AdapterGlueError(f"aphrodite/{EXTENSION}", "missing in the installed release")
        try:
            module = module_from_file("aphrodite._rust_tool_parser", path)
        except ImportError as exc:
            raise AdapterGlueError(f"aphrodite/{EXTENSION}", f"does not load: {exc}") from exc
        require_api(
            module, "Tool", "ToolParser", "ToolParserOutput", owner_name="_rust_tool_parser"
        )
        require_api(
            module.ToolParser, "parse_into", "finish", "tool_call_id", owner_name="ToolParser"
        )
        require_api(
            module.ToolParserOutput,
            "append",
            "coalesce",
            "calls",
            "normal_text",
            owner_name="ToolParserOutput",
        )
        try:
            module.ToolParser(RUST_PARSER_NAME, [])
        except ValueError as exc:
            raise AdapterGlueError(f"ToolParser({RUST_PARSER_NAME!r})", str(exc)) from exc
        self._rust = module

    def _check(self, request: Request) -> bool:
        """Whether tool parsing is active (tools declared, tool_choice not "none")."""
        self.load()
        if request.thinking:
            raise AdapterUnavailable(
                "thinking on: aphrodite separates reasoning in Python (needs torch)"
            )
        return bool(request.tools) and request.tool_choice != "none"

    def _rust_tools(self, request: Request) -> list[Any]:
        tools = []
        for tool in request.tools:
            function = tool.get("function", {})
            tools.append(
                call_parser(
                    self._rust.Tool,
                    function["name"],
                    function.get("description"),
                    function.get("parameters") or {},
                    function.get("strict"),
                )
            )
        return tools

    def _new_parser(self, request: Request) -> Any:
        return call_parser(self._rust.ToolParser, RUST_PARSER_NAME, self._rust_tools(request))

    def parse_whole(self, request: Request, output: Delta) -> Result:
        text = output.text
        if not self._check(request) or TOOL_CALL_START_TOKEN not in text:
            return Result(content=text)
        parser = self._new_parser(request)
        out = call_parser(self._rust.ToolParserOutput)
        call_parser(parser.parse_into, text, out)
        ids = {}
        for call in call_parser(lambda: list(out.calls)):
            tool_id = call_parser(parser.tool_call_id, call.tool_index)
            if tool_id is not None:
                ids[call.tool_index] = tool_id
        call_parser(out.append, call_parser(parser.finish))
        parsed = call_parser(out.coalesce)
        calls = []
        masked = 0
        for call in parsed.calls:
            if call.name is None:
                continue
            tool_id = ids.get(call.tool_index)
            if tool_id is None:
                tool_id, masked = MASKED_RANDOM_ID, masked + 1  # make_tool_call_id()
            calls.append(ToolCall(name=call.name, arguments=call.arguments or "{}", id=tool_id))
        if not calls:
            return Result(content=text)
        meta = {"masked_random_ids": masked} if masked else {}
        return Result(content=parsed.normal_text or None, tool_calls=tuple(calls), meta=meta)

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        if not self._check(request):
            return [StreamEvent(content=d.text) for d in deltas if d.text]
        parser = self._new_parser(request)
        events = []
        for delta in deltas:
            out = call_parser(self._rust.ToolParserOutput)
            call_parser(parser.parse_into, delta.text, out)
            calls = []
            for call in call_parser(lambda: list(out.calls)):
                if call.name is None and call.arguments is None:
                    continue
                tool_id = None
                if call.name is not None:
                    tool_id = call_parser(parser.tool_call_id, call.tool_index) or MASKED_RANDOM_ID
                calls.append(
                    ToolCallDelta(
                        index=call.tool_index, id=tool_id, name=call.name, arguments=call.arguments
                    )
                )
            content = out.normal_text or None
            if content is None and not calls:
                continue
            events.append(StreamEvent(content=content, tool_calls=tuple(calls)))
        return events
