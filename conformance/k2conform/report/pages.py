"""Reports, built from the results JSON alone (run and report are decoupled, as in
JSONTestSuite): an HTML page, an SVG picture of the class × adapter matrix, and a
Markdown summary for a CI job summary."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from typing import Any, Iterable

from k2conform.delivery.modes import TOKEN_ALIGNED_MODES
from k2conform.markers import visible

#: Cells that say something about the parser; adapter-error cells never count against it.
JUDGED = ("agree", "differs", "crash", "timeout")
_COLOURS = {
    "agree": "#2e7d32", "differs": "#c62828", "impl-defined": "#5c6bc0", "crash": "#6a1b9a",
    "timeout": "#ef6c00", "unavailable": "#9e9e9e", "adapter-error": "#795548",
}


def agreement(cells: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(agreeing, judged) over cells that were judged against an expectation."""
    judged = [c for c in cells if c["outcome"] in JUDGED]
    return sum(c["outcome"] == "agree" for c in judged), len(judged)


def class_matrix(results: dict[str, Any]) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[int, int, int]]]:
    """Taxonomy class × adapter → (agreeing, judged, implementation-defined) cells."""
    tags = {c["id"]: c["tags"] for c in results["cases"]}
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for cell in results["cells"]:
        for tag in tags.get(cell["case"], ()):
            grouped[(tag, cell["adapter"])].append(cell)
    classes = sorted({tag for t in tags.values() for tag in t})
    ran = {cell["adapter"] for cell in results["cells"]}  # unavailable adapters have no column
    adapters = [a["name"] for a in results["adapters"] if a["name"] in ran]
    return classes, adapters, {
        key: (*agreement(cells), sum(c["outcome"] == "impl-defined" for c in cells)) for key, cells in grouped.items()
    }


def _rate_colour(agree: int, judged: int) -> str:
    if not judged:
        return "#e0e0e0"
    rate = agree / judged
    red, green = int(230 * (1 - rate) + 25), int(180 * rate + 40)
    return f"rgb({red},{green},70)"


def matrix_svg(results: dict[str, Any]) -> str:
    """The class × adapter matrix as a standalone SVG, coloured by agreement rate."""
    classes, adapters, rates = class_matrix(results)
    row, label, col = 18, 260, 110
    width, height = label + col * len(adapters) + 10, row * (len(classes) + 2)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for j, adapter in enumerate(adapters):
        out.append(f'<text x="{label + j * col + col / 2}" y="{row - 4}" text-anchor="middle" font-weight="bold">{html.escape(adapter)}</text>')
    for i, tag in enumerate(classes):
        y = row * (i + 1)
        out.append(f'<text x="{label - 6}" y="{y + 13}" text-anchor="end">{html.escape(tag)}</text>')
        for j, adapter in enumerate(adapters):
            agree, judged, open_cells = rates.get((tag, adapter), (0, 0, 0))
            text = f"{agree}/{judged}" if judged else (f"{open_cells} i" if open_cells else "n/a")
            fill = _rate_colour(agree, judged) if judged or not open_cells else _COLOURS["impl-defined"]
            x = label + j * col
            out.append(f'<rect x="{x}" y="{y}" width="{col - 2}" height="{row - 2}" fill="{fill}"/>')
            out.append(f'<text x="{x + col / 2}" y="{y + 12}" text-anchor="middle" fill="white">{text}</text>')
    out.append("</svg>")
    return "\n".join(out)


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, Counter]]:
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for cell in results["cells"]:
        counts[(cell["adapter"], cell["delivery"])][cell["outcome"]] += 1
    order = {a["name"]: i for i, a in enumerate(results["adapters"])}
    modes = {m: i for i, m in enumerate(results["modes"])}
    return [(a, m, c) for (a, m), c in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 99), modes.get(kv[0][1], 99)))]


def result_vectors(results: dict[str, Any]) -> list[tuple[tuple, list[str]]]:
    """Cases with any non-agreeing cell, grouped by identical outcome vectors (JSONTestSuite's pruned view)."""
    by_case: dict[str, dict[tuple[str, str], str]] = defaultdict(dict)
    for cell in results["cells"]:
        by_case[cell["case"]][(cell["adapter"], cell["delivery"])] = (
            cell["outcome"] + (f" [{', '.join(cell['fields'])}]" if cell["fields"] else "")
        )
    groups: dict[tuple, list[str]] = defaultdict(list)
    for case, vector in by_case.items():
        if all(v in ("agree", "impl-defined", "unavailable") for v in vector.values()):
            continue
        groups[tuple(sorted(vector.items()))].append(case)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def cross_adapter_disagreements(results: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """Cases where the adapters' one-shot results differ from each other (any verdict)."""
    found = []
    by_case: dict[str, dict[str, str]] = defaultdict(dict)
    for cell in results["cells"]:
        if cell["delivery"] == "whole" and cell["observed"] and cell["observed"].get("outcome") == "ok":
            observed = cell["observed"]
            key = json.dumps([observed.get("content") or None, observed.get("reasoning") or None,
                              [(c["name"], c["arguments"]) for c in observed["tool_calls"]]], ensure_ascii=False)
            by_case[cell["case"]][cell["adapter"]] = key
    for case, keys in sorted(by_case.items()):
        if len(set(keys.values())) > 1:
            found.append((case, keys))
    return found


def markdown(results: dict[str, Any]) -> str:
    lines = [f"## k2conform: {len(results['cases'])} cases, {len(results['cells'])} cells, {results['wall_seconds']:.1f} s", ""]
    lines += _header_warnings(results, "- ")
    lines += ["| adapter | version | " + " | ".join(results["modes"]) + " |",
              "|---|---|" + "---|" * len(results["modes"])]
    versions = {a["name"]: a.get("version") or "-" for a in results["adapters"]}
    table: dict[str, dict[str, str]] = defaultdict(dict)
    for adapter, mode, counts in summary_rows(results):
        agree = counts["agree"]
        judged = sum(counts[o] for o in JUDGED)
        table[adapter][mode] = f"{agree}/{judged}" + (f" ({counts['impl-defined']} i)" if counts["impl-defined"] else "")
    for adapter in table:
        lines.append(f"| {adapter} | {versions.get(adapter)} | " + " | ".join(table[adapter].get(m, "-") for m in results["modes"]) + " |")
    partial = results.get("partial")
    if partial:
        lines += ["", f"**PARTIAL:** {partial['reason']}: {partial['cells']} of {partial['planned']} cells were run."]
    gate = results.get("gate")
    if gate:
        lines += ["", f"**Gate:** {'PASS' if gate['passed'] else 'FAIL'}: {gate['new']} new disagreement(s), "
                      f"{gate['baselined']} baselined, {len(gate['stale'])} stale baseline entr(y/ies)."]
        lines += [f"- MISSING: {line}" for line in gate.get("missing", ())]
        lines += [f"- NEW: {line}" for line in gate["new_cells"]]
        lines += [f"- STALE: {e['case']} {e['adapter']} {e['delivery']}: {e['outcome']} {','.join(e['fields'])} "
                  "no longer occurs" for e in gate["stale"]]
    return "\n".join(lines + streaming_cost_lines(results)) + "\n"


_STREAMING_COLUMNS = ("adapter", "version", "delivery", "exponent", "finding", "sizes (KB)", "µs per delta")


def streaming_cost_rows(results: dict[str, Any]) -> list[list[str]]:
    """The streaming-cost check added by ``run --bench``: per adapter and streaming delivery,
    the scaling exponent, the ``superlinear`` finding (or ``ok``) and its evidence."""
    rows = []
    for row in results.get("streaming_cost") or ():
        evidence = row["evidence"]
        capped = f" (capped after {evidence['capped']['after_kb']} KB)" if evidence.get("capped") else ""
        rows.append([row["adapter"], row.get("version") or "-", row["delivery"],
                     "-" if row["exponent"] is None else f"{row['exponent']:.2f}", row["finding"] or "ok",
                     ", ".join(map(str, evidence["sizes_kb"])) + capped,
                     ", ".join(f"{c:.1f}" for c in evidence["per_delta_us"])])
    return rows


def _streaming_cost_note(results: dict[str, Any]) -> str:
    threshold = (results.get("streaming_cost") or [{}])[0].get("threshold")
    return ("Exponent of the total streaming time against the output size (one call whose JSON arguments are "
            f"N KB; 1 is linear, 2 quadratic); above {threshold} the adapter gets a superlinear finding.")


def streaming_cost_lines(results: dict[str, Any]) -> list[str]:
    """The "Streaming cost" section of the Markdown summary (empty without ``run --bench``)."""
    rows = streaming_cost_rows(results)
    if not rows:
        return []
    lines = ["", "### Streaming cost", "", _streaming_cost_note(results), "",
             "| " + " | ".join(_STREAMING_COLUMNS) + " |", "|---" * len(_STREAMING_COLUMNS) + "|"]
    for cells in rows:
        cells = [f"**{c}**" if c == "superlinear" else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _header_warnings(results: dict[str, Any], prefix: str) -> list[str]:
    """One line per adapter that is unsupported, unavailable or whose glue failed."""
    warnings = []
    errors = results.get("adapter_errors") or {}
    for adapter in results["adapters"]:
        name, version = adapter["name"], adapter.get("version") or "not installed"
        written_for = ", ".join(adapter.get("supported_versions") or []) or "any release"
        if adapter["status"] == "unavailable":
            warnings.append(f"{prefix}{name}: unavailable ({adapter['reason']})")
        elif name in errors:
            cells = sum(errors[name].values())
            detail = "; ".join(f"{message} ({n} cells)" for message, n in errors[name].items())
            warnings.append(f"{prefix}{name}: ADAPTER ERROR, not a parser finding: the adapter was written for "
                            f"{written_for}, the installed release is {version}; {detail}. "
                            f"Its {cells} cells are not counted as disagreements.")
        elif adapter.get("supported") is False:
            warnings.append(f"{prefix}{name} {version} is not a release this adapter was written for "
                            f"({written_for}); it still runs, and a glue failure would show as adapter-error")
    return warnings + ([""] if warnings else [])


def html_page(results: dict[str, Any]) -> str:
    cases = {c["id"]: c for c in results["cases"]}
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>k2conform report</title><style>",
        "body{font-family:sans-serif;margin:1.5em;max-width:1400px} table{border-collapse:collapse;margin:.5em 0}",
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top} th{background:#f3f3f3}",
        "pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px;max-height:16em;overflow:auto}",
        ".warn{background:#fff3cd;padding:.5em} details{margin:.3em 0} summary{cursor:pointer}",
        *[f".{k}{{background:{v};color:white}}" for k, v in _COLOURS.items()],
        "</style></head><body>",
        f"<h1>k2conform conformance report</h1><p>k2conform {esc(results['k2conform'])} · {len(results['cases'])} cases · "
        f"{len(results['cells'])} cells · modes: {esc(', '.join(results['modes']))} · seed {results['seed']} · "
        f"wall {results['wall_seconds']:.1f} s</p>",
    ]
    for warning in _header_warnings(results, ""):
        if warning:
            parts.append(f"<p class='warn'>⚠ {esc(warning)}</p>")
    parts.append("<h2>Adapters</h2><table><tr><th>adapter</th><th>version</th><th>supported releases</th><th>status</th></tr>")
    for a in results["adapters"]:
        parts.append(f"<tr><td>{esc(a['name'])}</td><td>{esc(a.get('version') or 'not installed')}</td>"
                     f"<td>{esc(', '.join(a.get('supported_versions') or []) or '-')}</td><td>{esc(a['status'])} {esc(a['reason'])}</td></tr>")
    parts.append("</table>")
    gate = results.get("gate")
    if gate:
        parts.append(f"<p><b>Gate: {'PASS' if gate['passed'] else 'FAIL'}</b> — {gate['new']} new disagreement(s), "
                     f"{gate['baselined']} baselined, {len(gate['stale'])} stale baseline entries.</p>")
    parts.append("<h2>Summary per adapter and delivery mode</h2><table><tr><th>adapter</th><th>delivery</th>"
                 + "".join(f"<th class='{o}'>{o}</th>" for o in _COLOURS) + "<th>agreement</th></tr>")
    for adapter, mode, counts in summary_rows(results):
        agree, judged = counts["agree"], sum(counts[o] for o in JUDGED)
        rate = f"{100 * agree / judged:.1f}%" if judged else "n/a"
        kind = "token-aligned" if mode in TOKEN_ALIGNED_MODES else "text-level"
        parts.append(f"<tr><td>{esc(adapter)}</td><td>{esc(mode)} <small>({kind})</small></td>" + "".join(f"<td>{counts[o] or ''}</td>" for o in _COLOURS) + f"<td>{rate}</td></tr>")
    parts.append("</table><p>Token-aligned modes (whole, stream-token, stream-burst) are what an engine sends. "
                 "Text-level modes cut markers that an engine sends as single tokens: what a text replay or a "
                 "re-chunking proxy sends; a failure there is real but unreachable through a token stream.</p>")
    parts.append("<h2>Taxonomy class × adapter (agreeing / judged cells; <i>N i</i>: implementation-defined cells only)</h2>")
    parts.append(matrix_svg(results))
    vectors = result_vectors(results)
    parts.append(f"<h2>Disagreements, grouped by identical result vectors ({len(vectors)} groups)</h2>")
    for vector, group in vectors:
        failing = [f"{a}/{m}: {v}" for (a, m), v in vector if v not in ("agree", "impl-defined", "unavailable")]
        parts.append(f"<details><summary><b>{len(group)} case(s)</b>: {esc('; '.join(failing[:6]))}{' …' if len(failing) > 6 else ''}</summary>")
        for case_id in group[:20]:
            parts.append(_case_block(cases[case_id], results))
        if len(group) > 20:
            parts.append(f"<p>… and {len(group) - 20} more: {esc(', '.join(group[20:]))}</p>")
        parts.append("</details>")
    cross = cross_adapter_disagreements(results)
    parts.append(f"<h2>Adapters disagreeing with each other, one-shot ({len(cross)} cases, any verdict)</h2><table><tr><th>case</th><th>groups of adapters returning the same result</th></tr>")
    for case_id, keys in cross:
        same: dict[str, list[str]] = defaultdict(list)
        for adapter, key in keys.items():
            same[key].append(adapter)
        parts.append(f"<tr><td>{esc(case_id)}</td><td>{esc(' | '.join(', '.join(v) for v in same.values()))}</td></tr>")
    parts.append("</table>")
    streaming = streaming_cost_rows(results)
    if streaming:
        parts.append("<h2>Streaming cost</h2><p>" + esc(_streaming_cost_note(results)) + "</p><table><tr>"
                     + "".join(f"<th>{esc(c)}</th>" for c in _STREAMING_COLUMNS) + "</tr>")
        for cells in streaming:
            parts.append("<tr>" + "".join(f"<td class='differs'>{esc(c)}</td>" if c == "superlinear" else f"<td>{esc(c)}</td>"
                                          for c in cells) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _case_block(case: dict[str, Any], results: dict[str, Any]) -> str:
    esc = html.escape
    cells = [c for c in results["cells"] if c["case"] == case["id"]]
    rows = [f"<h3 id='{esc(case['id'])}'>{esc(case['id'])}</h3><p>{esc(case['description'])} · tags: {esc(', '.join(case['tags']))}</p>",
            f"<table><tr><th>model output (markers visible)</th><th>expected</th></tr><tr><td><pre>{esc(visible(case['model_output']))}</pre></td>"
            f"<td><pre>{esc(json.dumps(case.get('expected'), ensure_ascii=False, indent=1))}</pre></td></tr></table>",
            "<table><tr><th>adapter</th><th>delivery</th><th>outcome</th><th>observed</th></tr>"]
    for cell in cells:
        if cell["outcome"] in ("agree", "unavailable"):
            continue
        observed = dict(cell["observed"] or {})
        observed.pop("meta", None)
        rows.append(f"<tr><td>{esc(cell['adapter'])}</td><td>{esc(cell['variant'] or cell['delivery'])}</td>"
                    f"<td class='{cell['outcome']}'>{esc(cell['outcome'])} {esc(', '.join(cell['fields']))}</td>"
                    f"<td><pre>{esc(json.dumps(observed, ensure_ascii=False, indent=1))}</pre></td></tr>")
    rows.append("</table>")
    return "\n".join(rows)
