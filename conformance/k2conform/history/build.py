"""A parser line's behaviours across its releases, from results documents.

A *release* is one adapter row of a results document.  A row named ``LINE-VERSION`` (as
``setup-parsers`` names a release's environment: ``--adapter vllm-0.25.0=cmd:...``) is release
VERSION of LINE; any other row is its reported version of the line named after it.

A *behaviour* is what the findings report groups (``gate.behaviours.behaviours``, without a
baseline): the cases with the same outcome and differing fields in the same delivery modes.
Across releases, the cases that show one behaviour in exactly the same releases (and are
judged in the same others) make one trace.  A release that did not judge every cell of a trace (the
case was not run, or the
adapter could not run it: ``adapter-error``, ``unavailable``) says nothing about it: the trace
is *not observed* there, neither shown nor gone.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from k2conform.errors import UsageError
from k2conform.model import CellOutcome, RunResults
from k2conform.gate.behaviours import FAMILIES, behaviours, signature

#: ``vllm-0.25.0``, ``sglang-0.5.16``, ``vllm-0.10.1.1``: an environment's release name.
RELEASE_NAME = re.compile(r"^(?P<line>.+?)-(?P<version>\d+(?:\.[0-9A-Za-z]+)*)$")
#: Cells that say nothing about the parser's behaviour.
UNJUDGED = frozenset({CellOutcome.ADAPTER_ERROR, CellOutcome.UNAVAILABLE})
_PRE_RELEASE = ("dev", "a", "b", "rc")
#: What a release shows of one case of a behaviour.
SHOWN, ABSENT, UNOBSERVED = "shown", "absent", "unobserved"

#: (delivery-mode family, signature, delivery modes): a behaviour's identity in one release.
BehaviourKey = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True)
class Release:
    line: str
    version: str
    adapter: str  #: the row's name in its results document
    reported_version: str | None  #: what the adapter reported as installed
    source: str  #: the results document it came from


@dataclass
class Observation:
    """What one release showed: each judged cell's signature, and its behaviours' cases."""

    release: Release
    judged: dict[tuple[str, str], str] = field(default_factory=dict)  #: (case, mode) → signature
    shown: dict[BehaviourKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    behaviour_of: dict[tuple[str, str], BehaviourKey] = field(default_factory=dict)

    def now(self, cell: tuple[str, str]) -> str:
        """What a judged cell shows: its behaviour with the modes it spans, or its outcome."""
        key = self.behaviour_of.get(cell)
        return f"{key[1]} [{', '.join(key[2])}]" if key else self.judged[cell]


@dataclass(frozen=True)
class Change:
    version: str
    kind: str  #: "appeared" or "gone"
    now: tuple[str, ...] = ()  #: for "gone": what the cells show instead (``Observation.now``)


@dataclass(frozen=True)
class Trace:
    """One behaviour across a line's releases."""

    line: str
    family: str
    signature: str
    modes: tuple[str, ...]
    cases: tuple[str, ...]
    versions: tuple[str, ...]  #: the releases that show it, oldest first
    changes: tuple[Change, ...]
    unobserved: tuple[str, ...]  #: releases that did not judge all of its cells


@dataclass(frozen=True)
class LineHistory:
    line: str
    releases: tuple[Release, ...]  #: oldest first
    traces: tuple[Trace, ...]


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Release order: ``0.10.1 < 0.10.1.1 < 0.11.0rc1 < 0.11.0 < 0.11.0.post1``."""
    parts: list[tuple[int, int | str]] = []
    for part in re.findall(r"\d+|[A-Za-z]+", version):
        if part.isdigit():
            parts.append((0, int(part)))
        else:
            parts.append((-1 if part.lower() in _PRE_RELEASE else 1, part.lower()))
    return (*parts, (0, -1))


def release_of(name: str, reported_version: str | None, source: str) -> Release:
    named = RELEASE_NAME.match(name)
    if named:
        return Release(named["line"], named["version"], name, reported_version, source)
    return Release(name, reported_version or "unknown", name, reported_version, source)


def observations(documents: Iterable[tuple[str, RunResults]]) -> list[Observation]:
    """Every release with cells in the documents; a release given twice is a usage error."""
    found: dict[tuple[str, str], Observation] = {}
    for source, results in documents:
        grouped = behaviours(results, ())
        ran = {cell.adapter for cell in results.cells}
        for row in results.adapters:
            if row.name not in ran:
                continue
            release = release_of(row.name, row.version, source)
            key = (release.line, release.version)
            if key in found:
                raise UsageError(
                    f"{release.line} {release.version} is in both "
                    f"{found[key].release.source} and {source}: give each release once"
                )
            found[key] = observation = Observation(release)
            observation.judged = {
                (c.case, c.delivery): signature(c)
                for c in results.cells
                if c.adapter == row.name and c.outcome not in UNJUDGED
            }
            for behaviour in grouped.get(row.name, ()):
                key_of = (behaviour.family, behaviour.signatures[0], behaviour.modes)
                observation.shown[key_of].update(behaviour.cases)
                observation.behaviour_of.update(
                    dict.fromkeys(((c.case, c.delivery) for c in behaviour.cells), key_of)
                )
    return list(found.values())


def histories(documents: Iterable[tuple[str, RunResults]]) -> list[LineHistory]:
    """Each line's traces, lines by name, traces by the release they first show in."""
    by_line: dict[str, list[Observation]] = defaultdict(list)
    for observation in observations(documents):
        by_line[observation.release.line].append(observation)
    found = []
    for line in sorted(by_line):
        ordered = sorted(by_line[line], key=lambda o: version_key(o.release.version))
        found.append(LineHistory(line, tuple(o.release for o in ordered), _traces(line, ordered)))
    return found


def _traces(line: str, ordered: Sequence[Observation]) -> tuple[Trace, ...]:
    """Group the cases of each behaviour by what every release shows of them."""
    shown_in: dict[tuple[BehaviourKey, str], set[str]] = defaultdict(set)
    for observation in ordered:
        for key, cases in observation.shown.items():
            for case in cases:
                shown_in[(key, case)].add(observation.release.version)
    cases_of: dict[tuple[BehaviourKey, tuple[str, ...]], list[str]] = defaultdict(list)
    for (key, case), versions in shown_in.items():
        cells = [(case, mode) for mode in key[2]]
        states = tuple(
            SHOWN
            if o.release.version in versions
            else ABSENT
            if all(cell in o.judged for cell in cells)
            else UNOBSERVED
            for o in ordered
        )
        cases_of[(key, states)].append(case)
    traces = [
        _trace(line, key, tuple(sorted(cases)), states, ordered)
        for (key, states), cases in cases_of.items()
    ]
    return tuple(
        sorted(
            traces,
            key=lambda t: (
                [o.release.version for o in ordered].index(t.versions[0]),
                FAMILIES.index(t.family),
                t.signature,
                t.modes,
                t.cases,
            ),
        )
    )


def _trace(
    line: str,
    key: BehaviourKey,
    cases: tuple[str, ...],
    states: tuple[str, ...],
    ordered: Sequence[Observation],
) -> Trace:
    """A change is a release that judged the cells and differs from the last one before it
    that judged them; what the cells show instead is said for a behaviour that went away."""
    family, shown_signature, modes = key
    cells = [(case, mode) for case in cases for mode in modes]
    changes: list[Change] = []
    previous = UNOBSERVED
    for observation, state in zip(ordered, states):
        if state == UNOBSERVED:
            continue
        version = observation.release.version
        if previous != UNOBSERVED and state != previous:
            now = () if state == SHOWN else tuple(sorted({observation.now(c) for c in cells}))
            changes.append(Change(version, "appeared" if state == SHOWN else "gone", now))
        previous = state
    versions = tuple(o.release.version for o, state in zip(ordered, states) if state == SHOWN)
    unobserved = tuple(
        o.release.version for o, state in zip(ordered, states) if state == UNOBSERVED
    )
    return Trace(line, family, shown_signature, modes, cases, versions, tuple(changes), unobserved)


def version_ranges(shown: Sequence[str], releases: Sequence[str]) -> list[str]:
    """``["0.10.0–0.11.0", "0.25.0"]``: the runs of consecutive releases (in the order run)."""
    ranges: list[list[str]] = []
    previous = -2
    for n, version in enumerate(releases):
        if version not in shown:
            continue
        if n == previous + 1:
            ranges[-1].append(version)
        else:
            ranges.append([version])
        previous = n
    return [run[0] if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in ranges]
