"""The adapter protocol's wire format (docs/adapter-protocol.md), both directions: what
``--adapter 'cmd:...'`` (:mod:`k2conform.adapter.command`) sends and reads, and what
``k2conform serve-adapter`` (:mod:`k2conform.adapter.serve`) reads and sends.  One JSON object
per line; every check names what is wrong.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from k2conform.adapter.contract import Adapter, AdapterGlueError, AdapterUnavailable, ParserCrash
from k2conform.errors import UsageError
from k2conform.formats import FORMATS
from k2conform.model import Delta, Request, Result, ResultOutcome, StreamEvent, ToolCallDelta

PROTOCOL = "k2conform-adapter/1"
PREFIX = "cmd:"
#: ``NAME=cmd:COMMAND``: an explicit report name; ``NAME[k3]=cmd:COMMAND`` also the formats the
#: remote adapter parses (comma-separated; default K2 only), which a run plans its cells by
#: before any hello.
_NAMED = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.@+\-]*)(?:\[(?P<formats>[^\]]*)\])?=cmd:(?P<command>.*)$",
    re.S,
)


def is_command_spec(spec: str) -> bool:
    """Whether an ``--adapter`` value names an out-of-process adapter."""
    return spec.startswith(PREFIX) or _NAMED.match(spec) is not None


def split_spec(spec: str) -> tuple[str | None, str]:
    """``NAME=cmd:COMMAND`` → (NAME, COMMAND); ``cmd:COMMAND`` → (None, COMMAND)."""
    named = _NAMED.match(spec)
    if named:
        return named.group("name"), named.group("command")
    return None, spec[len(PREFIX) :]


def declared_formats(spec: str) -> tuple[str, ...]:
    """The formats a ``cmd:`` spec says its adapter parses (``NAME[k2,k3]=cmd:...``; else the
    contract's default); UsageError for a format k2conform does not know."""
    named = _NAMED.match(spec)
    if named is None or named.group("formats") is None:
        return Adapter.formats
    said = tuple(part.strip() for part in named.group("formats").split(","))
    unknown = [name for name in said if name not in FORMATS]
    if unknown or not said:
        raise UsageError(
            f"{spec.split('=cmd:', 1)[0]!r}: the formats in [...] must be among "
            f"{', '.join(FORMATS)} (got {named.group('formats')!r})"
        )
    return said


class ProtocolError(Exception):
    """The peer wrote something that is not a well-formed protocol line."""


def request_line(
    mode: str, request: Request, deltas: Sequence[Delta], adapter: str | None = None
) -> dict[str, Any]:
    """A request line; ``adapter`` names the served adapter it is for, when the process serves
    several (a command serving one is never sent the field)."""
    line: dict[str, Any] = {
        "mode": mode,
        "request": request.to_json(),
        "deltas": [{"text": d.text, "token_ids": list(d.token_ids)} for d in deltas],
    }
    if adapter is not None:
        line["adapter"] = adapter
    return line


def requested_adapter(data: Any, served: Sequence[str]) -> str:
    """The served adapter a request line is for: its ``adapter``, which a process serving
    several requires; ProtocolError names what is wrong."""
    name = data.get("adapter") if isinstance(data, dict) else None
    if name is None and len(served) == 1:
        return served[0]
    if name not in served:
        said = "names none" if name is None else f"names {name!r}"
        raise ProtocolError(f"the request {said}; this process serves {', '.join(served)}")
    return name


def parse_request_line(data: Any) -> tuple[str, Request, tuple[Delta, ...]]:
    """A request line as (mode, request, deltas); ProtocolError names what is wrong."""
    if not isinstance(data, dict):
        raise ProtocolError("a request must be a JSON object")
    mode = data.get("mode")
    if mode not in ("whole", "stream"):
        raise ProtocolError(f"'mode' must be 'whole' or 'stream', not {mode!r}")
    raw = data.get("request")
    if not isinstance(raw, dict):
        raise ProtocolError("'request' must be an object")
    from k2conform.case.corpus import CorpusError, request_from_json

    try:
        request = request_from_json(raw, "the request line")
    except CorpusError as error:
        raise ProtocolError(str(error)) from None
    raw_deltas = data.get("deltas")
    if not isinstance(raw_deltas, list):
        raise ProtocolError("'deltas' must be an array")
    deltas = []
    for i, d in enumerate(raw_deltas):
        if not isinstance(d, dict) or not isinstance(d.get("text"), str):
            raise ProtocolError(f"'deltas[{i}]' must be an object with a string 'text'")
        ids = d.get("token_ids") or []
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ProtocolError(f"'deltas[{i}].token_ids' must be an array of integers")
        deltas.append(Delta(d["text"], tuple(ids)))
    if mode == "whole" and len(deltas) != 1:
        raise ProtocolError("a 'whole' request has exactly one delta")
    return mode, request, tuple(deltas)


def hello_line(hellos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The first line of a process serving these adapters: the one hello, or for several
    ``{"protocol": ..., "adapters": [hello, ...]}``."""
    if len(hellos) == 1:
        return dict(hellos[0])
    return {"protocol": PROTOCOL, "adapters": [dict(hello) for hello in hellos]}


def read_hellos(line: Any) -> list[dict[str, Any]]:
    """The hello of each adapter a process serves, from its first line (:func:`hello_line`);
    ProtocolError names what is wrong, and two adapters that parse the same formats are
    wrong (a spec reaches its adapter by the formats it declares)."""
    if not isinstance(line, dict) or "adapters" not in line:
        check_hello(line)
        return [line]
    hellos = line["adapters"]
    if line.get("protocol") != PROTOCOL or not isinstance(hellos, list) or not hellos:
        raise ProtocolError(
            f'a hello of several adapters is {{"protocol": "{PROTOCOL}", "adapters": '
            f"[hello, ...]}}, got {str(line)[:120]!r}"
        )
    for hello in hellos:
        check_hello(hello)
    if formats_clash(hellos):
        raise ProtocolError("two of the adapters served parse the same formats: " + served(hellos))
    return hellos


def formats_of(hello: Mapping[str, Any]) -> tuple[str, ...]:
    """The formats a hello says its adapter parses, sorted (default: the contract's)."""
    return tuple(sorted(hello.get("formats") or Adapter.formats))


def formats_clash(hellos: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two of these adapters parse the same formats (no spec could reach either)."""
    parses = [formats_of(hello) for hello in hellos]
    return len(set(parses)) < len(parses)


def served(hellos: Sequence[Mapping[str, Any]]) -> str:
    """``vllm (k2), vllm-k3 (k3)``: the adapters of a process, each with its formats."""
    return ", ".join(f"{hello['name']} ({','.join(formats_of(hello))})" for hello in hellos)


def check_hello(hello: Any) -> None:
    if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
        raise ProtocolError(
            f'the first line must be a hello with "protocol": "{PROTOCOL}", got '
            f"{str(hello)[:120]!r}"
        )
    if not isinstance(hello.get("name"), str) or not hello["name"]:
        raise ProtocolError("the hello must carry the adapter's 'name'")
    if hello.get("version") is not None and not isinstance(hello["version"], str):
        raise ProtocolError("the hello's 'version' must be a string or null")
    if hello.get("status", "ok") not in ("ok", "unavailable", "adapter-error"):
        raise ProtocolError(f"the hello's 'status' is {hello.get('status')!r}")
    formats = hello.get("formats", list(Adapter.formats))
    if not isinstance(formats, list) or not formats or not all(f in FORMATS for f in formats):
        raise ProtocolError(
            f"the hello's 'formats' must be a non-empty array of {', '.join(FORMATS)}, "
            f"got {formats!r}"
        )


def _optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{where}'{key}' must be a string or null")
    return value


def result_line(data: Mapping[str, Any]) -> Result:
    outcome = data.get("outcome", "ok")
    if outcome not in tuple(ResultOutcome):
        raise ProtocolError(f"unknown outcome {outcome!r}")
    calls = data.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ProtocolError("'tool_calls' must be an array")
    for i, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not isinstance(call.get("arguments"), str)
        ):
            raise ProtocolError(f"tool_calls[{i}] needs a string 'name' and 'arguments'")
        _optional_str(call, "id", f"tool_calls[{i}].")
    for key in ("content", "reasoning", "error"):
        _optional_str(data, key, "")
    meta = data.get("meta") or {}
    if not isinstance(meta, dict):
        raise ProtocolError("'meta' must be an object")
    return Result.from_json(data)


def raise_failure(data: Mapping[str, Any]) -> None:
    outcome = data.get("outcome")
    error = str(data.get("error") or "")
    if outcome == "crash":
        raise ParserCrash(RemoteError(error))
    if outcome == "adapter-error":
        raise AdapterGlueError("remote adapter", error)
    if outcome == "unavailable":
        raise AdapterUnavailable(error)
    if outcome == "timeout":
        raise ParserCrash(TimeoutError(error))
    raise ProtocolError("a stream response needs 'events' (or an 'outcome' that is not ok)")


class RemoteError(Exception):
    """The remote parser raised; its message travels as text."""


def events_line(data: Mapping[str, Any]) -> list[StreamEvent]:
    events = data["events"]
    if not isinstance(events, list):
        raise ProtocolError("'events' must be an array")
    out = []
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise ProtocolError(f"events[{n}] must be an object")
        deltas = []
        calls = event.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ProtocolError(f"events[{n}].tool_calls must be an array")
        for i, call in enumerate(calls):
            where = f"events[{n}].tool_calls[{i}]."
            if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                raise ProtocolError(f"{where}index must be an integer")
            deltas.append(
                ToolCallDelta(
                    index=call["index"],
                    id=_optional_str(call, "id", where),
                    name=_optional_str(call, "name", where),
                    arguments=_optional_str(call, "arguments", where),
                )
            )
        out.append(
            StreamEvent(
                content=_optional_str(event, "content", f"events[{n}]."),
                reasoning=_optional_str(event, "reasoning", f"events[{n}]."),
                tool_calls=tuple(deltas),
                finish_reason=_optional_str(event, "finish_reason", f"events[{n}]."),
            )
        )
    return out
