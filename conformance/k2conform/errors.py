"""The two errors every entry point maps to exit status 2: the user's and k2conform's own."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit status 2."""


class HarnessError(RuntimeError):
    """A bug in k2conform itself, not in a parser: the run stops (exit status 2)."""
