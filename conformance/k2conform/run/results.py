"""A run's results as one typed document: assembled from the matrix's cells, or merged from the
shards of a run spread over machines (``run --shard K/N``, then ``merge``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from k2conform import __version__
from k2conform import markers
from k2conform.case.corpus import CompletionCase
from k2conform.errors import UsageError
from k2conform.model import AdapterRow, CaseSummary, Cell, ResultOutcome, RunResults


def read_results(path: Path) -> RunResults:
    """A ``run --json`` document; an unreadable one or one of another shape is a usage error
    naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read results {path}: {error}") from None
    try:
        return RunResults.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UsageError(
            f"{path} is not a k2conform results document (run --json): {type(error).__name__}: "
            f"{error}"
        ) from None


def shortfall(results: RunResults) -> list[str]:
    """Why a document judged less than it owes (no cell; fewer cells run than planned): the one
    rule the gate and ``verify`` both hold a run to."""
    why = ["no cell was run"] if not results.cells else []
    inventory = results.extra.get("inventory")
    if inventory and inventory["run"] < inventory["planned"]:
        why.append(f"{inventory['run']} of {inventory['planned']} planned cells were run")
    return why


def case_summary(case: CompletionCase) -> CaseSummary:
    """What a results document keeps of a case (:class:`~k2conform.model.CaseSummary`)."""
    return CaseSummary(
        case.id,
        case.verdict,
        case.description,
        tuple(case.tags),
        case.request,
        case.model_output,
        tuple(case.deltas) if case.deltas else None,
        case.expected.to_json() if case.expected else None,
        tuple(case.spelled_markers),
        case.format if case.format != markers.FORMAT else None,
    )


def adapter_row(adapter: Any, availability: tuple[str, str]) -> AdapterRow:
    return AdapterRow(
        adapter.name,
        adapter.version(),
        tuple(adapter.supported_versions),
        adapter.supported(),
        ResultOutcome(availability[0]),
        availability[1],
    )


def build_results(
    cells: Sequence[Cell],
    cases: Sequence[CompletionCase],
    adapters: Sequence[AdapterRow],
    seed: int,
    modes: Sequence[str],
    wall_seconds: float,
    worker_restarts: int,
    **extra: Any,
) -> RunResults:
    return RunResults(
        __version__,
        seed,
        tuple(modes),
        tuple(adapters),
        tuple(case_summary(c) for c in cases),
        tuple(cells),
        wall_seconds,
        worker_restarts,
        extra,
    )


def merge(shards: Sequence[tuple[str, RunResults]]) -> RunResults:
    """The shards (named by their files) joined into what one unsharded run gives; a cell in two
    shards, shards of different runs (seed, overlapping but unequal modes), a partial run and
    an incomplete set of shards are usage errors: a merge never stands for more than it holds.
    A document whose modes are all new (``k2conform grammar``'s) joins as more columns."""
    for name, shard in shards:
        if "partial" in shard.extra:
            partial = shard.extra["partial"]
            raise UsageError(
                f"{name}: a partial run ({partial['reason']}: {partial['cells']} of "
                f"{partial['planned']} cells); run it again"
            )
    seen: dict[tuple[str, str, str], str] = {}
    for name, shard in shards:
        for cell in shard.cells:
            if cell.key in seen:
                raise UsageError(
                    f"{name}: cell {' '.join(cell.key)} is also in {seen[cell.key]} (the same "
                    "shard twice?)"
                )
            seen[cell.key] = name
    first_name, first = shards[0]
    modes = list(first.modes)
    for name, shard in shards[1:]:
        if shard.seed != first.seed:
            raise UsageError(
                f"{name}: seed {shard.seed!r} differs from {first_name}'s {first.seed!r}"
            )
        if shard.modes != first.modes and set(shard.modes) & set(modes):
            raise UsageError(
                f"{name}: modes {shard.modes!r} differ from {first_name}'s {first.modes!r} "
                "(a document with modes of its own only, such as `k2conform grammar`'s, "
                "joins as more columns)"
            )
        modes += [m for m in shard.modes if m not in modes]
    _check_shard_sets(shards)
    adapters: dict[str, AdapterRow] = {}
    cases: dict[str, CaseSummary] = {}
    for _, shard in shards:
        for row in shard.adapters:
            adapters.setdefault(row.name, row)
        cases.update((c.id, c) for c in shard.cases)
    cells = sorted((c for _, shard in shards for c in shard.cells), key=lambda c: c.key)
    return RunResults(
        __version__,
        first.seed,
        tuple(modes),
        tuple(adapters.values()),
        tuple(cases[k] for k in sorted(cases)),
        tuple(cells),
        wall_seconds=max(s.wall_seconds for _, s in shards),
        worker_restarts=sum(s.worker_restarts for _, s in shards),
        extra={
            "merged_from": [s.extra.get("shard") or name for name, s in shards],
            **_inventory(shards),
        },
    )


def _check_shard_sets(shards: Sequence[tuple[str, RunResults]]) -> None:
    """The shards of one run (the same adapters) are K = 1..N of one N, each once."""
    sets: dict[tuple[str, ...], dict[str, str]] = {}
    for name, shard in shards:
        if "shard" in shard.extra:
            ran = tuple(sorted(row.name for row in shard.adapters))
            sets.setdefault(ran, {})[name] = shard.extra["shard"]
    for ran, members in sets.items():
        label = ", ".join(ran)
        totals = {spec.split("/")[1] for spec in members.values()}
        if len(totals) > 1:
            listed = ", ".join(f"{name} ({spec})" for name, spec in members.items())
            raise UsageError(f"shards of {label} out of different totals N: {listed}")
        (total,) = totals
        have = sorted(int(spec.split("/")[0]) for spec in members.values())
        lacking = sorted(set(range(1, int(total) + 1)) - set(have))
        if lacking:
            raise UsageError(
                f"shards of {label}: {', '.join(f'{k}/{total}' for k in lacking)} missing "
                f"(given {', '.join(f'{k}/{total}' for k in have)}); merge every shard of a run"
            )


def _inventory(shards: Sequence[tuple[str, RunResults]]) -> dict[str, Any]:
    """Planned and run cells added up.  Inputs that all lack an inventory (documents of an older
    k2conform) merge without one; a set in which only some lack it is refused: the gate would
    hold the merged run to less than it planned."""
    counts = [s.extra.get("inventory") for _, s in shards]
    lacking = [label for (label, _), count in zip(shards, counts) if count is None]
    if lacking and len(lacking) < len(shards):
        raise UsageError(
            f"{', '.join(lacking)}: no inventory (planned and run cells), unlike the other "
            "inputs; re-run it with this k2conform before merging"
        )
    if not counts or lacking:
        return {}
    return {
        "inventory": {
            "planned": sum(c["planned"] for c in counts),
            "run": sum(c["run"] for c in counts),
        }
    }
