"""Build one standalone reproduction script from the real modules' source text.

A script is the header (what it reproduces, how to run it), the imports of every part
(hoisted, deduplicated), the case's data, k2conform's own functions that the parts import
(inlined from their source with their dependencies), the shared module, the driver and a
two-line main.  Modules are read as text, never imported: building a vLLM script does not
import vLLM.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pprint
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from k2conform import formats, markers
from k2conform.errors import HarnessError
from k2conform.k3 import markers as k3
from k2conform.model import Delta, Request

#: Packages whose names a script must not import: what they provide is inlined.
INTERNAL = ("k2conform", "k2conform_adapters")
SHARED = f"{__package__}.shared"
EMPTY_MESSAGE = {"content": None, "reasoning": None, "tool_calls": []}

HEADER = '''\
#!/usr/bin/env python3
"""Reproduction: {title}: {case_id} [{mode}]

{about}

Run it with python where {package} is installed (nothing else is needed).
Exit status 1: the parser's result differs from the expected one (the bug reproduces).
The last line printed is the parser's result as JSON.
"""
from __future__ import annotations
'''

CASE_COMMENT = """\
# The case as the parser gets it: the request's tools, tool_choice and thinking; mode
# "whole" (the complete output in one call) or the streaming mode (the deltas in order);
# each delta [text, token ids] (no ids in text-level deliveries); what each token id
# decodes to, and Kimi K2's special tokens, for parsers that read the tokenizer."""

MAIN = """\
if __name__ == "__main__":
    main(run, CASE, EXPECTED)
"""


def build_script(
    driver: str,
    request: Request,
    deltas: Sequence[Delta],
    mode: str,
    *,
    expected: dict[str, Any] | None = None,
    case_id: str = "case",
    format: str = formats.DEFAULT,
) -> str:
    """The standalone script for one delivery of a ``format`` output through ``driver`` (a
    module of this package, e.g. ``"vllm"``): exit 1 and the observed message on its last
    line when it reproduces."""
    module = f"{__package__}.{driver}"
    tree = _parse(module)
    title, _, about = (ast.get_docstring(tree) or driver).partition("\n")
    bundle = Bundle([SHARED, module])
    header = HEADER.format(
        title=title.strip(),
        about=about.strip(),
        case_id=case_id,
        mode=mode,
        package=_constant(tree, "PACKAGE", module),
    )
    data = "\n".join(
        [
            CASE_COMMENT,
            _assignment("CASE", case_data(request, deltas, mode, format)),
            "# The message the spec expects.",
            _assignment("EXPECTED", expected or EMPTY_MESSAGE),
        ]
    )
    return f"{header}\n{bundle.imports()}\n\n\n{data}\n\n\n{bundle.code()}\n\n\n{MAIN}"


def case_data(
    request: Request, deltas: Sequence[Delta], mode: str, format: str = formats.DEFAULT
) -> dict[str, Any]:
    """The keyword arguments of the script's ``Case``; a K3 output's adds its format, K3's
    special tokens and the ids of its channel tags (:data:`ENCODED`)."""
    ids = sorted({i for delta in deltas for i in delta.token_ids})
    special = {**markers.SPECIAL_TOKEN_IDS, **formats.FORMATS[format].standin_token_ids}
    data = {
        "tools": json.loads(json.dumps([dict(t) for t in request.tools])),
        "tool_choice": json.loads(json.dumps(request.tool_choice)),
        "thinking": bool(request.thinking),
        "mode": mode,
        "deltas": [[delta.text, list(delta.token_ids)] for delta in deltas],
        "token_text": _token_texts(ids),
        "special_tokens": special,
    }
    if format != formats.DEFAULT:
        from k2conform.delivery.tokenizer import load_tokenizer

        tokenizer = load_tokenizer()
        data["format"] = format
        data["encoded"] = {
            text: list(tokenizer.encode(text, add_special_tokens=False))
            for text in ENCODED.get(format, ())
        }
    return data


#: Per format, the texts a parser encodes itself (the script's tokenizer answers only these):
#: vLLM's K3 reasoning parser finds its channel tags among the ids, and the generation prompt
#: ends with one (kimi_k3_reasoning_parser.py).
ENCODED = {
    k3.FORMAT: tuple(tag(name) for name in ("think", "response") for tag in (k3.opener, k3.closer)),
}


def _token_texts(ids: Sequence[int]) -> dict[int, str]:
    if not ids:
        return {}
    from k2conform.delivery.tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    return {i: tokenizer.decode([i]) for i in ids}


def _assignment(name: str, value: Any) -> str:
    """``NAME = value`` as a Python literal, one item a line when it is long."""
    prefix = f"{name} = "
    text = pprint.pformat(value, width=100 - len(prefix), sort_dicts=False)
    return prefix + text.replace("\n", "\n" + " " * len(prefix))


def _parse(module: str) -> ast.Module:
    return ast.parse(_source(module), filename=module)


def _source(module: str) -> str:
    """A module's source text, found without importing the module itself."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise HarnessError(f"no Python source for {module}")
    with open(spec.origin, encoding="utf-8") as file:
        return file.read()


def _constant(tree: ast.Module, name: str, module: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise HarnessError(f"{module} has no {name} = ... (see k2conform_adapters.repro)")


def _is_internal(module: str) -> bool:
    return module.split(".")[0] in INTERNAL


def _third_party(module: str) -> bool:
    return module.split(".")[0] not in sys.stdlib_module_names


def _alias(name: str, asname: str) -> str:
    return f"{name} as {asname}" if asname else name


class Bundle:
    """Modules joined into one namespace: the ``parts`` whole (docstrings and imports taken
    out), and of the k2conform functions they import, the source of each with what it uses,
    recursively; imports from anything else are hoisted and deduplicated."""

    def __init__(self, parts: Sequence[str]) -> None:
        self._parts = list(parts)
        self._imports: set[tuple[str, str | None, str | None]] = set()
        self._inlined: list[str] = []
        self._seen: set[tuple[str, str]] = set()
        self._defined: dict[str, str] = {}  # top-level name -> the module it comes from
        self._bodies = [self._part(module) for module in self._parts]

    def imports(self) -> str:
        """The import block: the standard library's, then the parser's."""
        groups = []
        for third_party in (False, True):
            wanted = {i for i in self._imports if _third_party(i[0]) == third_party}
            lines = [
                f"import {_alias(m, a)}"
                for m, a in sorted((m, a or "") for m, name, a in wanted if name is None)
            ]
            for module in sorted({m for m, name, _ in wanted if name}):
                names = sorted(_alias(n, a or "") for m, n, a in wanted if m == module and n)
                lines.append(f"from {module} import {', '.join(names)}")
            if lines:
                groups.append("\n".join(lines))
        return "\n\n".join(groups)

    def code(self) -> str:
        """The inlined k2conform functions, then every part's code."""
        return "\n\n\n".join(piece.strip("\n") for piece in [*self._inlined, *self._bodies])

    def source(self) -> str:
        """A complete module: imports and code."""
        return f"from __future__ import annotations\n\n\n{self.imports()}\n\n\n{self.code()}"

    def _define(self, name: str, where: str) -> None:
        if self._defined.setdefault(name, where) != where:
            raise HarnessError(
                f"{name} is defined twice in one script: in {self._defined[name]} and in {where}"
            )

    def _part(self, module: str) -> str:
        """A part's code without its docstring and imports (which are noted)."""
        text = _source(module)
        tree = ast.parse(text, filename=module)
        drop: set[int] = set()
        for node in tree.body:
            is_import = isinstance(node, (ast.Import, ast.ImportFrom))
            if is_import:
                self._import(node, module)
            if is_import or _is_docstring(node, tree):
                drop.update(range(node.lineno - 1, node.end_lineno))
            else:
                for name in _bound_names(node):
                    self._define(name, module)
        lines = [line for n, line in enumerate(text.splitlines()) if n not in drop]
        return "\n".join(lines).strip("\n") + "\n"

    def _import(self, node: ast.Import | ast.ImportFrom, where: str) -> None:
        """An import of a part: hoisted, dropped (another part's names) or inlined."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_internal(alias.name):
                    raise HarnessError(f"{where}: import {alias.name} (import names from it)")
                self._imports.add((alias.name, None, alias.asname))
            return
        module = node.module or ""
        if node.level:
            raise HarnessError(f"{where}: a relative import (a script has no package)")
        if module == "__future__" or module in self._parts:
            return
        if not _is_internal(module):
            self._imports.update((module, alias.name, alias.asname) for alias in node.names)
            return
        for alias in node.names:
            if alias.asname:
                raise HarnessError(
                    f"{where}: {alias.name} imported as {alias.asname} "
                    "(an inlined name keeps its own)"
                )
            self._inline(module, alias.name)

    def _inline(self, module: str, name: str) -> None:
        """``name`` of ``module`` into the script, after what it uses."""
        if (module, name) in self._seen:
            return
        self._seen.add((module, name))
        tree = _parse(module)
        definitions = {bound: node for node in tree.body for bound in _bound_names(node)}
        if name not in definitions:
            self._inline_import(tree, module, name)
            return
        node = _StripAnnotations().visit(definitions[name])
        for reference in sorted(_references(node)):
            if reference in definitions:
                self._inline(module, reference)
            else:
                self._inline_import(tree, module, reference, required=False)
        self._define(name, module)
        self._inlined.append(ast.unparse(node))

    def _inline_import(
        self, tree: ast.Module, module: str, name: str, required: bool = True
    ) -> None:
        """What ``module`` imports as ``name``: inlined when it is k2conform's, else imported
        (the standard library only).  Not imported there: a builtin or a local name."""
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if (alias.asname or alias.name.split(".")[0]) == name:
                        self._import_for_inlined(node, alias, module)
                        return
        if required:
            raise HarnessError(f"{module} defines no {name}")

    def _import_for_inlined(
        self, node: ast.Import | ast.ImportFrom, alias: ast.alias, module: str
    ) -> None:
        source = alias.name if isinstance(node, ast.Import) else node.module or ""
        if not _is_internal(source):
            if _third_party(source):
                raise HarnessError(f"{module} needs {source}: a standalone script cannot import it")
            name = None if isinstance(node, ast.Import) else alias.name
            self._imports.add((source, name, alias.asname))
        elif isinstance(node, ast.ImportFrom) and not alias.asname:
            self._inline(source, alias.name)
        else:
            raise HarnessError(
                f"{module}: {ast.unparse(node)} cannot be inlined "
                "(only names imported by their own name)"
            )


class _StripAnnotations(ast.NodeTransformer):
    """Drop the annotations a script never evaluates (signatures, local variables), so an
    inlined function needs no names for them; class fields keep theirs (dataclasses read
    them)."""

    def __init__(self) -> None:
        self._depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        for arg in _arguments(node.args):
            arg.annotation = None
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if not self._depth:
            return node
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def _arguments(args: ast.arguments) -> Iterator[ast.arg]:
    yield from args.posonlyargs
    yield from args.args
    yield from args.kwonlyargs
    yield from (a for a in (args.vararg, args.kwarg) if a is not None)


def _bound_names(node: ast.stmt) -> list[str]:
    """The module-level names a statement defines (not imports)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return [
        n.id
        for t in targets
        for n in ast.walk(t)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    ]


def _references(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _is_docstring(node: ast.stmt, tree: ast.Module) -> bool:
    return (
        node is tree.body[0]
        and isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )
