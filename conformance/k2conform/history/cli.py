"""``k2conform history RESULTS.json...``: per parser line, each distinct behaviour, the releases
it appears in and the release it changed in; ``--markdown FILE``, ``--json FILE``.  Exit
status: 0 written, 2 usage error (a file that is not a results document, a release twice)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from k2conform.errors import UsageError
from k2conform.history.build import LineHistory, Trace, histories, version_ranges


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "history", help="each behaviour across releases: where it appears, where it changed"
    )
    p.description = (__doc__ or "").replace("\n", " ")
    p.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS.json",
        help="results documents (run --json), one per release or merged; name each "
        "release's adapter LINE-VERSION (--adapter vllm-0.25.0=cmd:...)",
    )
    p.add_argument(
        "--markdown", type=Path, metavar="FILE", help="also write the history as Markdown"
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the history as JSON")
    p.set_defaults(handler=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from k2conform.run.results import read_results

    lines = histories((str(path), read_results(path)) for path in args.results)
    if not lines:
        raise UsageError("no adapter ran any case in these results documents")
    print(as_text(lines), end="")
    if args.markdown:
        args.markdown.write_text(as_markdown(lines), encoding="utf-8")
    if args.json:
        args.json.write_text(
            json.dumps(as_json(lines), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    return 0


def _versions(line: LineHistory) -> list[str]:
    return [release.version for release in line.releases]


def changed_in(trace: Trace) -> str:
    """``appeared in 0.12.0 · gone in 0.25.0 (now agree)``, or why there is no change."""
    words = [
        f"{c.kind} in {c.version}" + (f" (now {', '.join(c.now)})" if c.now else "")
        for c in trace.changes
    ]
    if not words:
        words.append("no change in the releases run")
    if trace.unobserved:
        words.append(f"not observed in {', '.join(trace.unobserved)}")
    return " · ".join(words)


def _heading(line: LineHistory) -> str:
    return (
        f"{line.line}: {len(line.releases)} releases ({', '.join(_versions(line))}), "
        f"{len(line.traces)} behaviours"
    )


def as_text(lines: list[LineHistory]) -> str:
    out = []
    for line in lines:
        out.append(_heading(line))
        for trace in line.traces:
            out.append(
                f"  {trace.signature}  [{', '.join(trace.modes)}]  {trace.family}  "
                f"{len(trace.cases)} cases: {', '.join(trace.cases)}"
            )
            out.append(
                f"    in {', '.join(version_ranges(trace.versions, _versions(line)))}; "
                f"{changed_in(trace)}"
            )
    return "\n".join(out) + "\n"


def as_markdown(lines: list[LineHistory]) -> str:
    out = ["# Behaviour history", ""]
    for line in lines:
        out += [
            f"## {_heading(line)}",
            "",
            "| behaviour | modes | cases | releases | changed |",
            "|---|---|---|---|---|",
        ]
        for trace in line.traces:
            cases = "<br>".join(f"`{case}`" for case in trace.cases)
            out.append(
                f"| {trace.signature} ({trace.family}) | {', '.join(trace.modes)} | {cases} "
                f"| {', '.join(version_ranges(trace.versions, _versions(line)))} "
                f"| {changed_in(trace)} |"
            )
        out.append("")
    return "\n".join(out)


def as_json(lines: list[LineHistory]) -> dict[str, Any]:
    return {
        "lines": [
            {
                "line": line.line,
                "releases": [
                    {
                        "version": r.version,
                        "adapter": r.adapter,
                        "reported_version": r.reported_version,
                        "source": r.source,
                    }
                    for r in line.releases
                ],
                "behaviours": [
                    {
                        "family": t.family,
                        "signature": t.signature,
                        "modes": list(t.modes),
                        "cases": list(t.cases),
                        "releases": list(t.versions),
                        "changes": [
                            {"release": c.version, "change": c.kind, "now": list(c.now)}
                            for c in t.changes
                        ],
                        "unobserved": list(t.unobserved),
                    }
                    for t in line.traces
                ],
            }
            for line in lines
        ]
    }
