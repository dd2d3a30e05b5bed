"""``k2conform fuzz``: run an atheris target for a while, then print what it found.

    k2conform fuzz reference --seconds 600
    k2conform fuzz differential --seconds 600 [--adapter vllm] [--delivery stream-char] [--findings
    DIR]
    k2conform fuzz roundtrip --runs 2000
    k2conform fuzz seed-corpus [OUT]
    k2conform fuzz reference DIR... --runs 1000   (corpus directories right after the target name)
    k2conform fuzz differential --seconds 600 --workers 2   (two fuzzing processes, one corpus)
    k2conform fuzz differential --format k3 --seconds 600   (Kimi K3 output, its adapters)

The target runs in a subprocess (libFuzzer owns its process and ends it with exit());
without corpus directories it uses ``fuzz/work/NAME`` (new inputs) and the seed corpus
``fuzz/seeds`` built from ``corpus/`` on demand (``--format k3``: ``fuzz/work/differential-k3``
and ``fuzz/seeds-k3``, the K3 cases).  With ``--workers N`` N such processes share
the first corpus directory (:mod:`k2conform.fuzzing.workers`); their findings tables are merged
into one and the executions added up.  Exit status: 0 when the target ran to its limit
without a crash and found nothing new, 1 when the target (any worker) crashed (a k2conform
bug: libFuzzer saved the input as ``crash-*``) or a finding is new to the corpus, the
baselines and the catalogue (each finding is judged as the matrix judges its case, then looked
up: :mod:`k2conform.minimize.known`), 2 on usage errors, 130 when interrupted (the workers are
stopped first).  libFuzzer's own output goes to a log file (``--verbose``: to stderr); the run
ends with one verdict line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from k2conform import formats
from k2conform.adapter.registry import create_adapter
from k2conform.fuzzing.instrument import INSTRUMENT_CHOICES
from k2conform.fuzzing.targets import (
    ENVELOPE_TARGETS,
    MAX_LEN,
    TARGETS,
    default_fuzz_dir,
    libfuzzer_timeout,
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fuzz",
        help="run an atheris fuzz target (reference, differential, roundtrip) or build seeds",
    )
    p.description = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[2].replace("\n", " ")
    p.add_argument("target", choices=[*TARGETS, "seed-corpus"])
    p.add_argument(
        "corpus_dirs",
        nargs="*",
        type=Path,
        help="libFuzzer corpus directories (the first receives new inputs); seed-corpus: the "
        "output directory",
    )
    p.add_argument("--seconds", type=int, help="stop after this many seconds (-max_total_time)")
    p.add_argument(
        "--runs", type=int, help="stop after this many executions (-runs; all workers together)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="fuzzing processes sharing the corpus (default 1); their findings are merged",
    )
    p.add_argument(
        "--adapter", action="append", help="adapter under test (repeatable; default: all available)"
    )
    p.add_argument(
        "--delivery",
        action="append",
        help="delivery mode (repeatable; default: whole and stream-token; "
        "stream-recorded: the pieces the fuzz input's cuts make)",
    )
    p.add_argument(
        "--findings", type=Path, help="where new signatures are saved (default: fuzz/findings)"
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=10.0,
        help="seconds per parse before it is a timeout finding",
    )
    p.add_argument(
        "--instrument",
        choices=INSTRUMENT_CHOICES,
        default=INSTRUMENT_CHOICES[0],
        help="code libFuzzer's coverage counts: the reference and the parsers' own Kimi files "
        "(kimi, the default: it rediscovers the most, docs/performance.md), every file the "
        "parsers declare (parsers), or the reference only",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        help="seed-corpus: the case corpus to build from (default: the shipped one)",
    )
    p.add_argument(
        "--format",
        choices=tuple(formats.FORMATS),
        default=formats.DEFAULT,
        help="the Kimi format fuzzed (differential and seed-corpus; default k2): its cases are "
        "the seeds, its reference the oracle, its adapters the ones under test",
    )
    p.add_argument("--no-seeds", action="store_true", help="do not add the seed corpus")
    p.add_argument(
        "--log",
        type=Path,
        help="where libFuzzer's own output goes (default: FINDINGS/fuzz-TARGET.log)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="show libFuzzer's own output instead of logging it"
    )
    p.add_argument(
        "--libfuzzer",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra libFuzzer flag, e.g. --libfuzzer=-max_len=512 (repeatable)",
    )
    p.set_defaults(handler=cmd_fuzz)


def main_seed_corpus(argv: Sequence[str]) -> int:
    """``fuzz/build_seed_corpus.py``: the seed directory, or with ``--service`` every target's
    files for OSS-Fuzz / ClusterFuzzLite (what ``.clusterfuzzlite/build.sh`` runs)."""
    parser = argparse.ArgumentParser(prog="build_seed_corpus")
    parser.add_argument("out", nargs="?", type=Path, default=default_fuzz_dir() / "seeds")
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--format", choices=tuple(formats.FORMATS), default=formats.DEFAULT)
    parser.add_argument(
        "--service",
        type=Path,
        metavar="OUT",
        help="write each target's fuzz_NAME_seed_corpus.zip, fuzz_NAME.dict and "
        "fuzz_NAME.options into OUT",
    )
    args = parser.parse_args(argv)
    if args.service is None:
        return _seed_corpus(args.out, args.corpus, args.format)
    from k2conform.fuzzing.seeds import write_service_files

    for path in write_service_files(args.service, args.corpus):
        print(path)
    return 0


def _seed_corpus(out: Path, corpus: Path | None, format: str = formats.DEFAULT) -> int:
    from k2conform.fuzzing.seeds import build_seed_corpus

    count = build_seed_corpus(out, corpus, format)
    print(f"{count} {format} seed inputs in {out}")
    return 0


def seeds_dir(fuzz_dir: Path, format: str) -> Path:
    """``fuzz/seeds`` (K2), ``fuzz/seeds-k3``: a format's seed corpus."""
    return fuzz_dir / ("seeds" if format == formats.DEFAULT else f"seeds-{format}")


def cmd_fuzz(args: argparse.Namespace) -> int:
    from k2conform.errors import UsageError

    fuzz_dir = default_fuzz_dir()
    if args.target == "seed-corpus":
        if len(args.corpus_dirs) > 1:
            raise UsageError("seed-corpus takes one output directory")
        out = args.corpus_dirs[0] if args.corpus_dirs else seeds_dir(fuzz_dir, args.format)
        return _seed_corpus(out, args.corpus, args.format)
    if args.format != formats.DEFAULT and args.target != "differential":
        raise UsageError(f"--format {args.format}: the {args.target} target fuzzes K2 output only")
    if args.seconds is None and args.runs is None:
        raise UsageError("give --seconds N or --runs N (fuzzing never ends by itself)")
    if any(limit is not None and limit <= 0 for limit in (args.seconds, args.runs)):
        raise UsageError("--seconds and --runs must be more than 0 (0 means no limit to libFuzzer)")
    from k2conform.fuzzing.differential import FUZZ_MODES, refuse_other_format, run_label

    for name in args.adapter or ():  # an unknown name is a usage error before any process starts
        refuse_other_format(create_adapter(name), args.format)
    unknown = [m for m in args.delivery or () if m not in FUZZ_MODES]
    if unknown:  # likewise: the target would only find out inside libFuzzer's process
        raise UsageError(
            f"no fuzz delivery mode {', '.join(unknown)} (known: {', '.join(FUZZ_MODES)})"
        )
    if args.workers < 1 or (args.runs is not None and args.runs < args.workers):
        raise UsageError("--workers N: at least 1, and no more than --runs")
    label = run_label(args.target, args.format)
    dirs = list(args.corpus_dirs)
    if not dirs:
        work = fuzz_dir / "work" / label
        work.mkdir(parents=True, exist_ok=True)
        dirs = [work]
        if args.target in ENVELOPE_TARGETS and not args.no_seeds:
            seeds = seeds_dir(fuzz_dir, args.format)
            if not seeds.is_dir() or not any(seeds.iterdir()):
                _seed_corpus(seeds, args.corpus, args.format)
            dirs.append(seeds)
    findings = args.findings or fuzz_dir / "findings"
    command = [sys.executable, "-m", "k2conform.fuzzing.targets", args.target]
    for adapter in args.adapter or ():
        command += ["--adapter", adapter]
    for mode in args.delivery or ():
        command += ["--delivery", mode]
    command += [
        "--findings",
        str(findings),
        "--deadline",
        str(args.deadline),
        "--instrument",
        args.instrument,
        "--format",
        args.format,
    ]
    if args.target in ENVELOPE_TARGETS:
        from k2conform.fuzzing.seeds import dictionary_file, dictionary_text

        dictionary = fuzz_dir / dictionary_file(args.format)
        if not dictionary.is_file():
            dictionary.parent.mkdir(parents=True, exist_ok=True)
            dictionary.write_text(dictionary_text(args.format), encoding="utf-8")
        command.append(f"-dict={dictionary}")
    if args.seconds is not None:
        command.append(f"-max_total_time={args.seconds}")
    command += [
        "-print_final_stats=1",
        f"-max_len={MAX_LEN[args.target]}",
        f"-timeout={libfuzzer_timeout(args.deadline)}",
        f"-artifact_prefix={fuzz_dir}/",
        *args.libfuzzer,
        *map(str, dirs),
    ]
    log = None if args.verbose else (args.log or findings / f"fuzz-{label}.log")
    return run_fuzz(label, command, args.runs, args.workers, findings, log, args.deadline)


def run_fuzz(
    target: str,
    command: list[str],
    runs: int | None,
    workers: int,
    findings: Path,
    log: Path | None = None,
    deadline: float = 10.0,
) -> int:
    """The target in ``workers`` processes (one: as it always ran), libFuzzer's output in
    ``log`` (None: on stderr), then the summary and the verdict: 1 when the target crashed
    or a finding is new to the corpus, the baselines and the catalogue, else 0."""
    from k2conform.fuzzing.workers import (
        Interrupted,
        clear_worker_files,
        merge_worker_tables,
        run_workers,
        split_runs,
    )

    commands = []
    for k, share in enumerate(split_runs(runs, workers)):
        own = [] if workers == 1 else ["--worker", str(k)]
        limit = [] if share is None else [f"-runs={share}"]
        commands.append([*command[:4], *own, *command[4:], *limit])
    if workers > 1:
        clear_worker_files(findings, target, workers)
    for worker_command in commands:
        print("$ " + " ".join(worker_command), file=sys.stderr, flush=True)
    interrupted = None
    with contextlib.ExitStack() as stack:
        echo = sys.stderr
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            echo = stack.enter_context(log.open("w", encoding="utf-8", errors="replace"))
            print(f"libFuzzer's output: {log}", file=sys.stderr, flush=True)
        try:
            ran = run_workers(commands, echo=echo, status=sys.stderr)
        except Interrupted as stop:
            interrupted, ran = stop, stop.workers
    if workers > 1:
        merge_worker_tables(findings, target, workers)
    print(summary(target, ran, findings))
    crashed = any(w.failed for w in ran)
    if crashed and log is not None:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        print("\n".join(["", f"the end of {log}:", *tail]), file=sys.stderr)
    judged = judge_findings(target, findings, deadline) if interrupted is None else []
    for row in judged:
        print(row.line())
    print(verdict_line(target, ran, judged, crashed, interrupted is not None))
    if interrupted is not None:
        print(f"interrupted ({interrupted}): every worker stopped", file=sys.stderr)
        return 130
    return 1 if crashed or any(row.new for row in judged) else 0


def judge_findings(target: str, findings: Path, deadline: float) -> list[Any]:
    """This run's findings judged as matrix cells and looked up in the corpus, the baselines
    and the catalogue (:func:`k2conform.minimize.known.judge_table`)."""
    import logging
    import warnings

    from k2conform.minimize.known import judge_table

    table = findings / f"signatures-{target}.json"
    if target == "reference" or not table.is_file():
        return []
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    rows = json.loads(table.read_text(encoding="utf-8")).get("signatures") or []
    return judge_table(rows, deadline)


def verdict_line(
    target: str, workers: Sequence[Any], judged: Sequence[Any], crashed: bool, interrupted: bool
) -> str:
    """The run in one line: executions, distinct findings, those new to the project, crashes."""
    executions = sum(w.stats.get("number_of_executed_units", 0) for w in workers)
    crashes = sum(len(w.artifacts) for w in workers) or int(crashed)
    new = sum(1 for row in judged if row.new)
    if interrupted:
        word = "INTERRUPTED"
    elif crashed:
        word = "CRASH (a k2conform bug: see the crash input above)"
    else:
        word = "NEW FINDINGS" if new else "PASS"
    findings = ""
    if target != "reference":
        findings = (
            f"{len(judged)} distinct finding(s), {new} new to the corpus, the baselines and the "
            "catalogue, "
        )
    head = f"k2conform fuzz {target}: {word}: {executions} executions, "
    return f"{head}{findings}{crashes} crash(es)"


def summary(target: str, workers: Sequence[Any], findings: Path) -> str:
    """Executions, exec/s (the workers' rates added up), peak RSS (the largest worker's),
    libFuzzer's last ``cov``/``ft`` (the highest), crash inputs, and the findings table."""
    from k2conform.fuzzing.differential import format_table

    def total(stat: str) -> int | str:
        values = [w.stats[stat] for w in workers if stat in w.stats]
        return sum(values) if values else "?"

    rss = [w.stats["peak_rss_mb"] for w in workers if "peak_rss_mb" in w.stats]
    coverage = [w.coverage for w in workers if w.coverage]
    head = f"\n== k2conform fuzz {target}: "
    if len(workers) > 1:
        head += f"{len(workers)} workers, "
    head += f"{total('number_of_executed_units')} executions, "
    head += f"{total('average_exec_per_sec')} exec/s, peak RSS {max(rss) if rss else '?'} MB"
    if coverage:
        head += f", cov {max(c[0] for c in coverage)} ft {max(c[1] for c in coverage)}"
    lines = [head]
    if len(workers) > 1:
        for w in workers:
            lines.append(
                f"   worker {w.index}: {w.stats.get('number_of_executed_units', '?')} executions,"
                f" {w.stats.get('average_exec_per_sec', '?')} exec/s, exit {w.returncode}"
                + (" (stopped)" if w.stopped else "")
            )
    for w in workers:
        for path in w.artifacts:
            lines.append(f"crash: {path}" + (f" (worker {w.index})" if len(workers) > 1 else ""))
    table = findings / f"signatures-{target}.json"
    if target != "reference" and table.is_file():
        lines.append(format_table(json.loads(table.read_text(encoding="utf-8"))))
    return "\n".join(lines)
