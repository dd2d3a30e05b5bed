"""A downstream parser project that uses the test kit: its own toy parser, its own conftest.py
(three lines of k2conform), its own baseline, run by its own pytest (a subprocess, as the
author runs it).  Shared by the test-kit tests and the wheel test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "k2conform-example-adapter" / "k2conform_example_adapter"

#: The author's parser: the example plugin's tiny parser, copied into their repository.
#: It buffers streams, knows nothing of <think> and does not strip argument whitespace
#: rules beyond .strip(): the corpus finds exactly that.
ADAPTER = """
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
"""

CASES = [
    "y_spec_single_call",
    "y_spec_parallel_calls",
    "y_split_marker_think_end",
    "y_marker_in_json_string_call_end",
]
MODES = ["whole", "stream-token"]


def downstream_project(tmp_path: Path, baseline: dict) -> Path:
    project = tmp_path / "myparser"
    project.mkdir()
    (project / "toyparser.py").write_text((EXAMPLE / "tinyparser.py").read_text())
    (project / "toy_adapter.py").write_text(ADAPTER)
    (project / "k2-baseline.json").write_text(json.dumps(baseline))
    (project / "conftest.py").write_text(
        textwrap.dedent(f"""
        from k2conform.testkit import conformance_tests
        from toy_adapter import ToyAdapter

        conformance_tests(globals(), adapter=ToyAdapter(), baseline="k2-baseline.json",
                          cases={CASES!r}, modes={MODES!r})
    """)
    )
    (project / "test_own.py").write_text("def test_the_authors_own_test():\n    assert True\n")
    return project


def run_pytest(
    project: Path, *args: str, python: str = sys.executable
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(project), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )


def node_outcomes(output: str) -> dict[str, str]:
    """node id → PASSED/FAILED/XFAIL/... from -rA's short summary."""
    found = {}
    for line in output.splitlines():
        match = re.match(r"^(PASSED|FAILED|XFAIL|XPASS|SKIPPED|ERROR) (\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found
