"""Case files: one JSON file per case, validated field by field.

A completion case (``"kind": "completion"``) is a model output with the request it
answers and the expected canonical result; a prompt case (``"kind": "prompt"``) is a
conversation with the expected prompt stream, byte for byte.  The id's prefix is the
verdict, JSONTestSuite style: ``y_`` well-formed (must parse to the expectation),
``n_`` malformed (the required behaviour is defined by the expectation), ``i_``
implementation-defined (recorded, not judged).  JSON escapes make every invisible
character (trailing space, tab, CR, missing final newline) unambiguous.

The loader reports the first problem of a bad file with its path and the offending
field; nothing is skipped.
"""

from __future__ import annotations

import argparse

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k2conform import formats
from k2conform.model import Request, RequestFate, Result, ToolCall, dumps_canonical
from k2conform.resources import bundled

#: The folder of a corpus holding the case sources (data the generator expands, not cases).
SOURCES = "sources"
#: The findings catalogue (``k2conform catalogue``): valid cases that ``check-corpus`` validates
#: but the loader leaves out, so they add no cells to the matrix (docs/findings-catalogue.md).
CATALOGUE = ("findings", "catalogue")
_ID_PATTERN = re.compile(r"^[yni]_[a-z0-9][a-z0-9_.\-]*$")
#: The Kimi formats a completion case (or a probe's replay) may be written in: K2's markers,
#: K3's channels.
FORMATS = tuple(formats.FORMATS)
_COMPLETION_KEYS = {
    "id": True,
    "kind": True,
    "description": True,
    "tags": True,
    "source": True,
    "request": True,
    "model_output": False,
    "deltas": False,
    "expected": False,
    "generator": False,
    "format": False,
    "spelled_markers": False,
}
_PROBE_KEYS = {
    "id": True,
    "kind": True,
    "description": True,
    "tags": True,
    "source": True,
    "tools": True,
    "tool_choice": False,
    "messages": True,
    "expect": True,
    "follow_up": False,
    "replay": True,
    "format": False,
}
_EXPECT_CALLS = ("required", "none", "any")
_PROMPT_KEYS = {
    "id": True,
    "kind": True,
    "description": True,
    "tags": True,
    "source": True,
    "messages": True,
    "tools": False,
    "add_generation_prompt": True,
    "expected_prompt": True,
}


class CorpusError(ValueError):
    """A case file that does not follow the format: names the file and the field."""

    def __init__(self, path: Path | str, field_name: str, message: str) -> None:
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{path}: field '{field_name}': {message}")


@dataclass(frozen=True)
class Expectation:
    """The expected canonical result of a completion case (outcome is always ``ok``).
    ``finish_reason`` is what a server must answer with (judged in the server modes); when a
    case does not say, the spec's rule holds: ``tool_calls`` when the reply carries calls."""

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None = None
    #: What a server must do with the request itself (a request-level case: the request is
    #: what it tests); None: the case says nothing of it, and a server must serve it.
    request: RequestFate | None = None

    def as_result(self) -> Result:
        return Result(self.content, self.reasoning, self.tool_calls)

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "content": self.content,
                "reasoning": self.reasoning,
                "tool_calls": [c.to_json() for c in self.tool_calls],
            }
            | ({"finish_reason": self.finish_reason} if self.finish_reason is not None else {})
            | ({"request": self.request.value} if self.request is not None else {})
        )


@dataclass(frozen=True)
class CompletionCase:
    id: str
    description: str
    tags: tuple[str, ...]
    source: str
    request: Request
    model_output: str
    deltas: tuple[str, ...] | None
    expected: Expectation | None
    generator: Mapping[str, Any] | None = None
    path: str = ""
    #: The format of ``model_output`` (:data:`FORMATS`); an adapter parses the formats it
    #: declares (``Adapter.formats``)
    format: str = formats.DEFAULT
    #: Offsets in ``model_output`` of markers the model wrote from ordinary pieces instead of
    #: their special token (sgl-project/sglang PR #32677): the text is the same, the token
    #: ids differ, so only token-aligned deliveries carry it (``delivery.modes.deliveries``).
    spelled_markers: tuple[int, ...] = ()

    kind = "completion"

    @property
    def verdict(self) -> str:
        return self.id[0]

    @property
    def request_level(self) -> bool:
        """The case tests how a server takes its request (``expected.request``): it is judged
        where requests are served (the server modes, ``k2conform grammar``), never by a parser
        alone."""
        return self.expected is not None and self.expected.request is not None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "description": self.description,
            "tags": list(self.tags),
            "source": self.source,
            "request": self.request.to_json(),
            "model_output": self.model_output,
        }
        if self.deltas is not None:
            data["deltas"] = list(self.deltas)
        if self.expected is not None:
            data["expected"] = self.expected.to_json()
        if self.generator is not None:
            data["generator"] = dict(self.generator)
        if self.format != formats.DEFAULT:
            data["format"] = self.format
        if self.spelled_markers:
            data["spelled_markers"] = list(self.spelled_markers)
        return data


@dataclass(frozen=True)
class PromptCase:
    id: str
    description: str
    tags: tuple[str, ...]
    source: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    add_generation_prompt: bool
    expected_prompt: str
    path: str = ""

    kind = "prompt"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "description": self.description,
            "tags": list(self.tags),
            "source": self.source,
            "messages": list(self.messages),
            "tools": list(self.tools),
            "add_generation_prompt": self.add_generation_prompt,
            "expected_prompt": self.expected_prompt,
        }


@dataclass(frozen=True)
class ProbeCase:
    """A conversation to send to a live engine (``"kind": "probe"``, docs/engine-plugin.md).

    ``expect`` says whether the model should call tools (``calls``: required, none, any) and
    which names it may call; ``follow_up`` (multi-turn) holds the tool results to send back
    under the returned ids, with its own ``expect``; ``replay`` is the model output of each
    turn that the CI engine (``k2conform serve-fake-engine``) generates: a live engine
    ignores it.
    """

    id: str
    description: str
    tags: tuple[str, ...]
    source: str
    tools: tuple[Mapping[str, Any], ...]
    tool_choice: str | Mapping[str, Any]
    messages: tuple[Mapping[str, Any], ...]
    expect: Mapping[str, Any]
    follow_up: Mapping[str, Any] | None
    replay: tuple[str, ...]
    path: str = ""
    #: The format of ``replay`` (:data:`FORMATS`): the live-engine plugin sends a probe to a
    #: server of its format only.
    format: str = formats.DEFAULT

    kind = "probe"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "description": self.description,
            "tags": list(self.tags),
            "source": self.source,
            "tools": list(self.tools),
            "tool_choice": self.tool_choice,
            "messages": list(self.messages),
            "expect": dict(self.expect),
        }
        if self.follow_up is not None:
            data["follow_up"] = dict(self.follow_up)
        data["replay"] = list(self.replay)
        if self.format != formats.DEFAULT:
            data["format"] = self.format
        return data


Case = CompletionCase | PromptCase | ProbeCase


@dataclass
class Corpus:
    completions: list[CompletionCase] = field(default_factory=list)
    prompts: list[PromptCase] = field(default_factory=list)
    #: Live-engine probes (not counted in ``len``: they have no expected parse).
    probes: list[ProbeCase] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.completions) + len(self.prompts)


def default_corpus_dir() -> Path:
    """The corpus of this checkout, or the one an installed k2conform carries."""
    return bundled("corpus")


def case_files(root: Path | str) -> list[Path]:
    """Every case file under ``root``: its ``*.json`` files, except those of the case sources
    (``sources/``, the data ``python -m k2conform.case.generate`` expands)."""
    root = Path(root)
    return [
        path for path in sorted(root.rglob("*.json")) if path.relative_to(root).parts[0] != SOURCES
    ]


def load_corpus(root: Path | str | None = None) -> Corpus:
    """Load and validate every ``*.json`` case under ``root``; raise on the first bad file."""
    root = Path(root) if root is not None else default_corpus_dir()
    if not root.exists():
        raise CorpusError(root, "-", "no such directory")
    corpus = Corpus()
    seen: dict[str, str] = {}
    for path in case_files(root):
        if path.relative_to(root).parts[:2] == CATALOGUE:
            continue  # checked against its own adapter (catalogue check), not run by the matrix
        case = load_case(path)
        if case.id in seen:
            raise CorpusError(path, "id", f"duplicate id, also in {seen[case.id]}")
        seen[case.id] = str(path)
        if isinstance(case, CompletionCase):
            corpus.completions.append(case)
        elif isinstance(case, ProbeCase):
            corpus.probes.append(case)
        else:
            corpus.prompts.append(case)
    return corpus


def iter_problems(root: Path | str) -> Iterator[CorpusError]:
    """Every bad file under ``root`` (for ``check-corpus``, which reports them all)."""
    seen: dict[str, str] = {}
    for path in case_files(root):
        try:
            case = load_case(path)
        except CorpusError as error:
            yield error
            continue
        if case.id in seen:
            yield CorpusError(path, "id", f"duplicate id, also in {seen[case.id]}")
        seen[case.id] = str(path)


def load_case(path: Path | str) -> Case:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise CorpusError(path, "-", f"not UTF-8: {error}") from None
    except json.JSONDecodeError as error:
        raise CorpusError(path, "-", f"not JSON: {error}") from None
    return case_from_json(data, path)


def case_from_json(data: Any, path: Path | str = "<memory>") -> Case:
    check = FieldChecker(path)
    check.object(data, "", {"kind": True}, strict=False)
    kind = data["kind"]
    if kind == "completion":
        return _completion(data, check, str(path))
    if kind == "prompt":
        return _prompt(data, check, str(path))
    if kind == "probe":
        return _probe(data, check, str(path))
    raise CorpusError(path, "kind", f"must be 'completion', 'prompt' or 'probe', not {kind!r}")


def write_case(case: Case, directory: Path | str) -> Path:
    """Write a case as ``DIR/<id>.json`` in the canonical layout (what the generator writes)."""
    path = Path(directory) / f"{case.id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_canonical(case.to_json()), encoding="utf-8")
    return path


def _common(data: Mapping[str, Any], check: FieldChecker) -> tuple[str, str, tuple[str, ...], str]:
    case_id = check.string(data["id"], "id")
    if not _ID_PATTERN.match(case_id):
        raise CorpusError(
            check.path, "id", f"{case_id!r} must match {_ID_PATTERN.pattern} (y_/n_/i_ prefix)"
        )
    stem = Path(check.path).stem
    if check.path != "<memory>" and stem != case_id:
        raise CorpusError(check.path, "id", f"{case_id!r} differs from the file name {stem!r}")
    description = check.string(data["description"], "description")
    if not description.strip() or "\n" in description:
        raise CorpusError(check.path, "description", "must be one non-empty line")
    tags = tuple(
        check.string(t, f"tags[{i}]") for i, t in enumerate(check.array(data["tags"], "tags"))
    )
    source = check.string(data["source"], "source")
    return case_id, description, tags, source


def _completion(data: Mapping[str, Any], check: FieldChecker, path: str) -> CompletionCase:
    check.object(data, "", _COMPLETION_KEYS)
    case_id, description, tags, source = _common(data, check)
    request = _request(data["request"], check)
    deltas = None
    if "deltas" in data:
        deltas = tuple(
            check.string(d, f"deltas[{i}]")
            for i, d in enumerate(check.array(data["deltas"], "deltas"))
        )
    if "model_output" in data:
        model_output = check.string(data["model_output"], "model_output")
        if deltas is not None and "".join(deltas) != model_output:
            raise CorpusError(path, "deltas", "do not concatenate to model_output")
    elif deltas is not None:
        model_output = "".join(deltas)
    else:
        raise CorpusError(path, "model_output", "required (or deltas)")
    expected = None
    if "expected" in data:
        expected = _expectation(data["expected"], check, "expected")
    elif case_id[0] != "i":
        raise CorpusError(path, "expected", "required for y_ and n_ cases")
    generator = None
    if "generator" in data:
        generator = check.object(
            data["generator"], "generator", {"class": True, "seed": True}, strict=False
        )
    format = _format(data, path)
    spelled = _spelled_markers(data.get("spelled_markers", []), model_output, format, check)
    return CompletionCase(
        case_id,
        description,
        tags,
        source,
        request,
        model_output,
        deltas,
        expected,
        generator,
        path,
        format,
        spelled,
    )


def _format(data: Mapping[str, Any], path: str) -> str:
    format = data.get("format", formats.DEFAULT)
    if format not in FORMATS:
        raise CorpusError(path, "format", f"must be one of {', '.join(FORMATS)}, not {format!r}")
    return format


def _spelled_markers(
    value: Any, model_output: str, format: str, check: FieldChecker
) -> tuple[int, ...]:
    """Ascending offsets, each where one of the format's special tokens starts."""
    tokens = formats.FORMATS[format].special_tokens
    offsets = tuple(
        check.integer(v, f"spelled_markers[{i}]")
        for i, v in enumerate(check.array(value, "spelled_markers"))
    )
    for i, at in enumerate(offsets):
        if i and at <= offsets[i - 1]:
            raise CorpusError(check.path, f"spelled_markers[{i}]", "offsets must ascend")
        if at < 0 or not any(model_output.startswith(t, at) for t in tokens):
            raise CorpusError(
                check.path,
                f"spelled_markers[{i}]",
                f"offset {at} is not where a {format} special token starts in model_output",
            )
    return offsets


def _prompt(data: Mapping[str, Any], check: FieldChecker, path: str) -> PromptCase:
    check.object(data, "", _PROMPT_KEYS)
    case_id, description, tags, source = _common(data, check)
    messages = _messages(data["messages"], check)
    tools = _tools(data.get("tools", []), check, "tools")
    add = data["add_generation_prompt"]
    if not isinstance(add, bool):
        raise CorpusError(path, "add_generation_prompt", "must be true or false")
    expected_prompt = check.string(data["expected_prompt"], "expected_prompt")
    return PromptCase(
        case_id, description, tags, source, messages, tools, add, expected_prompt, path
    )


def _probe(data: Mapping[str, Any], check: FieldChecker, path: str) -> ProbeCase:
    check.object(data, "", _PROBE_KEYS)
    case_id, description, tags, source = _common(data, check)
    tools = _tools(data["tools"], check, "tools")
    names = {t["function"]["name"] for t in tools}
    tool_choice = _tool_choice(data.get("tool_choice", "auto"), check, "tool_choice")
    if isinstance(tool_choice, dict) and tool_choice["function"].get("name") not in names:
        raise CorpusError(path, "tool_choice.function.name", "must name a declared tool")
    messages = _messages(data["messages"], check)
    if not messages:
        raise CorpusError(path, "messages", "must not be empty")
    expect = _probe_expect(data["expect"], check, "expect", names)
    follow_up = None
    turns = 1
    if "follow_up" in data:
        follow_up = check.object(
            data["follow_up"], "follow_up", {"tool_results": True, "expect": True}
        )
        results = check.object(
            follow_up["tool_results"], "follow_up.tool_results", {}, strict=False
        )
        for name, value in results.items():
            if name not in names:
                raise CorpusError(path, f"follow_up.tool_results.{name}", "must be a declared tool")
            check.string(value, f"follow_up.tool_results.{name}")
        _probe_expect(follow_up["expect"], check, "follow_up.expect", names)
        turns = 2
    replay = tuple(
        check.string(r, f"replay[{i}]") for i, r in enumerate(check.array(data["replay"], "replay"))
    )
    if len(replay) != turns:
        raise CorpusError(path, "replay", f"must hold one model output per turn ({turns})")
    return ProbeCase(
        case_id,
        description,
        tags,
        source,
        tools,
        tool_choice,
        messages,
        expect,
        follow_up,
        replay,
        path,
        _format(data, path),
    )


def _probe_expect(data: Any, check: FieldChecker, where: str, names: set[str]) -> Mapping[str, Any]:
    check.object(data, where, {"calls": True, "names": False, "min_calls": False})
    if data["calls"] not in _EXPECT_CALLS:
        raise CorpusError(
            check.path, f"{where}.calls", f"must be one of {', '.join(_EXPECT_CALLS)}"
        )
    for i, name in enumerate(check.array(data.get("names", []), f"{where}.names")):
        if name not in names:
            raise CorpusError(check.path, f"{where}.names[{i}]", f"{name!r} is not a declared tool")
    minimum = data.get("min_calls", 0)
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 0:
        raise CorpusError(check.path, f"{where}.min_calls", "must be a non-negative integer")
    return data


def _tool_choice(tool_choice: Any, check: FieldChecker, where: str) -> str | Mapping[str, Any]:
    if isinstance(tool_choice, str):
        if tool_choice not in ("auto", "none", "required"):
            raise CorpusError(check.path, where, "must be auto, none, required or a named choice")
    else:
        check.object(tool_choice, where, {"type": True, "function": True})
        check.object(tool_choice["function"], f"{where}.function", {"name": True})
    return tool_choice


#: Request options a server-level case may set (``request.server_options``), each with a
#: check; a case that sets any is run by server adapters only (server modes).
SERVER_OPTIONS: dict[str, str] = {
    "max_tokens": "a positive integer",
    "spaces_between_special_tokens": "true or false",
    "skip_special_tokens": "true or false",
    "parallel_tool_calls": "true or false",
    "stop": "a non-empty array of non-empty strings (stop strings the output does not contain)",
    "stream_options": "an object with include_usage / continuous_usage_stats (true or false)",
    "messages": (
        "a non-empty array of chat messages (objects with a role), the conversation before "
        "the reply"
    ),
    "continue_final_message": "true or false (the reply continues the last assistant message)",
    "stream_reasoning": "true or false (SGLang: stream the reasoning as it arrives)",
    "separate_reasoning": "true or false (SGLang: false runs no reasoning parser)",
    "empty_tools": "true or false (the body carries tools: [] where a case without tools has none)",
    "prior_tools": (
        "a non-empty array of tools, sent with the same output in a request of its own just "
        "before the case's (a schema of one request must not reach the next)"
    ),
    "chat_template_kwargs": (
        "an object of chat template arguments besides thinking (request.thinking sets that)"
    ),
}


def _server_options(data: Any, check: FieldChecker) -> dict[str, Any]:
    where = "request.server_options"
    check.object(data, where, dict.fromkeys(SERVER_OPTIONS, False))
    for key, value in data.items():
        if key == "max_tokens":
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        elif key == "stream_options":
            ok = isinstance(value, dict) and all(
                k in ("include_usage", "continuous_usage_stats") and isinstance(v, bool)
                for k, v in value.items()
            )
        elif key == "stop":
            ok = isinstance(value, list) and bool(value)
            ok = ok and all(isinstance(v, str) and v for v in value)
        elif key == "prior_tools":
            ok = isinstance(value, list) and bool(value)
            if ok:
                _tools(value, check, f"{where}.{key}")
        elif key == "chat_template_kwargs":
            ok = isinstance(value, dict) and bool(value) and "thinking" not in value
        elif key == "messages":
            ok = (
                isinstance(value, list)
                and bool(value)
                and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)
            )
        else:
            ok = isinstance(value, bool)
        if not ok:
            raise CorpusError(check.path, f"{where}.{key}", f"must be {SERVER_OPTIONS[key]}")
    return dict(data)


def _request(data: Any, check: FieldChecker) -> Request:
    check.object(
        data,
        "request",
        {"tools": False, "tool_choice": False, "thinking": False, "server_options": False},
    )
    tools = _tools(data.get("tools", []), check, "request.tools")
    tool_choice = _tool_choice(data.get("tool_choice", "auto"), check, "request.tool_choice")
    thinking = data.get("thinking", False)
    if not isinstance(thinking, bool):
        raise CorpusError(check.path, "request.thinking", "must be true or false")
    server_options = (
        _server_options(data["server_options"], check) if "server_options" in data else {}
    )
    if server_options.get("empty_tools") and tools:
        raise CorpusError(
            check.path, "request.server_options.empty_tools", "is for a case that declares no tools"
        )
    return Request(
        tools=tools, tool_choice=tool_choice, thinking=thinking, server_options=server_options
    )


def request_from_json(data: Any, source: str) -> Request:
    """A request given outside a case file (``parse``'s stdin, the adapter protocol), checked
    as a case's ``request`` is: a wrong shape is a :class:`CorpusError` naming the field."""
    return _request(data, FieldChecker(source))


_Objects = tuple[Mapping[str, Any], ...]


def conversation_from_json(data: Any, source: str) -> tuple[_Objects, _Objects, bool]:
    """``render``'s input (messages, tools, add_generation_prompt) given outside a case file,
    checked as a prompt case's fields are: a wrong shape is a :class:`CorpusError` naming
    the field."""
    check = FieldChecker(source)
    check.object(data, "", {"messages": True, "tools": False, "add_generation_prompt": False})
    add = check.boolean(data.get("add_generation_prompt", False), "add_generation_prompt")
    return _messages(data["messages"], check), _tools(data.get("tools", []), check, "tools"), add


def _messages(data: Any, check: FieldChecker) -> _Objects:
    """Chat messages with every field the renderer reads in the shape it reads it, so a message
    without a role fails here instead of rendering as a turn named ``None``."""
    messages = []
    for i, message in enumerate(check.array(data, "messages")):
        where = f"messages[{i}]"
        check.object(message, where, {"role": True}, strict=False)
        if not isinstance(message["role"], str) or not message["role"]:
            raise CorpusError(check.path, f"{where}.role", "must be a non-empty string")
        check.optional_string(message.get("name"), f"{where}.name")
        _content(message.get("content"), check, f"{where}.content")
        if message["role"] == "tool":
            check.object(message, where, {"tool_call_id": True}, strict=False)
            check.string(message["tool_call_id"], f"{where}.tool_call_id")
        for n, call in enumerate(
            check.array(message.get("tool_calls") or [], f"{where}.tool_calls")
        ):
            at = f"{where}.tool_calls[{n}]"
            check.object(call, at, {"id": True, "function": True}, strict=False)
            check.string(call["id"], f"{at}.id")
            check.object(call["function"], f"{at}.function", {"arguments": True}, strict=False)
        messages.append(message)
    return tuple(messages)


def _content(content: Any, check: FieldChecker, where: str) -> None:
    """A message's content: null, a string, or an array of parts (objects, any ``text`` a
    string)."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        kind = type(content).__name__
        raise CorpusError(
            check.path, where, f"must be a string, an array of parts or null, not {kind}"
        )
    for i, part in enumerate(content):
        check.object(part, f"{where}[{i}]", {}, strict=False)
        if "text" in part:
            check.string(part["text"], f"{where}[{i}].text")


def _tools(data: Any, check: FieldChecker, where: str) -> _Objects:
    tools = []
    for i, tool in enumerate(check.array(data, where)):
        check.object(tool, f"{where}[{i}]", {"type": True, "function": True})
        if tool["type"] != "function":
            raise CorpusError(check.path, f"{where}[{i}].type", "must be 'function'")
        function = check.object(
            tool["function"], f"{where}[{i}].function", {"name": True}, strict=False
        )
        check.string(function["name"], f"{where}[{i}].function.name")
        tools.append(tool)
    return tuple(tools)


def _expectation(data: Any, check: FieldChecker, where: str) -> Expectation:
    check.object(
        data,
        where,
        {
            "content": True,
            "reasoning": True,
            "tool_calls": True,
            "finish_reason": False,
            "request": False,
        },
    )
    calls = []
    for i, call in enumerate(check.array(data["tool_calls"], f"{where}.tool_calls")):
        at = f"{where}.tool_calls[{i}]"
        check.object(call, at, {"id": True, "name": True, "arguments": True})
        calls.append(
            ToolCall(
                name=check.string(call["name"], f"{at}.name"),
                arguments=check.string(call["arguments"], f"{at}.arguments"),
                id=check.optional_string(call["id"], f"{at}.id"),
            )
        )
    return Expectation(
        content=check.optional_string(data["content"], f"{where}.content"),
        reasoning=check.optional_string(data["reasoning"], f"{where}.reasoning"),
        tool_calls=tuple(calls),
        finish_reason=_finish_reason(data.get("finish_reason"), check, f"{where}.finish_reason"),
        request=_request_fate(data.get("request"), check, f"{where}.request"),
    )


def _request_fate(value: Any, check: "FieldChecker", where: str) -> RequestFate | None:
    if value is None:
        return None
    fates = [fate.value for fate in RequestFate]
    if check.string(value, where) not in fates:
        raise CorpusError(check.path, where, f"must be one of {', '.join(fates)}, not {value!r}")
    return RequestFate(value)


#: The finish reasons an OpenAI chat completion can end a turn of a tool-calling model with.
FINISH_REASONS = ("stop", "tool_calls", "length")


def _finish_reason(value: Any, check: "FieldChecker", where: str) -> str | None:
    if value is None:
        return None
    if check.string(value, where) not in FINISH_REASONS:
        raise CorpusError(
            check.path, where, f"must be one of {', '.join(FINISH_REASONS)}, not {value!r}"
        )
    return value


@dataclass
class FieldChecker:
    """Type checks that name the file and the field (case files and case sources)."""

    path: Path | str

    def object(
        self, value: Any, where: str, keys: Mapping[str, bool], strict: bool = True
    ) -> Mapping[str, Any]:
        """``keys`` maps each allowed key to whether it is required."""
        label = where or "<top>"
        if not isinstance(value, dict):
            raise CorpusError(self.path, label, f"must be an object, not {type(value).__name__}")
        for key, required in keys.items():
            if required and key not in value:
                raise CorpusError(self.path, _join(where, key), "missing")
        if strict:
            for key in value:
                if key not in keys:
                    raise CorpusError(
                        self.path, _join(where, key), f"unknown field (allowed: {', '.join(keys)})"
                    )
        return value

    def array(self, value: Any, where: str) -> Sequence[Any]:
        if not isinstance(value, list):
            raise CorpusError(self.path, where, f"must be an array, not {type(value).__name__}")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise CorpusError(self.path, where, f"must be a string, not {type(value).__name__}")
        return value

    def optional_string(self, value: Any, where: str) -> str | None:
        return None if value is None else self.string(value, where)

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise CorpusError(
                self.path, where, f"must be true or false, not {type(value).__name__}"
            )
        return value

    def integer(self, value: Any, where: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise CorpusError(self.path, where, f"must be an integer, not {type(value).__name__}")
        return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def add_case_options(p: argparse.ArgumentParser) -> None:
    """``--case GLOB`` (repeatable) and ``--corpus DIR``: which cases a command runs."""
    p.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="GLOB",
        help="only cases whose id matches (repeatable)",
    )
    p.add_argument("--corpus", type=Path, help="corpus directory (default: the shipped corpus)")
