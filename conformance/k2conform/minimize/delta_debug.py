"""``k2conform minimize``: shrink a disagreeing input to a small, ready-to-commit corpus case.

Given a disagreement (a case file, e.g. one the differential fuzzer saved in
``fuzz/findings/``, a JSON payload ``{"model_output", "tools"?, "thinking"?, "deltas"?}``, or
a raw fuzz input) and its delivery mode, it keeps the *signature* (which adapters disagree
with the reference, and how: :mod:`k2conform.fuzzing.signature`) fixed and shrinks, in
rounds until nothing changes:

1. the request: each declared tool, then thinking;
2. the text by delta debugging over marker tokens (markers whole, text runs between them);
3. the text over single characters, markers still whole, then over every character;
4. the chunk boundaries of a text-level delivery (``stream-char``, ``stream-random``,
   ``stream-marker-split``, recorded deltas): each cut removed while the signature holds.

Then it writes ``corpus/findings/<id>.json``: the expectation is the reference's result, the
prefix is the verdict rule's (:mod:`k2conform.case.verdict`, the rule every corpus id
follows), and the description and source record the signature, the delivery and every
adapter's observed result.  A text-level case keeps its deltas, so the matrix replays
them as ``stream-recorded``.  Everything is deterministic: the same input gives the same case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from k2conform import formats
from k2conform.fuzzing.signature import matches
from k2conform.fuzzing.syntax import DEFAULT as DEFAULT_SYNTAX
from k2conform.fuzzing.syntax import SYNTAXES, Syntax
from k2conform.model import Request


@dataclass(frozen=True)
class Candidate:
    request: Request
    text: str
    cuts: tuple[int, ...] | None  # None: a token-aligned mode, boundaries come from the tokenizer
    #: Markers delivered as ordinary token pieces (a token-aligned mode only).
    spelled: tuple[int, ...] = ()
    #: The Kimi format of ``text``: its marker units are what the minimiser deletes whole.
    format: str = formats.DEFAULT

    @property
    def syntax(self) -> Syntax:
        return SYNTAXES[self.format]


def segments(
    text: str, split_text: bool, split_markers: bool, syntax: Syntax = DEFAULT_SYNTAX
) -> list[tuple[int, int]]:
    """Units to delete: the format's marker units (K3: a tag with its attributes; whole unless
    ``split_markers``), text runs or characters."""
    units, position = [], 0
    for m in syntax.occurrence.finditer(text):
        if m.start() > position:
            units.extend(_run(position, m.start(), split_text))
        units.extend(
            _run(m.start(), m.end(), split_markers) if split_markers else [(m.start(), m.end())]
        )
        position = m.end()
    if position < len(text):
        units.extend(_run(position, len(text), split_text))
    return units


def _run(a: int, b: int, per_char: bool) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(a, b)] if per_char else [(a, b)]


def remove(candidate: Candidate, ranges: Sequence[tuple[int, int]]) -> Candidate:
    """Delete character ranges; cuts move with the text (a cut inside a deleted range goes)."""
    text = candidate.text
    gone = sorted(ranges)
    kept, position = [], 0
    for a, b in gone:
        kept.append(text[position:a])
        position = max(position, b)
    kept.append(text[position:])
    new_text = "".join(kept)
    cuts = None
    if candidate.cuts is not None:
        moved = set()
        for c in candidate.cuts:
            if any(a < c < b for a, b in gone):
                continue
            shift = sum(b - a for a, b in gone if b <= c)
            moved.add(c - shift)
        cuts = tuple(sorted(c for c in moved if 0 < c < len(new_text)))
    spelled = []
    for at in candidate.spelled:  # a spelled marker stays spelled while none of it is deleted
        marker = candidate.syntax.spellable.match(text, at)
        end = marker.end() if marker else at + 1
        if not any(a < end and at < b for a, b in gone):
            spelled.append(at - sum(b - a for a, b in gone if b <= at))
    return replace(candidate, text=new_text, cuts=cuts, spelled=tuple(spelled))


def ddmin(
    candidate: Candidate,
    units_of: Callable[[Candidate], list[tuple[int, int]]],
    holds: Callable[[Candidate], bool],
) -> Candidate:
    """Delete chunks of units (halving the chunk size) while ``holds``; deterministic."""
    units = units_of(candidate)
    chunk = max(1, len(units) // 2)
    while True:
        i = 0
        while i < len(units):
            trial = remove(candidate, units[i : i + chunk])
            if trial.text != candidate.text and holds(trial):
                candidate = trial
                units = units_of(candidate)
            else:
                i += chunk
        if chunk == 1:
            return candidate
        chunk = max(1, chunk // 2)


def shrink_cuts(candidate: Candidate, holds: Callable[[Candidate], bool]) -> Candidate:
    if not candidate.cuts:
        return candidate
    cuts = list(candidate.cuts)
    chunk = max(1, len(cuts) // 2)
    while True:
        i = 0
        while i < len(cuts):
            trial = replace(candidate, cuts=tuple(cuts[:i] + cuts[i + chunk :]))
            if holds(trial):
                candidate, cuts = trial, cuts[:i] + cuts[i + chunk :]
            else:
                i += chunk
        if chunk == 1:
            return candidate
        chunk = max(1, chunk // 2)


def shrink_request(candidate: Candidate, holds: Callable[[Candidate], bool]) -> Candidate:
    tools = list(candidate.request.tools)
    i = 0
    while i < len(tools) and len(tools) > 1:
        trial = replace(
            candidate, request=replace(candidate.request, tools=tuple(tools[:i] + tools[i + 1 :]))
        )
        if holds(trial):
            candidate, tools = trial, tools[:i] + tools[i + 1 :]
        else:
            i += 1
    if candidate.request.thinking:
        trial = replace(candidate, request=replace(candidate.request, thinking=False))
        if holds(trial):
            candidate = trial
    return candidate


class Minimizer:
    """Shrinks while ``engine.observe`` gives the same signature; counts the parses it ran."""

    def __init__(self, engine: Any, mode: str, target_signature: str) -> None:
        self.engine = engine
        self.mode = mode
        self.signature = target_signature
        self.cache: dict[tuple, bool] = {}
        self.tests = 0

    def observe(self, candidate: Candidate) -> Any:
        mode = _run_mode(candidate, self.mode)
        return self.engine.observe(
            candidate.request, candidate.text, mode, candidate.cuts, spelled=candidate.spelled
        )

    def holds(self, candidate: Candidate) -> bool:
        key = (
            json.dumps(candidate.request.to_json(), sort_keys=True),
            candidate.text,
            candidate.cuts,
            candidate.spelled,
        )
        if key not in self.cache:
            self.tests += 1
            self.cache[key] = matches(self.signature, self.observe(candidate).signature)
        return self.cache[key]

    def run(self, candidate: Candidate, rounds: int = 4) -> Candidate:
        for _ in range(rounds):
            before = candidate
            candidate = shrink_request(candidate, self.holds)
            for split_text, split_markers in ((False, False), (True, False), (True, True)):
                candidate = ddmin(
                    candidate,
                    lambda c, t=split_text, m=split_markers: segments(c.text, t, m, c.syntax),
                    self.holds,
                )
            candidate = shrink_cuts(candidate, self.holds)
            if candidate == before:
                break
        return candidate


# -- input ------------------------------------------------------------------------------------


class MinimizeInput(NamedTuple):
    """What ``minimize`` reads of its input: the delivery and signature it names, if any."""

    request: Request
    text: str
    deltas: tuple[str, ...] | None
    delivery: str | None
    signature: str | None
    spelled: tuple[int, ...] = ()
    format: str = formats.DEFAULT


def read_input(path: Path, format: str | None = None) -> MinimizeInput:
    """The input of ``minimize``: a case file (its format is its own), a JSON payload or a raw
    fuzz input (of ``format``; default K2)."""
    from k2conform.errors import UsageError

    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict):  # a raw fuzz input (libFuzzer's corpus or crash file)
        from k2conform.delivery.modes import cut
        from k2conform.fuzzing.envelope import decode

        fuzz = decode(raw, format or formats.DEFAULT)
        pieces = (
            tuple(d.text for d in cut(fuzz.text, fuzz.split_points()))
            if fuzz.cuts is not None
            else None
        )
        delivery = "stream-recorded" if pieces else None
        return MinimizeInput(
            fuzz.request(), fuzz.text, pieces, delivery, None, fuzz.spelled_markers(), fuzz.format
        )
    if data.get("kind") == "completion":
        from k2conform.case.corpus import case_from_json

        case = case_from_json(data)
        generator = case.generator or {}
        return MinimizeInput(
            case.request,
            case.model_output,
            case.deltas,
            generator.get("delivery"),
            generator.get("signature"),
            case.spelled_markers,
            case.format,
        )
    if "model_output" not in data and "deltas" not in data:
        raise UsageError(f"{path}: neither a case file nor a payload with 'model_output'")
    deltas = tuple(data["deltas"]) if data.get("deltas") is not None else None
    text = (
        data.get("model_output") if data.get("model_output") is not None else "".join(deltas or ())
    )
    request = Request(
        tools=tuple(data.get("tools") or ()),
        tool_choice=data.get("tool_choice", "auto"),
        thinking=bool(data.get("thinking", False)),
    )
    return MinimizeInput(
        request,
        text,
        deltas,
        data.get("delivery"),
        data.get("signature"),
        format=data.get("format") or format or formats.DEFAULT,
    )


class NoMatrixFinding(Exception):
    """The fuzz signature holds, but the matrix would not file the input as that finding."""


class JudgedEngine:
    """The fuzz engine with the matrix's judgement held: a candidate shows the finding only
    when its verdict prefix is the input's (an ``n_`` finding stays ``n_``) and every adapter
    the signature names gives, as a matrix cell, the input's outcome and differing fields
    (:class:`k2conform.minimize.cells.CellEngine`).  Without it a shrunk input can keep the
    fuzzer's coarse kind while the matrix no longer judges it, or judges other fields."""

    def __init__(self, engine: Any, cells: Mapping[str, Any], start: Candidate, mode: str) -> None:
        self.engine = engine
        self.cells = cells
        probes = self._probes(start, _run_mode(start, mode))
        for name, probe in probes.items():
            if probe.case is None:
                raise NoMatrixFinding(f"the reference parser cannot judge the input ({name})")
            if not probe.signature:
                raise NoMatrixFinding(
                    f"{name} in {mode}: the matrix judges the case ({probe.case.id[:1]}_) "
                    f"{probe.cell.outcome.value}, no finding"
                )
        self.prefix = next(iter(probes.values())).case.id.split("_", 1)[0]
        self.want = {name: probe.signature for name, probe in probes.items()}
        self.start_cells = {name: probe.cell for name, probe in probes.items()}

    @classmethod
    def for_signature(
        cls, engine: Any, signature: str, start: Candidate, mode: str
    ) -> JudgedEngine:
        from k2conform.adapter.registry import Availability
        from k2conform.fuzzing.signature import parse_signature
        from k2conform.minimize.cells import CellEngine
        from k2conform.run.cell import CellSettings

        by_name = {adapter.name: adapter for adapter in engine.adapters}
        settings = CellSettings(deadline=engine.deadline)
        cells = {}
        for name in parse_signature(signature):
            if name not in by_name:
                raise NoMatrixFinding(f"the signature names {name}, which is not under test")
            cells[name] = CellEngine(
                by_name[name], Availability("ok"), settings, "minimize", start.format
            )
        return cls(engine, cells, start, mode)

    def cells_of(self, candidate: Candidate, mode: str) -> dict[str, Any]:
        """Each held adapter's matrix cell of ``candidate``."""
        probes = self._probes(candidate, _run_mode(candidate, mode))
        return {name: probe.cell for name, probe in probes.items()}

    def _probes(self, candidate: Candidate, mode: str) -> dict[str, Any]:
        c = candidate
        return {
            name: cell.observe(c.request, c.text, mode, c.cuts, c.spelled)
            for name, cell in self.cells.items()
        }

    def observe(
        self,
        request: Request,
        text: str,
        mode: str,
        cuts: Sequence[int] | None = None,
        spelled: Sequence[int] = (),
    ) -> Any:
        observation = self.engine.observe(request, text, mode, cuts, spelled=spelled)
        if observation.signature:
            cuts = None if cuts is None else tuple(cuts)
            candidate = Candidate(request, text, cuts, tuple(spelled), self.engine.format)
            for name, probe in self._probes(candidate, mode).items():
                held = probe.case is not None and probe.case.id.startswith(self.prefix + "_")
                if not held or probe.signature != self.want[name]:
                    return replace(observation, signature="")
        return observation


def _run_mode(candidate: Candidate, mode: str) -> str:
    return "stream-recorded" if candidate.cuts is not None else mode


def minimize_input(
    engine: Any,
    request: Request,
    text: str,
    mode: str,
    deltas: Sequence[str] | None = None,
    target_signature: str | None = None,
    judged: bool = True,
    spelled: Sequence[int] = (),
) -> tuple[Any, Candidate, Candidate, Minimizer]:
    """(final observation, starting candidate, minimised candidate, minimiser).  ``judged``
    (the default) holds the matrix's judgement too (:class:`JudgedEngine`; the minimiser's
    ``engine`` then says what it held); a signature the matrix files as no finding raises
    :class:`NoMatrixFinding`."""
    from k2conform.delivery.modes import TEXT_LEVEL_MODES, cut_points

    if mode in TEXT_LEVEL_MODES:
        if deltas is None or mode != "stream-recorded":
            first = engine.observe(request, text, mode)
            deltas = first.deltas
        start = Candidate(request, text, cut_points(deltas or (text,)), format=engine.format)
    else:
        start = Candidate(request, text, None, tuple(spelled), engine.format)
    probe = Minimizer(engine, mode, "")
    signature = target_signature or probe.observe(start).signature
    if not signature:
        return None, start, start, probe
    if judged:
        engine = JudgedEngine.for_signature(engine, signature, start, mode)
    minimizer = Minimizer(engine, mode, signature)
    if not minimizer.holds(start):
        return None, start, start, minimizer
    small = minimizer.run(start)
    observation = minimizer.observe(small)
    observation.mode = mode
    return observation, start, small, minimizer
