"""Compare an observed result with an expectation, field by field, saying how.

Arguments are compared semantically (JSON equality, strict JSON only: no NaN, no
duplicate keys, ``1`` is not ``true``) when both sides parse, byte for byte
otherwise; every difference records which comparison was used.  ``None`` and ``""``
content are the same (an OpenAI client cannot tell them apart in practice); any other
difference counts, and a whitespace-only one is labelled as such.
"""

from __future__ import annotations

import json
import math
from typing import Any

from k2conform.model import FieldDiff, Result, ToolCall


class _Duplicate(ValueError):
    pass


def strict_json(text: str) -> tuple[bool, Any]:
    """Parse as strict JSON: no NaN/Infinity, no duplicate keys. Returns (ok, value)."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise _Duplicate("duplicate key")
        return dict(pairs)

    try:
        return True, json.loads(text, parse_constant=no_constants, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError):
        return False, None


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality that keeps booleans apart from numbers (iterative: any depth)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if type(x) is not type(y) or x != y:
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y or (isinstance(x, float) and math.isnan(x)):
                return False
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif type(x) is not type(y) or x != y:
            return False
    return True


def compare_arguments(expected: str, observed: str) -> str | None:
    """None when equal; otherwise how they were compared ("json" or "bytes")."""
    ok_e, value_e = strict_json(expected)
    ok_o, value_o = strict_json(observed)
    if ok_e and ok_o:
        return None if json_equal(value_e, value_o) else "json"
    return None if expected == observed else "bytes"


def _text_diff(name: str, expected: str | None, observed: str | None) -> FieldDiff | None:
    e, o = expected or "", observed or ""
    if e == o:
        return None
    how = "whitespace" if e.split() == o.split() else "text"
    return FieldDiff(name, expected, observed, how)


def same_reply(a: Result, b: Result) -> bool:
    """Whether two results give a client the same reply, ids included ("" and null alike): the
    harness's checks of its own oracle (the reference streamed and one-shot), not a verdict."""
    return (a.content or None, a.reasoning or None, a.tool_calls) == (
        b.content or None,
        b.reasoning or None,
        b.tool_calls,
    )


def compare_results(expected: Result, observed: Result, check_ids: bool = True) -> list[FieldDiff]:
    """Every field in which ``observed`` differs from ``expected`` (empty: they agree)."""
    diffs: list[FieldDiff] = []
    for name in ("content", "reasoning"):
        diff = _text_diff(name, getattr(expected, name), getattr(observed, name))
        if diff:
            diffs.append(diff)
    e_calls, o_calls = expected.tool_calls, observed.tool_calls
    if len(e_calls) != len(o_calls):
        diffs.append(FieldDiff("count", len(e_calls), len(o_calls), "count"))
    for i, (e, o) in enumerate(zip(e_calls, o_calls)):
        diffs.extend(_call_diffs(i, e, o, check_ids))
    return diffs


def _call_diffs(i: int, e: ToolCall, o: ToolCall, check_ids: bool) -> list[FieldDiff]:
    diffs = []
    if e.name != o.name:
        diffs.append(FieldDiff("name", e.name, o.name, "bytes", i))
    how = compare_arguments(e.arguments, o.arguments)
    if how:
        diffs.append(FieldDiff("arguments", e.arguments, o.arguments, how, i))
    if check_ids and e.id is not None and e.id != o.id:
        diffs.append(FieldDiff("id", e.id, o.id, "bytes", i))
    return diffs
