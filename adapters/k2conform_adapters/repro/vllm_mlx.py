"""vllm-mlx kimi_k2 tool parser

Drives vllm_mlx's KimiToolParser the way `vllm-mlx serve --enable-auto-tool-choice
--tool-call-parser kimi_k2` answers a non-streamed chat completion (vllm_mlx/server.py,
_parse_tool_calls_with_parser, restated here because server.py imports the MLX engines):
no tools or tool_choice "none" leaves the text unparsed; otherwise reset() and
extract_tool_calls, the generic parse_tool_calls when it finds no call, and
clean_output_text on the content.  The server's schema coercion of arguments
(_coerce_tool_arguments) is left out.
"""

from __future__ import annotations

from typing import Any

from vllm_mlx.api.tool_calling import parse_tool_calls
from vllm_mlx.api.utils import clean_output_text
from vllm_mlx.tool_parsers import ToolParserManager

from k2conform_adapters.repro.shared import Case, openai_calls

PACKAGE = "vllm-mlx"


def run(case: Case) -> dict[str, Any]:
    """The server's message for the complete output."""
    content, calls = case.text, []
    request = {"tools": case.tools, "tool_choice": case.tool_choice}
    if case.tools and case.tool_choice != "none":
        parser = ToolParserManager.get_tool_parser("kimi_k2")(None)
        parser.reset()
        result = parser.extract_tool_calls(case.text, request)
        if result.tools_called:
            content = result.content or ""
            calls = [
                {"id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                for c in result.tool_calls
            ]
        else:
            fallback_text, fallback_calls = parse_tool_calls(case.text, request)
            calls = openai_calls(fallback_calls)
            content = fallback_text if calls or result.content is None else result.content
    return {
        "content": clean_output_text(content) if content else None,
        "reasoning": None,
        "tool_calls": calls,
    }
