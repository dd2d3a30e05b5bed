"""``python -m k2conform.grammar.worker JOB OUT``: one engine's grammar check in the environment
it runs in (``k2conform grammar`` starts it with the engine's pinned environment's python).
JOB is a JSON file ``{"engine", "seed", "samples", "deadline", "cases": [case, ...]}``; the
result document (:func:`k2conform.grammar.check.run_job`) is written to OUT, so whatever the
engines print on stdout cannot corrupt it."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from k2conform.case.corpus import CompletionCase, case_from_json
from k2conform.grammar.check import Job, run_job
from k2conform.run.cell import CellSettings


def job_to_json(job: Job) -> dict[str, Any]:
    return {
        "engine": job.engine,
        "seed": job.seed,
        "samples": job.samples,
        "deadline": job.settings.deadline,
        "cases": [c.to_json() for c in job.cases],
    }


def job_from_json(data: Mapping[str, Any]) -> Job:
    cases = tuple(case_from_json(c, f"{c['id']}.json") for c in data["cases"])
    if not all(isinstance(c, CompletionCase) for c in cases):
        raise ValueError("a grammar job holds completion cases only")
    return Job(
        data["engine"],
        cases,
        data["seed"],
        data["samples"],
        CellSettings(deadline=data["deadline"]),
    )


def main(argv: list[str]) -> int:
    job_path, out_path = (Path(a) for a in argv)
    job = job_from_json(json.loads(job_path.read_text(encoding="utf-8")))
    document = run_job(job)
    out_path.write_text(
        json.dumps(document, ensure_ascii=False), encoding="utf-8", errors="backslashreplace"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
