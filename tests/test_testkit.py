"""The test kit for parser authors, proven on a downstream project built in a temporary
directory: its own toy parser, its own conftest.py (three lines of k2conform), its own
baseline, and its own pytest run (a subprocess, as the author runs it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from k2conform.runner import RunConfig, run_cell
from k2conform.testkit import BaselinedDeviation, ConformanceFailure, ConformanceKit, describe
from k2conform.baseline import BaselineEntry

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "k2conform-example-adapter" / "k2conform_example_adapter"

#: The author's parser: the example plugin's tiny parser, copied into their repository.
#: It buffers streams, knows nothing of <think> and does not strip argument whitespace
#: rules beyond .strip(): the corpus finds exactly that.
ADAPTER = '''
from typing import Sequence
from k2conform.adapter import Adapter, call_parser
from k2conform.model import Delta, Request, Result, StreamEvent, ToolCall, ToolCallDelta
import toyparser


class ToyAdapter(Adapter):
    name = "toy"
    description = "the author's parser"

    def parse_whole(self, request: Request, output: Delta) -> Result:
        content, calls = call_parser(toyparser.parse, output.text)
        return Result(content=content, tool_calls=tuple(
            ToolCall(name=c["name"], arguments=c["arguments"], id=c["id"]) for c in calls))

    def parse_stream(self, request: Request, deltas: Sequence[Delta]) -> list[StreamEvent]:
        parser = call_parser(toyparser.StreamingParser)
        for delta in deltas:
            call_parser(parser.feed, delta.text)
        content, calls = call_parser(parser.finish)
        return [StreamEvent(content=content, tool_calls=tuple(
            ToolCallDelta(index=i, id=c["id"], name=c["name"], arguments=c["arguments"])
            for i, c in enumerate(calls)))]
'''

CASES = ["y_spec_single_call", "y_spec_parallel_calls", "y_split_marker_think_end", "y_marker_in_json_string_call_end"]
MODES = ["whole", "stream-token"]


def _downstream(tmp_path: Path, baseline: dict) -> Path:
    project = tmp_path / "myparser"
    project.mkdir()
    (project / "toyparser.py").write_text((EXAMPLE / "tinyparser.py").read_text())
    (project / "toy_adapter.py").write_text(ADAPTER)
    (project / "k2-baseline.json").write_text(json.dumps(baseline))
    (project / "conftest.py").write_text(textwrap.dedent(f"""
        from k2conform.testkit import conformance_tests
        from toy_adapter import ToyAdapter

        conformance_tests(globals(), adapter=ToyAdapter(), baseline="k2-baseline.json",
                          cases={CASES!r}, modes={MODES!r})
    """))
    (project / "test_own.py").write_text("def test_the_authors_own_test():\n    assert True\n")
    return project


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(project), *args],
        cwd=project, capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="module")
def downstream_run(tmp_path_factory):
    baseline = {"entries": [{
        "adapter": "toy", "outcome": "differs", "fields": ["content", "reasoning"],
        "deliveries": ["*"], "cases": ["y_split_marker_think_end"],
        "reason": "toyparser has no reasoning parser: the <think> block stays in content",
    }]}
    project = _downstream(tmp_path_factory.mktemp("downstream"), baseline)
    return project, _pytest(project)


def _outcomes(output: str) -> dict[str, str]:
    """node id → PASSED/FAILED/XFAIL/... from -rA's short summary."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"^(PASSED|FAILED|XFAIL|XPASS|SKIPPED|ERROR) (\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


def test_the_downstream_run_has_one_test_per_case_and_mode(downstream_run):
    project, completed = downstream_run
    outcomes = _outcomes(completed.stdout)
    assert outcomes.get("test_own.py::test_the_authors_own_test") == "PASSED"
    cells = {k for k in outcomes if k.startswith("conftest.py::")}
    assert "conftest.py::y_spec_single_call[whole]" in cells
    assert "conftest.py::y_spec_single_call[stream-token]" in cells
    assert len(cells) % len(MODES) == 0 and len(cells) >= 8


def test_passing_cells_pass(downstream_run):
    _, completed = downstream_run
    outcomes = _outcomes(completed.stdout)
    for mode in MODES:
        assert outcomes[f"conftest.py::y_spec_single_call[{mode}]"] == "PASSED"
        assert outcomes[f"conftest.py::y_spec_parallel_calls[{mode}]"] == "PASSED"


def test_a_baselined_deviation_is_a_strict_xfail(downstream_run):
    _, completed = downstream_run
    outcomes = _outcomes(completed.stdout)
    for mode in MODES:
        assert outcomes[f"conftest.py::y_split_marker_think_end[{mode}]"] == "XFAIL"
    assert "toyparser has no reasoning parser" in completed.stdout


def test_a_new_deviation_fails_with_a_readable_diff(downstream_run):
    _, completed = downstream_run
    outcomes = _outcomes(completed.stdout)
    failed = [k for k, v in outcomes.items() if v == "FAILED"]
    assert failed, completed.stdout[-3000:]
    assert completed.returncode == 1
    # The failure report: the cell, the model output with markers visible, each field.
    assert "toy on y_marker_in_json_string_call_end [whole]: differs (arguments)" in completed.stdout
    assert "model output (markers visible):" in completed.stdout
    assert "⟦SB⟧" in completed.stdout
    assert re.search(r"- \w+.* differs \((json|bytes|text|count|whitespace)\):", completed.stdout)
    assert "    expected: " in completed.stdout and "    observed: " in completed.stdout
    assert "Traceback" not in completed.stdout


def test_a_baselined_cell_that_passes_is_a_strict_xpass_failure(tmp_path):
    baseline = {"entries": [{
        "adapter": "toy", "outcome": "differs", "fields": ["content"], "deliveries": ["whole"],
        "cases": ["y_spec_single_call"], "reason": "stale: the parser was fixed",
    }]}
    project = _downstream(tmp_path, baseline)
    completed = _pytest(project, "conftest.py::y_spec_single_call[whole]")
    assert completed.returncode == 1
    assert "XPASS(strict)" in completed.stdout


def test_a_parametrized_function_in_a_test_module(tmp_path):
    """The same kit in a test module: ``test_k2conform[CASE[MODE]]``."""
    project = _downstream(tmp_path, {"entries": []})
    (project / "conftest.py").unlink()
    (project / "test_k2.py").write_text(textwrap.dedent("""
        from k2conform.testkit import conformance_tests
        from toy_adapter import ToyAdapter

        conformance_tests(globals(), adapter=ToyAdapter(), cases=["y_spec_single_call"], modes=["whole"])
    """))
    completed = _pytest(project)
    assert "PASSED test_k2.py::test_k2conform[y_spec_single_call[whole]]" in completed.stdout
    assert completed.returncode == 0, completed.stdout[-2000:]


def test_the_kit_judges_exactly_as_the_matrix(corpus):
    """Same cell as run_cell: the kit adds no comparison of its own."""
    from k2conform.registry import Availability
    from k2conform.tokenizer import load_tokenizer
    from k2conform_adapters.reference import ReferenceAdapter

    adapter = ReferenceAdapter()
    kit = ConformanceKit(adapter, cases=["y_spec_single_call"], modes=["stream-char"])
    case = next(c for c in corpus.completions if c.id == "y_spec_single_call")
    config = RunConfig(kit.corpus, ("reference",), ("stream-char",))
    direct = run_cell(adapter, Availability("ok"), case, "stream-char", load_tokenizer(), config)
    assert kit.run("y_spec_single_call", "stream-char").to_json() | {"seconds": 0} == direct.to_json() | {"seconds": 0}


def test_a_baseline_entry_for_another_failure_does_not_hide_it(corpus):
    """Listed as one failure, failing as another: a real failure, not an xfail."""
    from k2conform_adapters.reference import ReferenceAdapter

    class Wrong(ReferenceAdapter):
        name = "wrong"

        def parse_whole(self, request, output):
            return super().parse_whole(request, output).__class__(content="x")

    entry = BaselineEntry("wrong", "differs", ("content",), ("whole",), ("y_spec_single_call",))
    kit = ConformanceKit(Wrong(), baseline=[entry], cases=["y_spec_single_call"], modes=["whole"])
    with pytest.raises(ConformanceFailure, match="the baseline lists this cell as differs content"):
        kit.check("y_spec_single_call", "whole")
    exact = BaselineEntry("wrong", "differs", ("count", "content"), ("whole",), ("y_spec_single_call",))
    kit = ConformanceKit(Wrong(), baseline=[exact], cases=["y_spec_single_call"], modes=["whole"])
    with pytest.raises(BaselinedDeviation):
        kit.check("y_spec_single_call", "whole")
    cell = kit.run("y_spec_single_call", "whole")
    assert "wrong on y_spec_single_call [whole]: differs (count, content)" in describe(
        next(c for c in corpus.completions if c.id == "y_spec_single_call"), cell)
