"""The verdict rule for K3 outputs: the prefix a K3 case's id must carry, read from the
policies the K3 reference parser fires (the same meanings as ``case.verdict``'s for K2)."""

from __future__ import annotations

from k2conform.k3.parser import parse
from k2conform.model import Request

#: Policies on which the format itself decides: a case they fire on can still be ``y``.
SPEC_POLICIES = frozenset({"K3.start", "K3.typed-value", "K3.index"})
#: Policies that only keep what a stricter parser would lose, or keep markup out of the
#: reply: malformed output, behaviour required (``n``).
KEEPING_POLICIES = frozenset(
    {
        "K3.channel-ends-channel",
        "K3.partial-tag-at-end",
        "K3.unclosed-call",
        "K3.unclosed-channel",
        "K3.no-calls-allowed",
    }
)


def verdict(request: Request, model_output: str) -> tuple[str, tuple[str, ...]]:
    """The prefix and why it is not ``y``."""
    result = parse(model_output, request)
    policies = set(result.meta["policies"])
    open_points = sorted(policies - SPEC_POLICIES - KEEPING_POLICIES)
    if open_points:
        return "i", tuple(f"policy {p} decides what the format leaves open" for p in open_points)
    reasons = [
        f"policy {p} keeps what a stricter parser would lose"
        for p in sorted(policies & KEEPING_POLICIES)
    ]
    declared = {tool["function"]["name"] for tool in request.tools}
    reasons += [
        f"call {c.name!r}: no such tool declared"
        for c in result.tool_calls
        if c.name not in declared
    ]
    return ("n", tuple(reasons)) if reasons else ("y", ())
