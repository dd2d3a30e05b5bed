"""ms-swift 4.6.0's ``KimiK25AgentTemplate.get_toolcall``, driven the way ``swift deploy`` does.

The deployment it stands for: ``swift deploy --model moonshotai/Kimi-K2-Instruct --template kimi_k2
--agent_template kimi_k25`` with the default (transformers) engine.  The ``kimi_k2`` template has
no response prefix (``swift/template/templates/moonshot.py``; the ``kimi_k25`` template would put
``<think></think>`` or ``<think>`` before every response).  What the server does with a response
(``swift/infer_engine/transformers_engine.py``, ``InferEngine._get_toolcall`` in
``infer_engine.py``):

* the message's ``content`` is the decoded response as it is: tool-call markup stays in it, and
  nothing is split off as reasoning (the transformers engine runs no reasoning parser);
* ``tool_calls`` are ``agent_template.get_toolcall(response)``, each wrapped in a
  ``ChatCompletionMessageToolCall`` (id ``toolcall-<uuid4 hex>``); an exception in
  ``get_toolcall`` is swallowed and gives no tool calls (recorded here in ``meta``);
* streaming sends the raw text deltas as content and runs the same one-shot ``get_toolcall`` on
  the finished response, so ``get_toolcall`` has no streaming counterpart: the stream modes are
  ``unavailable``.

The agent templates (``swift/agent_template/``) import only the standard library beside
``swift.infer_engine.Function`` and ``swift.template.{Prompt, split_str_parts_by}``, but those two
packages import torch, PIL, peft, modelscope and the model zoo.  So the adapter puts two stub
modules under those names in ``sys.modules`` before importing ``swift.agent_template`` itself,
each holding only the release's own definitions, read from the installed
``infer_engine/protocol.py`` (``Function``, ``ChatCompletionMessageToolCall``) and
``template/utils.py`` (``Prompt``, ``split_str_parts_by``: the ReAct fallback of
``get_toolcall``) with ``glue.definitions_from_source``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from k2conform.adapter.contract import (
    Adapter,
    AdapterUnavailable,
    ParserCrash,
    call_parser,
    glue_imports,
    require_api,
)
from k2conform.adapter.glue import RandomIds, definitions_from_source, load_once, package_dir
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall

from k2conform_adapters.reproducible import Reproducible

#: The stub modules: each name's release definitions, and the file they are read from.
STUBBED = {
    "swift.infer_engine": (
        "infer_engine/protocol.py",
        ("Function", "ChatCompletionMessageToolCall"),
    ),
    "swift.template": ("template/utils.py", ("Prompt", "split_str_parts_by")),
}


class MsSwiftAdapter(Reproducible, Adapter):
    """ms-swift's ``kimi_k25`` agent template behind ``swift deploy``'s response handling."""

    repro_driver = "ms_swift"
    name = "ms-swift"
    package = "ms-swift"
    supported_versions = ("4.6.0",)
    description = "swift deploy --template kimi_k2 --agent_template kimi_k25 (get_toolcall)"
    coverage_files = ("swift/agent_template/kimi_k25.py",)

    @load_once
    def load(self) -> None:
        root = package_dir("ms-swift", "swift")
        for module_name, (file, names) in STUBBED.items():
            if module_name not in sys.modules:
                definitions_from_source(
                    root / file, names, module_name=module_name, package=module_name
                )
        with glue_imports("ms-swift"):
            from swift.agent_template import agent_template_map
        self._template = agent_template_map["kimi_k25"]()
        require_api(
            self._template,
            "get_toolcall",
            "_format_tools",
            "_format_tool_calls",
            "_format_tool_responses",
            owner_name="KimiK25AgentTemplate",
        )
        self._tool_call_cls = sys.modules["swift.infer_engine"].ChatCompletionMessageToolCall

    def agent_template(self) -> Any:
        """The release's ``KimiK25AgentTemplate``: it also renders the prompt's tool pieces."""
        self.load()
        return self._template

    def parse_whole(self, request: Request, output: Delta) -> Result:
        template = self.agent_template()
        ids = RandomIds(re.compile(r"^toolcall-[0-9a-f]{32}$"), "toolcall-<random>")
        try:
            functions = call_parser(template.get_toolcall, output.text)
        except ParserCrash as crash:
            return Result(content=output.text, meta=ids.meta(get_toolcall_error=str(crash)))
        calls = tuple(
            ToolCall(name=c.function.name, arguments=c.function.arguments, id=ids.mask(c.id))
            for c in (self._tool_call_cls(function=function) for function in functions or ())
        )
        return Result(content=output.text, tool_calls=calls, meta=ids.meta())

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        raise AdapterUnavailable(
            "get_toolcall parses whole responses only: swift deploy streams "
            "the raw text and runs the same one-shot parse on the finished "
            "response"
        )
