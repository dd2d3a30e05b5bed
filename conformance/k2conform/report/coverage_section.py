"""The "Parser coverage" section of the main HTML report (``k2conform report --coverage FILE``),
and the summary table it shares with the standalone page of ``k2conform coverage --html``.
Built from the coverage document alone (``k2conform coverage --json``)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from k2conform.errors import UsageError
from k2conform.model import RunResults

ROLE_NAMES = {"kimi": "Kimi-specific", "shared": "shared"}
#: What a ``k2conform coverage --json`` document says it is (``coverage.measure`` writes it).
SCHEMA = "k2conform-coverage/1"


def read_coverage(path: Path) -> dict[str, Any]:
    """A ``k2conform coverage --json`` document; anything else is a usage error naming the file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read the coverage document {path}: {error}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UsageError(f"{path} is not a k2conform coverage document (k2conform coverage --json)")
    return document


def line_ranges(lines: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` → ``"1-3, 7"``."""
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def figure(count: dict[str, Any]) -> str:
    return f"{count['percent']:.1f} % ({count['covered']}/{count['total']})"


def _cells(tag: str, *figure_sets: dict[str, Any]) -> str:
    kinds = ("lines", "branches")
    return "".join(f"<{tag}>{figure(f[kind])}</{tag}>" for f in figure_sets for kind in kinds)


SUMMARY_HEADER = (
    "<table><tr><th>adapter</th><th>file</th><th>role</th><th>lines</th><th>branches</th>"
    "<th>Kimi-reachable lines</th><th>Kimi-reachable branches</th></tr>"
)


def summary_table(document: dict[str, Any], link_files: bool = False) -> str:
    """Per adapter and file: line and branch coverage, raw and of what Kimi can reach."""
    esc = html.escape
    rows = [SUMMARY_HEADER]
    for adapter in measured(document):
        label = esc(f"{adapter['name']} {adapter.get('version') or ''}".strip())
        for entry in adapter["files"]:
            name = esc(entry["path"])
            if link_files:
                name = f"<a href='#{esc(file_anchor(adapter, entry))}'>{name}</a>"
            role = ROLE_NAMES.get(entry["role"], entry["role"])
            figures = _cells("td", entry["figures"], entry["kimi_figures"])
            rows.append(f"<tr><td>{label}</td><td>{name}</td><td>{role}</td>{figures}</tr>")
        for role, total in adapter["totals"].items():
            figures = _cells("th", total["figures"], total["kimi_figures"])
            role_name = ROLE_NAMES.get(role, role)
            head = f"<th>{label}</th><th>all {role_name} files</th><th></th>"
            rows.append(f"<tr>{head}{figures}</tr>")
    rows.append("</table>")
    rows += [
        f"<p>Not measured: <b>{esc(a['name'])}</b>: {esc(a['reason'])}</p>"
        for a in not_measured(document)
    ]
    return "\n".join(rows)


def describe_run(document: dict[str, Any]) -> str:
    """One line: what was run, how long it took, on which coverage.py."""
    if "source" not in document:
        return "nothing was measured"
    load = ", ".join(f"{x:g}" for x in document.get("load_average", ()))
    return (
        f"{document['source']}: {document['cases']} cases, {document['cells']} cells "
        f"({', '.join(document['modes'])}) in {document['wall_seconds']:g} s, load average {load}; "
        f"coverage.py {document['coverage_py']}, branch mode; {document['created']}"
    )


REACHABLE_NOTE = (
    "Kimi-reachable leaves out the lines and branches only another model family's configuration, "
    "or a method Kimi's parser class replaces, can run (decided from the installed release's "
    "own objects; see k2conform.coverage.reachability)."
)


def html_section(results: RunResults) -> str:
    """The section, or nothing when the results carry no coverage document."""
    document = results.extra.get("coverage")
    if not document:
        return ""
    parts = [
        "<h2>Parser coverage</h2>",
        f"<p>{html.escape(describe_run(document))}</p>",
        f"<p>{html.escape(REACHABLE_NOTE)}</p>",
        summary_table(document),
    ]
    for adapter in measured(document):
        for entry in adapter["files"]:
            missing = set(entry["missing_lines"]) - {int(n) for n in entry["unreachable_lines"]}
            partial = {start for start, _ in reachable_missing_branches(entry)}
            if missing or partial:
                title = html.escape(f"{adapter['name']} {entry['path']}")
                parts.append(
                    f"<details><summary>{title}: {len(missing)} uncovered reachable lines, "
                    f"{len(partial)} lines with an untaken branch</summary><p>uncovered: "
                    f"{html.escape(line_ranges(missing) or '-')}<br>untaken branches from: "
                    f"{html.escape(line_ranges(partial) or '-')}</p></details>"
                )
    return "\n".join(parts)


def reachable_missing_branches(entry: dict[str, Any]) -> list[tuple[int, int]]:
    """The branch arcs of a file that were never taken and Kimi can take."""
    dead = {(a, b) for a, b, _ in entry["unreachable_branches"]}
    return [(a, b) for a, b in entry["missing_branches"] if (a, b) not in dead]


def file_anchor(adapter: dict[str, Any], entry: dict[str, Any]) -> str:
    return f"{adapter['name']}:{entry['path']}"


def measured(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in document["adapters"] if a["status"] == "measured"]


def not_measured(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in document["adapters"] if a["status"] != "measured"]
