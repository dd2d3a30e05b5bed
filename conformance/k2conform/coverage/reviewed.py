"""The reviewed list of unreachable code (``unreachable.toml``): what the automatic rules of
:mod:`k2conform.coverage.reachability` cannot decide, read by a person, per release.

Each ``[[entry]]`` names one place of one release of a parser package::

    [[entry]]
    release = "0.33.0"                             # the installed package's __version__
    file = "vllm/parser/engine/adapters.py"        # as the adapters declare it
    line = 113                                     # the first line
    end = 125                                      # optional: the last line of a span
    to = 74                                        # optional: only the branch line -> to
    text = "return self._parser_engine.reasoning_start_str"   # line's source, stripped
    reason = "why no Kimi K2 output, request or server setting of that release reaches it"

A line entry (with ``end``, a span) takes the statements it covers out of the Kimi-reachable
figures; a branch entry (``to``, negative for "leaves the function") takes that one arc out.
Entries of releases not installed are not used.  An entry is **stale**, and takes nothing out,
when its ``text`` is no longer what the installed file has at ``line``, when it covers no
statement (no arc ``line -> to`` exists), or when what it lists ran after all; stale entries
are listed in the document, the console table and the page.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k2conform.errors import UsageError

DEFAULT_PATH = Path(__file__).with_name("unreachable.toml")
PREFIX = "unreachable (reviewed): "
_FIELDS = {
    "release": str,
    "file": str,
    "line": int,
    "end": int,
    "to": int,
    "text": str,
    "reason": str,
}
_REQUIRED = ("release", "file", "line", "text", "reason")


@dataclass(frozen=True)
class Entry:
    release: str
    file: str
    line: int
    text: str
    reason: str
    end: int | None = None
    to: int | None = None
    index: int = 0  #: its position in the file (1-based), for messages

    @property
    def where(self) -> str:
        span = f"-{self.end}" if self.end is not None else ""
        arc = f"->{self.to}" if self.to is not None else ""
        return f"{self.file}:{self.line}{span}{arc} ({self.release})"

    def to_json(self) -> dict[str, Any]:
        data = {"release": self.release, "file": self.file, "line": self.line}
        data.update({k: v for k, v in (("end", self.end), ("to", self.to)) if v is not None})
        data.update(text=self.text, reason=self.reason)
        return data


@dataclass
class Applied:
    """What the reviewed entries take out of one file, and the entries that are stale."""

    lines: dict[int, str] = field(default_factory=dict)
    arcs: dict[tuple[int, int], str] = field(default_factory=dict)
    stale: list[dict[str, Any]] = field(default_factory=list)
    used: int = 0


def load(path: Path | str | None = None) -> tuple[Entry, ...]:
    """The entries of ``path`` (default: the shipped list); a malformed file is a
    :class:`UsageError` naming the file, the entry and the field."""
    if path is None and not DEFAULT_PATH.is_file():
        return ()  # an installation without the list (it is not package data yet)
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such reviewed-unreachable file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: not valid TOML: {error}") from None
    extra = sorted(set(data) - {"entry"})
    if extra:
        raise UsageError(f"{path}: unknown table or key {extra[0]!r} (only [[entry]] tables)")
    tables = data.get("entry", [])
    if not isinstance(tables, list):
        raise UsageError(f"{path}: entry: must be an array of tables ([[entry]])")
    entries = []
    for index, table in enumerate(tables, 1):
        where = f"{path}: entry {index}"
        for key in table:
            if key not in _FIELDS:
                raise UsageError(f"{where}: unknown field {key!r}")
        for key in _REQUIRED:
            if key not in table:
                raise UsageError(f"{where}: field {key!r} is missing")
        for key, value in table.items():
            kind = _FIELDS[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise UsageError(f"{where}: field {key!r} must be a {kind.__name__}")
            if kind is str and not value.strip():
                raise UsageError(f"{where}: field {key!r} must not be empty")
        if table["line"] < 1:
            raise UsageError(f"{where}: field 'line' must be 1 or more")
        if "end" in table and "to" in table:
            raise UsageError(f"{where}: field 'to' cannot go with 'end' (a branch has one line)")
        if table.get("end", table["line"]) < table["line"]:
            raise UsageError(f"{where}: field 'end' must not be before 'line'")
        if "to" in table and table["to"] == 0:
            raise UsageError(f"{where}: field 'to' must be a line number (negative: an exit)")
        if len(table["reason"].strip()) < 20:
            raise UsageError(f"{where}: field 'reason' must say why (20 characters or more)")
        entries.append(Entry(index=index, **table))
    return tuple(entries)


def for_file(entries: Iterable[Entry], path: str, release: str | None) -> list[Entry]:
    return [e for e in entries if e.file == path and e.release == release]


def apply(
    entries: Sequence[Entry],
    source: str,
    executed: set[int],
    missing: set[int],
    taken: Iterable[Sequence[int]],
    untaken: Iterable[Sequence[int]],
) -> Applied:
    """The lines and arcs the entries of one file take out; the stale entries, with why."""
    result = Applied()
    text_lines = source.splitlines()
    taken_arcs = {tuple(arc) for arc in taken}
    all_arcs = taken_arcs | {tuple(arc) for arc in untaken}
    statements = executed | missing
    for entry in entries:
        problem = _stale(entry, text_lines, statements, executed, taken_arcs, all_arcs)
        if problem:
            result.stale.append({**entry.to_json(), "problem": problem})
            continue
        result.used += 1
        reason = PREFIX + entry.reason
        if entry.to is not None:
            result.arcs[(entry.line, entry.to)] = reason
            continue
        for line in range(entry.line, (entry.end or entry.line) + 1):
            if line in statements:
                result.lines.setdefault(line, reason)
    return result


def _stale(
    entry: Entry,
    text_lines: Sequence[str],
    statements: set[int],
    executed: set[int],
    taken: set[tuple[int, int]],
    arcs: set[tuple[int, int]],
) -> str | None:
    if entry.line > len(text_lines):
        return f"line {entry.line} is past the end of the file ({len(text_lines)} lines)"
    found = text_lines[entry.line - 1].strip()
    if found != entry.text.strip():
        return f"line {entry.line} now reads {found!r}"
    if entry.end is not None and entry.end > len(text_lines):
        return f"end {entry.end} is past the end of the file ({len(text_lines)} lines)"
    if entry.to is not None:
        arc = (entry.line, entry.to)
        if arc not in arcs:
            return f"no branch {entry.line}->{entry.to} in the file"
        if arc in taken:
            return f"the branch {entry.line}->{entry.to} was taken: it is reachable"
        return None
    covered = set(range(entry.line, (entry.end or entry.line) + 1)) & statements
    if not covered:
        return "covers no statement"
    ran = sorted(covered & executed)
    if ran:
        return f"line {ran[0]} ran: it is reachable"
    return None


def summary(applied: Mapping[str, Applied]) -> dict[str, int]:
    return {
        "used": sum(a.used for a in applied.values()),
        "stale": sum(len(a.stale) for a in applied.values()),
    }
