"""The test kit for parser authors, proven on a downstream project built in a temporary
directory (tests/downstream.py) and run by its own pytest."""

from __future__ import annotations

import re
import textwrap

import pytest

from k2conform.adapter.contract import Adapter
from k2conform.run.cell import run_cell
from k2conform.testkit.kit import BaselinedDeviation, ConformanceFailure, ConformanceKit, describe
from k2conform.gate.baseline import BaselineEntry

from downstream import MODES, downstream_project, node_outcomes, run_pytest


@pytest.fixture(scope="module")
def downstream_run(tmp_path_factory):
    baseline = {
        "entries": [
            {
                "adapter": "toy",
                "outcome": "differs",
                "fields": ["content", "reasoning"],
                "deliveries": ["*"],
                "cases": ["y_split_marker_think_end"],
                "reason": "toyparser has no reasoning parser: the <think> block stays in content",
            }
        ]
    }
    project = downstream_project(tmp_path_factory.mktemp("downstream"), baseline)
    return project, run_pytest(project)


def test_the_downstream_run_has_one_test_per_case_and_mode(downstream_run):
    project, completed = downstream_run
    outcomes = node_outcomes(completed.stdout)
    assert outcomes.get("test_own.py::test_the_authors_own_test") == "PASSED"
    cells = {k for k in outcomes if k.startswith("conftest.py::")}
    assert "conftest.py::y_spec_single_call[whole]" in cells
    assert "conftest.py::y_spec_single_call[stream-token]" in cells
    assert len(cells) % len(MODES) == 0 and len(cells) >= 8


def test_passing_cells_pass(downstream_run):
    _, completed = downstream_run
    outcomes = node_outcomes(completed.stdout)
    for mode in MODES:
        assert outcomes[f"conftest.py::y_spec_single_call[{mode}]"] == "PASSED"
        assert outcomes[f"conftest.py::y_spec_parallel_calls[{mode}]"] == "PASSED"


def test_a_baselined_deviation_is_a_strict_xfail(downstream_run):
    _, completed = downstream_run
    outcomes = node_outcomes(completed.stdout)
    for mode in MODES:
        assert outcomes[f"conftest.py::y_split_marker_think_end[{mode}]"] == "XFAIL"
    assert "toyparser has no reasoning parser" in completed.stdout


def test_a_new_deviation_fails_with_a_readable_diff(downstream_run):
    _, completed = downstream_run
    outcomes = node_outcomes(completed.stdout)
    failed = [k for k, v in outcomes.items() if v == "FAILED"]
    assert failed, completed.stdout[-3000:]
    assert completed.returncode == 1
    # The failure report: the cell, the model output with markers visible, each field.
    assert (
        "toy on y_marker_in_json_string_call_end [whole]: differs (arguments)" in completed.stdout
    )
    assert "model output (markers visible):" in completed.stdout
    assert "⟦SB⟧" in completed.stdout
    assert re.search(r"- \w+.* differs \((json|bytes|text|count|whitespace)\):", completed.stdout)
    assert "    expected: " in completed.stdout and "    observed: " in completed.stdout
    assert "Traceback" not in completed.stdout


def test_a_baselined_cell_that_passes_is_a_strict_xpass_failure(tmp_path):
    baseline = {
        "entries": [
            {
                "adapter": "toy",
                "outcome": "differs",
                "fields": ["content"],
                "deliveries": ["whole"],
                "cases": ["y_spec_single_call"],
                "reason": "stale: the parser was fixed",
            }
        ]
    }
    project = downstream_project(tmp_path, baseline)
    completed = run_pytest(project, "conftest.py::y_spec_single_call[whole]")
    assert completed.returncode == 1
    assert "XPASS(strict)" in completed.stdout


def test_a_parametrized_function_in_a_test_module(tmp_path):
    """The same kit in a test module: ``test_k2conform[CASE[MODE]]``."""
    project = downstream_project(tmp_path, {"entries": []})
    (project / "conftest.py").unlink()
    (project / "test_k2.py").write_text(
        textwrap.dedent("""
        from k2conform.testkit import conformance_tests
        from toy_adapter import ToyAdapter

        conformance_tests(globals(), adapter=ToyAdapter(), cases=["y_spec_single_call"],
                          modes=["whole"])
    """)
    )
    completed = run_pytest(project)
    assert "PASSED test_k2.py::test_k2conform[y_spec_single_call[whole]]" in completed.stdout
    assert completed.returncode == 0, completed.stdout[-2000:]


def test_the_kit_judges_exactly_as_the_matrix(corpus):
    """Same cell as run_cell: the kit adds no comparison of its own."""
    from k2conform.adapter.registry import Availability
    from k2conform_adapters.reference import ReferenceAdapter

    adapter = ReferenceAdapter()
    kit = ConformanceKit(adapter, cases=["y_spec_single_call"], modes=["stream-char"])
    case = next(c for c in corpus.completions if c.id == "y_spec_single_call")
    direct = run_cell(adapter, case, "stream-char", availability=Availability("ok"))
    assert kit.run("y_spec_single_call", "stream-char").to_json() | {
        "seconds": 0
    } == direct.to_json() | {"seconds": 0}


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
    exact = BaselineEntry(
        "wrong", "differs", ("count", "content"), ("whole",), ("y_spec_single_call",)
    )
    kit = ConformanceKit(Wrong(), baseline=[exact], cases=["y_spec_single_call"], modes=["whole"])
    with pytest.raises(BaselinedDeviation):
        kit.check("y_spec_single_call", "whole")
    cell = kit.run("y_spec_single_call", "whole")
    assert "wrong on y_spec_single_call [whole]: differs (count, content)" in describe(
        next(c for c in corpus.completions if c.id == "y_spec_single_call"), cell
    )


@pytest.mark.slow
def test_the_kit_distributes_under_xdist_with_the_serial_verdicts(downstream_run, tmp_path):
    """``pytest -n 2`` in the author's project: the same tests, the same verdicts."""
    project, serial = downstream_run
    parallel = run_pytest(project, "-n", "2")
    assert "2 workers" in parallel.stdout or "created: 2/2 workers" in parallel.stdout, (
        parallel.stdout[-2000:]
    )
    assert node_outcomes(parallel.stdout) == node_outcomes(serial.stdout)
    assert parallel.returncode == serial.returncode == 1


class _SlowOnce(Adapter):
    """A reference adapter whose first parse hangs past any small deadline, the next ones not."""

    name = "slow"

    def __init__(self, hang_every_time: bool):
        from k2conform_adapters.reference import ReferenceAdapter

        self.inner, self.hang_every_time, self.calls = ReferenceAdapter(), hang_every_time, 0

    def version(self):
        return "1"

    def parse_stream(self, request, deltas):
        return self.inner.parse_stream(request, deltas)

    def parse_whole(self, request, output):
        import time

        self.calls += 1
        if self.hang_every_time or self.calls == 1:
            time.sleep(3600)
        return self.inner.parse_whole(request, output)


def test_a_hanging_parser_is_a_timeout_failure_in_the_kit_not_a_hung_pytest():
    kit = ConformanceKit(
        _SlowOnce(hang_every_time=True), cases=["y_spec_single_call"], modes=["whole"], timeout=0.05
    )
    with pytest.raises(
        ConformanceFailure, match=r"timeout[\s\S]*no result within 0.05 s, nor within 0.5 s"
    ):
        kit.check("y_spec_single_call", "whole")


def test_a_cell_slow_only_the_first_time_is_judged_on_its_retry_and_recorded_as_slow():
    kit = ConformanceKit(
        _SlowOnce(hang_every_time=False),
        cases=["y_spec_single_call"],
        modes=["whole"],
        timeout=0.05,
    )
    cell = kit.check("y_spec_single_call", "whole")
    assert cell.outcome == "agree"
    slow = cell.observed.meta["slow"]
    assert slow["deadline"] == 0.05 and slow["first_try_seconds"] >= 0.05


def test_a_deadline_must_be_positive():
    with pytest.raises(ValueError, match="more than 0 seconds"):
        ConformanceKit(
            _SlowOnce(hang_every_time=False),
            cases=["y_spec_single_call"],
            modes=["whole"],
            timeout=0,
        )
