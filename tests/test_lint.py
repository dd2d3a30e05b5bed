"""The whole tree passes ruff with the project's configuration (pyproject.toml: the line length
and the rules), so CI fails on a long line or an unused import as it does on a failing test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINTED = ("conformance", "adapters", "tests", "fuzz", "examples")


def test_ruff_finds_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *LINTED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
