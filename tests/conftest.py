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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    """One xdist group per file (``--dist loadgroup`` then sends files to workers whole, as
    ``loadfile`` would), except in a file that sets ``SPREAD_ACROSS_WORKERS = True``: its
    tests share nothing costly and go to whichever worker is free (test_more_parsers: one
    subprocess per environment, 7 minutes on one worker).  Without xdist (``-p no:xdist``, as
    tests/mutation/mutate.py runs) the mark is unregistered, and ``--strict-markers`` would
    refuse it."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and not getattr(module, "SPREAD_ACROSS_WORKERS", False):
            item.add_marker(pytest.mark.xdist_group(module.__name__))


def pytest_configure(config):
    """The lane markers, declared once in ``tests/lanes.py`` (``--strict-markers`` holds
    every test to them)."""
    for marker, needs in LANES.items():
        config.addinivalue_line("markers", f"{marker}: {needs}")
