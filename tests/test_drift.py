"""Drift safety: glue that no longer fits the installed release is an adapter-error,
reported once per adapter and never counted as a parser finding; a bug in k2conform's
own code stops the run with a traceback and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from multiprocessing import Pipe

import pytest

from k2conform.errors import HarnessError
from k2conform.model import CellOutcome, RunResults
from k2conform.run import matrix as runner
from k2conform.case.corpus import default_corpus_dir
from k2conform.report.pages import markdown

#: Installed in every process of the run (parent and workers) through sitecustomize: once
#: vLLM's abstract_parser module is imported, ``parse_delta`` is gone, as if renamed.
RENAMED_METHOD = textwrap.dedent("""
    import importlib.abc, importlib.util, sys

    class _RemoveParseDelta(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "vllm.parser.abstract_parser":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                for cls in module.DelegatingParser.__mro__:
                    if "parse_delta" in cls.__dict__:
                        delattr(cls, "parse_delta")

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _RemoveParseDelta())
""")


@pytest.mark.slow
def test_a_missing_vllm_method_is_one_adapter_error_naming_it_and_no_disagreement(tmp_path):
    pytest.importorskip("vllm")
    (tmp_path / "sitecustomize.py").write_text(RENAMED_METHOD)
    out = tmp_path / "results.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "run",
            "--adapter",
            "vllm",
            "--adapter",
            "reference",
            "--case",
            "y_spec_*",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "summary.md"),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
    )
    results = json.loads(out.read_text())
    vllm_cells = [c for c in results["cells"] if c["adapter"] == "vllm"]
    assert vllm_cells and all(c["outcome"] == "adapter-error" for c in vllm_cells)
    assert not any(CellOutcome(c["outcome"]).finding for c in results["cells"])
    (message,) = results["adapter_errors"]["vllm"]
    assert "DelegatingParser.parse_delta" in message
    summary = markdown(RunResults.from_json(results))
    assert summary.count("ADAPTER ERROR") == 1
    assert (
        "written for 0.20.0, " in summary and "0.33.0, the installed release is 0.33.0" in summary
    )
    assert completed.returncode == 1, (
        "the gate cannot vouch for a parser its adapter could not drive"
    )
    reference = [c["outcome"] for c in results["cells"] if c["adapter"] == "reference"]
    assert reference and set(reference) == {"agree"}, reference


def test_adapter_error_cells_are_neither_findings_nor_stale_evidence():
    from k2conform.gate.baseline import BaselineEntry, split_findings

    from k2conform.model import Cell, CellOutcome, FieldDiff

    cells = [
        Cell.failed("y_a", "vllm", "whole", "adapter-error", "X.y: missing"),
        Cell(
            "y_a",
            "sglang",
            "whole",
            CellOutcome.DIFFERS,
            diffs=(FieldDiff("content", None, "x", "text"),),
        ),
    ]
    entry = BaselineEntry("vllm", "differs", ("content",), ("whole",), ("y_a",), "known")
    verdict = split_findings(cells, [entry])
    assert verdict.adapter_errors == {"vllm": {"X.y: missing": 1}}
    assert [c.adapter for c in verdict.new] == ["sglang"]
    assert verdict.stale == [] and not verdict.passed


def test_an_exception_in_k2conform_itself_is_a_harness_error(monkeypatch):
    """The worker reports its own bug with the traceback; the parent raises HarnessError."""

    def broken_run_cell(*args, **kwargs):
        raise ZeroDivisionError("a bug in the comparison")

    monkeypatch.setattr(runner, "run_cell", broken_run_cell)  # the worker's reference to it
    config = runner.RunConfig(default_corpus_dir(), ("reference",))
    parent, child = Pipe()
    worker = threading.Thread(
        target=runner._worker, args=(child, config), kwargs={"silence": False}
    )
    worker.start()
    assert parent.recv()[0] == "ready"
    parent.send(("y_spec_single_call", "reference", "whole"))
    kind, payload = parent.recv()
    worker.join(10)
    assert kind == "harness-error" and "ZeroDivisionError: a bug in the comparison" in payload
    slot = runner._Slot(process=None, conn=_Replay((kind, payload)))
    with pytest.raises(HarnessError, match="ZeroDivisionError"):
        runner.CellPool(config)._receive(slot, deadline=0)


class _Replay:
    def __init__(self, message):
        self.message = message

    def poll(self, timeout=0):
        return True

    def recv(self):
        return self.message


def test_run_exits_2_with_a_traceback_on_a_harness_error(tmp_path):
    """A worker that cannot start stops the run.  Here: a tokenizer directory it cannot read
    (gone after the run checked it; the run's own check is bypassed so that the worker meets
    it, since a missing one is otherwise a usage error before any worker starts)."""
    bypass = (
        "import sys\n"
        "from k2conform.run.cell import CellSettings\n"
        "CellSettings.from_args = classmethod(lambda cls, a: cls(\n"
        "    seed=a.seed, burst=a.burst, tokenizer=a.tokenizer, deadline=a.timeout))\n"
        "from k2conform.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            bypass,
            "run",
            "--adapter",
            "reference",
            "--case",
            "y_spec_single_call",
            "--tokenizer",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2
    assert "harness error" in completed.stderr and "Traceback" in completed.stderr


def test_a_missing_glue_module_is_a_glue_error_naming_the_layout():
    from k2conform.adapter.contract import AdapterGlueError, glue_imports

    with pytest.raises(
        AdapterGlueError, match="vllm module layout: No module named 'vllm_renamed_module'"
    ):
        with glue_imports("vllm"):
            import vllm_renamed_module  # noqa: F401
