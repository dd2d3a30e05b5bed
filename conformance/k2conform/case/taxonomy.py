"""``docs/taxonomy.md``, rendered from the taxonomy, the bug registry and the generated cases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from k2conform.case.corpus import CompletionCase, PromptCase
from k2conform.case.sources import Sources


class CoverageError(AssertionError):
    """A taxonomy class or a known bug class that no generated case covers."""


def render_taxonomy(
    sources: Sources,
    cases: Sequence[CompletionCase | PromptCase],
    bugs_of: Mapping[str, Sequence[int]],
    base_seed: int,
) -> str:
    """The page: the classes with their cases, then every known bug class with its cases."""
    by_class: dict[str, list[str]] = {c: [] for c in sources.classes}
    for case in cases:
        for tag in case.tags:
            if tag in by_class:
                by_class[tag].append(case.id)
    by_bug: dict[int, list[str]] = {n: [] for n in sources.bugs}
    for case_id, bugs in bugs_of.items():
        for n in bugs:
            by_bug[n].append(case_id)
    for n, ids in by_bug.items():
        if not ids:
            raise CoverageError(f"known bug class {n} has no case")
    for c, ids in by_class.items():
        if not ids:
            raise CoverageError(f"taxonomy class {c} has no case")
    lines = _preamble(sources, cases, base_seed)
    for c in sources.classes.values():
        bugs = ", ".join(f"[{n}]({sources.bugs[n].links[0]})" for n in c.bugs) or "—"
        lines += [
            f"### `{c.id}`",
            "",
            f"- **Definition:** {c.definition}",
            f"- **Why it matters:** {c.why} Known bug classes: {bugs}.",
            f"- **Cases ({len(by_class[c.id])}):** " + _listed(by_class[c.id]),
            "",
        ]
    lines += [
        "## Known bug classes → cases",
        "",
        (
            f"Every one of the {len(sources.bugs)} known bug classes, with the cases built from it "
            "(the floor, not the ceiling)."
        ),
        "",
        "| # | known bug class | cases | reach |",
        "|---|---|---|---|",
    ]
    for n, bug in sources.bugs.items():
        links = " ".join(f"[link]({u})" for u in bug.links)
        lines.append(f"| {n} | {bug.title} {links} | " + _listed(by_bug[n]) + f" | {bug.reach} |")
    lines.append("")
    return "\n".join(lines)


def _preamble(
    sources: Sources, cases: Sequence[CompletionCase | PromptCase], base_seed: int
) -> list[str]:
    completions = sum(1 for c in cases if isinstance(c, CompletionCase))
    verdicts = {v: sum(1 for c in cases if c.id[0] == v) for v in "yni"}
    introduction = sources.introduction.format(
        base_seed=base_seed, completions=completions, prompts=len(cases) - completions, **verdicts
    )
    return ["# Edge-case taxonomy", "", *introduction.splitlines(), "", "## Classes", ""]


def _listed(case_ids: Sequence[str]) -> str:
    return ", ".join(f"`{i}`" for i in case_ids)
