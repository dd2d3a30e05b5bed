"""The core vocabulary every module speaks: request, tool call, result, outcome, delta.

A *case* (see ``k2conform.corpus``) is delivered to an *adapter* in a *delivery mode*
(see ``k2conform.delivery``); the adapter returns a *result*; the comparison
(``k2conform.compare``) turns result and expectation into a cell *outcome*.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, NamedTuple, Sequence

#: How a parse went, from the adapter's side.  ``ok``: the parser returned;
#: ``crash``: the parser raised or its process died; ``timeout``: it did not return
#: in time; ``unavailable``: its package is not installed; ``adapter-error``: the
#: adapter's own glue no longer fits the installed release (never a parser finding).
ResultOutcome = Literal["ok", "crash", "timeout", "unavailable", "adapter-error"]
RESULT_OUTCOMES: tuple[str, ...] = ("ok", "crash", "timeout", "unavailable", "adapter-error")


@dataclass(frozen=True)
class ToolCall:
    """One parsed call as an OpenAI client sees it; ``arguments`` is the raw string."""

    name: str
    arguments: str
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(name=data["name"], arguments=data["arguments"], id=data.get("id"))


@dataclass(frozen=True)
class Result:
    """The canonical result: the contract every adapter returns.

    ``meta`` carries what is recorded but never compared (adapter version, delivery,
    seed, the reference parser's policies that fired, stream statistics).
    """

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    outcome: ResultOutcome = "ok"
    error: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [call.to_json() for call in self.tool_calls],
            "outcome": self.outcome,
            "error": self.error,
        }
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Result:
        return cls(
            content=data.get("content"),
            reasoning=data.get("reasoning"),
            tool_calls=tuple(ToolCall.from_json(c) for c in data.get("tool_calls") or ()),
            outcome=data.get("outcome", "ok"),
            error=data.get("error"),
            meta=data.get("meta") or {},
        )

    @classmethod
    def failed(cls, outcome: ResultOutcome, error: str, **meta: Any) -> Result:
        return cls(outcome=outcome, error=error, meta=meta)

    def with_meta(self, **meta: Any) -> Result:
        return Result(
            self.content, self.reasoning, self.tool_calls, self.outcome, self.error,
            {**self.meta, **meta},
        )


@dataclass(frozen=True)
class Request:
    """What the server knows besides the model output: the declared tools and settings."""

    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] = "auto"
    thinking: bool = False

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool_name(t) for t in self.tools)

    def to_json(self) -> dict[str, Any]:
        return {"tools": list(self.tools), "tool_choice": self.tool_choice, "thinking": self.thinking}


def tool_name(tool: Mapping[str, Any]) -> str:
    """The function name of an OpenAI tool object."""
    return tool["function"]["name"]


@dataclass(frozen=True)
class Delta:
    """One piece of a streamed completion: its text and, when known, its token ids."""

    text: str
    token_ids: tuple[int, ...] = ()


class ToolCallDelta(NamedTuple):
    """One entry of ``delta.tool_calls`` in an OpenAI streaming chunk.

    A named tuple, not a dataclass: parsers make one per streamed delta, and a tuple is
    several times cheaper to build than a frozen dataclass.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


class StreamEvent(NamedTuple):
    """One streamed chunk's delta message as the adapter's server would send it."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.content is not None:
            data["content"] = self.content
        if self.reasoning is not None:
            data["reasoning"] = self.reasoning
        if self.tool_calls:
            data["tool_calls"] = [
                {k: v for k, v in d._asdict().items() if v is not None} for d in self.tool_calls
            ]
        return data


def dumps_canonical(data: Any) -> str:
    """JSON text used for files: keys in the writer's order (tool schemas stay byte-exact), non-ASCII visible."""
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def join_text(parts: Sequence[str | None]) -> str | None:
    """Concatenate optional text pieces; ``None`` when nothing was sent."""
    pieces = [p for p in parts if p is not None]
    return "".join(pieces) if pieces else None
