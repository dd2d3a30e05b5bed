"""What of a parser file Kimi can reach at all, so a shared engine's coverage is judged on the
part Kimi can run, not on code only another model family's configuration runs.

Three rules, applied to the real objects of the installed release (nothing listed by hand):

* **replaced methods**: a method of a class in a Kimi class's MRO that the Kimi class (or a
  class between them) overrides without calling it through ``super()``;
* **configuration**: an ``if`` whose test depends only on the engine configuration Kimi
  builds (vLLM's ``kimi_k2_config(thinking)``, both settings), on attributes ``__init__`` sets
  once from it, and on the engine states Kimi's transition table can reach: the arm the test
  never takes, and what follows an arm that always returns;
* **callers**: a private function or method whose every reference in the whole package lies
  in code the other rules found unreachable;
* **other families' classes**: the methods of a class that derives from a class in a Kimi
  class's MRO (other than ``object``) but is in no Kimi class's MRO itself, and whose name no
  class of a Kimi MRO mentions (another model family's detector beside Kimi's: Kimi's objects
  are never its instances).

A line is unreachable only when it is unreachable under every Kimi configuration; anything the
rules cannot decide counts as reachable.
"""

from __future__ import annotations

import ast
import bisect
import enum
import importlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()
_SELF: Any = type("Self", (), {"__repr__": lambda self: "self"})()
_PURE_CALLS = {"frozenset": frozenset, "tuple": tuple, "bool": bool, "len": len}
_IMMUTABLE = (type(None), bool, int, float, str, bytes, frozenset, tuple)
#: Module globals an expression may use: constants, and what names code rather than data.
_GLOBALS = (*_IMMUTABLE, type, ModuleType, FunctionType, enum.Enum)
_CLASS_LINE = re.compile(r"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)
_SELF_BEFORE = re.compile(r"(?<!\w)self$")


@dataclass(frozen=True)
class KimiContext:
    """What Kimi is, in one parser package: its classes and, for a configured engine, the
    configurations it builds."""

    classes: tuple[str, ...]  #: "module:attribute" of each Kimi class
    config_factory: str | None = None  #: "module:attribute" of the function building the config
    config_settings: tuple[Mapping[str, Any], ...] = ()  #: the keyword arguments of each build
    config_names: tuple[str, ...] = ()  #: names (and ``self.`` attributes) that hold the config
    state_attribute: str | None = None  #: ``self.<this>`` takes only the states the table reaches


#: The Kimi contexts of the packages under test, by top-level package and format.
CONTEXTS: dict[tuple[str, str], KimiContext] = {
    ("vllm", "k2"): KimiContext(
        classes=(
            "vllm.parser.kimi_k2:KimiK2Parser",
            "vllm.tool_parsers.kimi_k2_tool_parser:KimiK2ToolParser",
            "vllm.reasoning.kimi_k2_reasoning_parser:KimiK2ReasoningParser",
        ),
        config_factory="vllm.parser.kimi_k2:kimi_k2_config",
        config_settings=({"thinking": True}, {"thinking": False}),
        config_names=("config", "parser_engine_config"),
        state_attribute="state",
    ),
    ("sglang", "k2"): KimiContext(
        classes=(
            "sglang.srt.function_call.kimik2_detector:KimiK2Detector",
            "sglang.srt.parser.reasoning_parser:KimiK2Detector",
        )
    ),
    ("vllm", "k3"): KimiContext(
        classes=(
            "vllm.parser.kimi_k3:KimiK3Parser",
            "vllm.tool_parsers.kimi_k3_tool_parser:KimiK3ToolParser",
            "vllm.reasoning.kimi_k3_reasoning_parser:KimiK3ReasoningParser",
        )
    ),
    ("sglang", "k3"): KimiContext(
        classes=(
            "sglang.srt.function_call.kimik3_detector:KimiK3Detector",
            "sglang.srt.parser.reasoning_parser:KimiK3Detector",
        )
    ),
}


@dataclass
class Reachability:
    """One file's code that Kimi cannot reach: lines with the reason, and decided ``if`` tests."""

    unreachable: dict[int, str] = field(default_factory=dict)
    #: ``if`` line → (first line of its body, the test's constant value, reason)
    decided: dict[int, tuple[int, bool, str]] = field(default_factory=dict)

    def dead_arcs(self, arcs: Iterable[Sequence[int]]) -> set[tuple[int, int]]:
        """The branch arcs (coverage.py's ``[from, to]``) Kimi can never take."""
        dead = set()
        for start, end in arcs:
            arc = (start, end)
            if start in self.unreachable or end in self.unreachable:
                dead.add(arc)
            elif start in self.decided:
                body, value, _ = self.decided[start]
                if (end == body) != value:
                    dead.add(arc)
        return dead

    def reason_of_arc(self, start: int, end: int) -> str:
        if start in self.decided and start not in self.unreachable:
            return self.decided[start][2]
        return self.unreachable.get(start) or self.unreachable.get(end, "")


def resolve(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def analyse(files: Mapping[str, Path], context: KimiContext | None) -> dict[str, Reachability]:
    """Each file's unreachable code (keys: paths like ``vllm/parser/kimi_k2.py``)."""
    if context is None:
        return {path: Reachability() for path in files}
    sources = {path: Path(real).read_text(encoding="utf-8") for path, real in files.items()}
    trees = {path: ast.parse(text) for path, text in sources.items()}
    modules = {
        path: importlib.import_module(path.removesuffix(".py").replace("/", ".")) for path in files
    }
    package = _PackageText(files)
    kimi_classes = [resolve(spec) for spec in context.classes]
    related = {c.__name__ for kimi in kimi_classes for c in kimi.__mro__}
    related |= {
        n.name for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
    }
    stored = _stored_attributes(trees.values(), package, related)
    private = _PrivateCode.find(trees, package)
    configs = (
        [resolve(context.config_factory)(**setting) for setting in context.config_settings]
        if context.config_factory
        else [None]
    )
    per_config = []
    for config in configs:
        results = {}
        for path, tree in trees.items():
            facts = _Facts(modules[path], config, context, stored)
            result = Reachability()
            _replaced_methods(tree, modules[path], kimi_classes, result)
            _other_families(tree, modules[path], kimi_classes, result)
            _FileWalker(facts, result).module(tree)
            results[path] = result
        private.mark_uncalled(results)
        per_config.append(results)
    return {path: _intersection([results[path] for results in per_config]) for path in files}


def _intersection(results: list[Reachability]) -> Reachability:
    first = results[0]
    lines = set(first.unreachable).intersection(*(r.unreachable for r in results[1:]))
    decided = {
        line: first.decided[line]
        for line in first.decided
        if all(r.decided.get(line) == first.decided[line] for r in results[1:])
    }
    return Reachability({line: first.unreachable[line] for line in sorted(lines)}, decided)


# -- rule 1: methods a Kimi class replaces -----------------------------------------------------


def _calls_super(function: ast.AST, name: str) -> bool:
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
        for node in ast.walk(function)
    )


def _override_tree(owner: type, name: str) -> ast.AST | None:
    import inspect
    import textwrap

    member = owner.__dict__[name]
    function = getattr(member, "fget", None) or getattr(member, "__func__", None) or member
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None


def _replaced_by(kimi: type, base: type, name: str) -> str | None:
    """The Kimi-side override that never calls ``base.name``, if there is one."""
    for owner in kimi.__mro__[: kimi.__mro__.index(base)]:
        if name not in owner.__dict__:
            continue
        tree = _override_tree(owner, name)
        if tree is None or _calls_super(tree, name):
            continue
        return f"{owner.__qualname__}.{name}"
    return None


def _replaced_methods(
    tree: ast.Module, module: Any, kimi_classes: list[type], result: Reachability
) -> None:
    for node in tree.body:
        base = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
        users = [kimi for kimi in kimi_classes if isinstance(base, type) and base in kimi.__mro__]
        if not users:
            continue
        for method in node.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            replacements = [_replaced_by(kimi, base, method.name) for kimi in users]
            if all(replacements):
                _mark_body(method, f"replaced by {replacements[0]}, which does not call it", result)


def _mark_body(function: ast.AST, reason: str, result: Reachability) -> None:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring is no statement of its own
    _mark(body, reason, result)


def _mark(statements: Iterable[ast.stmt], reason: str, result: Reachability) -> None:
    for statement in statements:
        for line in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1):
            result.unreachable.setdefault(line, reason)


# -- rule 4: other families' classes --------------------------------------------------------


def _mro_text(kimi_classes: list[type]) -> str:
    import inspect

    texts = []
    for cls in {c for kimi in kimi_classes for c in kimi.__mro__ if c is not object}:
        try:
            texts.append(inspect.getsource(cls))
        except (OSError, TypeError):
            texts.append(cls.__name__)  # no source: keep every name it might use
    return "\n".join(texts)


def _other_families(
    tree: ast.Module, module: Any, kimi_classes: list[type], result: Reachability
) -> None:
    related = {c for kimi in kimi_classes for c in kimi.__mro__}
    bases = tuple(c for c in related if c is not object)
    mentioned = None
    for node in tree.body:
        cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
        if not isinstance(cls, type) or cls in related or not issubclass(cls, bases):
            continue
        if mentioned is None:
            mentioned = _mro_text(kimi_classes)
        if re.search(rf"\b{re.escape(node.name)}\b", mentioned):
            continue
        base = next(b for b in cls.__mro__ if b in related)
        reason = (
            f"{node.name} is another family's {base.__name__}: Kimi's objects are "
            f"{', '.join(k.__name__ for k in kimi_classes if issubclass(k, base))}"
        )
        for member in node.body:
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _mark_body(member, reason, result)


# -- rule 2: the configuration ---------------------------------------------------------------


@dataclass(frozen=True)
class _Possible:
    """A value known only to be one of ``values`` (the engine states Kimi's table reaches, the
    transitions a table lookup may return)."""

    values: frozenset


def _possible(values: Iterable[Any]) -> Any:
    members = frozenset(values)
    return _Possible(members) if members else UNKNOWN


class _PackageText:
    """The package's other source files, searched as text: a name used or an attribute stored
    there keeps the analysis from claiming it."""

    def __init__(self, files: Mapping[str, Path]) -> None:
        path, real = next(iter(files.items()))
        self.root = Path(real).resolve().parents[len(path.split("/")) - 2]
        self.analysed = {Path(p).resolve() for p in files.values()}
        self._texts: list[str] | None = None

    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = [
                p.read_text(encoding="utf-8", errors="replace")
                for p in sorted(self.root.rglob("*.py"))
                if p.resolve() not in self.analysed
            ]
        return self._texts

    def stores(self, names: Iterable[str]) -> Iterator[tuple[str, str | None]]:
        """Each ``X.name = ...`` in the other files: the name, and for ``self.name`` the class it
        is written in (the nearest ``class`` line above it)."""
        names = sorted(set(names))
        if not names:
            return
        regex = re.compile(r"\.({})\s*(?:[-+*/|&]?=)(?!=)".format("|".join(map(re.escape, names))))
        for text in self.texts():
            classes = None
            for match in regex.finditer(text):
                if not _SELF_BEFORE.search(text, max(0, match.start() - 5), match.start()):
                    yield match.group(1), None
                    continue
                if classes is None:
                    classes = [(m.start(), m.group(1)) for m in _CLASS_LINE.finditer(text)]
                above = bisect.bisect(classes, (match.start(), "")) - 1
                yield match.group(1), classes[above][1] if above >= 0 else None

    def mentions(self, names: Iterable[str]) -> set[str]:
        """The names that occur as words in the other files."""
        names = sorted(set(names))
        if not names:
            return set()
        regex = re.compile(r"\b({})\b".format("|".join(map(re.escape, names))))
        return {match.group(1) for text in self.texts() for match in regex.finditer(text)}


def _stored_attributes(
    trees: Iterable[ast.Module], package: _PackageText, related: set[str]
) -> Counter:
    """How often each attribute name is assigned.  In the package's other files a store counts
    twice (so the attribute is never taken as a constant), unless it is ``self.X = ...`` in a class
    no Kimi object is an instance of (another family's parser sets its own attributes)."""
    counts: Counter = Counter()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                counts[node.attr] += 1
    once = [
        name for name, count in counts.items() if count == 1
    ]  # the only candidates for a constant
    for name, owner in package.stores(once):
        if owner is None or owner in related:
            counts[name] += 2
    return counts


class _Facts:
    """Evaluates expressions of one module under one Kimi configuration; UNKNOWN where it cannot."""

    def __init__(self, module: Any, config: Any, context: KimiContext, stored: Counter) -> None:
        self.module, self.config, self.context, self.stored = module, config, context, stored
        self.attributes: dict[str, Any] = {}  # self.<name> → value, for the class being walked
        states = set()
        if config is not None and context.state_attribute:
            states = {config.initial_state, *(t.next_state for t in config.transitions.values())}
            states.add(type(config.initial_state)["CONTENT"])  # the engine's reset and finish state
        self.states = _Possible(frozenset(states)) if states else UNKNOWN

    def class_attributes(self, cls: ast.ClassDef) -> None:
        """The class's immutable constants (never assigned through an attribute), and the
        attributes ``__init__`` sets once, from the configuration, to an immutable value."""
        owner = getattr(self.module, cls.name, None)
        self.attributes = {}
        for node in cls.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and not self.stored[node.targets[0].id]
            ):
                value = getattr(owner, node.targets[0].id, UNKNOWN)
                if isinstance(value, _IMMUTABLE):
                    self.attributes[node.targets[0].id] = value
        init = next(
            (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
        )
        if init is None or self.config is None:
            return
        scope = _Scope(init, self.context.config_names)
        for node in ast.walk(init):
            target = (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            )
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and self.stored[target.attr] == 1
            ):
                value = self.value(node.value, scope)
                if value is not UNKNOWN and isinstance(value, _IMMUTABLE):
                    self.attributes[target.attr] = value

    def truth(self, node: ast.expr, scope: _Scope) -> Any:
        value = self.value(node, scope)
        if value is UNKNOWN or value is _SELF:
            return UNKNOWN
        try:
            truths = (
                {bool(v) for v in value.values} if isinstance(value, _Possible) else {bool(value)}
            )
        except Exception:  # noqa: BLE001 - a value whose truth needs running code
            return UNKNOWN
        return truths.pop() if len(truths) == 1 else UNKNOWN

    def value(self, node: ast.expr, scope: _Scope, depth: int = 0) -> Any:
        if depth > 20:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(node.id, scope, depth)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, depth)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            operand = self.truth(node.operand, scope)
            return UNKNOWN if operand is UNKNOWN else not operand
        if isinstance(node, ast.BoolOp):
            return self._bool_op(node, scope)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return _compare(
                node.ops[0],
                self.value(node.left, scope, depth + 1),
                self.value(node.comparators[0], scope, depth + 1),
            )
        if isinstance(node, ast.Call):
            return self._call(node, scope, depth)
        if isinstance(node, ast.Tuple):
            items = [self.value(item, scope, depth + 1) for item in node.elts]
            return (
                UNKNOWN
                if any(i is UNKNOWN or isinstance(i, _Possible) for i in items)
                else tuple(items)
            )
        if (
            isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp))
            and len(node.generators) == 1
        ):
            source = self.value(node.generators[0].iter, scope, depth + 1)
            return (
                ()
                if isinstance(source, (Mapping, frozenset, tuple, set, list)) and not source
                else UNKNOWN
            )
        return UNKNOWN

    def _name(self, name: str, scope: _Scope, depth: int) -> Any:
        if name in scope.config_parameters and self.config is not None:
            return self.config
        if name in scope.aliases:
            return self.value(scope.aliases[name], scope, depth + 1)
        if name == "self":
            return _SELF
        value = UNKNOWN if name in scope.bound else getattr(self.module, name, UNKNOWN)
        return value if isinstance(value, _GLOBALS) else UNKNOWN

    def _attribute(self, node: ast.Attribute, scope: _Scope, depth: int) -> Any:
        base = self.value(node.value, scope, depth + 1)
        if base is _SELF:
            if node.attr == self.context.state_attribute:
                return self.states
            if node.attr in self.context.config_names and self.config is not None:
                return self.config
            return self.attributes.get(node.attr, UNKNOWN)
        if base is UNKNOWN:
            return UNKNOWN
        try:
            if isinstance(base, _Possible):  # a None member would raise here: that path ends
                return _possible(getattr(v, node.attr) for v in base.values if v is not None)
            return getattr(base, node.attr)
        except Exception:  # noqa: BLE001 - an attribute that needs running code
            return UNKNOWN

    def _bool_op(self, node: ast.BoolOp, scope: _Scope) -> Any:
        deciding = isinstance(node.op, ast.Or)  # the operand value that decides the whole
        values = [self.truth(v, scope) for v in node.values]
        if deciding in values:
            return deciding
        return UNKNOWN if UNKNOWN in values else not deciding

    def _call(self, node: ast.Call, scope: _Scope, depth: int) -> Any:
        if node.keywords:
            return UNKNOWN
        arguments = [self.value(a, scope, depth + 1) for a in node.args]
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and 1 <= len(arguments) <= 2
        ):
            return self._lookup(self.value(node.func.value, scope, depth + 1), *arguments)
        if any(a is UNKNOWN or isinstance(a, _Possible) for a in arguments):
            return UNKNOWN
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in _PURE_CALLS
            and node.func.id not in scope.bound
        ):
            return _PURE_CALLS[node.func.id](*arguments)
        return UNKNOWN

    @staticmethod
    def _lookup(owner: Any, key: Any, default: Any = None) -> Any:
        """``owner.get(key, default)`` of a known mapping; with a key not known exactly, the
        possible values (every value the key may select, and the default)."""
        if not isinstance(owner, Mapping) or default is UNKNOWN or isinstance(default, _Possible):
            return UNKNOWN
        try:
            if key is UNKNOWN:
                return _possible([*owner.values(), default])
            if isinstance(key, _Possible):
                return _possible(owner.get(k, default) for k in key.values)
            return owner.get(key, default)
        except TypeError:  # an unhashable key or value
            return UNKNOWN


_OPERATIONS = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _compare(op: ast.cmpop, left: Any, right: Any) -> Any:
    """The comparison's value; with a possible-values side, the value every member agrees on."""
    operation = _OPERATIONS.get(type(op))
    if operation is None or UNKNOWN in (left, right) or _SELF in (left, right):
        return UNKNOWN
    lefts = left.values if isinstance(left, _Possible) else (left,)
    rights = right.values if isinstance(right, _Possible) else (right,)
    try:
        outcomes = {bool(operation(a, b)) for a in lefts for b in rights}
    except Exception:  # noqa: BLE001 - a comparison that needs running code
        return UNKNOWN
    return outcomes.pop() if len(outcomes) == 1 else UNKNOWN


class _Scope:
    """A function's names: the parameters holding the config, single-assignment aliases, and
    every other name it binds (never looked up in the module)."""

    def __init__(self, function: ast.AST | None, config_names: Sequence[str]) -> None:
        self.config_parameters: set[str] = set()
        self.aliases: dict[str, ast.expr] = {}
        self.bound: set[str] = set()
        if function is None:
            return
        arguments = function.args
        parameters = [
            a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
        ]
        parameters += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
        self.config_parameters = {p for p in parameters if p in config_names}
        stores = Counter(
            n.id
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        )
        self.bound = set(parameters) | set(stores)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and stores[node.targets[0].id] == 1
                and node.targets[0].id not in parameters
            ):
                self.aliases[node.targets[0].id] = node.value


class _FileWalker:
    """Walks every function of a module, marking the arms a decided test never takes."""

    def __init__(self, facts: _Facts, result: Reachability) -> None:
        self.facts, self.result = facts, result

    def module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self.facts.class_attributes(node)
                for member in node.body:
                    self._function(member)
                self.facts.attributes = {}
            else:
                self._function(node)

    def _function(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._block(node.body, _Scope(node, self.facts.context.config_names))

    def _block(self, statements: list[ast.stmt], scope: _Scope) -> None:
        for index, statement in enumerate(statements):
            if statement.lineno in self.result.unreachable:
                continue
            if not isinstance(statement, ast.If):
                for child in _child_blocks(statement):
                    self._block(child, scope)
                continue
            value = self.facts.truth(statement.test, scope)
            if value is UNKNOWN:
                self._block(statement.body, scope)
                self._block(statement.orelse, scope)
                continue
            test = ast.unparse(statement.test)
            reason = f"`{test}` is always {value} for Kimi"
            live, dead = (
                (statement.body, statement.orelse) if value else (statement.orelse, statement.body)
            )
            self.result.decided[statement.lineno] = (statement.body[0].lineno, value, reason)
            _mark(dead, reason, self.result)
            self._block(live, scope)
            if live and _terminates(live):
                _mark(
                    statements[index + 1 :],
                    f"after `if {test}`, which always leaves here for Kimi",
                    self.result,
                )
                return


def _child_blocks(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body


def _terminates(statements: list[ast.stmt]) -> bool:
    last = statements[-1]
    if isinstance(last, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    return (
        isinstance(last, ast.If)
        and bool(last.orelse)
        and _terminates(last.body)
        and _terminates(last.orelse)
    )


# -- rule 3: private code with no reachable caller ---------------------------------------------


@dataclass(frozen=True)
class _PrivateCode:
    """The private functions defined once across the files and used nowhere else in the package,
    with every place each is referenced (a call, an attribute, a name, a string)."""

    definitions: dict[str, tuple[str, ast.AST]]
    references: dict[str, list[tuple[str, int]]]

    @classmethod
    def find(cls, trees: Mapping[str, ast.Module], package: _PackageText) -> _PrivateCode:
        found: dict[str, list[tuple[str, ast.AST]]] = {}
        for path, tree in trees.items():
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(
                    node.name
                ):
                    found.setdefault(node.name, []).append((path, node))
        definitions = {name: places[0] for name, places in found.items() if len(places) == 1}
        for name in package.mentions(definitions):
            del definitions[name]
        references: dict[str, list[tuple[str, int]]] = {name: [] for name in definitions}
        for path, tree in trees.items():
            for node in ast.walk(tree):
                name = (
                    node.attr
                    if isinstance(node, ast.Attribute)
                    else node.id
                    if isinstance(node, ast.Name)
                    else node.value
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    else None
                )
                if name in references:
                    references[name].append((path, node.lineno))
        return cls(definitions, references)

    def mark_uncalled(self, results: dict[str, Reachability]) -> None:
        """Mark the ones whose every reference is in unreachable code, to a fixpoint."""
        changed = True
        while changed:
            changed = False
            for name, (path, node) in sorted(self.definitions.items()):
                if node.body[-1].lineno in results[path].unreachable:
                    continue
                if all(
                    (p == path and _inside(line, node)) or line in results[p].unreachable
                    for p, line in self.references[name]
                ):
                    _mark_body(
                        node, f"only called from code Kimi cannot reach ({name})", results[path]
                    )
                    changed = True


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _inside(line: int, node: ast.AST) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)
