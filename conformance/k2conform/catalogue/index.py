"""The catalogue on disk: its case files with their finding blocks, validated, and the index
(``README.md``) counting per parser the distinct behaviours, those with an upstream link and
those not reported upstream.

Each built adapter's folder also gets a ``README.md`` of its own; its first line is an HTML
comment with what the index cannot read from the case files (the release the build reached,
the behaviours it could not catalogue), so a build of one adapter rewrites the index of all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from k2conform.case.corpus import CompletionCase, CorpusError, load_case
from k2conform.delivery import modes
from k2conform.model import CellOutcome

INDEX = "README.md"
_STATE = "<!-- catalogue: "
UPSTREAM = ("new", "not reported", "linked")
#: The finding block's fields, each with its check.
_FIELDS: dict[str, Any] = {
    "adapter": lambda v: isinstance(v, str) and bool(v),
    "release": lambda v: v is None or isinstance(v, str),
    "delivery": lambda v: v in modes.MODES,
    "outcome": lambda v: v in {o.value for o in CellOutcome} and CellOutcome(v).finding,
    "fields": lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v),
    "reason": lambda v: isinstance(v, str),
    "link": lambda v: v is None or isinstance(v, str),
    "upstream": lambda v: v in UPSTREAM,
    "source_case": lambda v: isinstance(v, str) and bool(v),
}
_WANTED = {
    "adapter": "a non-empty string",
    "release": "a string or null",
    "delivery": f"a delivery mode ({', '.join(modes.MODES)})",
    "outcome": "a finding outcome (differs, crash, timeout)",
    "fields": "an array of field names",
    "reason": "a string",
    "link": "a string or null",
    "upstream": f"one of {', '.join(UPSTREAM)}",
    "source_case": "a case id",
}


@dataclass(frozen=True)
class Entry:
    """One catalogue case: the file, the case, its finding block."""

    path: Path
    case: CompletionCase
    finding: Mapping[str, Any]

    @property
    def adapter(self) -> str:
        return str(self.finding["adapter"])

    @property
    def not_reported(self) -> bool:
        return self.finding["upstream"] != "linked"


def read_entry(path: Path) -> Entry:
    """A catalogue case file, validated as a corpus case and then its finding block; a bad one
    raises :class:`CorpusError` naming the file and the field."""
    case = load_case(path)
    if not isinstance(case, CompletionCase):
        raise CorpusError(path, "kind", "a catalogue case is a completion case")
    generator = case.generator or {}
    if generator.get("class") != "CATALOGUE":
        raise CorpusError(path, "generator.class", "must be 'CATALOGUE' in the catalogue")
    finding = generator.get("finding")
    if not isinstance(finding, dict):
        raise CorpusError(path, "generator.finding", "must be an object (the finding block)")
    for key, ok in _FIELDS.items():
        if key not in finding:
            raise CorpusError(path, f"generator.finding.{key}", "missing")
        if not ok(finding[key]):
            raise CorpusError(path, f"generator.finding.{key}", f"must be {_WANTED[key]}")
    if path.parent.name != finding["adapter"]:
        raise CorpusError(
            path, "generator.finding.adapter", f"names {finding['adapter']!r}, but the file is "
            f"in the folder of {path.parent.name!r}",
        )  # fmt: skip
    return Entry(path, case, finding)


def case_paths(root: Path) -> list[Path]:
    """The catalogue's case files: ``root/<adapter>/*.json``."""
    return sorted(p for p in root.glob("*/*.json") if p.is_file())


def read_catalogue(root: Path) -> list[Entry]:
    return [read_entry(path) for path in case_paths(root)]


def _state(folder: Path) -> dict[str, Any]:
    readme = folder / INDEX
    try:
        first = readme.read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return {}
    if not first.startswith(_STATE) or not first.endswith(" -->"):
        return {}
    try:
        return json.loads(first[len(_STATE) : -4])
    except json.JSONDecodeError:
        return {}


def _cell(text: str, limit: int = 0) -> str:
    text = " ".join(str(text).split())
    if limit and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text.replace("|", "\\|")


def _entry_row(entry: Entry, prefix: str = "") -> str:
    f = entry.finding
    what = f["outcome"] + (f" ({', '.join(f['fields'])})" if f["fields"] else "")
    upstream = f"[link]({f['link']})" if f.get("link") else f["upstream"]
    report = (f.get("report") or {}).get("file")
    state = (f.get("report") or {}).get("state", "-")
    chars = f.get("chars") or ["?", len(entry.case.model_output)]
    return (
        f"| [`{entry.case.id}`]({prefix}{entry.path.name}) | {f['delivery']} | {_cell(what)} | "
        f"{_cell(f['reason'] or '-', 140)} | {upstream} | {chars[0]} → {chars[1]} | "
        + (f"[report]({prefix}{report}) ({state})" if report else _cell(state))
        + " |"
    )


def adapter_readme(
    adapter: str, release: str | None, entries: Sequence[Entry], skipped: Sequence[Any]
) -> str:
    state = {
        "release": release,
        "skipped": [
            {
                "reason": b.behaviour.reason,
                "signatures": list(b.behaviour.signatures),
                "deliveries": list(b.behaviour.modes),
                "upstream": b.behaviour.upstream,
                "link": b.behaviour.links[0] if b.behaviour.links else None,
                "note": b.note,
            }
            for b in skipped
        ],
    }
    lines = [
        _STATE + json.dumps(state, ensure_ascii=False) + " -->",
        f"# Findings catalogue: {adapter} {release or ''}".rstrip(),
        "",
        "Written by `k2conform catalogue build`; see docs/findings-catalogue.md and the index "
        "one folder up.",
        "",
        *_entry_table(entries),
    ]
    if skipped:
        lines += ["", "## Not catalogued", ""]
        lines += [f"* {_cell(s['reason'] or ', '.join(s['signatures']), 140)} "
                  f"({', '.join(s['deliveries'])}; {s['upstream']}): {_cell(s['note'])}"
                  for s in state["skipped"]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _entry_table(entries: Sequence[Entry], prefix: str = "") -> list[str]:
    if not entries:
        return ["No catalogue cases."]
    return [
        "| case | delivery | shows | reason | upstream | chars (source → minimised) | report |",
        "|---|---|---|---|---|---|---|",
        *(_entry_row(e, prefix) for e in entries),
    ]


def counts(root: Path, entries: Sequence[Entry] | None = None) -> dict[str, dict[str, Any]]:
    """Per adapter: distinct behaviours (catalogued and not), with an upstream link, not
    reported upstream (of them new: not in any baseline), catalogued."""
    entries = read_catalogue(root) if entries is None else entries
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    table: dict[str, dict[str, Any]] = {}
    for folder in folders:
        state = _state(folder)
        mine = [e for e in entries if e.adapter == folder.name]
        if not mine and not state:
            continue
        ups = [e.finding["upstream"] for e in mine]
        ups += [s.get("upstream", "new") for s in state.get("skipped", ())]
        table[folder.name] = {
            "release": state.get("release")
            or next((e.finding["release"] for e in mine if e.finding["release"]), None),
            "behaviours": len(ups),
            "catalogued": len(mine),
            "linked": sum(u == "linked" for u in ups),
            "not reported": sum(u != "linked" for u in ups),
            "new": sum(u == "new" for u in ups),
        }
    return table


def write_index(
    root: Path,
    skipped: Mapping[str, Sequence[Any]] | None = None,
    releases: Mapping[str, str | None] | None = None,
) -> Path:
    """Rewrite the per-adapter READMEs of the adapters just built (``releases``) and the
    index of the whole catalogue."""
    root.mkdir(parents=True, exist_ok=True)
    entries = read_catalogue(root)
    for adapter, release in (releases or {}).items():
        folder = root / adapter
        folder.mkdir(parents=True, exist_ok=True)
        mine = [e for e in entries if e.adapter == adapter]
        (folder / INDEX).write_text(
            adapter_readme(adapter, release, mine, (skipped or {}).get(adapter, ())),
            encoding="utf-8",
        )
    table = counts(root, entries)
    lines = [
        "# Findings catalogue",
        "",
        "One minimised corpus case and one upstream-ready bug report (`k2conform report-finding`) "
        "per distinct behaviour of each parser, written by `k2conform catalogue build` and "
        "re-checked by `k2conform catalogue check` (docs/findings-catalogue.md).  Not part of "
        "the matrix corpus.",
        "",
        "| parser | release | distinct behaviours | catalogued | with an upstream link | "
        "not reported upstream | of them new |",
        "|---|---|---|---|---|---|---|",
    ]
    for adapter, row in table.items():
        lines.append(
            f"| [{adapter}]({adapter}/{INDEX}) | {row['release'] or '-'} | {row['behaviours']} | "
            f"{row['catalogued']} | {row['linked']} | {row['not reported']} | {row['new']} |"
        )
    total = {k: sum(r[k] for r in table.values()) for k in ("behaviours", "linked", "not reported")}
    lines += [
        "",
        f"In all: {total['behaviours']} distinct behaviours, {total['linked']} with an upstream "
        f"link, {total['not reported']} not reported upstream yet.",
        "",
    ]
    for adapter in table:
        mine = [e for e in entries if e.adapter == adapter]
        lines += [f"## {adapter}", "", *_entry_table(mine, f"{adapter}/"), ""]
    path = root / INDEX
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
