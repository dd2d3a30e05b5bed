"""The matrix: every case × adapter × delivery mode, in worker processes, one outcome per cell.

Workers import every adapter once and compute each cell with :func:`k2conform.run.cell.run_cell`
(which owns the deadline and its retry); the parent hands out one cell at a time and gives a
worker up after the cell's hard limit.  A parser
that hangs or kills its worker becomes a ``timeout``/``crash`` cell and the worker is
replaced; an exception in this project's own code (comparison, delivery, reporting) is a
harness error that stops the run with a traceback (exit status 2).
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import multiprocessing
import os
import signal
import threading
import sys
import time
import traceback
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Collection, Iterable, Iterator, Mapping, Sequence

from k2conform.adapter.registry import create_adapter, load
from k2conform.case.corpus import CompletionCase, load_corpus
from k2conform.errors import HarnessError
from k2conform.model import AdapterRow, Cell, RunResults
from k2conform.run.cell import CellSettings, case_unfit, run_cell
from k2conform.run.results import adapter_row, build_results


@dataclass(frozen=True)
class RunConfig:
    """What the workers load (the corpus, the adapters) and how each cell runs."""

    corpus_root: Path
    adapters: tuple[str, ...]
    jobs: int = 0
    cell: CellSettings = CellSettings()
    #: Where adapters with a run-wide session (a server) keep their logs and caches.
    run_dir: Path | None = None


def select_cases(cases: Iterable[CompletionCase], globs: Sequence[str]) -> list[CompletionCase]:
    return [c for c in cases if not globs or any(fnmatch.fnmatchcase(c.id, g) for g in globs)]


# -- workers ---------------------------------------------------------------------------------


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _worker(conn: Connection, config: RunConfig, silence: bool = True) -> None:
    """Import every adapter once, then run the cells the parent sends until it sends None.

    Parsers log freely (SGLang warns once per unrecognised id); a worker's output would
    bury the progress bar, so it goes to /dev/null and results travel over the pipe.
    """
    from k2conform.delivery.tokenizer import load_tokenizer

    if (
        threading.current_thread() is threading.main_thread()
    ):  # a worker process, not a test's thread
        signal.signal(
            signal.SIGINT, signal.SIG_IGN
        )  # Ctrl-C reaches the whole group: the parent decides
    if silence:
        _silence()

    try:
        corpus = {c.id: c for c in load_corpus(config.corpus_root).completions}
        load_tokenizer(config.cell.tokenizer)
        adapters = {name: create_adapter(name, config.cell.deadline) for name in config.adapters}
        availability = {name: load(a) for name, a in adapters.items()}
    except BaseException:  # noqa: BLE001 - reported to the parent as a harness error
        conn.send(("harness-error", traceback.format_exc()))
        return
    conn.send(
        (
            "ready",
            (
                # each adapter's row as loaded here: the parent reports it without loading the
                # adapter again (a command adapter's hello is its parser's whole import)
                {
                    adapters[spec].name: adapter_row(adapters[spec], (a.status, a.reason))
                    for spec, a in availability.items()
                },
                # an adapter's own longer deadline is known once it is loaded (a remote's hello)
                {spec: config.cell.for_adapter(a) for spec, a in adapters.items()},
            ),
        )
    )
    whole_results: dict = {}  # one-shot results, reused by every stream cell of the same case
    while True:
        task = conn.recv()
        if task is None:
            return
        case_id, adapter_name, mode = task
        try:
            cell = run_cell(
                adapters[adapter_name],
                corpus[case_id],
                mode,
                config.cell,
                availability[adapter_name],
                whole_results,
            )
        except BaseException:  # noqa: BLE001 - reported to the parent as a harness error
            conn.send(("harness-error", traceback.format_exc()))
            return
        conn.send(("cell", cell))


def _silence() -> None:
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


@dataclass
class _Slot:
    process: Any
    conn: Connection
    task: tuple[str, str, str] | None = None
    deadline: float = 0.0


#: The cells that pay for a worker's start when no adapter waits on a server: 3,078 cells of
#: the in-process parsers took 14.4 s on one worker and 13.1 s on two, which used 20.3 s of CPU
#: to one's 13.5 s (7 Dec 2026, load 1).
CELLS_PER_WORKER = 3000


class CellPool:
    """Runs cells on ``jobs`` worker processes with a per-cell deadline."""

    def __init__(self, config: RunConfig, progress: Any = None) -> None:
        self.config = config
        self.progress = progress
        self.context = multiprocessing.get_context("spawn")
        #: Each adapter's row (release, status) as the workers loaded it, by display name.
        self.rows: dict[str, AdapterRow] = {}
        self.cell_settings: dict[str, CellSettings] = {}
        self.restarts = 0
        #: Set when Ctrl-C or SIGTERM stopped the run: the cells returned are the ones done.
        self.interrupted = False
        self.planned = 0
        # Cells carry the adapter's display name (``NAME=cmd:...`` → NAME), lost ones too.
        self.adapters = {spec: create_adapter(spec) for spec in config.adapters}
        self.display_names = {spec: adapter.name for spec, adapter in self.adapters.items()}

    def _spawn(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker, args=(child, self.config), daemon=True)
        with _sigint_ignored():  # born ignoring Ctrl-C (a spawned child inherits SIG_IGN), so
            process.start()  # an interrupt while it imports prints no traceback: the parent decides
        child.close()
        return _Slot(process, parent)

    def _ready(self, slot: _Slot) -> None:
        """Wait for a spawned worker's hello: its adapters loaded, their rows and settings."""
        kind, payload = self._receive(slot, deadline=time.monotonic() + 600)
        if kind != "ready":
            raise HarnessError(f"worker failed to start:\n{payload}")
        self.rows, self.cell_settings = payload

    def _receive(self, slot: _Slot, deadline: float) -> tuple[str, Any]:
        if not slot.conn.poll(max(0.0, deadline - time.monotonic())):
            return "timeout", None
        try:
            kind, payload = slot.conn.recv()
        except (EOFError, ConnectionError, OSError):
            return "died", None
        if kind == "harness-error":
            raise HarnessError(f"k2conform failed inside a worker:\n{payload}")
        return kind, payload

    def run(self, tasks: Sequence[tuple[str, str, str]]) -> list[Cell]:
        """Every task's cell, or, when interrupted (KeyboardInterrupt), those done so far, with
        :attr:`interrupted` set; the workers are stopped on every way out."""
        jobs = max(1, min(self.config.jobs or self._default_jobs(len(tasks)), len(tasks) or 1))
        self.planned = len(tasks)  # until the workers say which adapters are unavailable
        cells: list[Cell] = []
        try:
            with adapter_sessions(self.adapters.values(), self.config.run_dir):
                # All workers import at once: one after the other, the run's start took a
                # whole import (7 s of in-process parsers) longer per worker.
                slots = [self._spawn() for _ in range(jobs)]
                try:
                    for slot in slots:
                        self._ready(slot)
                    self._loop(tasks, slots, cells)
                finally:
                    for slot in slots:
                        self._stop(slot)
        except KeyboardInterrupt:
            self.interrupted = True
        return cells

    def _default_jobs(self, cells: int) -> int:
        """A worker per core, but no more than one per ``CELLS_PER_WORKER`` cells: a worker's
        start imports every adapter (7 s of one core for the in-process parsers, 7 Dec 2026),
        what about 3,000 of their cells take, so a small run's second worker only costs CPU.
        An adapter that waits on a server (``parallel_requests``) may want more workers than
        cores: each keeps one request in flight."""
        waiting = max((a.parallel_requests for a in self.adapters.values()), default=1)
        if waiting > 1:
            return max(os.cpu_count() or 1, waiting)
        return min(os.cpu_count() or 1, -(-cells // CELLS_PER_WORKER))

    def _loop(
        self, tasks: Sequence[tuple[str, str, str]], slots: list[_Slot], cells: list[Cell]
    ) -> None:
        # An adapter whose package is not installed is reported once (``availability``),
        # not as a cell per case and mode.
        tasks = [t for t in tasks if self._status(t[1]) != "unavailable"]
        self.planned = len(tasks)  #: the cells the run owes: its inventory's "planned"
        pending = list(reversed(tasks))
        while pending or any(s.task for s in slots):
            for slot in slots:
                if slot.task is None and pending:
                    slot.task = pending.pop()
                    slot.deadline = time.monotonic() + self._hard_limit(slot.task[1])
                    slot.conn.send(slot.task)
            busy = [s for s in slots if s.task]
            nearest = min(s.deadline for s in busy)
            wait(
                [s.conn for s in busy] + [s.process.sentinel for s in busy],
                timeout=max(0.0, nearest - time.monotonic()),
            )
            for index, slot in enumerate(slots):
                if slot.task is None:
                    continue
                ready = (
                    slot.conn.poll()
                    or not slot.process.is_alive()
                    or time.monotonic() >= slot.deadline
                )
                if not ready:
                    continue
                kind, payload = self._receive(slot, deadline=time.monotonic())
                if kind == "cell":
                    cells.append(payload)
                else:
                    cells.append(self._lost(slot.task, kind))
                    slots[index] = self._replace(slot)
                slots[index].task = None
                if self.progress:
                    self.progress(len(cells), len(tasks))

    def _hard_limit(self, spec: str) -> float:
        return self.cell_settings.get(spec, self.config.cell).hard_limit

    def _status(self, spec: str) -> str:
        row = self.rows.get(self.display_names.get(spec, spec))
        return row.status.value if row else "ok"

    def _lost(self, task: tuple[str, str, str], kind: str) -> Cell:
        case_id, spec, mode = task
        adapter = self.display_names.get(spec, spec)
        if kind == "timeout":
            reason = (
                f"no result within {self._hard_limit(spec):g} s, retry included; worker restarted"
            )
            return Cell.failed(case_id, adapter, mode, "timeout", reason)
        reason = "the worker process died while parsing (a crash in native code?); worker restarted"
        return Cell.failed(case_id, adapter, mode, "crash", reason)

    def _replace(self, slot: _Slot) -> _Slot:
        self._stop(slot)
        self.restarts += 1
        slot = self._spawn()
        self._ready(slot)
        return slot

    @staticmethod
    def _stop(slot: _Slot) -> None:
        try:
            if slot.process.is_alive() and slot.task is None:
                slot.conn.send(None)
                slot.process.join(2)
        except (BrokenPipeError, OSError):
            pass
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(5)


def in_shard(case_id: str, k: int, n: int) -> bool:
    """Whether ``case_id`` belongs to shard ``k`` of ``n`` (1-based): a stable hash of the id, so
    every machine draws the same partition, and all cells of a case (whose stale-baseline check
    and stream-vs-one-shot comparison look at each other) land in one shard."""
    digest = hashlib.sha256(case_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % n == k - 1


@contextmanager
def adapter_sessions(adapters: Iterable[Any], run_dir: Path | None) -> Iterator[None]:
    """Run-wide set-up in the parent process, before the workers start and after they end.

    Each adapter's ``run_session(run_dir)`` (``Adapter``'s yields nothing) yields environment
    variables for the workers (``vllm-server`` starts its server there and publishes the
    URL).  The variables are set for the run's duration, so spawned workers inherit them.
    """
    run_dir = Path(run_dir or Path.cwd() / ".k2conform-run")
    saved = dict(os.environ)
    with ExitStack() as stack:
        for adapter in adapters:
            os.environ.update(stack.enter_context(adapter.run_session(run_dir)))
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def plan(
    cases: Sequence[CompletionCase],
    adapters: Sequence[str],
    modes: Sequence[str],
    adapter_modes: Mapping[str, Sequence[str]] | None = None,
    request_options: Mapping[str, Collection[str]] | None = None,
    formats: Mapping[str, Collection[str]] | None = None,
) -> list[tuple[str, str, str]]:
    """The cells to run, longest outputs first so no long cell is left for the end; none
    that ``case_unfit`` rules out.  ``adapter_modes`` (when no mode was asked for) narrows
    each adapter to the modes it takes; ``request_options``: the server options each adapter
    applies itself (``Adapter.request_options``); ``formats``: the formats each
    parses (``Adapter.formats``, default K2 only): a case of another family is no cell of
    that adapter."""
    options = request_options or {}
    parses = formats or {}
    return [
        (case.id, adapter, mode)
        for case in sorted(cases, key=lambda c: -len(c.model_output))
        for adapter in adapters
        if case.format in parses.get(adapter, ("k2",))
        for mode in modes
        if case_unfit(case, mode, options.get(adapter, ())) is None
        and (adapter_modes is None or mode in adapter_modes.get(adapter, modes))
    ]


def progress_printer(stream: Any = sys.stderr) -> Any:
    """A one-line progress bar on a terminal; a line per tenth elsewhere."""
    tty = stream.isatty()
    last = [-1]

    def show(done: int, total: int) -> None:
        if tty:
            width = 30
            filled = width * done // max(total, 1)
            stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells")
            if done == total:
                stream.write("\n")
            stream.flush()
        elif done * 10 // max(total, 1) != last[0]:
            last[0] = done * 10 // max(total, 1)
            stream.write(f"{done}/{total} cells\n")

    return show


def run_matrix(
    cases: Sequence[CompletionCase],
    adapters: Mapping[str, Any],
    modes: Sequence[str],
    per_adapter: Mapping[str, Sequence[str]] | None,
    config: RunConfig,
    seed: int,
    shard: tuple[int, int] | None = None,
) -> RunResults:
    """Every planned cell of ``cases`` x ``adapters`` (spec -> adapter) x ``modes`` on the worker
    pool, as one results document that says what it planned and ran (``inventory``), and, when
    Ctrl-C or SIGTERM stopped it, that it is ``partial``; ``per_adapter``: the modes each adapter
    takes (None: every one of ``modes``)."""
    pool = CellPool(config, progress=progress_printer())
    started = time.monotonic()
    names = list(adapters)
    tasks = plan(
        cases,
        names,
        modes,
        per_adapter,
        {n: a.request_options for n, a in adapters.items()},
        {n: a.formats for n, a in adapters.items()},
    )
    with _sigterm_interrupts():
        cells = pool.run(tasks)
    extra: dict[str, Any] = {"inventory": {"planned": pool.planned, "run": len(cells)}}
    if pool.interrupted:
        extra["partial"] = {
            "cells": len(cells),
            "planned": pool.planned,
            "reason": "interrupted (Ctrl-C or SIGTERM)",
        }
    if shard:
        extra["shard"] = "{}/{}".format(*shard)
    # An adapter no worker loaded (the run was stopped first) is read here.
    rows = [pool.rows.get(a.name) or adapter_row(a, ("ok", "")) for a in adapters.values()]
    return build_results(
        cells, cases, rows, seed, modes, time.monotonic() - started, pool.restarts, **extra
    )


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops a run the way Ctrl-C does: workers stopped, partial results kept."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
