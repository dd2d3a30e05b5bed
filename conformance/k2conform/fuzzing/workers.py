"""Several long-lived libFuzzer processes of one target, sharing a corpus: ``--workers N``.

Each worker is the target run as ``k2conform fuzz`` runs one (:func:`run_workers` is that
run for N = 1 too), with ``--worker K``: it keeps its own findings table
(``signatures-<target>.worker-K.json``) and claims a new signature before it saves a case
file, so two workers never save the same one twice (:class:`~k2conform.fuzzing.differential.
FindingStore`).  All of them write new inputs to the same first corpus directory, which
libFuzzer re-reads every second (``-reload``, on by default), so each fuzzes from what the
others found.  libFuzzer's own ``-jobs=N -workers=N`` is not used: it runs ``argv`` again
through the shell with our options stripped (``python -m`` and the target name lost) and
writes each job's output to ``fuzz-K.log``, where neither the findings nor the final figures
can be told apart.

The workers run in their own sessions (a Ctrl-C reaches this process only, which then stops
them), die with it (``PR_SET_PDEATHSIG`` on Linux), and are stopped by their PIDs with
SIGTERM (libFuzzer then prints its final figures) when this process is interrupted, is sent
SIGTERM or SIGHUP, or one of them stops with an error (a crash stops the whole run, as it
stops a single libFuzzer).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

_STAT = re.compile(r"^stat::(\w+):\s*(\d+)")
_COVERAGE = re.compile(r"cov: (\d+) ft: (\d+)")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_READY = re.compile(r"ready after ([\d.]+) CPU seconds")
#: Seconds a stopped worker gets to print libFuzzer's final figures before it is killed.
STOP_GRACE = 30.0


class Interrupted(Exception):
    """This process was sent SIGINT, SIGTERM or SIGHUP while its workers ran (all of them
    stopped since: ``workers``)."""

    def __init__(self, signal_name: str, workers: list[Worker]) -> None:
        super().__init__(signal_name)
        self.workers = workers


@dataclass
class Worker:
    """One libFuzzer process and what its output said."""

    index: int
    command: list[str]
    process: subprocess.Popen | None = None
    stats: dict[str, int] = field(default_factory=dict)
    coverage: tuple[int, int] | None = None
    artifacts: list[str] = field(default_factory=list)
    ready_cpu: float | None = None
    stopped: bool = False  # stopped by us, not by its own limit or a crash
    output: list[str] = field(default_factory=list)  # kept only when asked (the bench)

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    @property
    def failed(self) -> bool:
        """Ended with an error of its own (a crash, a k2conform bug), not by its limit or us."""
        return self.returncode not in (0, None) and not self.stopped

    def read(self, line: str) -> None:
        match = _STAT.match(line)
        if match:
            self.stats[match.group(1)] = int(match.group(2))
        match = _COVERAGE.search(line)
        if match:
            self.coverage = (int(match.group(1)), int(match.group(2)))
        match = _ARTIFACT.search(line)
        if match:
            self.artifacts.append(match.group(1))
        match = _READY.search(line)
        if match:
            self.ready_cpu = float(match.group(1))


def split_runs(runs: int | None, workers: int) -> list[int | None]:
    """Each worker's ``-runs``: together exactly ``runs`` (the first ones take the rest)."""
    if runs is None:
        return [None] * workers
    return [runs // workers + (1 if k < runs % workers else 0) for k in range(workers)]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_workers(
    commands: Sequence[Sequence[str]],
    *,
    echo: TextIO | None = sys.stderr,
    status: TextIO | None = None,
    keep_output: bool = False,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> list[Worker]:
    """Start every command, pass their stderr through to ``echo`` (prefixed ``[wK]`` when
    there are several; each worker's PID goes to ``status``, default ``echo``), and return
    when all have ended (or are stopped after ``timeout`` seconds); see the module's docstring
    for the stopping.  Raises :class:`Interrupted` after stopping them when this process was
    interrupted."""
    workers = [Worker(k, list(c)) for k, c in enumerate(commands)]
    prefix = len(workers) > 1
    lock = threading.Lock()
    done = threading.Event()
    environment = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    signalled: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        signalled.append(signum)
        done.set()

    handlers = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            handlers[signum] = signal.signal(signum, on_signal)
    threads = []
    try:
        for worker in workers:
            worker.process = subprocess.Popen(
                worker.command,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=environment,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            said = status or echo
            if said is not None and prefix:
                with lock:
                    said.write(f"[k2conform fuzz] worker {worker.index}: pid {worker.process.pid}")
                    said.write("\n")
                    said.flush()
        for worker in workers:
            thread = threading.Thread(
                target=_pump, args=(worker, echo, prefix, lock, keep_output, done), daemon=True
            )
            thread.start()
            threads.append(thread)
        end = None if timeout is None else time.monotonic() + timeout
        while not done.is_set() and any(t.is_alive() for t in threads):
            if end is not None and time.monotonic() > end:
                break
            done.wait(0.2)
    finally:
        try:
            if any(w.process is not None and w.process.poll() is None for w in workers):
                stop(workers)
            for thread in threads:
                thread.join()
            for worker in workers:
                if worker.process is not None:
                    worker.process.wait()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    if signalled:
        raise Interrupted(signal.Signals(signalled[0]).name, workers)
    return workers


def _pump(
    worker: Worker,
    echo: TextIO | None,
    prefix: bool,
    lock: threading.Lock,
    keep: bool,
    done: threading.Event,
) -> None:
    process = worker.process
    assert process is not None and process.stderr is not None
    for line in process.stderr:
        worker.read(line)
        if keep:
            worker.output.append(line)
        if echo is not None:
            with lock:
                echo.write(f"[w{worker.index}] {line}" if prefix else line)
                echo.flush()
    if process.wait() != 0:
        done.set()  # a crash (or a worker that never started) ends the run for all of them


def stop(workers: Iterable[Worker], grace: float = STOP_GRACE) -> None:
    """SIGTERM each still-running worker by its PID, then SIGKILL what is left after
    ``grace`` seconds."""
    running = [w for w in workers if w.process is not None and w.process.poll() is None]
    for worker in running:
        worker.stopped = True
        assert worker.process is not None
        worker.process.send_signal(signal.SIGTERM)
    for worker in running:
        assert worker.process is not None
        try:
            worker.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            worker.process.kill()


# -- the findings tables ---------------------------------------------------------------------


def table_path(findings: Path, target: str, worker: int | None = None) -> Path:
    """The findings table of a run (``worker`` None) or of one of its workers."""
    name = f"signatures-{target}" + ("" if worker is None else f".worker-{worker}")
    return Path(findings) / f"{name}.json"


def claims_dir(findings: Path, target: str) -> Path:
    """Where a run's workers claim new signatures (emptied at its start and end)."""
    return Path(findings) / f".claims-{target}"


def clear_worker_files(findings: Path, target: str, workers: int) -> None:
    import shutil

    shutil.rmtree(claims_dir(findings, target), ignore_errors=True)
    for k in range(workers):
        table_path(findings, target, k).unlink(missing_ok=True)


def merge_tables(tables: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One findings table from the workers' tables: counts, executions and repeats add up, a
    signature's case file is the worker's that saved it, ``new`` if a worker saved it in
    this run, the time is the longest worker's."""
    counts: dict[str, int] = {}
    files: dict[str, str | None] = {}
    new: set[str] = set()
    for table in tables:
        for row in table.get("signatures") or ():
            key = row["key"]
            counts[key] = counts.get(key, 0) + row["count"]
            if row.get("file") and not files.get(key):
                files[key] = row["file"]
            else:
                files.setdefault(key, None)
            if row.get("new"):
                new.add(key)
    return {
        "target": tables[0].get("target") if tables else None,
        "workers": len(tables),
        "executions": sum(t.get("executions") or 0 for t in tables),
        # each worker counts the repeats of its own inputs only
        **(
            {"repeats": sum(t.get("repeats") or 0 for t in tables)}
            if any("repeats" in t for t in tables)
            else {}
        ),
        "seconds": max((t.get("seconds") or 0 for t in tables), default=0),
        "signatures": [
            {"key": k, "count": c, "file": files.get(k), "new": k in new}
            for k, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
    }


def merge_worker_tables(findings: Path, target: str, workers: int) -> dict[str, Any] | None:
    """Merge the workers' tables into the run's ``signatures-<target>.json`` (the workers'
    files and claims are removed); None when no worker wrote one."""
    tables = []
    for k in range(workers):
        path = table_path(findings, target, k)
        if path.is_file():
            tables.append(json.loads(path.read_text(encoding="utf-8")))
    if not tables:
        return None
    merged = merge_tables(tables)
    table_path(findings, target).write_text(
        json.dumps(merged, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
        errors="backslashreplace",
    )
    clear_worker_files(findings, target, workers)
    return merged
