"""``k2conform report-finding``: Markdown reports for findings of the shipped baseline, each
with a standalone reproduction script that reproduces the finding on its own (run here once
by the command with k2conform unimportable, its own verdict shown in the report)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from k2conform.adapter.registry import create_adapter, load
from k2conform.report_finding.bug_report import MESSAGE_FIELDS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # each runs every installed adapter and a script, 20-30 s


def _available(name: str) -> bool:
    return load(create_adapter(name)).status == "ok"


def _candidates(adapter: str) -> list[tuple[str, str]]:
    """(case, mode) pairs from baseline.json whose fields a message-level script can show."""
    entries = json.loads((ROOT / "baseline.json").read_text())["entries"]
    picked: list[tuple[str, str]] = []
    for entry in entries:
        if entry["adapter"] != adapter or entry["outcome"] not in ("differs", "crash"):
            continue
        if not set(entry["fields"]) <= set(MESSAGE_FIELDS):
            continue
        for mode in ("whole", "stream-token"):
            if "*" in entry["deliveries"] or mode in entry["deliveries"]:
                picked += [(case, mode) for case in entry["cases"] if "*" not in case][:2]
    return picked


@pytest.fixture(scope="module")
def findings(corpus):
    """Per adapter, the baseline's findings that are findings of the current corpus too."""
    from k2conform.run.cell import run_cell

    cases = {c.id: c for c in corpus.completions}
    found: dict[str, list[tuple[str, str]]] = {}
    for name in ("vllm", "sglang"):
        adapter = create_adapter(name)
        availability = load(adapter)
        if availability.status != "ok":
            continue
        found[name] = []
        for case_id, mode in _candidates(name):
            if case_id not in cases:
                continue
            cell = run_cell(adapter, cases[case_id], mode, availability=availability)
            if cell.outcome.finding and set(cell.fields) <= set(MESSAGE_FIELDS):
                found[name].append((case_id, mode))
            if len(found[name]) == 2 and any(m == "stream-token" for _, m in found[name]):
                break
            if len(found[name]) >= 3:
                break
    return found


FINDINGS = [("vllm", 0), ("vllm", 1), ("sglang", 0), ("sglang", 1)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """``report(adapter, case, mode)``: the command's report of that finding, made once for
    the module (a report runs every installed adapter and the script: 20-30 s), so the
    streamed-deltas test reads the report a reproduction test made of the same cell."""
    folder = tmp_path_factory.mktemp("reports")
    made: dict[tuple[str, str, str], tuple[subprocess.CompletedProcess, Path]] = {}

    def make(adapter: str, case: str, mode: str) -> tuple[subprocess.CompletedProcess, Path]:
        if (adapter, case, mode) not in made:
            made[adapter, case, mode] = _report(folder, adapter, case, mode)
        return made[adapter, case, mode]

    return make


def _report(
    tmp_path: Path, adapter: str, case: str, mode: str, *extra: str
) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / f"{adapter}-{case}-{mode}.md"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "report-finding",
            case,
            "--adapter",
            adapter,
            "--delivery",
            mode,
            "--out",
            str(out),
            "--compare",
            "reference",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return completed, out


def test_at_least_three_findings_are_picked(findings):
    if not findings:
        pytest.skip("neither vllm nor sglang is installed here")
    assert sum(len(v) for v in findings.values()) >= 3


@pytest.mark.parametrize(("adapter", "index"), FINDINGS, ids=[f"{a}-{i}" for a, i in FINDINGS])
def test_the_report_and_its_script_reproduce_a_baselined_finding(findings, report, adapter, index):
    if adapter not in findings:
        pytest.skip(f"{adapter} is not installed here")
    case, mode = findings[adapter][index]
    completed, out = report(adapter, case, mode)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "REPRODUCED" in completed.stderr
    report = out.read_text()
    for heading in (
        "## Model output",
        "## Request",
        "## Delivery",
        "## What the parser returned",
        "## What the spec expects",
        "## What other parsers return",
        "## Reproduction",
    ):
        assert heading in report
    assert "reproduced on its own" in report and "**reproduced**" in report
    assert "| reference |" in report
    assert "⟦" in report  # markers made visible
    script = out.with_suffix(".py")
    text = script.read_text()
    assert "k2conform" not in text  # the script uses only the parser's own package
    assert (
        f"```python\n{text.rstrip()}\n```" in report
    )  # the report shows exactly the script that ran
    # The command ran it on its own, as a maintainer does (as __main__, k2conform not even
    # importable): the script's own verdict, exit 1 and its REPRODUCED line, is in the report.
    # (tests/test_repro_scripts.py runs each driver's scripts as `python repro.py`.)
    assert "(k2conform not importable): exit status 1; **reproduced**" in report
    ran = report.split("(k2conform not importable)", 1)[1]
    assert re.search(r"```text\n(.*\n)*REPRODUCED", ran), ran[:2000]


def test_a_streamed_finding_lists_its_deltas(findings, report):
    streamed = [(a, c) for a, pairs in findings.items() for c, m in pairs if m == "stream-token"]
    if not streamed:
        pytest.skip("no token-stream finding of vllm/sglang here")
    adapter, case = streamed[0]
    completed, out = report(adapter, case, "stream-token")
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = out.read_text()
    assert "| # | delta (markers visible) | token ids |" in report
    assert '| 0 | `"' in report and " | 1635" in report  # deltas with their token ids


def test_a_crash_is_reproduced_as_a_crash(tmp_path):
    if not _available("vllm"):
        pytest.skip("vllm is not installed here")
    completed, out = _report(tmp_path, "vllm", "y_json_deep_nesting_1000_levels", "whole")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "the parser raises on its own" in out.read_text()


def test_a_cell_that_agrees_is_not_a_finding(tmp_path):
    completed, _ = _report(tmp_path, "reference", "y_spec_single_call", "whole")
    assert completed.returncode == 2
    assert "not a finding" in completed.stderr


def test_usage_errors(tmp_path):
    completed, _ = _report(tmp_path, "reference", "no_such_case", "whole")
    assert completed.returncode == 2 and "no completion case" in completed.stderr


def test_a_plugin_script_without_context_parameters(tmp_path, corpus):
    """An adapter whose repro_script takes only (request, deltas, mode) still gets a report."""
    from k2conform.report_finding.bug_report import reproduces, run_script, script_for
    from k2conform.delivery.modes import Delivery
    from k2conform.model import Delta
    from k2conform.model import Cell, CellOutcome, FieldDiff

    class Minimal:
        def repro_script(self, request, deltas, mode):
            return (
                "import json\n"
                "print(json.dumps({'content': 'x', 'reasoning': None, 'tool_calls': []}))\n"
            )

    case = next(c for c in corpus.completions if c.id == "y_spec_single_call")
    script = script_for(Minimal(), case, Delivery("whole", (Delta(case.model_output),)), None)
    run = run_script(script)
    cell = Cell(
        case.id,
        "minimal",
        "whole",
        CellOutcome.DIFFERS,
        diffs=(FieldDiff("count", 1, 0, "count"), FieldDiff("content", None, "x", "text")),
    )
    assert reproduces(case, cell, run)[0]
    blocked = run_script("import k2conform\n")
    assert blocked["status"] == 1
    halted = "ModuleNotFoundError: import of k2conform halted"
    assert halted in blocked["stderr"], blocked["stderr"]
    third_party = run_script("import pytest\n")  # site-packages, where the parser lives, stay
    assert third_party["status"] == 0, third_party["stderr"]


def test_an_adapter_without_a_reproduction_template_is_no_script(tmp_path, monkeypatch, capsys):
    """Nothing ran, so nothing failed to reproduce: the report is written and says so, and the
    command exits 2 with one NO SCRIPT line (not 1, "not reproduced")."""
    if not _available("vllm"):
        pytest.skip("vllm is not installed here")
    from k2conform.adapter.contract import Adapter
    from k2conform.cli import main
    from k2conform_adapters.vllm_parser import VllmAdapter

    # the contract's default: no template
    monkeypatch.setattr(VllmAdapter, "repro_script", Adapter.repro_script)
    out = tmp_path / "report.md"
    argv = ["report-finding", "y_json_deep_nesting_1000_levels", "--adapter", "vllm"]
    status = main([*argv, "--delivery", "whole", "--out", str(out)])
    assert status == 2
    assert "has no reproduction template" in out.read_text()
    assert not out.with_suffix(".py").exists()
    assert "NO SCRIPT: the vllm adapter has no reproduction template" in capsys.readouterr().err
