"""A test kit for parser authors: the whole corpus against *your* parser, in your pytest run.

``pip install k2conform`` in your repository, write an adapter for your parser (the two
methods of :class:`k2conform.adapter.contract.Adapter`, see docs/adapters.md) and add, in your
``conftest.py`` or in any ``test_*.py`` module::

    from k2conform.testkit import conformance_tests
    from myparser.k2 import MyAdapter

    conformance_tests(globals(), adapter=MyAdapter(), baseline="k2-baseline.json")

Your pytest run then has one test per case and delivery mode, with the id ``CASE[MODE]``
(``conftest.py::y_spec_single_call[stream-token]``).  Each test is one cell of
``k2conform run``, computed by the same code (:func:`k2conform.run.cell.run_cell`: the same
delivery modes, the same stream reassembly and invariants, the same comparison with the
project's expectations), so the verdicts are the matrix's:

* ``agree`` and ``impl-defined`` (an ``i_`` case: recorded, not judged) pass;
* ``unavailable`` (your adapter's ``load()`` raised AdapterUnavailable) is skipped;
* ``differs``, ``crash``, ``timeout`` and ``adapter-error`` fail, with a readable diff:
  the model output with markers visible, the delivery variant, and every differing field
  with the expected and observed values;
* a cell your baseline lists (the project's baseline format: ``{"entries": [{"adapter",
  "outcome", "fields", "deliveries", "cases", "reason"}]}``, see ``k2conform baseline``)
  is ``xfail(strict=True)``: it must still fail *in exactly that way*; if it passes, or
  fails differently, the test fails, so the baseline always says what is wrong today.

Options: ``modes`` (default: every mode but ``stream-recorded``, which runs for cases that
recorded deltas when you name it), ``cases`` (id globs), ``corpus`` (another corpus
directory), ``seed``, ``burst``, ``tokenizer`` (a real Kimi tokenizer directory), ``timeout``
(seconds per cell: a hanging parser is a ``timeout`` failure, not a hung pytest).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from k2conform.delivery.modes import DEFAULT_BURST, DEFAULT_MODES, DEFAULT_SEED, MODES
from k2conform.adapter.contract import Adapter
from k2conform.gate.baseline import BaselineEntry, load_baseline
from k2conform.case.corpus import CompletionCase, default_corpus_dir, load_corpus
from k2conform.markers import visible
from k2conform.adapter.registry import Availability, load
from k2conform.model import Cell, CellOutcome
from k2conform.run.cell import CellSettings, run_cell
from k2conform.run.matrix import select_cases

__all__ = ["ConformanceKit", "ConformanceFailure", "BaselinedDeviation", "conformance_tests"]


class ConformanceFailure(AssertionError):
    """A cell that is not what the project expects (and is not in the baseline)."""


class BaselinedDeviation(AssertionError):
    """A cell that fails exactly as a baseline entry says: the strict xfail's exception."""


@dataclass
class ConformanceKit:
    """One adapter, one corpus, one baseline: the cells to run and how to judge each."""

    adapter: Adapter
    baseline: Sequence[BaselineEntry] = ()
    modes: Sequence[str] = DEFAULT_MODES
    cases: Sequence[str] = ()
    corpus: Path | None = None
    seed: int = DEFAULT_SEED
    burst: int = DEFAULT_BURST
    tokenizer: str | None = None
    #: Seconds per cell before it is run again with ten times as long, then a ``timeout`` failure.
    timeout: float = 20.0
    _availability: Availability | None = field(default=None, repr=False)
    _whole: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown delivery mode(s) {unknown} (known: {', '.join(MODES)})")
        root = Path(self.corpus) if self.corpus else default_corpus_dir()
        self.corpus = root
        self._cases = {
            c.id: c
            for c in select_cases(load_corpus(root).completions, self.cases)
            if c.format in self.adapter.formats
        }
        self.settings = CellSettings(
            seed=self.seed, burst=self.burst, tokenizer=self.tokenizer, deadline=self.timeout
        )

    # -- what to run ----------------------------------------------------------------------

    def cells(self) -> Iterator[tuple[str, str]]:
        """(case id, mode) for every test, in corpus order."""
        for case in self._cases.values():
            for mode in self.modes:
                if mode == "stream-recorded" and case.deltas is None:
                    continue
                yield case.id, mode

    def entry_for(self, case_id: str, mode: str) -> BaselineEntry | None:
        """The baseline entry that lists this cell, if any."""
        for entry in self.baseline:
            if (
                entry.adapter == self.adapter.name
                and entry.covers_case(case_id)
                and entry.covers_delivery(mode)
            ):
                return entry
        return None

    def xfail_mark(self, case_id: str, mode: str) -> Any | None:
        entry = self.entry_for(case_id, mode)
        if entry is None:
            return None
        reason = f"baseline: {entry.outcome} {','.join(entry.fields)}" + (
            f" ({entry.reason})" if entry.reason else ""
        )
        return pytest.mark.xfail(strict=True, raises=BaselinedDeviation, reason=reason)

    # -- running one cell ------------------------------------------------------------------

    def run(self, case_id: str, mode: str) -> Cell:
        """The matrix's cell for this case and mode (the same code as ``k2conform run``)."""
        if self._availability is None:
            self._availability = load(self.adapter)
        return run_cell(
            self.adapter, self._cases[case_id], mode, self.settings, self._availability, self._whole
        )

    def check(self, case_id: str, mode: str) -> Cell:
        """Run the cell and raise for pytest: skip, pass, or the failure with its diff."""
        cell = self.run(case_id, mode)
        if cell.outcome == CellOutcome.UNAVAILABLE:
            pytest.skip(f"{self.adapter.name} unavailable: {cell.error or ''}")
        entry = self.entry_for(case_id, mode)
        if cell.outcome.passing:
            return cell  # a baselined cell that passes is an XPASS(strict): a stale entry
        text = describe(self._cases[case_id], cell)
        if (
            entry is not None
            and entry.outcome == cell.outcome
            and tuple(entry.fields) == tuple(cell.fields)
        ):
            raise BaselinedDeviation(text)
        if entry is not None:
            text += (
                f"\n\nthe baseline lists this cell as {entry.outcome} {','.join(entry.fields)}, "
                f"but it is {cell.outcome} {','.join(cell.fields)}"
            )
        raise ConformanceFailure(text)


def describe(case: CompletionCase, cell: Cell) -> str:
    """A failing cell for a human: what went in, and every field that came out wrong."""
    lines = [
        f"{cell.adapter} on {case.id} [{cell.delivery}]: {cell.outcome}"
        + (f" ({', '.join(cell.fields)})" if cell.fields else ""),
        f"  {case.description}" if case.description else "",
        "model output (markers visible):",
        *("    " + line for line in visible(case.model_output).split("\n")),
    ]
    if cell.variant and cell.variant != cell.delivery:
        lines.append(f"delivery variant: {cell.variant}")
    if cell.variants_differing:
        lines.append(
            f"variants that differ: {', '.join(cell.variants_differing[:8])}"
            + (" ..." if len(cell.variants_differing) > 8 else "")
        )
    if cell.outcome != CellOutcome.DIFFERS:
        lines.append(f"error: {cell.error}")
    for diff in cell.diffs:
        where = f" of call {diff.call}" if diff.call is not None else ""
        lines += [
            f"- {diff.field}{where} differs ({diff.how}):",
            f"    expected: {_show(diff.expected)}",
            f"    observed: {_show(diff.observed)}",
        ]
    if cell.outcome == CellOutcome.DIFFERS and cell.observed is not None:
        lines.append(
            "observed result: "
            + json.dumps(
                {k: v for k, v in cell.observed.to_json().items() if k != "meta"},
                ensure_ascii=False,
            )
        )
    return "\n".join(line for line in lines if line != "")


def _show(value: Any) -> str:
    if isinstance(value, str):
        return visible(json.dumps(value, ensure_ascii=False))
    return json.dumps(value, ensure_ascii=False)


# -- pytest glue ---------------------------------------------------------------------------


class ConformanceItem(pytest.Item):
    """One cell as a test; its name is ``CASE[MODE]``."""

    def __init__(self, *, kit: ConformanceKit, case_id: str, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kit, self.case_id, self.mode = kit, case_id, mode
        mark = kit.xfail_mark(case_id, mode)
        if mark is not None:
            self.add_marker(mark)

    def runtest(self) -> None:
        self.kit.check(self.case_id, self.mode)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (ConformanceFailure, BaselinedDeviation)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"k2conform {self.kit.adapter.name}: {self.case_id}[{self.mode}]"


class ConformanceFile(pytest.File):
    """The conftest.py that called :func:`conformance_tests`, collected as the corpus's tests."""

    kit: ConformanceKit

    def collect(self) -> Iterator[ConformanceItem]:
        for case_id, mode in self.kit.cells():
            yield ConformanceItem.from_parent(
                self, name=f"{case_id}[{mode}]", kit=self.kit, case_id=case_id, mode=mode
            )


def conformance_tests(
    namespace: dict[str, Any],
    adapter: Adapter,
    baseline: str | os.PathLike[str] | Sequence[BaselineEntry] | None = None,
    *,
    modes: Sequence[str] | None = None,
    cases: Sequence[str] = (),
    corpus: str | os.PathLike[str] | None = None,
    seed: int = DEFAULT_SEED,
    burst: int = DEFAULT_BURST,
    tokenizer: str | None = None,
    timeout: float = 20.0,
    name: str = "test_k2conform",
) -> ConformanceKit:
    """Add the corpus's tests to the calling module (pass ``globals()``).

    In a ``conftest.py`` the tests are collected from the conftest file itself (ids
    ``conftest.py::CASE[MODE]``); in a test module a parametrized function ``name`` is
    added (ids ``test_k2conform[CASE[MODE]]``).  A relative ``baseline`` path is resolved
    against the calling file's directory.
    """
    here = Path(namespace.get("__file__") or ".").resolve().parent
    if isinstance(baseline, (str, os.PathLike)):
        path = Path(baseline)
        entries: Sequence[BaselineEntry] = load_baseline(
            path if path.is_absolute() else here / path
        ).entries
    else:
        entries = tuple(baseline or ())
    kit = ConformanceKit(
        adapter,
        entries,
        tuple(modes or DEFAULT_MODES),
        tuple(cases),
        Path(corpus) if corpus else None,
        seed,
        burst,
        tokenizer,
        timeout,
    )
    source = Path(namespace.get("__file__") or "")
    if source.name == "conftest.py":
        conftest = source.resolve()

        def pytest_collect_file(file_path: Path, parent: Any) -> Any:
            if Path(file_path).resolve() == conftest:
                collector = ConformanceFile.from_parent(parent, path=Path(file_path))
                collector.kit = kit
                return collector
            return None

        namespace["pytest_collect_file"] = pytest_collect_file
    else:
        params = [
            pytest.param(
                case_id,
                mode,
                id=f"{case_id}[{mode}]",
                marks=[m for m in [kit.xfail_mark(case_id, mode)] if m is not None],
            )
            for case_id, mode in kit.cells()
        ]

        @pytest.mark.parametrize(("case_id", "mode"), params)
        def test_k2conform(case_id: str, mode: str) -> None:
            kit.check(case_id, mode)

        test_k2conform.__name__ = name
        namespace[name] = test_k2conform
    namespace.setdefault("k2conform_kit", kit)
    return kit
