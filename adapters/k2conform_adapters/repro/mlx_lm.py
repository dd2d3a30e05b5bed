"""mlx-lm kimi_k2 parse_tool_call

Calls mlx_lm.tool_parsers.kimi_k2.parse_tool_call on the tool-call section as mlx_lm.server
cuts it out.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any

from k2conform_adapters.repro.shared import Case

PACKAGE = "mlx-lm"


def load_parser_module() -> Any:
    """mlx_lm/tool_parsers/kimi_k2.py, loaded by file path (mlx_lm/__init__ imports mlx)."""
    spec = importlib.util.find_spec("mlx_lm")
    root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    loader = importlib.util.spec_from_file_location("kimi_k2", root / "tool_parsers" / "kimi_k2.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


kimi_k2 = load_parser_module()


def run(case: Case) -> dict[str, Any]:
    """mlx_lm.server's message for the case (the whole output, whatever the delivery)."""
    # mlx_lm.server cuts the text between tool_call_start and tool_call_end (and
    # <think>...</think> into reasoning) and calls parse_tool_call on each section,
    # dropping ValueErrors.
    text, reasoning = case.text, None
    if case.thinking and "</think>" in text:
        reasoning, text = text.split("</think>", 1)
    content, sections = "", []
    while kimi_k2.tool_call_start in text:
        before, text = text.split(kimi_k2.tool_call_start, 1)
        content += before
        section, _, text = text.partition(kimi_k2.tool_call_end)
        sections.append(section)
    content += text
    calls = []
    for section in sections:
        try:
            parsed = kimi_k2.parse_tool_call(section, case.tools or None)
        except ValueError:
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            calls.append(
                {
                    "id": call.get("id"),
                    "name": call["name"],
                    "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                }
            )
    return {"content": content or None, "reasoning": reasoning or None, "tool_calls": calls}
