"""The deterministic edge-case generator: ``corpus/generated`` and ``docs/taxonomy.md``.

The cases are data, ``corpus/sources/<group>.toml`` (read by :mod:`k2conform.case.sources`);
this module expands them.  Each case is built from its own ``random.Random(seed)``, the seed
derived from the base seed, the class id and the case id (recorded in the case's
``generator`` field), so one case can be rebuilt alone and adding a case never changes
another.  The expectation of every case is the reference parser's result; a case that states
its intended result (``expect``, required for ``y_``) is refused when the reference disagrees,
so a reference bug cannot silently become an expectation.

A case table (``[[case]]`` in ``corpus/sources/<group>.toml``) has ``class``, ``id``,
``description``, ``output`` (or ``deltas``) and optionally ``tools`` (names of
``shared.toml``'s tools, or inline tool tables), ``thinking``, ``expect`` (the intended
result: ``calls``, ``content``, ``reasoning``) and ``bugs`` (known bug classes); a prompt case
(``kind = "prompt"``) has ``messages``, ``add_generation_prompt``, ``tools`` and
``must_contain`` instead.  Its strings are templates (:mod:`k2conform.case.template`) over
variables from, innermost first:

* ``let`` — values built in order, random draws among them;
* ``rows = [{...}, ...]`` or ``product = {a = [...], b = [...]}`` — one case per row (a row key
  that is a case field replaces it, ``let`` is merged; any other key is a variable);
* the group file's ``[let]``, and ``shared.toml`` (``contents``).

In ``expect``, ``calls`` lists ``call``/``calls`` values or ``{name, arguments, id}`` tables,
and an empty ``content`` or ``reasoning`` means none.

    python -m k2conform.case.generate            # (re)write corpus/generated and docs/taxonomy.md
    python -m k2conform.case.generate --check    # exit 1 listing missing, stale or changed files
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k2conform.case.corpus import (
    CompletionCase,
    CorpusError,
    Expectation,
    FieldChecker,
    PromptCase,
    write_case,
)
from k2conform.case.sources import Group, Sources, load_sources, tool_json
from k2conform.case.taxonomy import render_taxonomy
from k2conform.case.template import Calls, Scope
from k2conform.case.verdict import Verdict, verdict
from k2conform.model import Request, ToolCall, dumps_canonical
from k2conform.reference.parser import ReferenceParser, parse
from k2conform.reference.render import render
from k2conform.resources import checkout_root

DEFAULT_SEED = 20261130

#: Policies that fire on (nearly) every call; not worth a tag.
_ROUTINE_POLICIES = frozenset({"ID.verbatim", "ARGS.raw", "ID.standard", "THINK.off"})
_COMPLETION_FIELDS = {
    "class": True,
    "id": True,
    "description": True,
    "let": False,
    "output": False,
    "deltas": False,
    "tools": False,
    "thinking": False,
    "expect": False,
    "bugs": False,
}
_PROMPT_FIELDS = {
    "kind": True,
    "class": True,
    "id": True,
    "description": True,
    "let": False,
    "messages": True,
    "tools": False,
    "add_generation_prompt": True,
    "must_contain": False,
    "bugs": False,
}


class GeneratorError(AssertionError):
    """A generated case whose reference result is not what its source intends."""


def _derive(*parts: Any) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")


# ---------------------------------------------------------------------------------------
# Cases

_ALL_FIELDS = set(_COMPLETION_FIELDS) | set(_PROMPT_FIELDS)


def _rows(
    path: Path, table: Mapping[str, Any], where: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The table once per row of its ``rows`` or ``product``: (its fields, the row's variables)."""
    check = FieldChecker(path)
    if "rows" in table and "product" in table:
        raise CorpusError(path, f"{where}.rows", "give rows or product, not both")
    rows: list[Mapping[str, Any]] = [{}]
    if "rows" in table:
        rows = [
            check.object(row, f"{where}.rows[{i}]", {}, strict=False)
            for i, row in enumerate(check.array(table["rows"], f"{where}.rows"))
        ]
    elif "product" in table:
        for key, values in check.object(
            table["product"], f"{where}.product", {}, strict=False
        ).items():
            rows = [
                {**row, **(value if isinstance(value, dict) else {key: value})}
                for row in rows
                for value in check.array(values, f"{where}.product.{key}")
            ]
    base = {key: value for key, value in table.items() if key not in ("rows", "product")}
    expanded = []
    for row in rows:
        fields = {**base, **{key: value for key, value in row.items() if key in _ALL_FIELDS}}
        if "let" in row:
            fields["let"] = {
                **check.object(base.get("let", {}), f"{where}.let", {}, strict=False),
                **row["let"],
            }
        expanded.append(
            (fields, {key: value for key, value in row.items() if key not in _ALL_FIELDS})
        )
    return expanded


@dataclass
class _Generator:
    sources: Sources
    base_seed: int
    cases: list[CompletionCase] = field(default_factory=list)
    prompts: list[PromptCase] = field(default_factory=list)
    bugs_of: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def expand(self, group: Group) -> None:
        for index, table in enumerate(group.cases):
            for fields, variables in _rows(group.path, table, f"case[{index}]"):
                self._case(
                    group,
                    fields,
                    Scope(group.path, [variables, group.let, self.sources.shared]),
                    f"case[{index}]",
                )

    def _case(self, group: Group, fields: Mapping[str, Any], scope: Scope, where: str) -> None:
        check = FieldChecker(group.path)
        prompt = fields.get("kind") == "prompt"
        check.object(fields, where, _PROMPT_FIELDS if prompt else _COMPLETION_FIELDS)
        class_id = check.string(fields["class"], f"{where}.class")
        if class_id not in self.sources.classes:
            raise CorpusError(group.path, f"{where}.class", f"{class_id!r} is not a taxonomy class")
        if class_id.split(".")[0].lower() != group.name:
            raise CorpusError(
                group.path,
                f"{where}.class",
                f"{class_id} cases belong in {class_id.split('.')[0].lower()}.toml",
            )
        case_id = scope.text(fields["id"], f"{where}.id")
        seed = _derive(self.base_seed, class_id, case_id)
        rng = random.Random(seed)
        for name, raw in check.object(
            fields.get("let", {}), f"{where}.let", {}, strict=False
        ).items():
            scope.bound[name] = scope.value(raw, f"{where}.let.{name}", rng)
        bugs = tuple(
            check.integer(n, f"{where}.bugs[{i}]")
            for i, n in enumerate(check.array(fields.get("bugs", []), f"{where}.bugs"))
        )
        for i, n in enumerate(bugs):
            if n not in self.sources.bugs:
                raise CorpusError(group.path, f"{where}.bugs[{i}]", f"no known bug class {n}")
        self.bugs_of[case_id] = bugs
        source = (
            "; ".join(f"known bug class {n}: {self.sources.bugs[n].links[0]}" for n in bugs)
            or f"k2conform taxonomy {class_id}"
        )
        head = _Head(
            case_id,
            class_id,
            scope.text(fields["description"], f"{where}.description"),
            source,
            tuple(self._tools(scope, fields.get("tools", []), f"{where}.tools")),
        )
        if prompt:
            self._prompt(head, fields, scope, where)
        else:
            self.cases.append(self._completion(head, fields, scope, where, seed))

    def _tools(self, scope: Scope, raw: Any, where: str) -> list[dict[str, Any]]:
        """Tool names of shared.toml (once each) and inline tool tables, in order."""
        tools: list[dict[str, Any]] = []
        names: set[str] = set()
        for i, item in enumerate(FieldChecker(scope.path).array(scope.value(raw, where), where)):
            if isinstance(item, dict):
                tools.append(tool_json(item, scope.path, f"{where}[{i}]"))
            elif item not in self.sources.tools:
                raise CorpusError(
                    scope.path, f"{where}[{i}]", f"{item!r} is not a tool of shared.toml"
                )
            elif item not in names:
                names.add(item)
                tools.append(self.sources.tools[item])
        return tools

    def _completion(
        self, head: _Head, fields: Mapping[str, Any], scope: Scope, where: str, seed: int
    ) -> CompletionCase:
        check = FieldChecker(scope.path)
        deltas = None
        if "deltas" in fields:
            pieces = check.array(
                scope.value(fields["deltas"], f"{where}.deltas"), f"{where}.deltas"
            )
            deltas = tuple(
                check.string(str(d) if isinstance(d, Calls) else d, f"{where}.deltas[{i}]")
                for i, d in enumerate(pieces)
            )
            output = "".join(deltas)
        elif "output" in fields:
            output = scope.text(fields["output"], f"{where}.output")
        else:
            raise CorpusError(scope.path, f"{where}.output", "missing (or deltas)")
        request = Request(
            tools=head.tools,
            thinking=check.boolean(fields.get("thinking", False), f"{where}.thinking"),
        )
        intended = (
            _intended(scope, fields["expect"], f"{where}.expect") if "expect" in fields else None
        )
        result = parse(output, request)
        observed = (result.content, result.reasoning, result.tool_calls)
        if intended is None and head.id.startswith("y_"):
            raise GeneratorError(f"{head.id}: a y_ case must state its intended result (expect)")
        if intended is not None and observed != intended:
            raise GeneratorError(
                f"{head.id}: reference result {observed!r} is not the intended {intended!r}"
            )
        _check_prefix(scope, where, head.id, verdict(request, output, result))
        if deltas is not None:
            streamed = ReferenceParser(request)
            for delta in deltas:
                streamed.feed(delta)
            streamed.finish()
            got = streamed.result()
            if (got.content, got.reasoning, got.tool_calls) != observed:
                raise GeneratorError(
                    f"{head.id}: the recorded deltas parse differently from the whole output"
                )
        policies = [p for p in result.meta["policies"] if p not in _ROUTINE_POLICIES]
        return CompletionCase(
            id=head.id,
            description=head.description,
            tags=tuple(dict.fromkeys([head.class_id, *policies])),
            source=head.source,
            request=request,
            model_output=output,
            deltas=deltas,
            expected=Expectation(result.content, result.reasoning, result.tool_calls),
            generator={"class": head.class_id, "seed": seed, "base_seed": self.base_seed},
        )

    def _prompt(self, head: _Head, fields: Mapping[str, Any], scope: Scope, where: str) -> None:
        check = FieldChecker(scope.path)
        messages = check.array(
            scope.value(fields["messages"], f"{where}.messages"), f"{where}.messages"
        )
        add = check.boolean(fields["add_generation_prompt"], f"{where}.add_generation_prompt")
        _check_prefix(scope, where, head.id, Verdict("y"))
        expected = render(messages, head.tools, add)
        for i, needle in enumerate(
            check.array(fields.get("must_contain", []), f"{where}.must_contain")
        ):
            if scope.text(needle, f"{where}.must_contain[{i}]") not in expected:
                raise GeneratorError(
                    f"{head.id}: rendered prompt lacks {scope.text(needle, where)!r}"
                )
        self.prompts.append(
            PromptCase(
                head.id,
                head.description,
                (head.class_id,),
                head.source,
                tuple(messages),
                head.tools,
                add,
                expected,
            )
        )


@dataclass(frozen=True)
class _Head:
    id: str
    class_id: str
    description: str
    source: str
    tools: tuple[dict[str, Any], ...]


def _check_prefix(scope: Scope, where: str, case_id: str, decided: Verdict) -> None:
    """Refuse an id whose prefix is not the verdict rule's (:mod:`k2conform.case.verdict`)."""
    if case_id[0] != decided.prefix:
        why = "; ".join(decided.reasons) or "the spec defines the result"
        raise CorpusError(
            scope.path,
            f"{where}.id",
            f"{case_id}: the verdict rule gives {decided.prefix}_ ({why})",
        )


def _intended(
    scope: Scope, raw: Any, where: str
) -> tuple[str | None, str | None, tuple[ToolCall, ...]]:
    """(content, reasoning, calls) a case intends; an empty content or reasoning is none."""
    check = FieldChecker(scope.path)
    check.object(raw, where, {"calls": False, "content": False, "reasoning": False})
    value = scope.value(raw.get("calls", []), f"{where}.calls")
    calls: list[ToolCall] = []
    for i, item in enumerate(
        [value] if isinstance(value, Calls) else check.array(value, f"{where}.calls")
    ):
        at = f"{where}.calls[{i}]"
        if isinstance(item, Calls):
            calls.extend(item.calls)
        else:
            check.object(item, at, {"name": True, "arguments": True, "id": True})
            calls.append(
                ToolCall(
                    check.string(item["name"], f"{at}.name"),
                    check.string(item["arguments"], f"{at}.arguments"),
                    check.string(item["id"], f"{at}.id"),
                )
            )
    content = scope.text(raw.get("content", ""), f"{where}.content") or None
    reasoning = scope.text(raw.get("reasoning", ""), f"{where}.reasoning") or None
    return content, reasoning, tuple(calls)


def _build(seed: int, sources: Sources | None = None) -> _Generator:
    g = _Generator(sources or load_sources(), seed)
    for group in g.sources.groups:
        g.expand(group)
    ids = [c.id for c in g.cases] + [p.id for p in g.prompts]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise GeneratorError(f"duplicate case ids: {sorted(duplicates)}")
    return g


def generate_cases(
    seed: int = DEFAULT_SEED, sources: Sources | None = None
) -> list[CompletionCase]:
    """Every generated completion case, in a fixed order."""
    return _build(seed, sources).cases


def group_of(case: CompletionCase | PromptCase) -> str:
    """The folder of a case: its class (first tag) prefix in lower case (``ID.x`` -> ``id``)."""
    return case.tags[0].split(".")[0].lower()


# ---------------------------------------------------------------------------------------
# Writing and checking


def _expected_files(seed: int, sources: Sources | None) -> dict[str, str]:
    """Relative path (under the repository root) -> file text, for everything the generator owns."""
    g = _build(seed, sources)
    files = {
        f"corpus/generated/{group_of(case)}/{case.id}.json": dumps_canonical(case.to_json())
        for case in [*g.cases, *g.prompts]
    }
    files["docs/taxonomy.md"] = render_taxonomy(
        g.sources, [*g.cases, *g.prompts], g.bugs_of, g.base_seed
    )
    return files


def write_generated(
    root: Path | str, seed: int = DEFAULT_SEED, sources: Sources | None = None
) -> list[Path]:
    """(Re)write ``root/corpus/generated`` (stale files removed first) and ``docs/taxonomy.md``."""
    root = Path(root)
    g = _build(seed, sources)
    target = root / "corpus" / "generated"
    if target.exists():
        for stale in sorted(target.rglob("*"), reverse=True):
            if stale.is_file():
                stale.unlink()
            else:
                stale.rmdir()
    written = [write_case(case, target / group_of(case)) for case in [*g.cases, *g.prompts]]
    doc = root / "docs" / "taxonomy.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(
        render_taxonomy(g.sources, [*g.cases, *g.prompts], g.bugs_of, g.base_seed), encoding="utf-8"
    )
    return [*written, doc]


def check_generated(
    root: Path | str, seed: int = DEFAULT_SEED, sources: Sources | None = None
) -> list[str]:
    """Problems of the checked-in files against what the generator writes (empty: in sync)."""
    root = Path(root)
    expected = _expected_files(seed, sources)
    problems = []
    for rel, text in sorted(expected.items()):
        path = root / rel
        if not path.exists():
            problems.append(f"missing: {rel}")
        elif path.read_bytes() != text.encode("utf-8"):
            problems.append(f"changed: {rel}")
    generated = root / "corpus" / "generated"
    if generated.exists():
        for path in sorted(generated.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in expected:
                problems.append(f"stale: {rel}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m k2conform.case.generate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 listing files that differ from what the generator writes",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=checkout_root(),
        help="repository root (default: this checkout)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--sources", type=Path, help="the case sources (default: the corpus's sources/)"
    )
    args = parser.parse_args(argv)
    try:
        sources = load_sources(args.sources)
        if args.check:
            problems = check_generated(args.root, args.seed, sources)
        else:
            written = write_generated(args.root, args.seed, sources)
    except CorpusError as error:
        print(error, file=sys.stderr)
        return 2
    if not args.check:
        target, doc = args.root / "corpus" / "generated", args.root / "docs" / "taxonomy.md"
        print(f"wrote {len(written) - 1} cases under {target} and {doc}")
        return 0
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"{len(problems)} file(s) differ; run python -m k2conform.case.generate",
            file=sys.stderr,
        )
        return 1
    print("corpus/generated and docs/taxonomy.md are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
