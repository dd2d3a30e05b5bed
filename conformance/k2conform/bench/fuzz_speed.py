"""``k2conform bench --fuzz-seconds N``: the atheris targets' executions per second, side by side.

Every run starts at the same moment from the same seed corpus (built from ``corpus/``), with the
libFuzzer flags ``k2conform fuzz`` uses, so all of them meet the same load and their ratios hold;
the absolute figures come with the load average around them.  Besides libFuzzer's exec/s each
row has the CPU seconds the process used (exec per CPU second moves far less with the load than
exec per wall second) and libFuzzer's final ``cov``/``ft``.  The differential target runs twice:
with the parsers under test instrumented (how it fuzzes) and with only the reference
(``--instrument reference``), which prices the parsers' instrumentation and shows what it adds
to libFuzzer's coverage.

With ``--fuzz-workers N`` (repeatable) the differential target then runs alone once per
worker count, one count after the other, as ``k2conform fuzz --workers N`` runs it
(:mod:`k2conform.fuzzing.workers`: N processes sharing one corpus): the row adds up the
workers' executions and exec/s, and its CPU seconds are all of theirs.

A differential row also says how many executions repeated an input the target had already run
(``repeats``, from the run's findings tables: :class:`~k2conform.fuzzing.mutator.SeenInputs`):
those explored nothing new, whatever exec/s says.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from k2conform.resources import bundled

#: (target, its own options) of each run, in the order they are reported.
FUZZ_RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reference", ()),
    ("differential", ()),
    ("differential", ("--instrument", "reference")),
    ("roundtrip", ()),
)
#: Past the bounded run: importing vLLM and SGLang takes a minute on a loaded machine.
STARTUP_ALLOWANCE = 600


def fuzz_command(
    target: str, options: Sequence[str], seconds: int, work: Path, seeds: Path
) -> list[str]:
    """The target script with the flags ``k2conform fuzz`` gives it; new inputs and findings go
    to ``work``."""
    from k2conform.fuzzing.targets import ENVELOPE_TARGETS, MAX_LEN

    fuzz_dir = bundled("fuzz")
    command = [
        sys.executable,
        str(fuzz_dir / f"fuzz_{target}.py"),
        "--findings",
        str(work / "findings"),
        *options,
        f"-max_total_time={seconds}",
        f"-max_len={MAX_LEN[target]}",
        "-print_final_stats=1",
        f"-artifact_prefix={work}/",
        str(work),
    ]
    if target in ENVELOPE_TARGETS:
        command += [f"-dict={fuzz_dir / 'kimi_k2.dict'}", str(seeds)]
    return command


def fuzz_speeds(
    seconds: int, runs: Sequence[tuple[str, Sequence[str]]] = FUZZ_RUNS
) -> dict[str, Any]:
    """Every run at the same time; one row each (see :func:`fuzz_row`) and the load around them."""
    from k2conform.fuzzing.seeds import build_seed_corpus

    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="k2conform-bench-fuzz-") as tmp:
        seeds = Path(tmp) / "seeds"
        build_seed_corpus(seeds)
        started = []
        for k, (target, options) in enumerate(runs):
            work = Path(tmp) / f"run-{k}"
            work.mkdir()
            log = (work / "libfuzzer.log").open("w", encoding="utf-8", errors="replace")
            command = fuzz_command(target, options, seconds, work, seeds)
            started.append(
                (
                    target,
                    options,
                    log,
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work),
                )
            )
        rows = []
        for (
            target,
            options,
            log,
            process,
        ) in started:  # reaped in order: the CPU deltas are each one's
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                process.wait(timeout=seconds + STARTUP_ALLOWANCE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            log.close()
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            output = Path(log.name).read_text(encoding="utf-8", errors="replace")
            row = fuzz_row(target, options, seconds, process.returncode, output, cpu)
            rows.append(with_repeats(row, Path(log.name).parent / "findings"))
    return {
        "targets": rows,
        "concurrent": True,
        "loadavg": {"before": load_before, "after": list(os.getloadavg())},
        "note": f"{len(rows)} runs at the same time on {os.cpu_count()} cores",
    }


def fuzz_row(
    target: str,
    options: Sequence[str],
    seconds: int,
    returncode: int,
    output: str,
    cpu_seconds: float,
) -> dict[str, Any]:
    """One run's figures from libFuzzer's output, read as ``k2conform fuzz`` reads a worker's
    (:class:`~k2conform.fuzzing.workers.Worker`): executions (its final stats), the last
    progress line's exec/s, the last ``cov``/``ft``, and executions per CPU second of fuzzing
    (the CPU the target says it spent before fuzzing, importing the parsers, left out);
    ``error`` when it never got going."""
    from k2conform.fuzzing.workers import Worker

    parsed = Worker(0, [])
    for line in output.splitlines():
        parsed.read(line)
    speeds = re.findall(r"exec/s:\s*(\d+)", output)
    label = " ".join([target, *options])
    if "number_of_executed_units" not in parsed.stats:
        return {
            "target": target,
            "run": label,
            "error": f"exit {returncode}: {output.strip()[-300:]}",
        }
    return _speed_row(
        target,
        label,
        {},
        seconds,
        parsed.stats["number_of_executed_units"],
        int(speeds[-1]) if speeds else None,
        cpu_seconds - (parsed.ready_cpu or 0.0),
        [parsed],
    )


def _speed_row(
    target: str,
    label: str,
    extra: dict[str, Any],
    seconds: int,
    executions: int,
    exec_per_s: int | None,
    fuzzing_cpu: float,
    workers: Sequence[Any],
) -> dict[str, Any]:
    """A bench row: the run's label (and ``extra``), executions, exec/s, the CPU seconds of
    fuzzing and executions per CPU second, and the highest final ``cov``/``ft`` of
    ``workers``."""
    row: dict[str, Any] = {
        "target": target,
        "run": label,
        **extra,
        "seconds": seconds,
        "executions": executions,
        "exec_per_s": exec_per_s,
        "cpu_seconds": round(fuzzing_cpu, 2),
        "exec_per_cpu_s": round(executions / fuzzing_cpu) if fuzzing_cpu > 0 else None,
    }
    coverage = [w.coverage for w in workers if w.coverage]
    if coverage:
        row["cov"], row["ft"] = max(c[0] for c in coverage), max(c[1] for c in coverage)
    return row


def with_repeats(row: dict[str, Any], findings: Path) -> dict[str, Any]:
    """The row with ``repeats`` and ``repeat_share`` added up over the run's findings tables
    (one, or one per worker) where they count repeats; as it was elsewhere."""
    tables = [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(findings.glob(f"signatures-{row['target']}*.json"))
    ]
    counted = [t for t in tables if "repeats" in t]
    executions = sum(t.get("executions") or 0 for t in counted)
    if counted and executions:
        row["repeats"] = sum(t["repeats"] for t in counted)
        row["repeat_share"] = round(row["repeats"] / executions, 3)
    return row


def fuzz_lines(fuzz: dict[str, Any]) -> list[str]:
    """The bench table's lines for the fuzz runs."""
    load = fuzz.get("loadavg") or {}
    lines = [
        f"fuzz: {fuzz['note']}"
        + (f"; load average {load['before'][0]:.1f} -> {load['after'][0]:.1f}" if load else "")
    ]
    for row in fuzz["targets"]:
        if "error" in row:
            lines.append(f"  {row['run']:<36} error: {row['error']}")
            continue
        coverage = f", cov {row['cov']} ft {row['ft']}" if "cov" in row else ""
        if "repeats" in row:
            coverage += f", {row['repeats']} repeats ({100 * row['repeat_share']:.0f} %)"
        lines.append(
            f"  {row['run']:<36} {row['exec_per_s']} exec/s ({row['executions']} runs in "
            f"{row['seconds']} s; {row['exec_per_cpu_s']} per CPU second){coverage}"
        )
    return lines


def worker_speeds(
    seconds: int, counts: Sequence[int], target: str = "differential"
) -> dict[str, Any]:
    """The target alone from the seed corpus with each number of workers in turn; one row
    each (:func:`workers_row`) with the load average around it."""
    from k2conform.fuzzing.seeds import build_seed_corpus
    from k2conform.fuzzing.workers import run_workers

    rows = []
    with tempfile.TemporaryDirectory(prefix="k2conform-bench-workers-") as tmp:
        seeds = Path(tmp) / "seeds"
        build_seed_corpus(seeds)
        for n in counts:
            work = Path(tmp) / f"workers-{n}"
            work.mkdir()
            command = fuzz_command(target, (), seconds, work, seeds)
            commands = [
                [*command[:2], *(["--worker", str(k)] if n > 1 else []), *command[2:]]
                for k in range(n)
            ]
            load_before = list(os.getloadavg())
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            workers = run_workers(
                commands, echo=None, cwd=work, timeout=seconds + STARTUP_ALLOWANCE
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            row = with_repeats(workers_row(target, seconds, workers, cpu), work / "findings")
            row["loadavg"] = {"before": load_before, "after": list(os.getloadavg())}
            rows.append(row)
    return {
        "targets": rows,
        "concurrent": False,
        "note": f"one after the other on {os.cpu_count()} cores",
    }


def workers_row(target: str, seconds: int, workers: Sequence[Any], cpu_seconds: float) -> dict:
    """One worker count's figures: executions and libFuzzer's exec/s added up over the
    workers, executions per CPU second of fuzzing (every worker's imports left out), the
    highest final ``cov``/``ft``; ``error`` when a worker never got going."""
    label = f"{target} --workers {len(workers)}"
    broken = [w for w in workers if "number_of_executed_units" not in w.stats]
    if broken:
        return {
            "target": target,
            "run": label,
            "workers": len(workers),
            "error": f"worker {broken[0].index} exit {broken[0].returncode}",
        }
    return _speed_row(
        target,
        label,
        {"workers": len(workers)},
        seconds,
        sum(w.stats["number_of_executed_units"] for w in workers),
        sum(w.stats.get("average_exec_per_sec", 0) for w in workers),
        cpu_seconds - sum(w.ready_cpu or 0.0 for w in workers),
        workers,
    )


def worker_lines(fuzz: dict[str, Any]) -> list[str]:
    """The bench table's lines for the worker counts."""
    lines = [f"fuzz workers: {fuzz['note']}"]
    for row in fuzz["targets"]:
        load = row.get("loadavg")
        around = f"; load average {load['before'][0]:.1f} -> {load['after'][0]:.1f}" if load else ""
        row_lines = fuzz_lines({"note": "", "targets": [row]})[1:]
        lines += [line + around for line in row_lines]
    return lines
