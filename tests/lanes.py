"""The test lanes (docs/testing.md) and the one way a test says an environment is missing.

``make test`` runs the developer lane, the tests marked with none of :data:`LANES`;
``make test-lanes`` runs the rest; ``.ci/run`` runs both.  A test that needs a built
environment calls :func:`missing` when it is not there: a skip on a developer's machine, a
failure where ``K2CONFORM_REQUIRE_ENVIRONMENTS=1`` (CI), so a lane can never pass by skipping
what it exists to run.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

#: marker → what the lane needs; every marker here is excluded from the developer lane.
LANES = {
    "server": "the real vLLM server's venv (make servers)",
    "grammar": "each engine's grammar venv (make grammars)",
    "extra": "the extra parsers' and the older releases' venvs (make parsers-extra)",
    "llama_cpp": "the llama.cpp harness (make llama-cpp: a C++ build)",
    "slow": "nothing more, but 10 s or more a test: whole-corpus runs, venv builds, timeouts",
}
REQUIRE = "K2CONFORM_REQUIRE_ENVIRONMENTS"
ROOT = Path(__file__).resolve().parent.parent


def missing(reason: str) -> NoReturn:
    """The environment this test needs is not built: skip, or fail where CI requires it."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: a missing environment fails the lane)")
    pytest.skip(reason)


def make_command(target: str, **variables: str) -> list[str]:
    """``make TARGET`` in the repository with this venv's k2conform (``VENV``) and
    ``VARIABLES``: how a test runs a lane as CI would (:func:`run_once`)."""
    settings = [f"{name}={value}" for name, value in variables.items()]
    return [
        "make",
        "--no-print-directory",
        "-C",
        str(ROOT),
        target,
        f"VENV={sys.prefix}",
        *settings,
    ]


def run_once(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    command: list[str],
    timeout: float,
    unset: tuple[str, ...] = (),
) -> tuple[Path, dict]:
    """Run a lane's ``make`` command once for the whole test session, whichever worker asks
    first (the others wait on its lock), in a folder every worker shares: ``command`` may name
    it as ``{root}``.  Returns the folder and what the command did (``rc``, the ends of
    ``stdout`` and ``stderr``): the tests read what the lane wrote there.  ``unset``: variables
    the command must not inherit."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    root = (base.parent / f"{name}-{uid}") if uid else (base / name)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "done.json"
        if not done.exists():
            env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", *unset)}
            proc = subprocess.run(
                [part.replace("{root}", str(root)) for part in command],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
            )
            done.write_text(
                json.dumps(
                    {
                        "rc": proc.returncode,
                        "stdout": proc.stdout[-5000:],
                        "stderr": proc.stderr[-5000:],
                    }
                )
            )
    return root, json.loads((root / "done.json").read_text())
