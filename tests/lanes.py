"""The test lanes (docs/testing.md) and the one way a test says an environment is missing.

``make test`` runs the developer lane, the tests marked with none of :data:`LANES`;
``make test-lanes`` runs the rest; ``.ci/run`` runs both.  A test that needs a built
environment calls :func:`missing` when it is not there: a skip on a developer's machine, a
failure where ``K2CONFORM_REQUIRE_ENVIRONMENTS=1`` (CI), so a lane can never pass by skipping
what it exists to run.
"""

from __future__ import annotations

import os
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


def missing(reason: str) -> NoReturn:
    """The environment this test needs is not built: skip, or fail where CI requires it."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: a missing environment fails the lane)")
    pytest.skip(reason)
