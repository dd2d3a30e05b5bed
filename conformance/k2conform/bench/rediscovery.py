"""``k2conform bench --rediscovery``: fuzzing measured by what it finds (Magma's time to bug,
FuzzBench's repeated trials), against the behaviours the project already knows.

The behaviours are the catalogue's (``corpus/findings/catalogue``) for the in-process parsers
under test, one per adapter, outcome, differing fields and family of delivery modes (the
report's grouping).  Each trial fuzzes the differential target from a seed set that shows
(almost) none of them, with the findings keyed by the matrix's judgement of their case
(``--distinct cells``: :class:`k2conform.fuzzing.differential.FindingStore`), for a budget of CPU
seconds of fuzzing (the set-up is not counted), under a recorded libFuzzer seed.  A behaviour
is rediscovered when a finding's judged cell is that behaviour; since ``minimize`` holds the
matrix's judgement, the finding's minimised case shows it too.  Behaviours the seed set shows
by itself (a run of the seeds alone) are left out of the figures and listed.

Per target configuration (which code libFuzzer's coverage counts) the report gives, per
behaviour, the CPU seconds to its first rediscovery in each trial and their median, and the
share of behaviours rediscovered within the budget (median over the trials), with that share
over time for the plot.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from k2conform import markers
from k2conform.case.corpus import CompletionCase, default_corpus_dir, load_corpus
from k2conform.errors import HarnessError
from k2conform.minimize.known import Judgement, catalogue_judgements

#: The seed sets: the golden spec cases, or the corpus less every case a baseline entry of an
#: adapter under test lists (the cases that show one of its behaviours).
SEED_SETS = ("golden", "corpus-minus")
#: Which code libFuzzer's coverage counts: the parsers' declared files and the reference, only
#: the Kimi-specific files among them and the reference, or the reference alone.
CONFIGURATIONS = ("parsers", "kimi", "reference")
#: The deliveries of every trial: one-shot, token-aligned, and the fuzz input's own cuts
#: (text-level: a third of the catalogue's behaviours show only there).
MODES = ("whole", "stream-token", "stream-recorded")
ADAPTERS = ("vllm", "sglang")


@dataclass(frozen=True)
class Target:
    """One catalogued behaviour (:attr:`Judgement.behaviour`): what a finding must be judged as
    to rediscover it, with a catalogue case that shows it."""

    adapter: str
    outcome: str
    fields: tuple[str, ...]
    family: str  #: of delivery modes (:func:`k2conform.gate.behaviours.family`)
    example: str

    @property
    def name(self) -> str:
        return f"{self.adapter} {self.outcome} ({','.join(self.fields)}) {self.family}"

    def shown_by(self, row: Mapping[str, Any]) -> bool:
        """Whether a findings-table row (``--distinct cells``) is this behaviour."""
        cell = row.get("cell")
        if not cell:
            return False
        mode = row["key"].partition(" ")[0]
        judged = Judgement(cell["adapter"], cell["outcome"], tuple(cell["fields"]), mode)
        return judged.behaviour == (self.adapter, self.outcome, self.fields, self.family)


def targets(adapters: Sequence[str], corpus: Path | None = None) -> list[Target]:
    """The catalogue's behaviours of ``adapters``, once each."""
    found: dict[tuple, Target] = {}
    for case_id, judged in catalogue_judgements(corpus):
        if judged.adapter in adapters:
            found.setdefault(judged.behaviour, Target(*judged.behaviour, case_id))
    return sorted(found.values(), key=lambda t: t.name)


def seed_cases(seed_set: str, adapters: Sequence[str], corpus: Path | None = None) -> list:
    """The K2 cases of the seed set."""
    from k2conform.gate.baseline import load_baseline
    from k2conform.resources import checkout_root

    root = Path(corpus or default_corpus_dir())
    if seed_set == "golden":
        return [c for c in load_corpus(root / "golden").completions if c.format == markers.FORMAT]
    checkout = checkout_root()
    entries = load_baseline(checkout / "baseline.json").entries if checkout else ()
    listed = [e for e in entries if e.adapter in adapters]
    return [
        c
        for c in load_corpus(root).completions
        if c.format == markers.FORMAT and not any(e.covers_case(c.id) for e in listed)
    ]


def write_seeds(cases: Iterable[CompletionCase], out: Path) -> int:
    from k2conform.fuzzing.seeds import fuzz_input

    out.mkdir(parents=True, exist_ok=True)
    names = set()
    for case in cases:
        data = fuzz_input(case).encode()
        name = hashlib.sha1(data).hexdigest()
        (out / name).write_bytes(data)
        names.add(name)
    return len(names)


def trial_command(
    configuration: str, adapters: Sequence[str], findings: Path, extra: Sequence[str]
) -> list[str]:
    from k2conform.fuzzing.targets import MAX_LEN, libfuzzer_timeout
    from k2conform.resources import bundled

    fuzz_dir = bundled("fuzz")
    command = [sys.executable, str(fuzz_dir / "fuzz_differential.py"), "--findings", str(findings)]
    for adapter in adapters:
        command += ["--adapter", adapter]
    for mode in MODES:
        command += ["--delivery", mode]
    command += ["--instrument", configuration, "--distinct", "cells"]
    command += [
        f"-dict={fuzz_dir / 'kimi_k2.dict'}",
        f"-max_len={MAX_LEN['differential']}",
        f"-timeout={libfuzzer_timeout(10.0)}",
        "-print_final_stats=1",
        *extra,
    ]
    return command


def run_target(command: list[str], work: Path, seeds: Path, wall_limit: float) -> dict[str, Any]:
    """The target on a fresh corpus directory beside the seeds; its findings table."""
    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    findings = Path(command[command.index("--findings") + 1])
    log = work / "libfuzzer.log"
    with log.open("w", encoding="utf-8", errors="replace") as out:
        full = [*command, f"-artifact_prefix={work}/", str(corpus), str(seeds)]
        process = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, cwd=work)
        try:
            process.wait(timeout=wall_limit)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait(timeout=60)
    table = findings / "signatures-differential.json"
    if process.returncode == 0 and not table.is_file():
        return {"signatures": []}  # a clean end before any finding or the 200th execution
    if process.returncode not in (0, -15) or not table.is_file():
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        why = f"the differential target failed ({process.returncode}):"
        raise HarnessError("\n".join([why, *tail]))
    return json.loads(table.read_text(encoding="utf-8"))


def first_found(table: Mapping[str, Any], goals: Sequence[Target]) -> dict[str, float]:
    """Per behaviour rediscovered in the table: the CPU seconds of its first sighting."""
    found: dict[str, float] = {}
    for row in table.get("signatures") or ():
        for goal in goals:
            if goal.shown_by(row) and row.get("first_cpu") is not None:
                found[goal.name] = min(found.get(goal.name, row["first_cpu"]), row["first_cpu"])
    return found


def summarise(
    goals: Sequence[Target], trials: Sequence[Mapping[str, Any]], budget: float
) -> dict[str, Any]:
    """Per behaviour the CPU seconds to first rediscovery in each trial and their median (None
    when fewer than half the trials found it), the share within the budget per trial, its
    median, and the median share over time (for the plot)."""
    per_behaviour = {}
    for goal in goals:
        times = [t["found"].get(goal.name) for t in trials]
        hits = [t for t in trials if found_within(t, goal, budget)]
        median = statistics.median(times_or_inf(times, budget)) if trials else None
        per_behaviour[goal.name] = {
            "example": goal.example,
            "cpu_seconds": times,
            "median_cpu_seconds": None if median == float("inf") else median,
            "share_of_trials": round(len(hits) / len(trials), 3) if trials else 0.0,
        }
    shares = (
        [sum(1 for g in goals if found_within(t, g, budget)) / len(goals) for t in trials]
        if goals
        else []
    )
    steps = [round(budget * k / 20, 2) for k in range(21)]
    curve = (
        [
            statistics.median(
                sum(1 for g in goals if found_within(t, g, step)) / len(goals) for t in trials
            )
            for step in steps
        ]
        if goals and trials
        else []
    )
    return {
        "behaviours": per_behaviour,
        "share_per_trial": [round(s, 3) for s in shares],
        "median_share": round(statistics.median(shares), 3) if shares else 0.0,
        "over_time": {"cpu_seconds": steps, "median_share": [round(c, 3) for c in curve]},
    }


def found_within(trial: Mapping[str, Any], goal: Target, limit: float) -> bool:
    """Whether the trial rediscovered the goal within ``limit`` CPU seconds (0.0 included)."""
    seconds = trial["found"].get(goal.name)
    return seconds is not None and seconds <= limit


def times_or_inf(times: Sequence[float | None], budget: float) -> list[float]:
    return [x if x is not None and x <= budget else float("inf") for x in times]


def rediscovery(
    budget: float,
    trials: int,
    seed_set: str,
    configurations: Sequence[str],
    adapters: Sequence[str] = ADAPTERS,
    base_seed: int = 1,
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """The whole benchmark: the goals, the seeds' own findings, every trial, the summaries."""
    goals = targets(adapters)
    cases = seed_cases(seed_set, adapters)
    doc: dict[str, Any] = {
        "budget_cpu_seconds": budget,
        "trials": trials,
        "seed_set": seed_set,
        "seed_cases": len(cases),
        "adapters": list(adapters),
        "modes": list(MODES),
        "loadavg_before": list(os.getloadavg()),
        "configurations": {},
    }
    with tempfile.TemporaryDirectory(prefix="k2conform-rediscovery-") as tmp:
        seeds = Path(tmp) / "seeds"
        doc["seed_inputs"] = write_seeds(cases, seeds)
        log(
            f"{len(goals)} catalogued behaviours of {', '.join(adapters)}; seed set {seed_set}: "
            f"{len(cases)} cases, {doc['seed_inputs']} inputs"
        )
        alone = Path(tmp) / "seeds-alone"
        command = trial_command("reference", adapters, alone / "findings", ["-runs=0"])
        shown = first_found(run_target(command, alone, seeds, 3600), goals)
        doc["shown_by_seeds"] = sorted(shown)
        open_goals = [g for g in goals if g.name not in shown]
        doc["goals"] = [g.name for g in open_goals]
        log(f"the seeds alone show {len(shown)}: {', '.join(sorted(shown)) or 'none'}")
        for configuration in configurations:
            runs = []
            for k in range(trials):
                seed = base_seed + k
                work = Path(tmp) / f"{configuration}-{seed}"
                extra = [f"-seed={seed}", f"-max_total_time={int(budget * 6 + 600)}"]
                command = trial_command(configuration, adapters, work / "findings", extra)
                command[2:2] = ["--cpu-budget", str(budget)]
                table = run_target(command, work, seeds, budget * 6 + 900)
                found = first_found(table, open_goals)
                runs.append({
                    "seed": seed,
                    "executions": table.get("executions"),
                    "cpu_seconds": table.get("cpu_seconds"),
                    "distinct_findings": len(table.get("signatures") or ()),
                    "found": found,
                })  # fmt: skip
                log(
                    f"{configuration} seed {seed}: {len(found)}/{len(open_goals)} behaviours in "
                    f"{table.get('cpu_seconds')} CPU s, {table.get('executions')} executions"
                )
            doc["configurations"][configuration] = {
                "runs": runs,
                **summarise(open_goals, runs, budget),
            }
    doc["loadavg_after"] = list(os.getloadavg())
    return doc


def table_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report: the share per configuration, then per behaviour its median time."""
    configurations = doc["configurations"]
    lines = [
        f"rediscovery: {len(doc['goals'])} behaviours, {doc['trials']} trials of "
        f"{doc['budget_cpu_seconds']:g} CPU s each, seeds {doc['seed_set']} "
        f"({doc['seed_cases']} cases); the seeds alone show {len(doc['shown_by_seeds'])}",
        "",
        "| configuration | share within the budget (median) | per trial | executions per trial |",
        "|---|---|---|---|",
    ]
    for name, result in configurations.items():
        runs = result["runs"]
        lines.append(
            f"| {name} | {100 * result['median_share']:.0f} % | "
            f"{', '.join(f'{100 * s:.0f} %' for s in result['share_per_trial'])} | "
            f"{', '.join(str(r['executions']) for r in runs)} |"
        )
    heads = " | ".join(f"{c}: median CPU s (share of trials)" for c in configurations)
    lines += ["", f"| behaviour | {heads} |"]
    lines.append("|---|" + "---|" * len(configurations))
    for goal in doc["goals"]:
        cells = []
        for result in configurations.values():
            row = result["behaviours"][goal]
            median = row["median_cpu_seconds"]
            shown = "–" if median is None else f"{median:g}"
            cells.append(f"{shown} ({row['share_of_trials']:.0%})")
        lines.append(f"| {goal} | " + " | ".join(cells) + " |")
    return lines


def plot(doc: Mapping[str, Any], path: Path) -> str:
    """The median share over CPU time per configuration, with matplotlib (the bench extra);
    without it, nothing is drawn and the reason is returned."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "not drawn: matplotlib is not installed (pip install -e '.[bench]')"
    fig, axis = plt.subplots(figsize=(7, 4))
    for name, result in doc["configurations"].items():
        curve = result["over_time"]
        axis.step(curve["cpu_seconds"], curve["median_share"], where="post", label=name)
    axis.set_xlabel("CPU seconds of fuzzing")
    axis.set_ylabel("behaviours rediscovered (median share)")
    axis.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return str(path)
