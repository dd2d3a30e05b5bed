"""AST mutation testing of k2conform's core: do the tests notice when the code is wrong?

Each module is mutated one mutant at a time (comparison and boolean operators, operands
of ``and``/``or`` removed, ``not`` removed, conditions negated, constants changed, return
values replaced by ``None``, statements deleted, arithmetic swapped, slice and ``range``
bounds moved by one), and the tests that exercise it run against each mutant.  A mutant is
*killed* when they fail or time out (an infinite loop is a killed mutant, not a hung run),
and *survives* when they pass.  Mutants listed in ``equivalent.json`` (next to this file)
change nothing a caller can see; they are left out of the score, each with its reason.

Nothing is written to the checkout: every module is scored in a fresh temporary copy of
``conformance/`` and ``tests/`` (the rest of the checkout is linked), put first on
``PYTHONPATH``, so other work in the checkout goes on undisturbed.  f-strings (message
wording), annotations, decorators, imports and docstrings are not mutated, nor are
module- and class-level statements deleted.

Usage, from the checkout root::

    .venv/bin/python tests/mutation/mutate.py                    # every module, then the scores
    .venv/bin/python tests/mutation/mutate.py judge/compare.py   # one module (or several)
    .venv/bin/python tests/mutation/mutate.py --list gate/baseline.py   # the mutants, none run
    .venv/bin/python tests/mutation/mutate.py judge/stream.py --tests tests/test_x.py --timeout 30

It prints every surviving mutant as ``file:line: scope: kind: `before` -> `after```, then
one score line per module.  Exit status: 0 when every module kills at least ``--min-score``
% of its non-equivalent mutants, 1 when one does not, 2 on bad arguments or when the tests
fail on the unmutated copy.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("conformance") / "k2conform"
EQUIVALENT = Path(__file__).with_name("equivalent.json")
#: module (relative to the package) -> the test files that exercise it
TARGETS = {
    "judge/compare.py": ("tests/test_compare.py",),
    "judge/stream.py": ("tests/test_stream_and_delivery.py",),
    "gate/baseline.py": ("tests/test_baseline.py",),
}
_COPIED = ("conformance", "tests")
#: caches a test run could write to through a link
_NOT_LINKED = {".git", "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache"}

_COMPARE_SWAPS = {
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_BINARY_SWAPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_NOT_MUTATED_FIELDS = {"annotation", "returns", "decorator_list", "type_comment"}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NEVER_DELETED = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.Pass, *_FUNCTIONS)


class Abort(Exception):
    """The run cannot say anything (exit status 2): one line on stderr."""


@dataclass(frozen=True)
class Site:
    """One node that can be mutated, and where it hangs in the tree."""

    node: ast.AST
    parent: ast.AST
    field: str
    index: int | None
    scope: str


@dataclass(frozen=True)
class Change:
    """One mutation of a node: the node that replaces it, and how a report shows the change."""

    kind: str
    new: ast.AST
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class Mutant:
    module: str
    line: int
    scope: str
    kind: str
    before: str
    after: str
    source: str

    @property
    def key(self) -> str:
        """How equivalent.json names it: no line number, so edits elsewhere keep it listed."""
        return f"{self.scope}: {self.kind}: `{self.before}` -> `{self.after}`"

    def describe(self) -> str:
        return f"{PACKAGE / self.module}:{self.line}: {self.key}"


# -- finding the mutants ---------------------------------------------------------------------


def _is_docstring(parent: ast.AST, field: str, index: int | None, node: ast.AST) -> bool:
    return (
        field == "body"
        and index == 0
        and isinstance(parent, (ast.Module, ast.ClassDef, *_FUNCTIONS))
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _skipped(parent: ast.AST, field: str, index: int | None, node: object) -> bool:
    never = (ast.Import, ast.ImportFrom, ast.JoinedStr)
    return (
        not isinstance(node, ast.AST)
        or isinstance(node, never)
        or _is_docstring(parent, field, index, node)
    )


def sites(tree: ast.Module) -> list[Site]:
    """Every mutable node in a fixed order (the same for the same source)."""
    found: list[Site] = []

    def visit(node: ast.AST, scope: str) -> None:
        for field, value in ast.iter_fields(node):
            if field in _NOT_MUTATED_FIELDS:
                continue
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                index = position if isinstance(value, list) else None
                if _skipped(node, field, index, child):
                    continue
                found.append(Site(child, node, field, index, scope))
                if isinstance(child, (ast.ClassDef, *_FUNCTIONS)):
                    visit(child, child.name if scope == "<module>" else f"{scope}.{child.name}")
                else:
                    visit(child, scope)

    visit(tree, "<module>")
    return found


def _plus(node: ast.expr, amount: int) -> ast.expr:
    operator = ast.Add() if amount > 0 else ast.Sub()
    return ast.BinOp(copy.deepcopy(node), operator, ast.Constant(abs(amount)))


def _with(node: ast.AST, **changes: object) -> ast.AST:
    changed = copy.deepcopy(node)
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 70 else text[:67] + "..."


def _operator_changes(node: ast.AST) -> list[Change]:
    if isinstance(node, ast.Compare):
        return [
            Change("comparison", _with(node, ops=[*node.ops[:j], swap(), *node.ops[j + 1 :]]))
            for j, op in enumerate(node.ops)
            for swap in _COMPARE_SWAPS.get(type(op), ())
        ]
    if isinstance(node, ast.BoolOp):
        values = node.values
        kept = [
            values[1 - j] if len(values) == 2 else _with(node, values=values[:j] + values[j + 1 :])
            for j in range(len(values))
        ]
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return [Change("boolean", _with(node, op=other))] + [
            Change("operand removed", new, before=_short(removed), after="(removed)")
            for removed, new in zip(values, kept, strict=True)
        ]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [Change("not removed", node.operand)]
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINARY_SWAPS:
        return [Change("arithmetic", _with(node, op=_BINARY_SWAPS[type(node.op)]()))]
    return []


def _value_changes(node: ast.AST) -> list[Change]:
    if isinstance(node, ast.Constant):
        return [
            Change("constant", ast.Constant(value)) for value in _constant_mutations(node.value)
        ]
    if isinstance(node, ast.Slice):
        return [
            Change("off by one", _with(node, **{bound: _plus(getattr(node, bound), amount)}))
            for bound in ("lower", "upper")
            if getattr(node, bound) is not None
            for amount in (1, -1)
        ]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        args = node.args
        return [
            Change("off by one", _with(node, args=[*args[:j], _plus(a, amount), *args[j + 1 :]]))
            for j, a in enumerate(args)
            for amount in (1, -1)
        ]
    if isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
        return [Change("return value", _with(node, value=ast.Constant(None)))]
    return []


def _constant_mutations(value: object) -> list[object]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, (int, float)):
        return [value + 1, value - 1]
    if isinstance(value, str):
        return ["" if value else "mutant"]
    return []


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _negation(site: Site) -> list[Change]:
    """``if c`` -> ``if not c`` (a lone comparison is flipped by its operator already)."""
    node = site.node
    if isinstance(site.parent, ast.comprehension) and site.field == "ifs":
        condition, build = node, lambda negated: negated
    elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
        condition, build = node.test, lambda negated: _with(node, test=negated)
    else:
        return []
    if isinstance(condition, ast.Compare) and len(condition.ops) == 1:
        return []
    if isinstance(condition, ast.UnaryOp) and isinstance(condition.op, ast.Not):
        return []
    return [Change("condition negated", build(ast.UnaryOp(ast.Not(), copy.deepcopy(condition))))]


def _deletion(site: Site) -> list[Change]:
    """Statements inside functions; a function's last ``return`` is the return-value mutant's."""
    node, parent = site.node, site.parent
    if (
        not isinstance(node, ast.stmt)
        or isinstance(node, _NEVER_DELETED)
        or site.scope == "<module>"
        or isinstance(parent, ast.ClassDef)
    ):
        return []
    if (
        isinstance(parent, _FUNCTIONS)
        and site.field == "body"
        and site.index == len(parent.body) - 1
        and isinstance(node, ast.Return)
    ):
        return []
    return [Change("statement deleted", ast.Pass())]


def changes(site: Site) -> list[Change]:
    """Every mutation of one node."""
    node = site.node
    return _operator_changes(node) + _value_changes(node) + _negation(site) + _deletion(site)


def _replace(site: Site, new: ast.AST) -> None:
    ast.copy_location(new, site.node)
    if site.index is None:
        setattr(site.parent, site.field, new)
    else:
        getattr(site.parent, site.field)[site.index] = new


def mutants(source: str, module: str) -> list[Mutant]:
    """Every distinct mutant of ``source`` (one that changes nothing or repeats another is not)."""
    seen = {ast.unparse(ast.parse(source))}
    found: list[Mutant] = []
    for number in range(len(sites(ast.parse(source)))):
        for choice in range(len(changes(sites(ast.parse(source))[number]))):
            tree = ast.parse(source)
            site = sites(tree)[number]
            change = changes(site)[choice]
            before, after = change.before or _short(site.node), change.after or _short(change.new)
            _replace(site, change.new)
            mutated = ast.unparse(ast.fix_missing_locations(tree))
            if mutated not in seen:
                seen.add(mutated)
                found.append(
                    Mutant(
                        module, site.node.lineno, site.scope, change.kind, before, after, mutated
                    )
                )
    return _numbered(found)


def _numbered(found: list[Mutant]) -> list[Mutant]:
    """Mutants that read alike (the same text twice in one function) get distinct keys."""
    counts: dict[str, int] = {}
    numbered = []
    for mutant in found:
        counts[mutant.key] = counts.get(mutant.key, 0) + 1
        if counts[mutant.key] > 1:
            mutant = replace(mutant, kind=f"{mutant.kind} #{counts[mutant.key]}")
        numbered.append(mutant)
    return numbered


# -- running the tests against each mutant ----------------------------------------------------


def make_copy(into: Path) -> Path:
    """A checkout to mutate: its own conformance/ and tests/, the rest linked read-only."""
    for name in _COPIED:
        shutil.copytree(
            ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__", "__snapshots__")
        )
    for path in ROOT.iterdir():
        if path.name not in _NOT_LINKED and path.name not in _COPIED:
            (into / path.name).symlink_to(path)
    return into


def run_tests(root: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """'passed', 'failed' or 'timeout' for one run of ``tests`` in the copy at ``root``, and
    pytest's last line (what failed, for a run that should have passed)."""
    env = {**os.environ, "PYTHONPATH": str(root / "conformance"), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "-x",
        "-q",
        "--tb=no",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "-o",
        f"timeout={timeout:g}",
    ]
    process = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return "timeout", f"killed after {timeout + 10:g} s"
    last = ([line for line in output.splitlines() if line.strip()] or [""])[-1]
    if process.returncode == 5:
        raise Abort(f"no test ran in {' '.join(tests)}")
    return ("passed" if process.returncode == 0 else "failed"), last


@dataclass
class Score:
    module: str
    total: int = 0
    killed: int = 0
    timeouts: int = 0
    equivalent: int = 0
    seconds: float = 0.0

    @property
    def survived(self) -> int:
        return self.total - self.killed - self.equivalent

    @property
    def percent(self) -> float:
        judged = self.total - self.equivalent
        return 100.0 * self.killed / judged if judged else 100.0

    def line(self) -> str:
        return (
            f"{self.module}: {self.total} mutants, {self.killed} killed ({self.timeouts} by "
            f"timeout), {self.equivalent} equivalent, {self.survived} survived: "
            f"{self.percent:.1f} % of {self.total - self.equivalent} non-equivalent, "
            f"{self.seconds:.0f} s"
        )


def score_module(
    module: str, tests: tuple[str, ...], timeout: float, equivalent: set[str]
) -> Score:
    """Mutate ``module`` in a fresh copy, run ``tests`` per mutant, print every survivor."""
    score = Score(module)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="k2conform-mutation-") as tmp:
        root = make_copy(Path(tmp))
        target = root / PACKAGE / module
        source = target.read_text(encoding="utf-8")
        found = mutants(source, module)
        for key in sorted(equivalent - {m.key for m in found}):
            print(f"  listed as equivalent, but no mutant of {module} any more: {key}")
        target.write_text(ast.unparse(ast.parse(source)), encoding="utf-8")
        outcome, last = run_tests(root, tests, timeout)
        if outcome != "passed":
            raise Abort(f"{' '.join(tests)} fail on the unmutated {module}: {last}")
        for mutant in found:
            target.write_text(mutant.source, encoding="utf-8")
            outcome, _ = run_tests(root, tests, timeout)
            score.total += 1
            if mutant.key in equivalent and outcome == "passed":
                score.equivalent += 1
            elif outcome == "passed":
                print(f"  survived: {mutant.describe()}", flush=True)
            else:
                if mutant.key in equivalent:
                    print(f"  listed as equivalent, but killed: {mutant.describe()}")
                score.killed += 1
                score.timeouts += outcome == "timeout"
    score.seconds = time.monotonic() - started
    return score


def load_equivalent(path: Path = EQUIVALENT) -> dict[str, set[str]]:
    """module -> the keys of its mutants reviewed as equivalent (each entry says why)."""
    listed: dict[str, set[str]] = {}
    for entry in json.loads(path.read_text(encoding="utf-8"))["equivalent"]:
        if not entry.get("why"):
            raise Abort(f"{path.name}: {entry.get('mutant')!r} gives no why")
        listed.setdefault(entry["module"], set()).add(entry["mutant"])
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"modules under {PACKAGE} (default: all)")
    parser.add_argument(
        "--tests", action="append", help="test files to run instead of the module's own"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds one mutant's test run may take (default 60)",
    )
    parser.add_argument(
        "--min-score",
        type=float,
        default=95.0,
        help="the score each module must reach (default 95)",
    )
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except Abort as error:
        print(f"mutate.py: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    modules = args.modules or list(TARGETS)
    unknown = [m for m in modules if m not in TARGETS]
    if unknown:
        raise Abort(f"unknown module {unknown[0]!r} (known: {', '.join(TARGETS)})")
    if args.timeout <= 0:
        raise Abort("--timeout must be more than 0")
    equivalent = load_equivalent()
    if args.list:
        for module in modules:
            for mutant in mutants((ROOT / PACKAGE / module).read_text(encoding="utf-8"), module):
                listed = mutant.key in equivalent.get(module, set())
                print(mutant.describe() + ("  [equivalent]" if listed else ""))
        return 0
    scores = []
    for module in modules:
        tests = tuple(args.tests or TARGETS[module])
        print(f"{module}: running {' '.join(tests)} per mutant", flush=True)
        scores.append(score_module(module, tests, args.timeout, equivalent.get(module, set())))
        print(f"  {scores[-1].line()}", flush=True)
    for score in scores:
        print(score.line())
    return 0 if all(s.percent >= args.min_score for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
