"""mlx-lm 0.32.2's ``kimi_k2`` tool parser, driven the way ``mlx_lm.server`` drives it.

What the server does (``mlx_lm/server.py``, ``handle_completion``):

* at load, ``tokenizer_utils.load`` infers ``tool_parser_type="kimi_k2"`` from the chat
  template (it mentions ``<|tool_calls_section_begin|>``) and keeps the module's
  ``parse_tool_call``, ``tool_call_start`` and ``tool_call_end``; a Kimi vocabulary has
  ``<think>``/``</think>``, so ``has_thinking`` is true whatever the request says;
* every generated piece goes through a ``TextStateMachine`` (``mlx_lm/generate.py``) with
  the transitions ``normal -<think>-> reasoning -</think>-> normal``, ``normal|reasoning
  -<|tool_calls_section_begin|>-> tool -<|tool_calls_section_end|>-> normal``; text in the
  ``tool`` state is collected and, when the state leaves ``tool`` (or the stream ends in
  it), the collected section text is one entry of ``tool_calls``;
* the initial state is ``reasoning`` when the prompt ends inside ``<think>`` (thinking on)
  and ``normal`` otherwise;
* the engine's last response carries ``finish_reason="stop"`` (the EOS token): the state
  machine then *discards* whatever it still holds back as a possible marker prefix;
* ``ToolCallFormatter`` calls ``parse_tool_call(section_text, tools)`` for each entry,
  drops an entry whose parse raises ``ValueError``/``JSONDecodeError`` (a warning), uses
  the parsed ``id`` or a random ``uuid4``, and ``json.dumps(arguments, ensure_ascii=False)``;
* streaming: a chunk is sent after a piece whenever the state is not ``tool`` and there is
  text, reasoning or calls; one-shot: the same loop, one message at the end
  (``content`` is ``text or None``).

mlx itself does not run here (Apple silicon / its own native library), and
``import mlx_lm`` imports ``mlx``.  The parser module imports only ``regex`` and the
standard library, so the adapter loads ``mlx_lm/tool_parsers/kimi_k2.py`` by file path
from the installed distribution, without running ``mlx_lm/__init__``.  The server's
``TextStateMachine`` (pure Python, but in ``generate.py`` which imports ``mlx``) is taken
from the installed ``generate.py`` too: the class and its ``_build_trie`` helper are
extracted from the source with ``ast`` and executed on their own, so the state machine
under test is the release's own code.  ``ToolCallFormatter`` (in ``server.py``, which
imports ``mlx``) is restated here from that file.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Sequence

from k2conform import markers
from k2conform.adapter.contract import (
    Adapter,
    AdapterGlueError,
    ParserCrash,
    call_parser,
    require_api,
)
from k2conform.adapter.glue import RandomIds, load_once, module_from_file, package_dir
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta

from k2conform_adapters.reproducible import Reproducible

#: ``str(uuid.uuid4())``: the id of a call whose parse gave none.
RANDOM_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MASKED_RANDOM_ID = "uuid4-<random>"


def extract_definitions(
    path: Path, names: Sequence[str], namespace: dict[str, Any]
) -> dict[str, Any]:
    """Execute only the top-level definitions ``names`` of a source file (no imports run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names
    ]
    missing = set(names) - {node.name for node in wanted}
    if missing:
        raise AdapterGlueError(
            f"{path.name}:{','.join(sorted(missing))}", "missing in the installed release"
        )
    module = ast.Module(body=wanted, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the release's own code
    return namespace


class MlxLmAdapter(Reproducible, Adapter):
    """mlx-lm's ``kimi_k2`` ``parse_tool_call`` behind the server's text state machine."""

    repro_driver = "mlx_lm"
    name = "mlx-lm"
    package = "mlx-lm"
    supported_versions = ("0.32.2",)
    description = "mlx_lm.server: tool_parser_type kimi_k2 (inferred from the chat template)"

    @load_once
    def load(self) -> None:
        root = package_dir("mlx-lm", "mlx_lm")
        parser_file = root / "tool_parsers" / "kimi_k2.py"
        generate_file = root / "generate.py"
        for path in (parser_file, generate_file):
            if not path.is_file():
                raise AdapterGlueError(
                    str(path.relative_to(root.parent)), "missing in the installed release"
                )
        try:
            module = module_from_file("k2conform_mlx_lm_kimi_k2", parser_file)
        except ModuleNotFoundError as exc:
            raise AdapterGlueError(
                "mlx_lm/tool_parsers/kimi_k2.py", f"a dependency is missing: {exc}"
            ) from exc
        require_api(
            module,
            "parse_tool_call",
            "tool_call_start",
            "tool_call_end",
            owner_name="mlx_lm.tool_parsers.kimi_k2",
        )
        namespace = extract_definitions(
            generate_file, ("_build_trie", "TextStateMachine"), {"deque": deque}
        )
        machine = namespace["TextStateMachine"]
        require_api(machine, "make_state", "split", "discard", owner_name="TextStateMachine")
        self._parse_tool_call = module.parse_tool_call
        self._start = module.tool_call_start
        self._end = module.tool_call_end
        self._machine_cls = machine

    def _machine(self) -> Any:
        """``make_text_state_machine`` for a Kimi tokenizer (thinking and tool calling)."""
        transitions = {
            "normal": [(markers.THINK_BEGIN, "reasoning"), (self._start, "tool")],
            "reasoning": [(markers.THINK_END, "normal"), (self._start, "tool")],
            "tool": [(self._end, "normal")] if self._end else [],
        }
        return self._machine_cls(transitions)

    def _run(
        self, request: Request, pieces: Sequence[str], stream: bool
    ) -> tuple[list[StreamEvent], Result]:
        """The server's generation loop over ``pieces`` then the EOS step."""
        machine = self._machine()
        initial = "reasoning" if request.thinking else "normal"
        state = machine.make_state(initial)
        formatter = _ToolCallFormatter(
            self._parse_tool_call, [dict(t) for t in request.tools] or None, stream
        )
        prev_state = initial
        current = initial
        reasoning_text = text = tool_text = ""
        tool_calls: list[str] = []
        events: list[StreamEvent] = []
        all_calls: list[dict[str, Any]] = []
        all_text: list[str] = []
        all_reasoning: list[str] = []
        steps = [(piece, None) for piece in pieces] + [("", "stop")]
        for piece, finish_reason in steps:
            if finish_reason == "stop":
                state, current = call_parser(self._machine_cls.discard, state)
                segments = [(current, "")]
            else:
                state, segments = call_parser(self._machine_cls.split, state, piece)
            for current, clean in segments:
                if current == "reasoning":
                    reasoning_text += clean
                elif current == "tool":
                    tool_text += clean
                elif current == "normal":
                    if prev_state == "tool":
                        tool_calls.append(tool_text)
                        tool_text = ""
                    text += clean
                prev_state = current
            if (
                stream
                and finish_reason is None
                and current != "tool"
                and (text or tool_calls or reasoning_text)
            ):
                events.append(_event(text, reasoning_text, formatter(tool_calls)))
                reasoning_text = text = ""
                tool_calls = []
        if prev_state == "tool" and tool_text:
            tool_calls.append(tool_text)
        formatted = formatter(tool_calls)
        if stream:
            events.append(_event(text, reasoning_text, formatted))
        else:
            all_calls, all_text, all_reasoning = formatted, [text], [reasoning_text]
        result = Result(
            content="".join(all_text) or None,
            reasoning="".join(all_reasoning) or None,
            tool_calls=tuple(
                ToolCall(
                    name=c["function"]["name"], arguments=c["function"]["arguments"], id=c["id"]
                )
                for c in all_calls
            ),
            meta=formatter.ids.meta(),
        )
        return [e for e in events if e is not None], result

    def parse_whole(self, request: Request, output: Delta) -> Result:
        self.load()
        return self._run(request, [output.text], stream=False)[1]

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        self.load()
        return self._run(request, [d.text for d in deltas], stream=True)[0]


class _ToolCallFormatter:
    """``mlx_lm.server.ToolCallFormatter`` (server.py imports mlx, so it is restated)."""

    def __init__(self, parse: Any, tools: Any, streaming: bool) -> None:
        self._idx = 0
        self._parse = parse
        self._tools = tools
        self._streaming = streaming
        self.ids = RandomIds(RANDOM_ID, MASKED_RANDOM_ID)

    def _format(self, tc: dict[str, Any]) -> dict[str, Any]:
        tc_id = self.ids.mask(tc.pop("id", None) or str(uuid.uuid4()))
        tc["arguments"] = call_parser(json.dumps, tc["arguments"], ensure_ascii=False)
        out = {"function": tc, "type": "function", "id": tc_id}
        if self._streaming:
            out["index"] = self._idx
            self._idx += 1
        return out

    def __call__(self, tool_calls: list[str]) -> list[dict[str, Any]]:
        result = []
        for tool_text in tool_calls:
            try:
                parsed = call_parser(self._parse, tool_text, self._tools)
            except ParserCrash as crash:
                if isinstance(crash.cause, (ValueError, json.JSONDecodeError)):
                    continue  # the server logs a warning and drops the call
                raise
            if not isinstance(parsed, list):
                parsed = [parsed]
            result.extend(self._format(dict(tc)) for tc in parsed)
        return result


def _event(text: str, reasoning: str, calls: list[dict[str, Any]]) -> StreamEvent | None:
    deltas = tuple(
        ToolCallDelta(
            index=c["index"],
            id=c["id"],
            name=c["function"]["name"],
            arguments=c["function"]["arguments"],
        )
        for c in calls
    )
    if not text and not reasoning and not deltas:
        return None
    return StreamEvent(content=text or None, reasoning=reasoning or None, tool_calls=deltas)
