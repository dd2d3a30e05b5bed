"""The core vocabulary every module speaks: request, delta, tool call, result, outcome, cell, run.

A *case* (``k2conform.case``) is delivered to an *adapter* (``k2conform.adapter``) in a
*delivery mode* (``k2conform.delivery``); the adapter returns a :class:`Result` with a
:class:`ResultOutcome`; judging it against the expectation (``k2conform.judge``) gives a
:class:`Cell` with a :class:`CellOutcome` and its :class:`FieldDiff` list; a run
(``k2conform.run``) is a :class:`RunResults`, which the gate, the reports, ``merge`` and
``baseline`` read back with :meth:`RunResults.from_json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Mapping, NamedTuple, Sequence


class ResultOutcome(StrEnum):
    """How a parse went, from the adapter's side."""

    OK = "ok"  #: the parser returned
    CRASH = "crash"  #: the parser raised, or its process died
    TIMEOUT = "timeout"  #: it did not return in time (twice: a slow first try is re-run)
    UNAVAILABLE = "unavailable"  #: its package is not installed, or it does not take this mode
    ADAPTER_ERROR = "adapter-error"  #: the adapter's glue no longer fits the installed release


class CellOutcome(StrEnum):
    """What one cell (case × adapter × delivery mode) came to."""

    AGREE = "agree"  #: matches the expectation
    DIFFERS = "differs"  #: does not; the fields say where
    IMPL_DEFINED = "impl-defined"  #: an ``i_`` case: recorded, not judged
    CRASH = "crash"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    ADAPTER_ERROR = "adapter-error"

    @property
    def passing(self) -> bool:
        return self in PASSING

    @property
    def finding(self) -> bool:
        """A finding about the parser under test.  ``adapter-error`` deliberately is not one: it
        is a fact about k2conform's glue and the installed release, reported once per adapter."""
        return self in FINDINGS


PASSING = frozenset({CellOutcome.AGREE, CellOutcome.IMPL_DEFINED, CellOutcome.UNAVAILABLE})
FINDINGS = frozenset({CellOutcome.DIFFERS, CellOutcome.CRASH, CellOutcome.TIMEOUT})
#: Which outcome of a mode's several variants the cell reports: the first is the worst.
SEVERITY = (
    CellOutcome.ADAPTER_ERROR,
    CellOutcome.CRASH,
    CellOutcome.TIMEOUT,
    CellOutcome.UNAVAILABLE,
    CellOutcome.DIFFERS,
    CellOutcome.IMPL_DEFINED,
    CellOutcome.AGREE,
)


class WireKind(StrEnum):
    """One rule of a server's wire contract each (``judge.wire.RULES``: the rule and its
    source); the value is the check's name in every report."""

    SSE_FRAMING = "sse-framing"
    FIRST_CALL_CHUNK = "first-call-chunk"
    CALL_RESENT = "call-resent"
    INDEX_ORDER = "index-order"
    FINISH_COUNT = "finish-count"
    FINISH_VALUE = "finish-value"
    AFTER_FINISH = "after-finish"
    USAGE = "usage"
    STREAM_VS_WHOLE = "stream-vs-whole-content"
    WHOLE_SHAPE = "whole-shape"


@dataclass(frozen=True)
class WireViolation:
    """A server's bytes broke one rule of the wire contract: a finding of the server."""

    kind: WireKind
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WireViolation:
        return cls(WireKind(data["kind"]), str(data["detail"]))


class StreamKind(StrEnum):
    """One invariant of a delta stream each, as a client reassembles it (``judge.stream``)."""

    AFTER_FINISH = "after-finish"  #: a chunk after the one with finish_reason
    MARKER_IN_CONTENT = "marker-in-content"  #: marker bytes in a content delta
    INDEX_GAP = "index-gap"  #: a new call's index is not the next one
    NO_NAME = "first-delta-without-name"  #: a call's first delta has no name
    ID_RESENT = "id-resent"  #: a call's id sent again (clients concatenate it)
    NAME_RESENT = "name-resent"
    ID_LATE = "id-late"  #: a call's id first sent after its first delta
    NAME_LATE = "name-late"
    #: the stream, or the one stepped beside it, sent other chunks than alone
    #: (``stream-interleaved``: a parser state one stream shares with another)
    CROSS_STREAM = "cross-stream"
    #: a long call's arguments sent in one delta from a finely fed stream
    #: (``judge.stream.HELD_BACK``: liveness)
    HELD_BACK = "arguments-held-back"


@dataclass(frozen=True)
class StreamViolation:
    """A stream broke one invariant clients rely on; ``detail`` says where (``chunk N: ...``)."""

    kind: StreamKind
    detail: str

    def __str__(self) -> str:
        return self.detail

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamViolation:
        return cls(StreamKind(data["kind"]), str(data["detail"]))


def stream_violations(result: Result) -> tuple[StreamViolation, ...]:
    """The stream invariants a streamed result broke (``meta.stream_violations``)."""
    return tuple(StreamViolation.from_json(v) for v in result.meta.get("stream_violations") or ())


class RequestFate(StrEnum):
    """What a server did with the request itself, before any reply could be judged: the fate a
    request-level case expects (``expected.request``) and a server adapter reports
    (``meta.request``, raised as ``adapter.RequestRefused``)."""

    ACCEPTED = "accepted"  #: served: the reply is judged as any other
    REJECTED = "rejected"  #: refused before generating (an HTTP 4xx)
    #: taken, but the output cannot be produced under it: the grammar the engine built for the
    #: request refuses it (the real server ends such a request with ``finish_reason`` error,
    #: an HTTP 500; ``k2conform grammar`` reads it off the grammar)
    UNCALLABLE = "uncallable"


def request_fate(result: Result) -> tuple[RequestFate, str]:
    """The request's fate a result records, and what the server said (``accepted`` and "" for
    a result without one: a parser, or a server that served the request)."""
    recorded = result.meta.get("request") or {}
    return RequestFate(recorded.get("fate", RequestFate.ACCEPTED)), str(recorded.get("detail", ""))


#: The closed set of fields a difference can name, in report order.
#: ``request``: the server's fate for the request differs from the case's (``RequestFate``).
#: ``isolation``: a stream sent other chunks while another stream went through the same
#: adapter (``stream-interleaved``).  ``liveness``: a long call's arguments held back to one
#: delta (``judge.stream.HELD_BACK``).  ``grammar``: an engine's grammar rejects a well-formed
#: output or admits one outside its request (``k2conform grammar``).  ``wire:KIND``: a server's
#: bytes break that rule of the wire contract (``judge.wire``: the SSE framing, usage, the
#: finish_reason's value, ...).
DIFF_FIELDS = (
    "request",
    "count",
    "name",
    "arguments",
    "id",
    "content",
    "reasoning",
    "index",
    "stream-invariant",
    "isolation",
    "liveness",
    "finish_reason",
    *(f"wire:{kind.value}" for kind in WireKind),
    "grammar",
)


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
    outcome: ResultOutcome = ResultOutcome.OK
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
            outcome=ResultOutcome(data.get("outcome", "ok")),
            error=data.get("error"),
            meta=data.get("meta") or {},
        )

    @classmethod
    def failed(cls, outcome: ResultOutcome | str, error: str, **meta: Any) -> Result:
        return cls(outcome=ResultOutcome(outcome), error=error, meta=meta)

    def with_meta(self, **meta: Any) -> Result:
        return Result(
            self.content,
            self.reasoning,
            self.tool_calls,
            self.outcome,
            self.error,
            {**self.meta, **meta},
        )


@dataclass(frozen=True)
class Request:
    """What the server knows besides the model output: the declared tools and settings."""

    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] = "auto"
    thinking: bool = False
    #: Request options only a real server sees (``max_tokens``, ``spaces_between_special_tokens``,
    #: ...; see ``case.corpus.SERVER_OPTIONS``); parser-level adapters never get such a case.
    server_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool_name(t) for t in self.tools)

    def to_json(self) -> dict[str, Any]:
        data = {
            "tools": list(self.tools),
            "tool_choice": self.tool_choice,
            "thinking": self.thinking,
        }
        if self.server_options:
            data["server_options"] = dict(self.server_options)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        """A request as :meth:`to_json` wrote it, read back unchecked (a results document's);
        a case file's goes through ``case.corpus``'s checks instead."""
        return cls(
            tuple(data.get("tools") or ()),
            data.get("tool_choice", "auto"),
            bool(data.get("thinking", False)),
            dict(data.get("server_options") or {}),
        )


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
    """One streamed chunk's delta message as the adapter's server would send it, with the
    chunk's ``finish_reason`` where a server adapter sees one (parsers have none)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None

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
        if self.finish_reason is not None:
            data["finish_reason"] = self.finish_reason
        return data


def dumps_canonical(data: Any) -> str:
    """JSON text used for files: keys in the writer's order (tool schemas stay byte-exact),
    non-ASCII visible."""
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def join_text(parts: Sequence[str | None]) -> str | None:
    """Concatenate optional text pieces; ``None`` when nothing was sent."""
    pieces = [p for p in parts if p is not None]
    return "".join(pieces) if pieces else None


class StreamReply(NamedTuple):
    """What a server adapter's ``parse_stream`` may return instead of the bare events: the
    events, and the wire contract's violations in the bytes it read (``judge.wire``), which
    the events alone cannot show (SSE framing, usage, the finish_reason's value)."""

    events: list[StreamEvent]
    wire: tuple[WireViolation, ...] = ()


@dataclass(frozen=True)
class FieldDiff:
    """One field in which an observed result differs, and how it was compared."""

    field: str  #: one of :data:`DIFF_FIELDS`
    expected: Any
    observed: Any
    how: str  #: "json", "bytes", "whitespace", "count", "text", "stream"
    call: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "field": self.field,
            "expected": self.expected,
            "observed": self.observed,
            "how": self.how,
        }
        if self.call is not None:
            data["call"] = self.call
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldDiff:
        return cls(
            data["field"], data.get("expected"), data.get("observed"), data["how"], data.get("call")
        )


@dataclass(frozen=True)
class Cell:
    """One case through one adapter in one delivery mode: the outcome, where it differs, what was
    seen."""

    case: str
    adapter: str
    delivery: str
    outcome: CellOutcome
    diffs: tuple[FieldDiff, ...] = ()
    observed: Result | None = None
    #: The delivery variant the cell reports (``stream-random[...]``), and every variant that
    #: did not pass, for modes made of several streams.
    variant: str = ""
    variants_differing: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def fields(self) -> tuple[str, ...]:
        """The differing fields, each once, in :data:`DIFF_FIELDS` order."""
        return tuple(sorted({d.field for d in self.diffs}, key=DIFF_FIELDS.index))

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case, self.adapter, self.delivery)

    @property
    def error(self) -> str | None:
        return self.observed.error if self.observed else None

    def timed(self, seconds: float) -> Cell:
        return replace(self, seconds=seconds)

    @classmethod
    def failed(
        cls, case: str, adapter: str, delivery: str, outcome: CellOutcome | str, error: str
    ) -> Cell:
        """A cell without a parse: unavailable, a lost worker's crash or timeout, an adapter
        error."""
        outcome = CellOutcome(outcome)
        return cls(case, adapter, delivery, outcome, observed=Result.failed(outcome.value, error))

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "adapter": self.adapter,
            "delivery": self.delivery,
            "outcome": self.outcome.value,
            "fields": list(self.fields),
            "diffs": [d.to_json() for d in self.diffs],
            "variant": self.variant,
            "variants_differing": list(self.variants_differing),
            "observed": self.observed.to_json() if self.observed else None,
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Cell:
        observed = data.get("observed")
        return cls(
            data["case"],
            data["adapter"],
            data["delivery"],
            CellOutcome(data["outcome"]),
            diffs=tuple(FieldDiff.from_json(d) for d in data.get("diffs") or ()),
            observed=Result.from_json(observed) if observed else None,
            variant=data.get("variant", ""),
            variants_differing=tuple(data.get("variants_differing") or ()),
            seconds=data.get("seconds", 0.0),
        )


@dataclass(frozen=True)
class AdapterRow:
    """What a run knows of one adapter: its release, whether the glue was written for it,
    and whether it loaded (``status`` is ``ok``, ``unavailable`` or ``adapter-error``)."""

    name: str
    version: str | None
    supported_versions: tuple[str, ...] = ()
    supported: bool | None = None
    status: ResultOutcome = ResultOutcome.OK
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "supported_versions": list(self.supported_versions),
            "supported": self.supported,
            "status": self.status.value,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AdapterRow:
        return cls(
            data["name"],
            data.get("version"),
            tuple(data.get("supported_versions") or ()),
            data.get("supported"),
            ResultOutcome(data.get("status", "ok")),
            data.get("reason", ""),
        )


@dataclass(frozen=True)
class CaseSummary:
    """What a results document keeps of a case: what the reports show, and what they need to
    derive its deliveries again (the request: ``stream-after-cutoff``'s prelude calls its first
    declared tool, as ``stream-interleaved``'s partner does, in the case's format)."""

    id: str
    verdict: str
    description: str
    tags: tuple[str, ...]
    request: Request
    model_output: str
    deltas: tuple[str, ...] | None = None
    #: The case's expectation as its file writes it (the reports print it as it is).
    expected: Mapping[str, Any] | None = None
    spelled_markers: tuple[int, ...] = ()
    #: The format; None for Kimi K2 (the documents leave the key out then).
    format: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "verdict": self.verdict,
            "description": self.description,
            "tags": list(self.tags),
            "request": self.request.to_json(),
            "model_output": self.model_output,
            "deltas": list(self.deltas) if self.deltas is not None else None,
            "expected": dict(self.expected) if self.expected is not None else None,
        }
        if self.spelled_markers:
            data["spelled_markers"] = list(self.spelled_markers)
        if self.format is not None:
            data["format"] = self.format
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseSummary:
        deltas, expected = data.get("deltas"), data.get("expected")
        return cls(
            data["id"],
            data.get("verdict", ""),
            data.get("description", ""),
            tuple(data.get("tags") or ()),
            Request.from_json(data.get("request") or {}),
            data.get("model_output", ""),
            tuple(deltas) if deltas is not None else None,
            expected,
            tuple(data.get("spelled_markers") or ()),
            data.get("format", data.get("family")),  # "family" before 6 Dec 2026
        )


#: Keys of a results document other than the typed ones, kept as they are (the gate's
#: verdict, adapter errors, the streaming-cost check, the shard, what was planned and run,
#: the parser coverage ``report --coverage`` shows beside it).
_EXTRA_KEYS = (
    "gate",
    "adapter_errors",
    "streaming_cost",
    "shard",
    "merged_from",
    "partial",
    "inventory",
    "coverage",
)


@dataclass(frozen=True)
class RunResults:
    """A run's results document (``run --json``): what was run, on what, and every cell."""

    version: str
    seed: int
    modes: tuple[str, ...]
    adapters: tuple[AdapterRow, ...]
    cases: tuple[CaseSummary, ...]
    cells: tuple[Cell, ...]
    wall_seconds: float = 0.0
    worker_restarts: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "k2conform": self.version,
            "seed": self.seed,
            "modes": list(self.modes),
            "wall_seconds": self.wall_seconds,
            "worker_restarts": self.worker_restarts,
            "adapters": [a.to_json() for a in self.adapters],
            "cases": [c.to_json() for c in self.cases],
            "cells": [c.to_json() for c in self.cells],
        }
        data.update({k: self.extra[k] for k in _EXTRA_KEYS if k in self.extra})
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResults:
        """Raises KeyError, TypeError or ValueError on a document of the wrong shape."""
        return cls(
            version=data["k2conform"],
            seed=data["seed"],
            modes=tuple(data["modes"]),
            adapters=tuple(AdapterRow.from_json(a) for a in data["adapters"]),
            cases=tuple(CaseSummary.from_json(c) for c in data["cases"]),
            cells=tuple(Cell.from_json(c) for c in data["cells"]),
            wall_seconds=data.get("wall_seconds", 0.0),
            worker_restarts=data.get("worker_restarts", 0),
            extra={k: data[k] for k in _EXTRA_KEYS if k in data},
        )

    def with_extra(self, **extra: Any) -> RunResults:
        return replace(self, extra={**self.extra, **extra})
