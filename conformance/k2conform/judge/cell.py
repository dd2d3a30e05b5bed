"""The cell's judgement of one delivered result: the request's fate (``RequestFate``), the
case's expectation (unless the case is ``i_``), the server's ``finish_reason``, the server's
wire contract and the stream invariants, each difference a :class:`~k2conform.model.FieldDiff`.
``run/cell.py`` delivers, times and reports the worst variant; what counts as a difference is
decided here, once."""

from __future__ import annotations

from k2conform.case.corpus import CompletionCase, Expectation
from k2conform.judge.compare import compare_arguments, compare_results
from k2conform.model import (
    CellOutcome,
    FieldDiff,
    RequestFate,
    Result,
    ResultOutcome,
    StreamKind,
    WireViolation,
    request_fate,
    stream_violations,
)


def judge_result(
    case: CompletionCase, result: Result, whole: Result | None
) -> tuple[CellOutcome, list[FieldDiff], Result]:
    """One delivered result against the case's expectation and the stream invariants
    (``whole``: the same adapter's one-shot parse, which a stream's calls must equal)."""
    if result.outcome != ResultOutcome.OK:
        return CellOutcome(result.outcome.value), [], result
    fate, _ = request_fate(result)
    wanted = (case.expected.request if case.expected else None) or RequestFate.ACCEPTED
    if RequestFate.ACCEPTED != fate or fate != wanted:
        # a request not served (or served against the case's word) leaves no reply to judge
        if case.verdict == "i":
            return CellOutcome.IMPL_DEFINED, [], result
        if fate == wanted:
            return CellOutcome.AGREE, [], result
        return CellOutcome.DIFFERS, [FieldDiff("request", wanted.value, fate.value, "text")], result
    diffs = _stream_diffs(result, whole, liveness=case.verdict != "i") + _wire_diffs(result)
    if case.verdict != "i" and case.expected is not None:
        diffs = (
            compare_results(case.expected.as_result(), result)
            + _finish_diffs(case.expected, result)
            + diffs
        )
    if diffs:
        return CellOutcome.DIFFERS, diffs, result
    return (CellOutcome.IMPL_DEFINED if case.verdict == "i" else CellOutcome.AGREE), [], result


def _finish_diffs(expected: Expectation, result: Result) -> list[FieldDiff]:
    """A server's ``finish_reason`` (server adapters put it in ``meta``; parsers have none):
    the case's, else the spec's rule for the reply as sent, ``tool_calls`` when it carries
    calls, ``stop`` otherwise (missing or extra calls are already differences of their own)."""
    observed = result.meta.get("finish_reason")
    wanted = expected.finish_reason or ("tool_calls" if result.tool_calls else "stop")
    if observed is None or observed == wanted:
        return []
    return [FieldDiff("finish_reason", wanted, observed, "text")]


def _wire_diffs(result: Result) -> list[FieldDiff]:
    """A server's wire contract (``judge.wire``), as its adapter read it off the bytes: each
    violation a finding of the server, field ``wire:KIND``."""
    violations = [WireViolation.from_json(v) for v in result.meta.get("wire_violations") or ()]
    return [FieldDiff(f"wire:{v.kind.value}", None, v.detail, "stream") for v in violations]


#: The stream violations with a field of their own (the rest are ``stream-invariant``).
_VIOLATION_FIELDS = {
    StreamKind.INDEX_GAP: "index",
    StreamKind.CROSS_STREAM: "isolation",
    StreamKind.HELD_BACK: "liveness",
}


def _stream_diffs(result: Result, whole: Result | None, liveness: bool) -> list[FieldDiff]:
    """Stream invariants, and the stream's calls against the same adapter's one-shot parse.
    ``liveness``: whether held-back arguments count; not on an ``i_`` case, whose open point
    may be read from the whole call (``ID.foreign`` infers a call's name from its arguments,
    so nothing of the call can go out before they end)."""
    diffs = []
    for violation in stream_violations(result):
        if violation.kind is StreamKind.HELD_BACK and not liveness:
            continue
        field_name = _VIOLATION_FIELDS.get(violation.kind, "stream-invariant")
        diffs.append(FieldDiff(field_name, None, violation.detail, "stream"))
    if whole is not None and whole.outcome == ResultOutcome.OK:
        w_calls, s_calls = whole.tool_calls, result.tool_calls
        if len(w_calls) != len(s_calls):
            diffs.append(FieldDiff("stream-invariant", len(w_calls), len(s_calls), "stream"))
        for i, (w, s) in enumerate(zip(w_calls, s_calls)):
            if compare_arguments(w.arguments, s.arguments):
                diffs.append(FieldDiff("stream-invariant", w.arguments, s.arguments, "stream", i))
    return diffs
