"""The extra real parsers (aphrodite's Rust parser, lmdeploy, mlx-lm), each in its own
virtual environment made by k2conform setup-parsers and run through the adapter protocol
(``NAME=cmd:.venvs/NAME/bin/k2conform serve-adapter NAME``).  A parser whose environment is
not installed is skipped with the command that installs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k2conform.adapter.registry import create_adapter, load

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("K2CONFORM_VENVS", ROOT / ".venvs"))
PINNED = {"aphrodite": "0.24.1", "lmdeploy": "0.18.0", "mlx-lm": "0.32.2"}


def _venv(name: str) -> Path:
    venv = VENVS / name
    if not (venv / "bin" / "k2conform").exists():
        pytest.skip(f"{venv} is not installed: run k2conform setup-parsers {name} (make parsers-extra)")
    return venv


def _spec(name: str) -> str:
    return f"{name}=cmd:{_venv(name)}/bin/k2conform serve-adapter {name}"


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k2conform.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _matrix(tmp_path: Path, name: str, cases: list[str], modes: list[str]) -> dict[tuple[str, str], dict]:
    out = tmp_path / "results.json"
    args = ["run", "--adapter", _spec(name), "--jobs", "1", "--json", str(out)]
    for case in cases:
        args += ["--case", case]
    for mode in modes:
        args += ["--delivery", mode]
    completed = _run(*args)
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    results = json.loads(out.read_text())
    row = next(a for a in results["adapters"] if a["name"] == name)
    assert row["status"] == "ok", row
    return {(c["case"], c["delivery"]): c for c in results["cells"]}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_venv_serves_its_pinned_release(name):
    venv = _venv(name)
    completed = subprocess.run([str(venv / "bin" / "k2conform"), "list-adapters", "--json"],
                               capture_output=True, text=True, timeout=600)
    row = next(r for r in json.loads(completed.stdout) if r["name"] == name)
    assert row["status"] == "ok", row
    assert row["version"] == PINNED[name] and row["supported"] is True


@pytest.mark.parametrize("name", sorted(PINNED))
def test_golden_calls_parse_through_the_protocol(tmp_path, name):
    cells = _matrix(tmp_path, name, ["y_spec_single_call", "y_spec_parallel_calls"], ["whole", "stream-token"])
    assert {c["outcome"] for c in cells.values()} == {"agree"}, {k: (v["outcome"], v["fields"]) for k, v in cells.items()}


def test_aphrodite_rust_parser_rejects_a_space_after_the_argument_marker(tmp_path):
    """The Rust parser wants `{` right after <|tool_call_argument_begin|>: a space is a parse error."""
    cells = _matrix(tmp_path, "aphrodite", ["y_ws_around_marker_after_argument_begin_space"], ["whole", "stream-token"])
    for mode in ("whole", "stream-token"):
        cell = cells[("y_ws_around_marker_after_argument_begin_space", mode)]
        assert cell["outcome"] == "crash" and "invalid JSON object argument" in cell["observed"]["error"]


def test_aphrodite_thinking_requests_are_unavailable(tmp_path):
    cells = _matrix(tmp_path, "aphrodite", ["y_split_marker_think_end"], ["whole"])
    assert all(c["outcome"] == "unavailable" for c in cells.values()) or not cells


def test_lmdeploy_expects_markers_as_whole_tokens(tmp_path):
    """Token streams agree; a text-level stream that cuts a call marker loses the call."""
    cells = _matrix(tmp_path, "lmdeploy", ["y_spec_single_call"], ["stream-token", "stream-char"])
    assert cells[("y_spec_single_call", "stream-token")]["outcome"] == "agree"
    char = cells[("y_spec_single_call", "stream-char")]
    assert char["outcome"] == "differs" and "count" in char["fields"]


def test_lmdeploy_class_level_parser_state_does_not_leak_between_configurations():
    """set_parsers writes class attributes: thinking on, then off, in one process."""
    venv = _venv("lmdeploy")
    script = """
from k2conform_adapters.lmdeploy_parser import LmdeployAdapter
from k2conform.model import Delta, Request
text = "<think>plan</think>answer"
adapter = LmdeployAdapter()
before = adapter.parse_whole(Request(thinking=False), Delta(text))
on = adapter.parse_whole(Request(thinking=True), Delta(text))
after = adapter.parse_whole(Request(thinking=False), Delta(text))
assert on.reasoning == "plan" and on.content == "answer", on
assert before.to_json() == after.to_json(), (before, after)
assert before.reasoning is None, before
print("ok")
"""
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_mlx_lm_takes_a_leading_think_tag_into_reasoning(tmp_path):
    """mlx-lm's state machine starts in reasoning and does not strip an explicit <think>."""
    cells = _matrix(tmp_path, "mlx-lm", ["y_think_on_leading_open_tag"], ["whole"])
    cell = cells[("y_think_on_leading_open_tag", "whole")]
    assert cell["outcome"] == "differs" and cell["fields"] == ["reasoning"]
    assert cell["observed"]["reasoning"].startswith("<think>")


@pytest.mark.parametrize(("name", "case"), [
    ("aphrodite", "y_ws_around_marker_after_argument_begin_space"),
    ("mlx-lm", "y_think_on_leading_open_tag"),
])
def test_report_finding_reproduces_in_the_parsers_own_venv(tmp_path, name, case):
    venv = _venv(name)
    out = tmp_path / "report.md"
    completed = subprocess.run([str(venv / "bin" / "k2conform"), "report-finding", case, "--adapter", name,
                                "--out", str(out), "--compare", "reference"],
                               capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "reproduced on its own" in out.read_text()
    alone = subprocess.run([str(venv / "bin" / "python"), str(out.with_suffix(".py"))],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert alone.returncode == 1 and "REPRODUCED" in alone.stdout


@pytest.mark.parametrize("name", sorted(PINNED))
def test_without_the_package_the_adapter_is_unavailable(name):
    adapter = create_adapter(name)
    if adapter.version() is not None:
        pytest.skip(f"{adapter.package} is installed in this environment")
    assert load(adapter).status == "unavailable"


def test_setup_parsers_knows_the_extra_parsers():
    listed = [line.split()[0] for line in _run("setup-parsers", timeout=60).stdout.splitlines()]
    assert set(PINNED) <= set(listed)
    bad = _run("setup-parsers", "no-such-parser", timeout=60)
    assert bad.returncode == 2 and "unknown environment 'no-such-parser'" in bad.stderr
    for name in PINNED:
        assert (ROOT / "requirements" / f"{name}.txt").read_text().count(f"=={PINNED[name]}") == 1
