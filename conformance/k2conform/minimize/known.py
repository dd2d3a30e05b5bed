"""Whether a fuzz finding is already known, and where: the corpus, a baseline, the catalogue.

A fuzz signature (``vllm:wrong-name``) is the fuzzer's coarse kind, decided against the
reference alone; what the project records is a *behaviour*, the matrix's judgement of a cell
(:func:`k2conform.run.cell.run_cell`): an adapter, an outcome and the fields that differ.  So
a finding is first judged as the matrix would judge its case file
(:func:`k2conform.fuzzing.differential.judge_finding`),
then looked up (:meth:`Known.lookup`):

* **corpus**: a case of the matrix corpus with the same request and model output;
* **baseline**: an entry (any ``baseline*.json`` of the checkout, or those given) for the
  same adapter, outcome and fields in the same family of delivery modes;
* **catalogue**: a catalogued behaviour (``corpus/findings/catalogue``) of the same adapter,
  outcome and fields in the same family of delivery modes.

The family of modes (:func:`k2conform.gate.behaviours.family`: token-aligned, the one-shot
parse among them, or text-level) stands for the mode as the report and the catalogue group
behaviours: the catalogue keeps one example per behaviour and replays text-level chunks as
recorded ones.  A case that spells markers from ordinary token pieces (``spelled_markers``) is
a family apart (:func:`axis_family`): the same fields differing for another reason, the
token ids, which only a spelled case (or a baseline entry of one) shows.

A finding that none of them knows is *new*: the only kind worth a user's review.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from k2conform.case.corpus import CATALOGUE, CompletionCase, default_corpus_dir, load_corpus
from k2conform.fuzzing.differential import axis, axis_mode, judge_finding, matrix_mode
from k2conform.gate.baseline import BaselineEntry, load_baseline
from k2conform.model import Cell
from k2conform.gate.behaviours import family
from k2conform.resources import checkout_root


#: What a finding none of the three knows is.
NEW = "not in the corpus, a baseline or the catalogue"


def default_baselines() -> list[Path]:
    """The checkout's ``baseline*.json`` (none for an installed wheel, which carries none)."""
    root = checkout_root()
    return sorted(root.glob("baseline*.json")) if root is not None else []


def _request_key(case: CompletionCase) -> str:
    """The same request and output (and the same markers spelled: other token ids)."""
    spelled = [list(case.spelled_markers)] if case.spelled_markers else []
    return json.dumps([case.request.to_json(), case.model_output, *spelled], sort_keys=True)


def axis_family(label: str) -> str:
    """The report's family of modes of a mode or an :attr:`Observation.axis
    <k2conform.fuzzing.differential.Observation.axis>`: markers spelled from ordinary token
    pieces are a family apart (``token-aligned+spelled``), whose findings no unspelled case
    shows."""
    mode = axis_mode(label)
    return family(mode) + label[len(mode) :]


@dataclass(frozen=True)
class Judgement:
    """What the matrix makes of one finding (a cell of its case): adapter, outcome, fields, and
    the fuzzer's delivery mode (its axis: ``stream-token+spelled``)."""

    adapter: str
    outcome: str
    fields: tuple[str, ...]
    mode: str

    @classmethod
    def of(cls, cell: Cell, mode: str) -> Judgement:
        return cls(cell.adapter, cell.outcome.value, tuple(cell.fields), mode)

    def __str__(self) -> str:
        fields = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.adapter} {self.outcome}{fields} in {self.mode}"

    @property
    def behaviour(self) -> tuple[str, str, tuple[str, ...], str]:
        """Adapter, outcome, fields and family of modes: two judgements with the same one are
        one behaviour (the report's grouping)."""
        return (self.adapter, self.outcome, self.fields, axis_family(self.mode))


def catalogue_judgements(corpus: Path | None = None) -> list[tuple[str, Judgement]]:
    """Each catalogued behaviour as (case id, the judgement its finding block records)."""
    from k2conform.catalogue.index import read_catalogue

    folder = Path(corpus or default_corpus_dir()).joinpath(*CATALOGUE)
    return [
        (
            entry.case.id,
            Judgement(
                entry.adapter,
                entry.finding["outcome"],
                tuple(entry.finding["fields"]),
                axis(entry.finding["delivery"], bool(entry.case.spelled_markers)),
            ),
        )
        for entry in (read_catalogue(folder) if folder.is_dir() else ())
    ]


@dataclass
class Known:
    """The corpus, the baselines and the catalogue, read once."""

    corpus: dict[str, str] = field(default_factory=dict)  # request+text → case id
    spelled: set[str] = field(default_factory=set)  # ids of cases with spelled markers
    baselines: list[tuple[str, BaselineEntry]] = field(default_factory=list)
    catalogue: list[tuple[str, Judgement]] = field(default_factory=list)  # case id, behaviour

    @classmethod
    def load(cls, corpus: Path | None = None, baselines: Sequence[Path] | None = None) -> Known:
        known = cls(catalogue=catalogue_judgements(corpus))
        for case in load_corpus(corpus or default_corpus_dir()).completions:
            known.corpus.setdefault(_request_key(case), case.id)
            if case.spelled_markers:
                known.spelled.add(case.id)
        paths = default_baselines() if baselines is None else list(baselines)
        for path in paths:
            known.baselines += [(path.name, e) for e in load_baseline(path).entries]
        return known

    def lookup(self, case: CompletionCase, behaviour: Judgement) -> list[str]:
        """Where the finding is known, one line each (empty: it is new)."""
        found = []
        same = self.corpus.get(_request_key(case))
        if same is not None and same != case.id:
            found.append(f"corpus: {same} is the same output")
        what = (behaviour.adapter, behaviour.outcome, behaviour.fields)
        mode = axis_mode(behaviour.mode)
        spelled = mode != behaviour.mode
        for name, entry in self.baselines:
            if (entry.adapter, entry.outcome, entry.fields) != what:
                continue
            # an entry knows the spelled axis exactly when it covers a spelled case
            if any(entry.covers_case(c) for c in self.spelled) != spelled:
                continue
            if "*" in entry.deliveries or family(mode) in map(family, entry.deliveries):
                more = " …" if len(entry.cases) > 3 else ""
                found.append(f"baseline: {name}, the entry of {', '.join(entry.cases[:3])}{more}")
                break
        for case_id, known in self.catalogue:
            if known.behaviour == behaviour.behaviour:
                found.append(f"catalogue: {case_id}")
                break
        return found


@dataclass(frozen=True)
class JudgedFinding:
    """One row of a fuzz run's findings table, judged as the matrix would judge its case."""

    key: str  #: the table's ``MODE adapter:kind``
    case: str  #: the case file's id
    behaviour: Judgement | None  #: None: the matrix files the case as no finding
    known: tuple[str, ...]
    note: str = ""

    @property
    def new(self) -> bool:
        return self.behaviour is not None and not self.known

    def line(self) -> str:
        if self.behaviour is None:
            return f"{self.key}: no matrix finding ({self.note})"
        where = "known: " + "; ".join(self.known) if self.known else f"NEW: {NEW}"
        return f"{self.key}: {self.behaviour}, {where}"


def judge_table(
    rows: Sequence[dict[str, Any]],
    deadline: float,
    known: Known | None = None,
) -> list[JudgedFinding]:
    """Each row seen in this run (count > 0) with a case file: the case judged as a matrix
    cell of the row's adapter in the row's mode, then looked up in :class:`Known`."""
    from k2conform.adapter.registry import create_adapter, load
    from k2conform.case.corpus import load_case

    known = known or Known.load()
    adapters: dict[str, Any] = {}
    judged = []
    for row in rows:
        if not row.get("count") or not row.get("file"):
            continue
        label, _, component = row["key"].partition(" ")
        name = component.partition(":")[0]
        case = load_case(row["file"])
        if name not in adapters:
            adapters[name] = create_adapter(name)
            load(adapters[name])
        mode = axis_mode(label)
        cell = judge_finding(case, adapters[name], mode, deadline)
        if not cell.outcome.finding:
            note = f"the {case.id[:1]}_ case is {cell.outcome.value} in {matrix_mode(case, mode)}"
            judged.append(JudgedFinding(row["key"], case.id, None, (), note))
            continue
        behaviour = Judgement.of(cell, label)
        judged.append(
            JudgedFinding(row["key"], case.id, behaviour, tuple(known.lookup(case, behaviour)))
        )
    return judged
