"""Shared fixtures: the shipped corpus, loaded once, and the hypothesis profile."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

import k2conform.testkit.strategies  # noqa: F401 - registers the "ci" and "deep" profiles
from k2conform.case.corpus import Corpus, load_corpus
from lanes import LANES

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return load_corpus()


def pytest_configure(config):
    """The lane markers, declared once in ``tests/lanes.py`` (``--strict-markers`` holds
    every test to them)."""
    for marker, needs in LANES.items():
        config.addinivalue_line("markers", f"{marker}: {needs}")
