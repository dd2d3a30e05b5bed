"""Reports, built from a results document alone (run and report are decoupled, as in
JSONTestSuite; read once into :class:`~k2conform.model.RunResults`): an HTML page that opens on
each adapter's distinct behaviours, an SVG picture of the class × adapter matrix, and a Markdown
summary for a CI job summary and the console."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from collections.abc import Iterable

from k2conform.gate.baseline import gate_block
from k2conform.model import Cell, RunResults
from k2conform.report import coverage_section, style
from k2conform.gate.behaviours import (
    FAMILIES,
    Behaviour,
    counts,
    family,
    gated_behaviours,
    ran_adapters,
)
from k2conform.report.findings_html import FindingsView, table

#: Cells that say something about the parser; adapter-error cells never count against it.
JUDGED = ("agree", "differs", "crash", "timeout")
_COLOURS = style.OUTCOME_COLOURS


def agreement(cells: Iterable[Cell]) -> tuple[int, int]:
    """(agreeing, judged) over cells that were judged against an expectation."""
    judged = [c for c in cells if c.outcome in JUDGED]
    return sum(c.outcome == "agree" for c in judged), len(judged)


#: (taxonomy class, adapter, mode family) → (agreeing, judged, implementation-defined) cells.
Rates = dict[tuple[str, str, str], tuple[int, int, int]]


def class_matrix(results: RunResults) -> tuple[list[str], list[str], Rates]:
    """(taxonomy class, adapter, mode family) → (agreeing, judged, implementation-defined) cells:
    token-aligned and text-level modes apart, since only the first is what an engine sends."""
    tags = {c.id: c.tags for c in results.cases}
    grouped: dict[tuple[str, str, str], list[Cell]] = defaultdict(list)
    for cell in results.cells:
        for tag in tags.get(cell.case, ()):
            grouped[(tag, cell.adapter, family(cell.delivery))].append(cell)
    classes = sorted({tag for t in tags.values() for tag in t})
    return (
        classes,
        ran_adapters(results),
        {
            key: (*agreement(cells), sum(c.outcome == "impl-defined" for c in cells))
            for key, cells in grouped.items()
        },
    )


def matrix_svg(results: RunResults) -> str:
    """The class × adapter matrix as a standalone SVG, one column per adapter and mode family,
    coloured by agreement rate, its text black or white for contrast."""
    classes, adapters, rates = class_matrix(results)
    row, label, col = 18, 260, 84
    columns = [(adapter, fam) for adapter in adapters for fam in FAMILIES]
    width, height = label + col * len(columns) + 10, row * (len(classes) + 3)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            'font-family="sans-serif" font-size="11">'
        ),
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for j, adapter in enumerate(adapters):
        out.append(
            f'<text x="{label + (2 * j + 1) * col}" y="{row - 4}" text-anchor="middle" '
            f'font-weight="bold">{html.escape(adapter)}</text>'
        )
    for j, (_, fam) in enumerate(columns):
        out.append(
            f'<text x="{label + j * col + col / 2}" y="{2 * row - 5}" '
            f'text-anchor="middle">{fam}</text>'
        )
    for i, tag in enumerate(classes):
        y = row * (i + 2)
        out.append(
            f'<text x="{label - 6}" y="{y + 13}" text-anchor="end">{html.escape(tag)}</text>'
        )
        for j, (adapter, fam) in enumerate(columns):
            agree, judged, open_cells = rates.get((tag, adapter, fam), (0, 0, 0))
            text = f"{agree}/{judged}" if judged else (f"{open_cells} i" if open_cells else "n/a")
            only_open = open_cells and not judged
            fill = _COLOURS["impl-defined"] if only_open else style.rate_colour(agree, judged)
            x = label + j * col
            out.append(
                f'<rect x="{x}" y="{y}" width="{col - 2}" height="{row - 2}" fill="{fill}"/>'
            )
            out.append(
                f'<text x="{x + col / 2}" y="{y + 12}" text-anchor="middle" '
                f'fill="{style.text_on(fill)}">{text}</text>'
            )
    out.append("</svg>")
    return "\n".join(out)


def summary_rows(results: RunResults) -> list[tuple[str, str, Counter]]:
    tally: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for cell in results.cells:
        tally[(cell.adapter, cell.delivery)][cell.outcome.value] += 1
    order = {a.name: i for i, a in enumerate(results.adapters)}
    modes = {m: i for i, m in enumerate(results.modes)}
    return [
        (a, m, c)
        for (a, m), c in sorted(
            tally.items(), key=lambda kv: (order.get(kv[0][0], 99), modes.get(kv[0][1], 99))
        )
    ]


def cross_adapter_disagreements(results: RunResults) -> list[tuple[str, dict[str, str]]]:
    """Cases where the adapters' one-shot results differ from each other (any verdict)."""
    found = []
    by_case: dict[str, dict[str, str]] = defaultdict(dict)
    for cell in results.cells:
        observed = cell.observed
        if cell.delivery == "whole" and observed and observed.outcome == "ok":
            key = json.dumps(
                [
                    observed.content or None,
                    observed.reasoning or None,
                    [(c.name, c.arguments) for c in observed.tool_calls],
                ],
                ensure_ascii=False,
            )
            by_case[cell.case][cell.adapter] = key
    for case, keys in sorted(by_case.items()):
        if len(set(keys.values())) > 1:
            found.append((case, keys))
    return found


def _agreement_text(tally: Counter) -> str:
    judged = sum(tally[o] for o in JUDGED)
    open_cells = f" ({tally['impl-defined']} i)" if tally["impl-defined"] else ""
    return f"{tally['agree']}/{judged}{open_cells}"


def markdown(results: RunResults, grouped: dict[str, list[Behaviour]] | None = None) -> str:
    """The summary a CI job shows (and the console prints): agreement per adapter and mode,
    the gate with every new, stale and missing item by name, distinct behaviours per adapter
    (``grouped``: :func:`~k2conform.gate.behaviours.gated_behaviours`, when the caller has it)."""
    lines = [
        (
            f"## k2conform: {len(results.cases)} cases, {len(results.cells)} cells, "
            f"{results.wall_seconds:.1f} s"
        ),
        "",
    ]
    lines += _header_warnings(results, "- ")
    lines += [
        "| adapter | version | " + " | ".join(results.modes) + " |",
        "|---|---|" + "---|" * len(results.modes),
    ]
    versions = {a.name: a.version or "-" for a in results.adapters}
    agreement_by_mode: dict[str, dict[str, str]] = defaultdict(dict)
    for adapter, mode, tally in summary_rows(results):
        agreement_by_mode[adapter][mode] = _agreement_text(tally)
    for adapter, by_mode in agreement_by_mode.items():
        lines.append(
            f"| {adapter} | {versions.get(adapter)} | "
            + " | ".join(by_mode.get(m, "-") for m in results.modes)
            + " |"
        )
    partial = results.extra.get("partial")
    if partial:
        lines += [
            "",
            (
                f"**PARTIAL:** {partial['reason']}: {partial['cells']} of "
                f"{partial['planned']} cells were run."
            ),
        ]
    inventory = results.extra.get("inventory")
    if inventory and inventory["run"] < inventory["planned"]:
        run, planned = inventory["run"], inventory["planned"]
        lines += ["", f"**INCOMPLETE:** {run} of {planned} planned cells."]
    gate = gate_block(results.extra)
    if gate:
        lines += [
            "",
            (
                f"**Gate:** {'PASS' if gate.passed else 'FAIL'}: {gate.new} new "
                f"disagreement(s), {gate.baselined} baselined, "
                f"{len(gate.stale)} stale baseline entr(y/ies)."
            ),
        ]
        lines += [f"- MISSING: {line}" for line in gate.missing]
        lines += [f"- UNREVIEWED: {line}" for line in gate.unreviewed]
        lines += [f"- NEW: {line}" for line in gate.new_cells]
        lines += [f"- STALE: {line}" for line in gate.stale_lines]
    behaviour = behaviour_lines(results, grouped)
    return "\n".join(lines + behaviour + streaming_cost_lines(results)) + "\n"


def behaviour_lines(
    results: RunResults, grouped: dict[str, list[Behaviour]] | None = None
) -> list[str]:
    """The "Distinct behaviours per adapter" table of the Markdown summary."""
    adapters = ran_adapters(results)
    if not adapters:
        return []
    grouped = gated_behaviours(results) if grouped is None else grouped
    per_adapter = counts({a: g for a, g in grouped.items() if a in adapters})
    columns = (
        "adapter",
        "token-aligned",
        "text-level",
        "new",
        "baselined, not reported upstream",
        "finding cells",
    )
    lines = [
        "",
        "### Distinct behaviours per adapter",
        "",
        "| " + " | ".join(columns) + " |",
        "|---" * len(columns) + "|",
    ]
    for adapter in adapters:
        row = per_adapter[adapter]
        lines.append(
            f"| {adapter} | "
            + " | ".join(str(row[key]) for key in (*FAMILIES, "new", "not reported", "cells"))
            + " |"
        )
    for adapter in adapters:
        if grouped.get(adapter):
            lines += ["", f"#### {adapter}", ""]
            lines += [_behaviour_line(b) for b in grouped[adapter]]
    return lines


#: How much of a reviewed reason a summary line quotes (the report and the baseline have it all).
_REASON_CHARS = 160


def _behaviour_line(behaviour: Behaviour) -> str:
    """One distinct behaviour, one line: what differs, where, on which cases, and why."""
    status = {"new": "**NEW**", "not reported": "not reported upstream"}.get(
        behaviour.upstream, " ".join(behaviour.links)
    )
    cases = behaviour.cases
    shown = ", ".join(cases[:3]) + (f", … ({len(cases)} cases)" if len(cases) > 3 else "")
    reason = " ".join(behaviour.reason.split())
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    return (
        f"- {status}: {'; '.join(behaviour.signatures)} in {', '.join(behaviour.modes)}: "
        f"{shown}" + (f". {reason}" if reason else "")
    )


_STREAMING_COLUMNS = (
    "adapter",
    "version",
    "delivery",
    "exponent",
    "finding",
    "sizes (KB)",
    "µs per delta",
)


def streaming_cost_rows(results: RunResults) -> list[list[str]]:
    """The streaming-cost check added by ``run --bench``: per adapter and streaming delivery,
    the scaling exponent, the ``superlinear`` finding (or ``ok``) and its evidence."""
    rows = []
    for row in results.extra.get("streaming_cost") or ():
        evidence = row["evidence"]
        capped = (
            f" (capped after {evidence['capped']['after_kb']} KB)" if evidence.get("capped") else ""
        )
        rows.append(
            [
                row["adapter"],
                row.get("version") or "-",
                row["delivery"],
                "-" if row["exponent"] is None else f"{row['exponent']:.2f}",
                row["finding"] or "ok",
                ", ".join(map(str, evidence["sizes_kb"])) + capped,
                ", ".join(f"{c:.1f}" for c in evidence["per_delta_us"]),
            ]
        )
    return rows


def _streaming_cost_note(results: RunResults) -> str:
    threshold = (results.extra.get("streaming_cost") or [{}])[0].get("threshold")
    return (
        "Exponent of the total streaming time against the output size (one call whose JSON "
        "arguments are "
        f"N KB; 1 is linear, 2 quadratic); above {threshold} the adapter gets a superlinear "
        "finding."
    )


def streaming_cost_lines(results: RunResults) -> list[str]:
    """The "Streaming cost" section of the Markdown summary (empty without ``run --bench``)."""
    rows = streaming_cost_rows(results)
    if not rows:
        return []
    lines = [
        "",
        "### Streaming cost",
        "",
        _streaming_cost_note(results),
        "",
        "| " + " | ".join(_STREAMING_COLUMNS) + " |",
        "|---" * len(_STREAMING_COLUMNS) + "|",
    ]
    for cells in rows:
        cells = [f"**{c}**" if c == "superlinear" else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _header_warnings(results: RunResults, prefix: str) -> list[str]:
    """One line per adapter that is unsupported, unavailable or whose glue failed."""
    warnings = []
    errors = results.extra.get("adapter_errors") or {}
    absent = [a.name for a in results.adapters if a.status == "unavailable" and not a.version]
    if absent:  # one line for the parsers this machine does not have, asked for or not
        warnings.append(
            f"{prefix}not installed here (unavailable): {', '.join(absent)}; "
            "`k2conform setup-parsers` lists the environments that bring them"
        )
    for adapter in results.adapters:
        name, version = adapter.name, adapter.version or "not installed"
        written_for = ", ".join(adapter.supported_versions) or "any release"
        if name in absent:
            continue
        if adapter.status == "unavailable":
            warnings.append(f"{prefix}{name}: unavailable ({adapter.reason})")
        elif name in errors:
            cells = sum(errors[name].values())
            detail = "; ".join(f"{message} ({n} cells)" for message, n in errors[name].items())
            # A release clause only when one is known (a cmd: adapter without a hello has neither).
            known = adapter.version or adapter.supported_versions
            releases = (
                f"the adapter was written for {written_for}, the installed release is {version}; "
                if known
                else ""
            )
            warnings.append(
                f"{prefix}{name}: ADAPTER ERROR, not a parser finding: {releases}{detail}. "
                f"Its {cells} cells are not counted as disagreements."
            )
        elif adapter.supported is False:
            warnings.append(
                f"{prefix}{name} {version} is not a release this adapter was written for "
                f"({written_for}); it still runs, and a glue failure would show as adapter-error"
            )
    return warnings + ([""] if warnings else [])


def html_page(results: RunResults, grouped: dict[str, list[Behaviour]] | None = None) -> str:
    """The HTML report: it opens on the findings per adapter; the tables of every cell's
    outcome, the class matrix and the cases with findings follow (``grouped``: as
    :func:`markdown`'s)."""
    esc = html.escape
    view = FindingsView(results, grouped)
    sections = (
        ("findings", "findings"),
        ("matrix", "class matrix"),
        ("summary", "every mode"),
        ("cases", "cases"),
    )
    links = " · ".join(f"<a href='#{target}'>{name}</a>" for target, name in sections)
    parts = [
        (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width'><title>k2conform report</title>"
        ),
        f"<style>{style.CSS}{style.outcome_css()}</style></head><body>",
        (
            f"<h1>k2conform conformance report</h1><p>k2conform {esc(results.version)} · "
            f"{len(results.cases)} cases · {len(results.cells)} cells · "
            f"seed {results.seed} · wall {results.wall_seconds:.1f} s · {links}</p>"
        ),
        _gate_html(results),
        *[f"<p class='warn'>⚠ {esc(w)}</p>" for w in _header_warnings(results, "") if w],
        view.page_part(),
        _matrix_html(results),
        _summary_html(results),
        _cross_adapter_html(results),
        _streaming_cost_html(results),
        coverage_section.html_section(results),
        view.case_list(),
        f"<script>{style.SCRIPT}</script></body></html>",
    ]
    return "\n".join(part for part in parts if part)


def _gate_html(results: RunResults) -> str:
    """The verdict, with every missing adapter and stale entry by name (new ones are in the
    findings view, marked NEW)."""
    esc = html.escape
    gate, partial = gate_block(results.extra), results.extra.get("partial")
    parts = (
        [
            (
                f"<p class='warn'><b>PARTIAL</b>: {esc(partial['reason'])}: {partial['cells']} of "
                f"{partial['planned']} cells were run.</p>"
            )
        ]
        if partial
        else []
    )
    if not gate:
        return "\n".join(parts + ["<p><b>No baseline given</b>: every finding counts as new.</p>"])
    verdict = "<b class='pass'>Gate: PASS</b>" if gate.passed else "<b class='fail'>Gate: FAIL</b>"
    parts.append(
        f"<p>{verdict}: {gate.new} new disagreement(s), {gate.baselined} baselined, "
        f"{len(gate.stale)} stale baseline entries.</p>"
    )
    items = [f"MISSING: {line}" for line in gate.missing]
    items += [f"UNREVIEWED: {line}" for line in gate.unreviewed]
    items += [f"STALE: {line}" for line in gate.stale_lines]
    if items:
        parts.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>")
    return "\n".join(parts)


def _matrix_html(results: RunResults) -> str:
    return (
        "<h2 id='matrix'>Taxonomy class × adapter, token-aligned and text-level modes apart"
        "</h2>"
        "<p>Agreeing / judged cells; <i>N i</i>: implementation-defined cells only.</p>"
        f"<div class='matrix'>{matrix_svg(results)}</div>"
    )


def _summary_html(results: RunResults) -> str:
    esc = html.escape
    adapters = [
        (
            esc(a.name),
            esc(a.version or "not installed"),
            (
                f"{esc(a.status)} {esc(a.reason)} (supported releases: "
                f"{esc(', '.join(a.supported_versions) or '-')})"
            ),
        )
        for a in results.adapters
    ]
    modes = []
    for adapter, mode, tally in summary_rows(results):
        agree, judged = tally["agree"], sum(tally[o] for o in JUDGED)
        rate = f"{100 * agree / judged:.1f}%" if judged else "n/a"
        modes.append(
            [
                esc(adapter),
                f"{esc(mode)} <small>({family(mode)})</small>",
                *(str(tally[o] or "") for o in _COLOURS),
                rate,
            ]
        )
    outcomes = [f"<span class='badge o-{o}'>{o}</span>" for o in _COLOURS]
    return "\n".join(
        [
            "<h2 id='summary'>Every adapter and delivery mode</h2>",
            table(("adapter", "version", "status"), adapters, css="plain"),
            table(("adapter", "delivery", *outcomes, "agreement"), modes, css="plain"),
            (
                "<p>Token-aligned modes (whole, stream-token, stream-burst, the server modes) are "
                "what "
                "an engine sends. Text-level modes cut markers that an engine sends as single "
                "tokens: "
                "what a text replay or a re-chunking proxy sends; a failure there is real but "
                "unreachable through a token stream.</p>"
            ),
        ]
    )


def _cross_adapter_html(results: RunResults) -> str:
    esc = html.escape
    cross = cross_adapter_disagreements(results)
    rows = []
    for case_id, keys in cross:
        same: dict[str, list[str]] = defaultdict(list)
        for adapter, key in keys.items():
            same[key].append(adapter)
        rows.append((esc(case_id), esc(" | ".join(", ".join(v) for v in same.values()))))
    return (
        f"<h2>Adapters disagreeing with each other, one-shot ({len(cross)} cases, any "
        "verdict)</h2>"
        + table(("case", "groups of adapters returning the same result"), rows, css="plain")
    )


def _streaming_cost_html(results: RunResults) -> str:
    esc = html.escape
    streaming = streaming_cost_rows(results)
    if not streaming:
        return ""
    rows = [
        [
            f"<span class='badge o-differs'>{esc(c)}</span>" if c == "superlinear" else esc(c)
            for c in cells
        ]
        for cells in streaming
    ]
    return f"<h2>Streaming cost</h2><p>{esc(_streaming_cost_note(results))}</p>" + table(
        [esc(c) for c in _STREAMING_COLUMNS], rows, css="plain"
    )
