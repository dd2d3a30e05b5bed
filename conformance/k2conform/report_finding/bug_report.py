"""``k2conform report-finding CASE --adapter NAME``: a Markdown bug report for a parser's
maintainers.

The report has what a maintainer needs and nothing of k2conform's internals: the raw model
output (markers made visible, and the exact JSON string), the request, the delivery (every
delta), what the parser returned, what the spec expects, what the other parsers return on
the same delivery, and a standalone reproduction script that imports only the parser's own
package.  The script comes from the adapter (``Adapter.repro_script(request, deltas, mode,
expected=..., case_id=...)``, see docs/adapters.md); the command runs it once in this
interpreter's environment, with ``k2conform`` made unimportable, reads the result it prints,
judges it with k2conform's comparison, and says in the report whether it reproduces.

Exit status: 0 the report was written and the script reproduces the finding; 1 written, but
the script does not reproduce it (or was not run, ``--no-run``); 2 usage error (unknown case,
an adapter that is not available here, a cell that is not a finding), or the report was written
but the adapter has no reproduction template ("no script": nothing ran, so nothing failed to
reproduce).
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from k2conform.delivery import modes
from k2conform.judge.compare import compare_results
from k2conform.case.corpus import CompletionCase
from k2conform.adapter.harness import execute
from k2conform.markers import visible
from k2conform.model import Result, RunResults, ToolCall
from k2conform.adapter.registry import create_adapter, default_adapter_names, load
from k2conform.errors import UsageError

#: Fields a script that checks the final message can show (stream invariants need the stream).
MESSAGE_FIELDS = ("count", "name", "arguments", "id", "content", "reasoning")
SCRIPT_TIMEOUT = 300.0
_BLOCK = (
    "import runpy, sys\n"
    "for name in ('k2conform', 'k2conform_adapters'):\n"
    "    sys.modules[name] = None  # the reproduction must not need k2conform\n"
    "sys.argv = [{path!r}]\n"
    "runpy.run_path({path!r}, run_name='__main__')\n"
)


def script_for(
    adapter: Any, case: CompletionCase, variant: modes.Delivery, expected: dict | None
) -> str | None:
    method = adapter.repro_script
    context = {"expected": expected, "case_id": case.id}
    parameters = inspect.signature(method).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        context = {k: v for k, v in context.items() if k in parameters}
    return method(
        case.request,
        list(variant.deltas),
        "whole" if not variant.streaming else variant.mode,
        **context,
    )


def run_script(script: str, timeout: float = SCRIPT_TIMEOUT) -> dict[str, Any]:
    """Run a reproduction script in this interpreter's environment, k2conform unimportable."""
    with tempfile.TemporaryDirectory(prefix="k2conform-repro-") as tmp:
        path = Path(tmp) / "repro.py"
        path.write_text(script, encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-c", _BLOCK.format(path=str(path))],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as expired:
            return {
                "status": None,
                "timeout": True,
                "stdout": expired.stdout or "",
                "stderr": expired.stderr or "",
                "observed": None,
            }
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    observed = None
    if lines:
        try:
            observed = json.loads(lines[-1])
        except json.JSONDecodeError:
            observed = None
    return {
        "status": done.returncode,
        "timeout": False,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "observed": observed,
    }


def reproduces(case: CompletionCase, cell: Any, run: dict[str, Any]) -> tuple[bool, str]:
    """Whether the script's own result shows the finding (judged by k2conform's comparison)."""
    observed = run.get("observed")
    if cell.outcome == "timeout":
        return bool(run.get("timeout")), "the script timed out too" if run.get(
            "timeout"
        ) else "the script returned"
    if not isinstance(observed, dict):
        return False, f"the script printed no result (exit status {run.get('status')})"
    if cell.outcome == "crash":
        if "crash" in observed:
            return True, f"the parser raises on its own: {observed['crash']}"
        return False, "the parser did not raise in the script"
    if "crash" in observed:
        return False, f"the script's parser raised instead: {observed['crash']}"
    result = Result(
        content=observed.get("content"),
        reasoning=observed.get("reasoning"),
        tool_calls=tuple(
            ToolCall(name=c.get("name") or "", arguments=c.get("arguments") or "", id=c.get("id"))
            for c in observed.get("tool_calls") or ()
        ),
    )
    script_fields = (
        {d.field for d in compare_results(case.expected.as_result(), result)}
        if case.expected
        else set()
    )
    cell_fields = {f for f in cell.fields if f in MESSAGE_FIELDS}
    if not cell_fields:
        return False, (
            "the finding is a stream invariant ("
            + ", ".join(cell.fields)
            + "), which a script checking the final message cannot show"
        )
    if script_fields == cell_fields:
        return (
            True,
            "the script's result differs from the expectation in the same fields "
            f"({', '.join(sorted(cell_fields))})",
        )
    return False, (
        f"the script's result differs in {sorted(script_fields) or 'nothing'}, "
        f"the cell in {sorted(cell_fields)}"
    )


def other_results(
    args: argparse.Namespace, target: str, case: CompletionCase, variant: modes.Delivery
) -> list[dict[str, Any]]:
    rows = []
    names = args.compare or [n for n in default_adapter_names() if n != target]
    for name in names:
        other = create_adapter(name)
        availability = load(other)
        if availability.status != "ok":
            rows.append(
                {
                    "adapter": other.name,
                    "version": other.version(),
                    "outcome": availability.status,
                    "result": None,
                    "source": "not installed here",
                }
            )
            continue
        result = execute(other, case.request, variant)
        rows.append(
            {
                "adapter": other.name,
                "version": other.version(),
                "outcome": result.outcome,
                "result": result,
                "source": "run now, same delivery",
            }
        )
    if args.results:
        try:
            data = RunResults.from_json(json.loads(args.results.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UsageError(
                f"{args.results} is not a readable results document: {error}"
            ) from None
        versions = {a.name: a.version for a in data.adapters}
        shown = {r["adapter"] for r in rows if r["result"] is not None} | {target}
        for cell in data.cells:
            if cell.case == case.id and cell.delivery == variant.mode and cell.adapter not in shown:
                rows.append(
                    {
                        "adapter": cell.adapter,
                        "version": versions.get(cell.adapter),
                        "outcome": cell.outcome,
                        "result": cell.observed,
                        "source": f"{args.results.name} ({cell.variant or variant.mode})",
                    }
                )
    return rows


# -- the Markdown ----------------------------------------------------------------------------


def _fence(text: str, lang: str = "") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _message(result: Result | None) -> dict[str, Any] | None:
    if result is None:
        return None
    data = result.to_json()
    data.pop("meta", None)
    if data.get("outcome") == "ok":
        data.pop("outcome")
        data.pop("error")
    return data


def _summary(result: Result | None, outcome: str) -> str:
    if result is None:
        return outcome
    if result.outcome != "ok":
        return f"{result.outcome}: {(result.error or '')[:120]}"
    calls = "; ".join(f"`{c.name}` `{c.arguments[:60]}`" for c in result.tool_calls) or "no calls"
    content = json.dumps(result.content, ensure_ascii=False)[:60]
    return f"{calls}; content {visible(content)}".replace("|", "\\|")


def markdown(
    case: CompletionCase,
    adapter: Any,
    cell: Any,
    variant: modes.Delivery,
    others: Sequence[dict[str, Any]],
    script: str | None,
    script_path: Path | None,
    run: dict[str, Any] | None,
    verdict: tuple[bool, str] | None,
) -> str:
    version = adapter.version()
    package = adapter.package or "k2conform"
    what = cell.outcome + (f" ({', '.join(cell.fields)})" if cell.fields else "")
    out = [
        f"# {package} {version or ''}: {case.description or case.id}".rstrip(),
        "",
        f"* **Parser**: `{package}=={version}` — {adapter.description}",
        f"* **Case**: `{case.id}` from the k2conform corpus of Kimi K2 tool-calling cases"
        f" (tags: {', '.join(f'`{t}`' for t in case.tags) or '-'})",
        f"* **Source**: {case.source or '-'}",
        f"* **Finding**: {what} in delivery `{cell.delivery}`"
        + (
            f" (variant `{cell.variant}`)" if cell.variant and cell.variant != cell.delivery else ""
        ),
        f"* **Reproduction**: {_reproduction_state(verdict)}"
        + (f" — {verdict[1]}" if verdict else ""),
        "",
        "## Model output",
        "",
        "Markers shown as `⟦SB⟧` section begin, `⟦TB⟧` call begin, `⟦AB⟧` argument begin, `⟦TE⟧` "
        "call end, "
        "`⟦SE⟧` section end; `↵` newline, `»` tab, `␣` trailing space.",
        "",
        _fence(visible(case.model_output), "text"),
        "",
        "Exactly, as a JSON string:",
        "",
        _fence(json.dumps(case.model_output, ensure_ascii=False), "json"),
        "",
        "## Request",
        "",
        _fence(_json(case.request.to_json()), "json"),
        "",
        "## Delivery",
        "",
        *_delivery_lines(variant),
        "",
        "## What the parser returned",
        "",
        _fence(_json(_message(cell.observed) if cell.observed else None), "json"),
        "",
        "## What the spec expects",
        "",
        _fence(_json(case.expected.to_json() if case.expected else None), "json"),
        "",
    ]
    if cell.diffs:
        out.append("Differences:")
        out.append("")
        for diff in cell.diffs:
            where = f" (call {diff.call})" if diff.call is not None else ""
            out.append(
                f"* `{diff.field}`{where}, compared as {diff.how}: expected "
                f"`{visible(json.dumps(diff.expected, ensure_ascii=False))}`, got "
                f"`{visible(json.dumps(diff.observed, ensure_ascii=False))}`"
            )
        out.append("")
    out += [
        "## What other parsers return",
        "",
        "| parser | version | result | source |",
        "|---|---|---|---|",
    ]
    for row in others:
        out.append(
            f"| {row['adapter']} | {row['version'] or '-'} | "
            f"{_summary(row['result'], row['outcome'])} | {row['source']} |"
        )
    out += ["", "## Reproduction", ""]
    if script is None:
        out.append(f"The `{adapter.name}` adapter has no reproduction template (`repro_script`).")
    else:
        out += _reproduction_lines(package, version, script, script_path, run, verdict)
    out.append("")
    return "\n".join(out)


def _reproduction_state(verdict: tuple[bool, str] | None) -> str:
    if verdict is None:
        return "not run"
    return "reproduced on its own" if verdict[0] else "NOT reproduced on its own"


def _delivery_lines(variant: modes.Delivery) -> list[str]:
    """The delivery section: one-shot, or the deltas as fed (markers visible, ids beside)."""
    if not variant.streaming:
        return ["The complete output in one call of the one-shot (non-streaming) API."]
    rows = [
        f"`{variant.label}`: {len(variant.deltas)} deltas, fed in order to the streaming API "
        "(the last one carries the finish reason).",
        "",
        "| # | delta (markers visible) | token ids |",
        "|---|---|---|",
    ]
    for n, delta in enumerate(variant.deltas[:300]):
        shown = (
            visible(json.dumps(delta.text, ensure_ascii=False))
            .replace("|", "\\|")
            .replace("\n", " ")
        )
        rows.append(f"| {n} | `{shown}` | {' '.join(map(str, delta.token_ids)) or '-'} |")
    if len(variant.deltas) > 300:
        rows.append(f"| … | {len(variant.deltas) - 300} more | |")
    return rows


def _reproduction_lines(
    package: str,
    version: str | None,
    script: str,
    script_path: Path | None,
    run: dict[str, Any] | None,
    verdict: tuple[bool, str] | None,
) -> list[str]:
    """The standalone script, and what it printed when it ran once on its own."""
    out = [
        f"A standalone script; it imports only `{package}` and the standard library"
        + (f" (saved as `{script_path.name}`)" if script_path else "")
        + ". Exit status 1 means the bug reproduces.",
        "",
        _fence(script, "python"),
        "",
    ]
    if run is None:
        return out
    status = "timed out" if run.get("timeout") else f"exit status {run.get('status')}"
    out.append(
        f"Run once with `{package}=={version}` (k2conform not importable): {status}; "
        + ("**reproduced**" if verdict and verdict[0] else "**not reproduced**")
        + (f": {verdict[1]}." if verdict else ".")
    )
    tail = "\n".join(run.get("stdout", "").strip().splitlines()[-12:])
    if tail:
        out += ["", _fence(tail, "text")]
    if run.get("stderr") and (not verdict or not verdict[0]):
        out += [
            "",
            "stderr:",
            "",
            _fence("\n".join(run["stderr"].strip().splitlines()[-15:]), "text"),
        ]
    return out
