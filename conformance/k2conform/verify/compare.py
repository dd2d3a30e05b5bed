"""Base against head for one adapter: what a candidate (a pull request, a branch, a release)
fixed, broke or changed, cell by cell, grouped by how they changed, and whether the two runs can
be compared at all.

A cell is *fixed* when the base's is a finding and the head's is not, *regressed* the other way
round, *changed* when both are findings of another kind or the observed result differs, else
*unchanged*.  Two runs are comparable only when they judged the same cases (the same case
documents, digest-equal) in the same modes with the same seed, completely (no partial run, no
fewer cells than planned, no adapter-error, not empty): "no regression" is never claimed over
less than it says.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from k2conform.model import Cell, RunResults
from k2conform.run.results import shortfall

#: The classes of a cell, worst first (the order of the report).
CLASSES = ("regressed", "fixed", "changed", "unchanged")


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its results and what it ran (an environment or a file)."""

    label: str
    results: RunResults
    #: Kimi-relevant file (``vllm/parser/kimi_k2.py``) -> sha256, where the side is an environment
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    """What changed between the sides for some cells: their class and signature on each side
    (``differs content`` → ``agree``); a behaviour of the report is ``gate.behaviours``'."""

    kind: str
    base: str
    head: str
    cells: tuple[tuple[str, str], ...]  #: (case, delivery)

    @property
    def cases(self) -> list[str]:
        return sorted({case for case, _ in self.cells})

    @property
    def modes(self) -> list[str]:
        return sorted({mode for _, mode in self.cells})


@dataclass(frozen=True)
class Comparison:
    adapter: str
    base: Side
    head: Side
    not_comparable: tuple[str, ...]
    counts: dict[str, int]
    changes: tuple[Change, ...]
    changed_files: tuple[str, ...]

    @property
    def status(self) -> int:
        """0 no regression, 1 regression, 3 not comparable."""
        if self.not_comparable:
            return 3
        return 1 if self.counts["regressed"] else 0


def corpus_digest(results: RunResults) -> str:
    """The cases a run judged, as documents: two runs of different corpora never compare."""
    cases = [c.to_json() for c in sorted(results.cases, key=lambda c: c.id)]
    return hashlib.sha256(json.dumps(cases, sort_keys=True).encode()).hexdigest()[:12]


def _single_adapter(side: Side) -> tuple[str | None, list[Cell]]:
    names = sorted({c.adapter for c in side.results.cells})
    if len(names) != 1:
        return None, []
    return names[0], list(side.results.cells)


def _incomplete(side: Side) -> list[str]:
    results, why = side.results, []
    if "partial" in results.extra:
        why.append(f"{side.label}: a partial run ({results.extra['partial']['reason']})")
    why += [f"{side.label}: {reason}" for reason in shortfall(results)]
    errors = [c for c in results.cells if c.outcome == "adapter-error"]
    if errors:
        why.append(
            f"{side.label}: {len(errors)} adapter-error cell(s) (the glue does not fit: "
            f"{errors[0].error})"
        )
    return why


def _signature(cell: Cell) -> str:
    return f"{cell.outcome} {','.join(cell.fields)}".strip()


def _observed(cell: Cell) -> Any:
    if cell.observed is None:
        return None
    data = cell.observed.to_json()
    data.pop("meta", None)
    return data


def classify(base: Cell, head: Cell) -> str:
    before, after = base.outcome.finding, head.outcome.finding
    if before and not after:
        return "fixed"
    if after and not before:
        return "regressed"
    if _signature(base) != _signature(head) or _observed(base) != _observed(head):
        return "changed"
    return "unchanged"


def compare(base: Side, head: Side) -> Comparison:
    not_comparable = [*_incomplete(base), *_incomplete(head)]
    base_name, base_cells = _single_adapter(base)
    head_name, head_cells = _single_adapter(head)
    for side, name in ((base, base_name), (head, head_name)):
        if name is None and side.results.cells:
            not_comparable.append(f"{side.label}: cells of more than one adapter")
    b, h = base.results, head.results
    if corpus_digest(b) != corpus_digest(h):
        not_comparable.append(
            f"different corpora (base {corpus_digest(b)}, head {corpus_digest(h)}: "
            f"{len(b.cases)} and {len(h.cases)} cases)"
        )
    if tuple(b.modes) != tuple(h.modes):
        not_comparable.append(f"different modes (base {list(b.modes)}, head {list(h.modes)})")
    if b.seed != h.seed:
        not_comparable.append(f"different seeds (base {b.seed}, head {h.seed})")
    by_key = {(c.case, c.delivery): c for c in base_cells}
    head_by_key = {(c.case, c.delivery): c for c in head_cells}
    if not not_comparable and by_key.keys() != head_by_key.keys():
        only = sorted(by_key.keys() ^ head_by_key.keys())
        not_comparable.append(
            f"{len(only)} cell(s) judged on one side only (first: {' '.join(only[0])})"
        )
    counts = dict.fromkeys(CLASSES, 0)
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for key in sorted(by_key.keys() & head_by_key.keys()):
        kind = classify(by_key[key], head_by_key[key])
        counts[kind] += 1
        if kind != "unchanged":
            groups[(kind, _signature(by_key[key]), _signature(head_by_key[key]))].append(key)
    changes = sorted(
        (
            Change(kind, before, after, tuple(cells))
            for (kind, before, after), cells in groups.items()
        ),
        key=lambda g: (CLASSES.index(g.kind), -len(g.cells), g.base, g.head),
    )
    changed_files = sorted(
        path
        for path in base.files.keys() | head.files.keys()
        if base.files.get(path) != head.files.get(path)
    )
    return Comparison(
        head_name or base_name or "?",
        base,
        head,
        tuple(not_comparable),
        counts,
        tuple(changes),
        tuple(changed_files),
    )


def to_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "adapter": comparison.adapter,
        "base": comparison.base.label,
        "head": comparison.head.label,
        "status": comparison.status,
        "not_comparable": list(comparison.not_comparable),
        "counts": comparison.counts,
        "corpus": corpus_digest(comparison.base.results),
        "modes": list(comparison.base.results.modes),
        "seed": comparison.base.results.seed,
        "changed_files": list(comparison.changed_files),
        "behaviours": [
            {
                "kind": b.kind,
                "base": b.base,
                "head": b.head,
                "cells": len(b.cells),
                "cases": b.cases,
                "modes": b.modes,
            }
            for b in comparison.changes
        ],
    }


#: The Markdown stays a pull-request comment: at most this many lines.
MAX_LINES = 60


def markdown(comparison: Comparison) -> str:
    """Regressions first, each with the command that writes its upstream-ready report."""
    c = comparison
    total = sum(c.counts.values())
    verdict = {0: "NO REGRESSION", 1: "REGRESSION", 3: "NOT COMPARABLE"}[c.status]
    lines = [
        f"## k2conform verify: {c.adapter}, {_named(c.base)} → {_named(c.head)}",
        "",
        f"**{verdict}**: "
        + (
            "; ".join(c.not_comparable)
            if c.not_comparable
            else f"{total:,} cells compared (corpus {corpus_digest(c.base.results)}, "
            f"{len(c.base.results.modes)} modes, seed {c.base.results.seed}): "
            + ", ".join(f"{c.counts[k]:,} {k}" for k in CLASSES)
        ),
    ]
    if not c.not_comparable and not any(c.counts[k] for k in CLASSES[:3]):
        lines.append(f"\n{c.head.label} behaves as {c.base.label} on all {total:,} cells.")
    if c.changed_files:
        shown = ", ".join(f"`{f}`" for f in c.changed_files[:8])
        more = f" and {len(c.changed_files) - 8} more" if len(c.changed_files) > 8 else ""
        lines.append(f"\nKimi-relevant files that differ: {shown}{more}.")
    elif c.base.files and c.head.files:
        lines.append("\nNo Kimi-relevant file differs.")
    for kind in CLASSES[:3]:
        group = [b for b in c.changes if b.kind == kind]
        if not group:
            continue
        lines += ["", f"### {kind.capitalize()}: {len(group)} behaviour(s), {c.counts[kind]} cells"]
        for b in group:
            if len(lines) >= MAX_LINES - 2:
                lines.append("- … and more: the JSON output (`--json`) lists every behaviour")
                break
            cases = ", ".join(b.cases[:3]) + (
                f", … ({len(b.cases)} cases)" if len(b.cases) > 3 else ""
            )
            line = f"- `{b.base}` → `{b.head}` in {', '.join(b.modes)}: {cases}"
            if kind == "regressed":
                line += (
                    f" — `k2conform report-finding {b.cases[0]} --adapter {c.adapter} "
                    f"--delivery {b.modes[0]} --out report.md`"
                )
            lines.append(line)
        if len(lines) >= MAX_LINES - 1:
            break
    return "\n".join(lines[:MAX_LINES]) + "\n"


def html_page(comparison: Comparison) -> str:
    """The comparison as one self-contained page: every behaviour (the Markdown stops at a
    comment's length), regressions first, each regression with its report-finding command."""
    c = comparison
    total = sum(c.counts.values())
    verdict = {0: "NO REGRESSION", 1: "REGRESSION", 3: "NOT COMPARABLE"}[c.status]
    e = html.escape
    out = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>k2conform verify: {e(c.adapter)}</title>",
        "<style>body{font:14px sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left;"
        "vertical-align:top}code{background:#f3f3f3}.regressed{color:#b00}.fixed{color:#070}"
        "</style>",
        f"<h1>k2conform verify: {e(c.adapter)}, {e(_named(c.base))} → {e(_named(c.head))}</h1>",
        f"<p><b>{verdict}</b></p>",
    ]
    if c.not_comparable:
        out.append("<ul>" + "".join(f"<li>{e(why)}</li>" for why in c.not_comparable) + "</ul>")
    else:
        out.append(
            f"<p>{total:,} cells compared: corpus {e(corpus_digest(c.base.results))}, modes "
            f"{e(', '.join(c.base.results.modes))}, seed {c.base.results.seed}.</p>"
        )
    out.append(
        "<table><tr>"
        + "".join(f"<th>{k}</th>" for k in CLASSES)
        + "</tr><tr>"
        + "".join(f"<td>{c.counts[k]:,}</td>" for k in CLASSES)
        + "</tr></table>"
    )
    if c.changed_files:
        out.append(
            "<h2>Kimi-relevant files that differ</h2><ul>"
            + "".join(f"<li><code>{e(f)}</code></li>" for f in c.changed_files)
            + "</ul>"
        )
    for kind in CLASSES[:3]:
        group = [b for b in c.changes if b.kind == kind]
        if not group:
            continue
        out.append(f"<h2 class='{kind}'>{kind.capitalize()}: {len(group)} behaviour(s)</h2>")
        out.append(
            "<table><tr><th>base</th><th>head</th><th>modes</th><th>cells</th><th>cases</th></tr>"
        )
        for b in group:
            command = (
                f"<br><code>k2conform report-finding {e(b.cases[0])} --adapter {e(c.adapter)} "
                f"--delivery {e(b.modes[0])} --out report.md</code>"
                if kind == "regressed"
                else ""
            )
            out.append(
                f"<tr><td><code>{e(b.base)}</code></td><td><code>{e(b.head)}</code></td>"
                f"<td>{e(', '.join(b.modes))}</td><td>{len(b.cells)}</td>"
                f"<td>{e(', '.join(b.cases))}{command}</td></tr>"
            )
        out.append("</table>")
    return "\n".join(out) + "\n"


def _named(side: Side) -> str:
    """The side as given, with the release its adapter reported (``vllm==0.34.0 (0.34.0)``)."""
    versions = sorted({row.version for row in side.results.adapters if row.version})
    return f"{side.label} ({', '.join(versions)})" if versions else side.label
