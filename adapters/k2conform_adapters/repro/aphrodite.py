"""aphrodite Rust KimiK2ToolParser

Drives the Rust KimiK2ToolParser (aphrodite/_rust_tool_parser.abi3.so) as aphrodite's
RustToolParser bridge does.
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

from k2conform_adapters.repro.shared import Case, assemble

PACKAGE = "aphrodite-engine"


def load_extension() -> Any:
    """aphrodite-engine's Rust extension, loaded by file path (aphrodite/__init__ needs torch)."""
    spec = importlib.util.find_spec("aphrodite")
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "_rust_tool_parser.abi3.so"
    loader = importlib.util.spec_from_file_location("aphrodite._rust_tool_parser", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


rust = load_extension()


def new_parser(case: Case) -> Any:
    """ToolParser("KimiK2ToolParser", tools), the tools as the bridge converts them."""
    tools = [
        rust.Tool(
            t["function"]["name"],
            t["function"].get("description"),
            t["function"].get("parameters") or {},
            t["function"].get("strict"),
        )
        for t in case.tools
    ]
    return rust.ToolParser("KimiK2ToolParser", tools)


def run(case: Case) -> dict[str, Any]:
    """The Rust parser's message for the case, one-shot or streamed."""
    # As aphrodite's RustToolParser bridge drives a Rust parser.
    if case.mode == "whole":
        return parse_whole(case)
    parser, events = new_parser(case), []
    for text, _ids in case.deltas:  # the bridge never calls finish() on a stream
        out = rust.ToolParserOutput()
        parser.parse_into(text, out)
        events.append(
            {
                "content": out.normal_text or None,
                "tool_calls": [
                    {
                        "index": c.tool_index,
                        "name": c.name,
                        "arguments": c.arguments,
                        "id": parser.tool_call_id(c.tool_index) if c.name is not None else None,
                    }
                    for c in out.calls
                    if c.name is not None or c.arguments is not None
                ],
            }
        )
    return assemble(events)


def parse_whole(case: Case) -> dict[str, Any]:
    """The one-shot path: no section begin means all content; calls without a name drop."""
    text = case.text
    if "<|tool_calls_section_begin|>" not in text:
        return {"content": text, "reasoning": None, "tool_calls": []}
    parser, out = new_parser(case), rust.ToolParserOutput()
    parser.parse_into(text, out)
    ids = {c.tool_index: parser.tool_call_id(c.tool_index) for c in out.calls}
    out.append(parser.finish())
    parsed = out.coalesce()
    calls = [
        {"id": ids.get(c.tool_index), "name": c.name, "arguments": c.arguments or "{}"}
        for c in parsed.calls
        if c.name is not None
    ]
    if not calls:
        return {"content": text, "reasoning": None, "tool_calls": []}
    return {"content": parsed.normal_text or None, "reasoning": None, "tool_calls": calls}
