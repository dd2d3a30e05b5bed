"""ms-swift kimi_k25 agent template get_toolcall

Calls KimiK25AgentTemplate.get_toolcall on the whole response, as `swift deploy --template
kimi_k2 --agent_template kimi_k25` does (swift/infer_engine/infer_engine.py _get_toolcall):
the message's content is the response itself, each Function becomes a
ChatCompletionMessageToolCall, and an exception in get_toolcall gives no tool calls.
swift.infer_engine and swift.template import torch and the model zoo, so where they do not
import, the script puts in their place modules holding only the names the agent templates
import, their source read from the installed protocol.py and template/utils.py.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import sys
import types
from typing import Any

from k2conform_adapters.repro.shared import Case

PACKAGE = "ms-swift"
#: Per module the agent templates import from: its file, and the definitions taken from it.
NEEDED = {
    "swift.infer_engine": (
        "infer_engine/protocol.py",
        ["Function", "random_uuid", "ChatCompletionMessageToolCall"],
    ),
    "swift.template": (
        "template/utils.py",
        ["Prompt", "_split_str_by_regex", "split_str_parts_by"],
    ),
}
HEADER = "import json, re, uuid\nfrom dataclasses import dataclass, field\nfrom typing import *\n"


def defines(node: ast.stmt, names: list[str]) -> bool:
    """Whether a top-level statement is the def, class or assignment of one of ``names``."""
    targets = [getattr(t, "id", None) for t in getattr(node, "targets", ())]
    return getattr(node, "name", None) in names or any(t in names for t in targets)


def agent_templates() -> Any:
    """swift.agent_template, with the two modules it imports made from their own source."""
    root = pathlib.Path(next(iter(importlib.util.find_spec("swift").submodule_search_locations)))
    for name, (file, wanted) in NEEDED.items():
        try:
            getattr(importlib.import_module(name), wanted[0])
        except Exception:  # noqa: BLE001 - its package needs torch &c. (lazy imports raise late)
            tree = ast.parse((root / file).read_text(encoding="utf-8"))
            picked = [ast.unparse(node) for node in tree.body if defines(node, wanted)]
            module = sys.modules[name] = types.ModuleType(name)
            exec(HEADER + "\n\n".join(picked), module.__dict__)  # noqa: S102 - the release's code
    return importlib.import_module("swift.agent_template")


swift_agent_template = agent_templates()


def run(case: Case) -> dict[str, Any]:
    """swift deploy's message for the complete response."""
    template = swift_agent_template.agent_template_map["kimi_k25"]()
    tool_call = sys.modules["swift.infer_engine"].ChatCompletionMessageToolCall
    try:
        functions = template.get_toolcall(case.text)
    except Exception:  # noqa: BLE001 - _get_toolcall swallows it: no tool calls
        functions = None
    calls = [tool_call(function=f) for f in functions or ()]
    return {
        "content": case.text,
        "reasoning": None,
        "tool_calls": [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in calls
        ],
    }
