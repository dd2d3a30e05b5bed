"""The case sources: the data ``python -m k2conform.case.generate`` expands (``corpus/sources/``).

* ``taxonomy.toml`` — the edge-case classes (definition, why it matters, known bug classes)
  and ``groups``, the group files in the order they are expanded;
* ``bugs.toml`` — the known bug classes (title, links, how far a parser can reach them);
* ``shared.toml`` — the declared tools every group may name, and shared values (``contents``);
* ``<group>.toml`` — the cases of ``corpus/generated/<group>/``, in order (the format is in
  :mod:`k2conform.case.generate`).

A bad file is a :class:`~k2conform.case.corpus.CorpusError` naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from k2conform.case.corpus import SOURCES, CorpusError, FieldChecker, default_corpus_dir

_META = ("taxonomy", "bugs", "shared")


@dataclass(frozen=True)
class TaxonomyClass:
    """One edge-case class: what it is, why it matters, the known bug classes behind it."""

    id: str
    definition: str
    why: str
    bugs: tuple[int, ...]


@dataclass(frozen=True)
class Bug:
    """One known bug class; ``reach`` says how far a parser can reach it."""

    number: int
    title: str
    links: tuple[str, ...]
    reach: str


@dataclass(frozen=True)
class Group:
    """One group file: its shared ``let`` values and its case tables, in order."""

    name: str
    path: Path
    let: Mapping[str, Any]
    cases: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Sources:
    """Everything the generator expands, read and checked."""

    directory: Path
    #: The introduction of docs/taxonomy.md (a ``str.format`` template).
    introduction: str
    classes: dict[str, TaxonomyClass]
    bugs: dict[int, Bug]
    tools: dict[str, dict[str, Any]]
    shared: Mapping[str, Any]
    groups: tuple[Group, ...]


def default_sources_dir() -> Path:
    return default_corpus_dir() / SOURCES


def load_sources(directory: Path | str | None = None) -> Sources:
    """Read and check every source file (the group files' cases are checked as they expand)."""
    directory = Path(directory) if directory is not None else default_sources_dir()
    taxonomy = _read(directory / "taxonomy.toml")
    bugs = _bugs(_read(directory / "bugs.toml"), directory / "bugs.toml")
    classes = _classes(taxonomy, directory / "taxonomy.toml", bugs)
    shared_path = directory / "shared.toml"
    shared = dict(_read(shared_path))
    tools = {
        name: tool_json(spec, shared_path, f"tools.{name}", name)
        for name, spec in _table(shared.pop("tools", None), shared_path, "tools").items()
    }
    introduction = FieldChecker(directory / "taxonomy.toml").string(
        taxonomy["introduction"], "introduction"
    )
    return Sources(
        directory, introduction, classes, bugs, tools, shared, _groups(taxonomy, directory)
    )


def tool_json(spec: Any, path: Path, where: str, name: str | None = None) -> dict[str, Any]:
    """An OpenAI tool from its source: name, description, properties, required, strict."""
    check = FieldChecker(path)
    keys = {"description": True, "properties": True, "required": False, "strict": False}
    check.object(spec, where, keys if name is not None else {"name": True, **keys})
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": _table(spec["properties"], path, f"{where}.properties"),
    }
    required = [
        check.string(r, f"{where}.required[{i}]")
        for i, r in enumerate(check.array(spec.get("required", []), f"{where}.required"))
    ]
    if required:
        parameters["required"] = required
    function: dict[str, Any] = {
        "name": name if name is not None else check.string(spec["name"], f"{where}.name"),
        "description": check.string(spec["description"], f"{where}.description"),
        "parameters": parameters,
    }
    if "strict" in spec and check.boolean(spec["strict"], f"{where}.strict"):
        function["strict"] = True
    return {"type": "function", "function": function}


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CorpusError(path, "-", f"cannot read: {error.strerror or error}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CorpusError(path, "-", f"not TOML: {error}") from None


def _table(value: Any, path: Path, where: str) -> dict[str, Any]:
    return dict(FieldChecker(path).object(value, where, {}, strict=False))


def _bugs(data: Mapping[str, Any], path: Path) -> dict[int, Bug]:
    check = FieldChecker(path)
    check.object(data, "", {"bug": True})
    bugs: dict[int, Bug] = {}
    for i, entry in enumerate(check.array(data["bug"], "bug")):
        where = f"bug[{i}]"
        check.object(entry, where, {"number": True, "title": True, "links": True, "reach": False})
        number = check.integer(entry["number"], f"{where}.number")
        if number in bugs:
            raise CorpusError(path, f"{where}.number", f"{number} appears twice")
        links = tuple(
            check.string(u, f"{where}.links[{j}]")
            for j, u in enumerate(check.array(entry["links"], f"{where}.links"))
        )
        if not links:
            raise CorpusError(path, f"{where}.links", "must name at least one link")
        bugs[number] = Bug(
            number,
            check.string(entry["title"], f"{where}.title"),
            links,
            check.string(entry.get("reach", "Parser-side; covered directly."), f"{where}.reach"),
        )
    return bugs


def _classes(
    data: Mapping[str, Any], path: Path, bugs: Mapping[int, Bug]
) -> dict[str, TaxonomyClass]:
    check = FieldChecker(path)
    check.object(data, "", {"groups": True, "introduction": True, "class": True})
    classes: dict[str, TaxonomyClass] = {}
    for i, entry in enumerate(check.array(data["class"], "class")):
        where = f"class[{i}]"
        check.object(entry, where, {"id": True, "definition": True, "why": True, "bugs": True})
        class_id = check.string(entry["id"], f"{where}.id")
        numbers = tuple(
            check.integer(n, f"{where}.bugs[{j}]")
            for j, n in enumerate(check.array(entry["bugs"], f"{where}.bugs"))
        )
        unknown = [n for n in numbers if n not in bugs]
        if unknown:
            raise CorpusError(path, f"{where}.bugs", f"no such known bug class: {unknown}")
        classes[class_id] = TaxonomyClass(
            class_id,
            check.string(entry["definition"], f"{where}.definition"),
            check.string(entry["why"], f"{where}.why"),
            numbers,
        )
    return classes


def _groups(taxonomy: Mapping[str, Any], directory: Path) -> tuple[Group, ...]:
    path = directory / "taxonomy.toml"
    check = FieldChecker(path)
    names = [
        check.string(g, f"groups[{i}]")
        for i, g in enumerate(check.array(taxonomy["groups"], "groups"))
    ]
    present = {p.stem for p in directory.glob("*.toml")} - set(_META)
    if set(names) != present:
        raise CorpusError(path, "groups", f"must list the group files exactly: {sorted(present)}")
    groups = []
    for name in names:
        group_path = directory / f"{name}.toml"
        data = _read(group_path)
        FieldChecker(group_path).object(data, "", {"let": False, "case": True})
        cases = FieldChecker(group_path).array(data["case"], "case")
        for i, case in enumerate(cases):
            FieldChecker(group_path).object(case, f"case[{i}]", {}, strict=False)
        groups.append(
            Group(name, group_path, _table(data.get("let", {}), group_path, "let"), tuple(cases))
        )
    return tuple(groups)
