"""The HTML of the per-adapter findings view and of the case list it links to.

For each adapter: its distinct behaviours (``findings.behaviours``), token-aligned and
text-level apart, each with its status (new, baselined, reported upstream or not), how many
cases show it (linked to their list), a minimal example with its per-field diff, stream
violations and deltas, and the ``k2conform report-finding`` command that reproduces it.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from k2conform.gate.baseline import gate_block
from k2conform.markers import visible
from k2conform.model import CaseSummary, Cell, Delta, FieldDiff, RunResults
from k2conform.gate.behaviours import (
    FAMILIES,
    TOKEN_ALIGNED,
    Behaviour,
    counts,
    gated_behaviours,
    ran_adapters,
)
from k2conform.report.findings import delivered_deltas, repro_command, script_cannot_show

esc = html.escape
#: Deltas shown per example; a stream-char example of a long output has thousands.
MAX_DELTAS = 400
#: Characters of a reviewed reason shown in a behaviour's one-line summary.
SHORT_REASON = 180
_FAMILY_TITLES = {
    TOKEN_ALIGNED: "Token-aligned modes: what an engine streams (markers are single tokens)",
    "text-level": "Text-level modes only: a text replay or re-chunking proxy (markers cut)",
}
_UPSTREAM_CSS = {"new": "new", "not reported": "unreported", "linked": "linked"}


def anchor(*parts: str) -> str:
    """An element id made of names that may hold spaces or slashes (``cmd:`` adapters)."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", part) for part in parts)


def case_anchor(case: str) -> str:
    return anchor("case", case)


def _label(text: str) -> str:
    return f"<div class='label'>{text}</div>"


def _pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    widths: Sequence[str] = (),
    css: str = "fixed",
) -> str:
    """A table of already escaped cells; ``widths`` of the first columns, the rest share."""
    cols = "".join(f"<col style='width:{w}'>" for w in widths)
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table class='{css}'>{cols}<tr>{head}</tr>{body}</table>"


class FindingsView:
    """Renders the behaviours of one results document."""

    def __init__(self, results: RunResults, grouped: dict[str, list[Behaviour]] | None = None):
        self.cases = {c.id: c for c in results.cases}
        self.seed = results.seed
        self.versions = {a.name: a.version or "not installed" for a in results.adapters}
        self.adapters = ran_adapters(results)
        delivered = {c.delivery for c in results.cells}
        self.modes = [m for m in results.modes if m in delivered]
        self.baselined = gate_block(results.extra) is not None
        self.found = gated_behaviours(results) if grouped is None else grouped

    def page_part(self) -> str:
        """The overview table, the filters and one section per adapter."""
        if self.baselined:
            how = (
                "Each distinct behaviour once: the baseline's reviewed reason where one "
                "explains it, else the outcome and fields that differ in the same delivery "
                "modes."
            )
        else:
            how = (
                "No baseline was given (or the results predate the report's use of it: "
                "<code>k2conform report --baseline FILE</code>): every finding counts as new."
            )
        parts = [
            "<h2 id='findings'>Findings per adapter</h2>",
            (
                f"<p>{how} Open a behaviour for its minimal example and the command that "
                "reproduces it.</p>"
            ),
            self._overview(),
            self._filters(),
        ]
        parts += [self._adapter_section(adapter) for adapter in self.adapters]
        return "\n".join(parts)

    def _overview(self) -> str:
        per_adapter = counts({a: self.found.get(a, ()) for a in self.adapters})
        rows = []
        for adapter in self.adapters:
            row = per_adapter[adapter]
            per_family = [
                f"<a href='#{anchor('adapter', adapter, fam)}'>{row[fam]}</a>" for fam in FAMILIES
            ]
            rows.append(
                [
                    f"<a href='#{anchor('adapter', adapter)}'><b>{esc(adapter)}</b></a>",
                    esc(self.versions[adapter]),
                    *per_family,
                    str(row["new"]),
                    str(row["not reported"]),
                    str(row["cells"]),
                ]
            )
        headers = (
            "adapter",
            "version",
            "token-aligned behaviours",
            "text-level behaviours",
            "new",
            "not reported upstream",
            "finding cells",
        )
        return table(headers, rows, css="overview")

    def _filters(self) -> str:
        classes = sorted(
            {
                tag
                for group in self.found.values()
                for b in group
                for case in b.cases
                for tag in self.cases[case].tags
            }
        )

        def select(name: str, label: str, options: Iterable[str]) -> str:
            choices = "".join(f"<option value='{esc(o)}'>{esc(o)}</option>" for o in options)
            return (
                f"<label>{label} <select id='f-{name}'><option value=''>all</option>{choices}"
                "</select></label>"
            )

        def checkbox(name: str, label: str) -> str:
            return f"<label><input type='checkbox' id='f-{name}'> {label}</label>"

        return (
            "<div class='filters'>"
            + select("adapter", "adapter", self.adapters)
            + select("class", "taxonomy class", classes)
            + select("mode", "delivery mode", self.modes)
            + checkbox("new", "new only")
            + checkbox("unreported", "without an upstream report")
            + "<span id='f-count'></span></div>"
        )

    def _adapter_section(self, adapter: str) -> str:
        group = self.found.get(adapter, ())
        parts = [
            (
                f"<section class='adapter-findings' id='{anchor('adapter', adapter)}' "
                f"data-adapter='{esc(adapter)}'><h3>{esc(adapter)} "
                f"{esc(self.versions[adapter])}: {len(group)} distinct behaviour(s)</h3>"
            )
        ]
        if not group:
            parts.append("<p>No findings: every judged cell agrees.</p>")
        for fam in FAMILIES if group else ():
            members = [b for b in group if b.family == fam]
            parts.append(
                f"<div class='family-list' id='{anchor('adapter', adapter, fam)}'>"
                f"<h4>{esc(_FAMILY_TITLES[fam])}: {len(members)}</h4>"
                + ("" if members else "<p>None.</p>")
                + "<p class='nomatch' hidden>No behaviour here matches the filters.</p>"
            )
            parts += [
                self._behaviour(b, anchor("b", adapter, fam, str(n)))
                for n, b in enumerate(members, 1)
            ]
            parts.append("</div>")
        return "\n".join(parts + ["</section>"])

    def _behaviour(self, behaviour: Behaviour, ident: str) -> str:
        classes = sorted({tag for case in behaviour.cases for tag in self.cases[case].tags})
        summary = (
            f"{_status_badges(behaviour)} <b>{esc(' | '.join(behaviour.signatures))}</b> · "
            f"{esc(', '.join(behaviour.modes))} · <a href='#{ident}-cases'>"
            f"{len(behaviour.cases)} case(s)</a>, {len(behaviour.cells)} cell(s)"
        )
        if behaviour.reason:
            reason = behaviour.reason
            short = reason if len(reason) <= SHORT_REASON else reason[: SHORT_REASON - 3] + "…"
            summary += f"<br><span class='reason'>{esc(short)}</span>"
        return (
            f"<details class='behaviour {_UPSTREAM_CSS[behaviour.upstream]}' id='{ident}' "
            f"data-adapter='{esc(behaviour.adapter)}' data-family='{behaviour.family}' "
            f"data-modes='{' '.join(behaviour.modes)}' data-classes='{esc(' '.join(classes))}' "
            f"data-upstream='{behaviour.upstream}'><summary>{summary}</summary>"
            f"<div class='body'>{self._behaviour_body(behaviour, ident)}</div></details>"
        )

    def _behaviour_body(self, behaviour: Behaviour, ident: str) -> str:
        example = behaviour.example(self.cases)
        case = self.cases[example.case]
        shown_variant = example.variant not in ("", example.delivery)
        variant = f" (variant {esc(example.variant)})" if shown_variant else ""
        link = f"<a href='#{case_anchor(example.case)}'>{esc(example.case)}</a>"
        reason = behaviour.reason and f"<p><b>Reviewed reason:</b> {esc(behaviour.reason)}</p>"
        parts = [
            reason,
            f"<p><b>Upstream:</b> {_upstream(behaviour)}</p>",
            _label(
                f"Minimal example: {link} in {esc(example.delivery)}{variant}: "
                f"{esc(case.description)}"
            ),
            _label("model output (markers visible)") + _pre(visible(case.model_output)),
            cell_detail(example),
            table(
                (_expected_title(case), "what the parser returned"),
                [(_pre(_json(case.expected)), _pre(_json(_message(example))))],
            ),
            deltas_block(delivered_deltas(case, example, self.seed), example),
            _label("reproduce (writes a bug report with a standalone script)")
            + f"<code class='cmd'>{esc(repro_command(example, self.seed))}</code>"
            + _cannot_show(example),
        ]
        items = "".join(
            f"<li><a href='#{case_anchor(c)}'>{esc(c)}</a>: "
            f"{esc(', '.join(behaviour.modes_of(c)))}</li>"
            for c in behaviour.cases
        )
        parts.append(
            f"<details id='{ident}-cases'><summary>the {len(behaviour.cases)} case(s) and "
            f"their modes</summary><ul>{items}</ul></details>"
        )
        return "\n".join(part for part in parts if part)

    def case_list(self) -> str:
        """Every case some behaviour holds: its output and expectation, and each finding cell
        (cells of one adapter whose outcome and diffs are the same are one row)."""
        by_case: dict[str, dict[tuple[str, str], list[Cell]]] = {}
        for adapter in self.adapters:
            for behaviour in self.found.get(adapter, ()):
                for cell in behaviour.cells:
                    same = json.dumps([cell.outcome, [d.to_json() for d in cell.diffs], cell.error])
                    by_case.setdefault(cell.case, {}).setdefault((adapter, same), []).append(cell)
        parts = [f"<h2 id='cases'>Cases with findings ({len(by_case)})</h2>"]
        parts += [
            self._case_section(case_id, list(rows.values()))
            for case_id, rows in sorted(by_case.items())
        ]
        return "\n".join(parts)

    def _case_section(self, case_id: str, rows: Sequence[Sequence[Cell]]) -> str:
        case = self.cases[case_id]
        findings = [
            (
                esc(cells[0].adapter),
                esc(", ".join(c.variant or c.delivery for c in cells)),
                cell_detail(cells[0])
                + _observed(cells[0])
                + f"<code class='cmd'>{esc(repro_command(cells[0], self.seed))}</code>"
                + _cannot_show(cells[0]),
            )
            for cells in rows
        ]
        return (
            f"<section class='case' id='{case_anchor(case_id)}'><h3>{esc(case_id)}</h3>"
            f"<p>{esc(case.description)} · tags: {esc(', '.join(case.tags))}"
            "</p>"
            + table(
                ("model output (markers visible)", _expected_title(case)),
                [(_pre(visible(case.model_output)), _pre(_json(case.expected)))],
            )
            + table(
                ("adapter", "modes", "what differs, and the command that reproduces it"),
                findings,
                widths=("8em", "11em"),
            )
            + "</section>"
        )


def _expected_title(case: CaseSummary) -> str:
    if case.verdict == "i":
        return "expected (an implementation-defined case: not judged; the stream invariants are)"
    return "expected"


def _status_badges(behaviour: Behaviour) -> str:
    family = f"<span class='badge family'>{esc(behaviour.family)}</span>"
    if behaviour.upstream == "new":
        return f"<span class='badge new'>NEW</span> {family}"
    unreported = (
        "<span class='badge unreported'>not reported upstream</span> "
        if behaviour.upstream == "not reported"
        else ""
    )
    return f"<span class='badge baselined'>baselined</span> {unreported}{family}"


def _upstream(behaviour: Behaviour) -> str:
    if behaviour.links:
        return " ".join(f"<a href='{esc(link)}'>{esc(link)}</a>" for link in behaviour.links)
    if behaviour.upstream == "new":
        return "not in the baseline: review it, then file it upstream or add it to the baseline."
    return "<span class='badge unreported'>not reported upstream</span>: worth filing."


def cell_detail(cell: Cell) -> str:
    """What is wrong with one cell: the per-field diff, the stream violations, the error."""
    parts = [
        f"<span class='badge o-{esc(cell.outcome)}'>{esc(cell.outcome)}</span> "
        + esc(", ".join(cell.fields))
    ]
    if cell.error:
        parts.append(_label("error") + _pre(cell.error))
    violations = [d for d in cell.diffs if _is_violation(d)]
    diffs = [d for d in cell.diffs if not _is_violation(d)]
    if diffs:
        rows = [
            (
                esc(d.field),
                "" if d.call is None else str(d.call),
                esc(_how(d)),
                _value(d.expected),
                _value(d.observed),
            )
            for d in diffs
        ]
        parts.append(
            table(
                ("field", "call", "compared as", "expected", "observed"),
                rows,
                widths=("8em", "3em", "9em"),
            )
        )
    if violations:
        parts.append(
            _label("stream violations")
            + "<ul>"
            + "".join(f"<li>{esc(str(d.observed))}</li>" for d in violations)
            + "</ul>"
        )
    if cell.variants_differing:
        parts.append(
            _label(
                f"{len(cell.variants_differing)} stream variant(s) differ: "
                + esc(", ".join(cell.variants_differing))
            )
        )
    return "\n".join(parts)


def _how(diff: FieldDiff) -> str:
    how = "stream: expected is its own one-shot parse" if diff.how == "stream" else diff.how
    return how + _first_difference(diff.expected, diff.observed)


def _first_difference(expected: Any, observed: Any) -> str:
    """Where two long strings part, so a reader need not compare kilobytes by eye."""
    if not (isinstance(expected, str) and isinstance(observed, str)):
        return ""
    if max(len(expected), len(observed)) < 80:
        return ""
    shorter = min(len(expected), len(observed))
    at = next((i for i, (a, b) in enumerate(zip(expected, observed)) if a != b), shorter)
    return f"; they part at character {at} (lengths {len(expected)}, {len(observed)})"


def _is_violation(diff: FieldDiff) -> bool:
    """A stream invariant the stream broke (its text is the observed value), as opposed to the
    stream's calls differing from the same adapter's one-shot parse."""
    return diff.how == "stream" and diff.expected is None and isinstance(diff.observed, str)


def _value(value: Any) -> str:
    if value is None:
        return "<span class='none'>null (absent)</span>"
    if value == "":
        return "<span class='none'>empty string</span>"
    if isinstance(value, str):
        return _pre(visible(value))
    return f"<code>{esc(json.dumps(value, ensure_ascii=False))}</code>"


def deltas_block(deltas: Sequence[Delta] | None, cell: Cell) -> str:
    """The deltas in order, each made visible, with its token ids when the mode has them."""
    if deltas is None:
        one_shot = not cell.delivery.startswith("stream")
        return _label(
            "deltas: one-shot, the whole output in one call"
            if one_shot
            else "deltas: they cannot be derived again here (a run with another tokenizer?)"
        )
    # ↵ stands for a newline in a delta; the line break itself would only split the box
    shown = "".join(
        f"<li>{esc(visible(d.text).replace(chr(10), '')) or '<i>empty</i>'}"
        + (f"<sub>{' '.join(map(str, d.token_ids))}</sub>" if d.token_ids else "")
        + "</li>"
        for d in deltas[:MAX_DELTAS]
    )
    more = f" (the first {MAX_DELTAS} shown)" if len(deltas) > MAX_DELTAS else ""
    ids = " (token ids below each)" if any(d.token_ids for d in deltas) else ""
    label = _label(f"the {len(deltas)} deltas, in order{more}{ids}")
    return f"{label}<ol class='deltas'>{shown}</ol>"


def _message(cell: Cell) -> dict[str, Any] | None:
    """The observed result as a client sees it: no ``meta`` (never compared), no outcome and
    error when the parse went through."""
    if cell.observed is None:
        return None
    data = cell.observed.to_json()
    data.pop("meta", None)
    if data["outcome"] == "ok":
        del data["outcome"], data["error"]
    return data


def _observed(cell: Cell) -> str:
    if cell.observed is None:
        return ""
    return f"<details><summary>observed result</summary>{_pre(_json(_message(cell)))}</details>"


def _json(value: Any) -> str:
    """Indented when small; a long value on one line (a deeply nested case would otherwise be
    thousands of lines of indentation)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    return text if len(text) < 4000 else json.dumps(value, ensure_ascii=False)


def _cannot_show(cell: Cell) -> str:
    why = script_cannot_show(cell)
    return f"<p class='note'>{esc(why[0].upper() + why[1:])}.</p>" if why else ""
