"""The coverage document for people: a console table, and a standalone HTML page with each
file's source, its uncovered lines, its partial branches and what Kimi cannot reach marked."""

from __future__ import annotations

import html
from collections import defaultdict
from typing import Any

from k2conform.report.coverage_section import (
    REACHABLE_NOTE,
    ROLE_NAMES,
    describe_run,
    file_anchor,
    measured,
    not_measured,
    reachable_missing_branches,
    summary_table,
)


def _short(count: dict[str, Any]) -> str:
    return f"{count['percent']:5.1f}% {count['covered']:>4}/{count['total']:<4}"


def _row(label: str, raw: dict[str, Any], kimi: dict[str, Any], note: str = "") -> str:
    figures = [_short(raw["lines"]), _short(raw["branches"]), _short(kimi["lines"]).ljust(21)]
    return f"  {label:<50} {' '.join(figures)} {_short(kimi['branches'])}{note}"


def console_table(document: dict[str, Any]) -> str:
    """Per adapter and file: lines and branches, raw and Kimi-reachable; then what was not
    measured."""
    lines = [describe_run(document), ""]
    columns = ("lines".ljust(16), "branches".ljust(16), "Kimi-reachable lines".ljust(21))
    header = f"  {'file':<50} {' '.join(columns)} Kimi-reachable branches"
    for adapter in measured(document):
        version = adapter.get("version") or ""
        lines += [f"{adapter['name']} {version} ({adapter['cells']} cells)", header]
        for entry in adapter["files"]:
            note = "  (never imported)" if entry["never_run"] else ""
            lines.append(_row(entry["path"], entry["figures"], entry["kimi_figures"], note))
        for role, total in adapter["totals"].items():
            label = f"all {ROLE_NAMES.get(role, role)} files"
            lines.append(_row(label, total["figures"], total["kimi_figures"]))
        lines += _reviewed_lines(adapter)
        lines.append("")
    lines += [f"not measured: {a['name']}: {a['reason']}" for a in not_measured(document)]
    return "\n".join(lines).rstrip() + "\n"


def _reviewed_lines(adapter: dict[str, Any]) -> list[str]:
    """The reviewed list's share, per file, and each stale entry with what is wrong with it."""
    out = []
    for entry in adapter["files"]:
        lines, arcs = entry.get("reviewed_lines", ()), entry.get("reviewed_branches", ())
        if lines or arcs:
            out.append(
                f"  unreachable (reviewed): {entry['path']}: {len(lines)} lines, "
                f"{len(arcs)} branches ({entry.get('reviewed_entries', 0)} entries)"
            )
        for stale in entry.get("stale_reviewed", ()):
            arc = f"->{stale['to']}" if "to" in stale else ""
            span = f"-{stale['end']}" if "end" in stale else ""
            out.append(
                f"  STALE reviewed entry {stale['file']}:{stale['line']}{span}{arc} "
                f"({stale['release']}): {stale['problem']}"
            )
    return out


_STYLE = """
body{font-family:sans-serif;margin:1.5em;max-width:1400px}
table{border-collapse:collapse;margin:.5em 0} th{background:#f3f3f3}
td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}
table.src{font-family:monospace;font-size:12px;border:none}
table.src td{border:none;padding:0 6px;white-space:pre} td.n{color:#888;text-align:right}
.run{background:#e8f5e9} .miss{background:#ffcdd2} .part{background:#fff59d}
.dead{background:#e0e0e0;color:#666} .excl{color:#999} .note{color:#8d6e63;font-family:sans-serif}
"""


MARKS = (
    "<p>Marks: <span class='run'>ran</span> · <span class='miss'>never ran</span> · "
    "<span class='part'>a branch never taken (hover: where to)</span> · "
    "<span class='dead'>Kimi cannot reach (hover: why)</span> · "
    "<span class='excl'>excluded</span></p>"
)


def html_page(document: dict[str, Any]) -> str:
    """A standalone page: the summary, then every measured file's source with its marks."""
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>k2conform parser coverage</title>",
        f"<style>{_STYLE}</style></head><body><h1>k2conform parser coverage</h1>",
        f"<p>{esc(describe_run(document))}</p><p>{esc(REACHABLE_NOTE)}</p>",
        MARKS,
        summary_table(document, link_files=True),
    ]
    for adapter in measured(document):
        for entry in adapter["files"]:
            anchor = esc(file_anchor(adapter, entry))
            title = f"{esc(adapter['name'])}: {esc(entry['path'])}"
            parts += [f"<h2 id='{anchor}'>{title}</h2>", _stale_list(entry), _source_table(entry)]
    parts.append("</body></html>")
    return "\n".join(parts)


def _stale_list(entry: dict[str, Any]) -> str:
    stale = entry.get("stale_reviewed", ())
    if not stale:
        return ""
    items = "".join(
        f"<li>line {s['line']}{'->' + str(s['to']) if 'to' in s else ''}: "
        f"{html.escape(s['problem'])} (entry: {html.escape(s['reason'])})</li>"
        for s in stale
    )
    return f"<p><b>Stale entries of the reviewed unreachable list</b></p><ul>{items}</ul>"


def _source_table(entry: dict[str, Any]) -> str:
    esc = html.escape
    executed, missing = set(entry["executed_lines"]), set(entry["missing_lines"])
    excluded = set(entry["excluded_lines"])
    unreachable = {int(line): reason for line, reason in entry["unreachable_lines"].items()}
    untaken: dict[int, list[int]] = defaultdict(list)
    for start, end in reachable_missing_branches(entry):
        untaken[start].append(end)
    dead_arcs: dict[int, str] = {a: reason for a, _, reason in entry["unreachable_branches"]}
    rows = ["<table class='src'>"]
    for number, text in enumerate(entry["source"].splitlines(), 1):
        mark, note = "", ""
        if number in unreachable:
            mark, note = "dead", unreachable[number]
        elif number in untaken:
            targets = ", ".join("exit" if end < 0 else str(end) for end in sorted(untaken[number]))
            mark, note = "part", f"never went to {targets}"
        elif number in missing:
            mark = "miss"
        elif number in executed:
            mark = "run"
        elif number in excluded:
            mark = "excl"
        if number in dead_arcs and number not in unreachable:
            note = "; ".join(filter(None, [note, f"Kimi: {dead_arcs[number]}"]))
        title = f" title='{esc(note, quote=True)}'" if note else ""
        shown = f"<span class='note'>  ◂ {esc(note)}</span>" if mark == "part" else ""
        rows.append(
            f"<tr class='{mark}'{title}><td class='n'>{number}</td><td>{esc(text)}{shown}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)
