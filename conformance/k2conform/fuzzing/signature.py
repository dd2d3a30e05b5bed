"""Disagreement classes and signatures: how thousands of failing fuzz inputs become a short list.

A disagreement between an adapter's result and the expected one (the reference's, or the
calls the roundtrip target rendered) is classified into a closed set of *kinds*; the
*signature* of an input is every disagreeing adapter with its primary kind, in adapter
order: ``vllm:dropped-call|sglang:leaked-marker``.  The fuzzers count and save findings per
*component* (``sglang:leaked-marker`` in one delivery mode), so an hour of fuzzing yields at
most adapters × kinds × modes files, not one per combination.  Kinds are decided from the
results alone (never from the input's text), so two inputs that break a parser the same
way share a signature.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from k2conform.judge.compare import compare_arguments
from k2conform.markers import LEAK_MARKERS
from k2conform.model import Result, StreamKind, stream_violations

#: Every kind, in the order a signature lists them.
KINDS: tuple[str, ...] = (
    "crash",  # the parser raised (a finding, never a fuzzer crash)
    "timeout",  # the parser did not return within the per-input deadline
    # the stream sent other chunks beside another stream through the same adapter than alone
    # (``stream-interleaved``: shared parser state); listed before what it causes
    "cross-stream",
    "dropped-call",  # fewer calls than expected
    "extra-call",  # more calls than expected
    "wrong-name",  # same number of calls, a name differs
    # content, reasoning or a call's arguments hold the expected text twice: emitted once
    # while streaming and again when a late strip flushed its buffer (vllm-project/vllm
    # PR #50367); listed before what it implies (wrong-arguments, content-drift)
    "duplicate-emission",
    "wrong-arguments",  # same number of calls, arguments differ (JSON-equal, else byte-equal)
    "leaked-marker",  # marker bytes in content or reasoning that the expectation does not have
    "content-drift",  # content differs otherwise (implied by leaked-marker, so not listed with it)
    "reasoning-drift",  # reasoning differs otherwise
    # a long call's arguments held back to one delta (``judge.stream.HELD_BACK``: liveness)
    "held-back",
    "broken-stream",  # the stream broke a client invariant (id/name resent, index gap)
)


def _marker_counts(leaks: Sequence[str], *texts: str | None) -> dict[str, int]:
    joined = "".join(t or "" for t in texts)
    return {m: joined.count(m) for m in leaks}


def twice(
    expected: str | None,
    observed: str | None,
    output: str | None = None,
    leaks: Sequence[str] = LEAK_MARKERS,
) -> bool:
    """Whether ``observed`` holds ``expected`` twice or more, and more often than the model
    ``output`` does (an output that says it twice is parsed, not emitted, twice); marker bytes
    are left out of all three (a leaked marker is its own kind, and ``<|to`` is in every
    marker's text), and ``expected`` must have three characters or more (a shorter text is in
    most texts twice).  ``leaks``: the format's marker texts."""
    if not expected or not observed:
        return False
    wanted, seen = _without_markers(expected, leaks), _without_markers(observed, leaks)
    written = _without_markers(output, leaks).count(wanted) if output is not None else 1
    return len(wanted.strip()) >= 3 and seen.count(wanted) >= max(2, written + 1)


def _without_markers(text: str, leaks: Sequence[str]) -> str:
    for marker in leaks:
        text = text.replace(marker, "")
    return text


def classify(
    expected: Result,
    observed: Result,
    output: str | None = None,
    leaks: Sequence[str] = LEAK_MARKERS,
) -> tuple[str, ...]:
    """The kinds of disagreement of ``observed`` with ``expected`` (empty: they agree);
    ``output``: the model output both came from, when known (:func:`twice`); ``leaks``: the
    marker texts of its format (:attr:`k2conform.formats.Format.leak_markers`).

    Ids are not compared (SGLang rebuilds them, vLLM may mint them: the matrix judges ids).
    """
    if observed.outcome in ("crash", "timeout"):
        return (observed.outcome,)
    if observed.outcome != "ok":
        raise ValueError(f"cannot classify a result with outcome {observed.outcome!r}")
    kinds: set[str] = set()
    e_calls, o_calls = expected.tool_calls, observed.tool_calls
    if len(o_calls) < len(e_calls):
        kinds.add("dropped-call")
    elif len(o_calls) > len(e_calls):
        kinds.add("extra-call")
    else:
        for e, o in zip(e_calls, o_calls):
            if e.name != o.name:
                kinds.add("wrong-name")
            if compare_arguments(e.arguments, o.arguments):
                kinds.add("wrong-arguments")
                if twice(e.arguments, o.arguments, output, leaks):
                    kinds.add("duplicate-emission")
    if twice(expected.content, observed.content, output, leaks) or twice(
        expected.reasoning, observed.reasoning, output, leaks
    ):
        kinds.add("duplicate-emission")
    e_markers = _marker_counts(leaks, expected.content, expected.reasoning)
    o_markers = _marker_counts(leaks, observed.content, observed.reasoning)
    if any(o_markers[m] > e_markers[m] for m in leaks):
        kinds.add("leaked-marker")
    else:
        if (expected.content or "") != (observed.content or ""):
            kinds.add("content-drift")
        if (expected.reasoning or "") != (observed.reasoning or ""):
            kinds.add("reasoning-drift")
    # Marker bytes in content deltas are judged above, against the expectation.
    for violation in stream_violations(observed):
        if violation.kind is StreamKind.CROSS_STREAM:
            kinds.add("cross-stream")
        elif violation.kind is StreamKind.HELD_BACK:
            kinds.add("held-back")
        elif violation.kind is not StreamKind.MARKER_IN_CONTENT:
            kinds.add("broken-stream")
    return tuple(k for k in KINDS if k in kinds)


def primary(kinds: Sequence[str]) -> str:
    """The one kind a signature keeps for an adapter: the first in ``KINDS`` order (a crash
    before a dropped call before leaked marker bytes, …), so combinations stay few."""
    return kinds[0]


def components(sig: str) -> list[str]:
    """``vllm:dropped-call|sglang:leaked-marker`` → ``["vllm:dropped-call",
    "sglang:leaked-marker"]``."""
    return [part for part in sig.split("|") if part]


def matches(target: str, observed: str) -> bool:
    """Whether ``observed`` shows ``target``: every adapter the target names disagrees the
    same way (adapters the target does not name are ignored)."""
    want, got = parse_signature(target), parse_signature(observed)
    return bool(want) and all(got.get(name) == kinds for name, kinds in want.items())


def signature(
    kinds_by_adapter: Mapping[str, Sequence[str]], order: Iterable[str] | None = None
) -> str:
    """``adapter:kind|adapter:kind`` over the adapters that disagree ("" when none does),
    each with its :func:`primary` kind."""
    names = list(order) if order is not None else list(kinds_by_adapter)
    return "|".join(
        f"{name}:{primary(kinds_by_adapter[name])}" for name in names if kinds_by_adapter.get(name)
    )


def parse_signature(text: str) -> dict[str, tuple[str, ...]]:
    """The inverse of :func:`signature`."""
    out: dict[str, tuple[str, ...]] = {}
    for part in filter(None, text.split("|")):
        name, _, kinds = part.partition(":")
        out[name] = tuple(kinds.split("+"))
    return out


def slug(text: str, limit: int = 60) -> str:
    """An id-safe form of a signature: ``sglang_leaked-marker__vllm_dropped-call``."""
    out = text.replace("|", "__").replace(":", "_").replace("+", "_")
    out = "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in out.lower())
    return out[:limit].strip("_-") or "x"
