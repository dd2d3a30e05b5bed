"""What adapters of OpenAI-style servers share, so each adapter file holds only what is
specific to its parser: loading once, the request object a case becomes, masking random
tool-call ids, and turning the server's message objects into k2conform's results.

A plugin adapter (docs/adapters.md) may use these too; nothing here calls a parser, so an
exception in here is glue breakage, never a parser finding.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ClassVar, Collection, Iterable

from k2conform.adapter.contract import AdapterGlueError, AdapterUnavailable
from k2conform.model import Request, StreamEvent, ToolCall, ToolCallDelta

#: What the adapters call the model in requests; the parsers never look at it.
MODEL_NAME = "moonshotai/Kimi-K2-Instruct"
#: The conversation a case's request carries: the parsers read the tools and options only.
CASE_MESSAGES = ({"role": "user", "content": "(conformance case)"},)


def load_once(load: Callable[[Any], None]) -> Callable[[Any], None]:
    """Make an adapter's ``load`` run its body once per instance (imports take seconds);
    a load that raised runs again next time, so its reason is reported every time."""

    @functools.wraps(load)
    def guarded(self: Any) -> None:
        if getattr(self, "_loaded", False):
            return
        load(self)
        self._loaded = True

    return guarded


def case_request_fields(
    request: Request, options: Collection[str] = (), *, template_kwargs: bool = True
) -> dict[str, Any]:
    """The conversation and options of a case's request body: ``messages`` (the case's own,
    else ``CASE_MESSAGES``), ``chat_template_kwargs={"thinking": ...}`` where the server reads
    thinking from there, and the case's server options among ``options`` (the adapter's
    ``request_options``) as the request's own fields (``chat_template_kwargs`` adds to
    thinking)."""
    applied = {k: v for k, v in request.server_options.items() if k in options}
    fields: dict[str, Any] = {"messages": [dict(m) for m in applied.pop("messages", CASE_MESSAGES)]}
    extra_kwargs = applied.pop("chat_template_kwargs", {})
    if template_kwargs or extra_kwargs:
        thinking = {"thinking": request.thinking} if template_kwargs else {}
        fields["chat_template_kwargs"] = {**thinking, **extra_kwargs}
    return {**fields, **applied}


def build_chat_request(
    request_cls: Any,
    request: Request,
    *,
    choice_without_tools: str | None,
    template_kwargs: bool = True,
    options: Collection[str] = (),
) -> Any:
    """The server's ``ChatCompletionRequest`` for a case: its tools, its tool_choice (or
    ``choice_without_tools`` when it declares none: each server has its own default), and
    :func:`case_request_fields`."""
    fields: dict[str, Any] = {
        "model": MODEL_NAME,
        "tools": [dict(t) for t in request.tools] or None,
        "tool_choice": request.tool_choice if request.tools else choice_without_tools,
        **case_request_fields(request, options, template_kwargs=template_kwargs),
    }
    try:
        return request_cls(**fields)
    except Exception as exc:  # noqa: BLE001 - the request model rejected our glue
        raise AdapterGlueError("ChatCompletionRequest", f"{type(exc).__name__}: {exc}") from exc


@dataclass
class RandomIds:
    """Ids a server mints at random differ on every run: report their shape, count them
    (``meta.masked_random_ids``), so results stay reproducible.  One instance per parse."""

    pattern: re.Pattern[str]
    #: The id reported in its place: the id's fixed part with :data:`MASK` for the random one.
    replacement: str
    masked: int = 0

    #: What stands for the random part of a masked id (a server of the fake engine makes it
    #: unique again, as the server's own random ids are).
    MASK: ClassVar[str] = "<random>"

    @classmethod
    def chatcmpl(cls, alphabet: str = "0-9a-f") -> "RandomIds":
        """``chatcmpl-tool-<random>``: OpenAI-style servers' ``make_tool_call_id()``."""
        return cls(re.compile(rf"^chatcmpl-tool-[{alphabet}]{{16,32}}$"), "chatcmpl-tool-<random>")

    def mask(self, tool_id: str | None) -> str | None:
        if tool_id is not None and self.pattern.match(tool_id):
            self.masked += 1
            return self.replacement
        return tool_id

    def meta(self, **fields: Any) -> dict[str, Any]:
        """A result's ``meta``: the given fields, plus the masked count when there is one."""
        return {**fields, "masked_random_ids": self.masked} if self.masked else dict(fields)


def tool_calls_of(calls: Iterable[Any] | None, ids: RandomIds) -> tuple[ToolCall, ...]:
    """A one-shot message's ``tool_calls`` (OpenAI ``ToolCall`` objects) as k2conform's."""
    return tuple(
        ToolCall(name=tc.function.name, arguments=tc.function.arguments, id=ids.mask(tc.id))
        for tc in (calls or ())
    )


def _delta_function(function: Any) -> tuple[str | None, str | None]:
    """A streamed call's ``function``: an object, a dict (some releases dump it), or absent."""
    if function is None:
        return None, None
    if isinstance(function, dict):
        return function.get("name"), function.get("arguments")
    return function.name, function.arguments


def event_of(
    message: Any,
    ids: RandomIds,
    *,
    reasoning_field: str = "reasoning",
    blank_is_absent: bool = False,
) -> StreamEvent | None:
    """A streamed ``DeltaMessage`` as a ``StreamEvent``; None for a message with nothing in it
    (the server sends no chunk for it, or one that only carries ``finish_reason``).
    ``blank_is_absent``: the server treats ``""`` content as no content (lmdeploy does)."""
    if message is None:
        return None
    calls = tuple(
        ToolCallDelta(index=tc.index, id=ids.mask(tc.id), name=name, arguments=arguments)
        for tc in (message.tool_calls or ())
        for name, arguments in [_delta_function(tc.function)]
    )
    content = message.content
    reasoning = getattr(message, reasoning_field, None)
    if blank_is_absent:
        content, reasoning = content or None, reasoning or None
    if content is None and reasoning is None and not calls:
        return None
    return StreamEvent(content=content, reasoning=reasoning, tool_calls=calls)


def package_dir(distribution: str, top: str) -> Path:
    """The installed package directory of ``top``, found without importing it (for
    packages whose ``__init__`` needs a GPU stack the parser itself does not)."""
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise AdapterUnavailable(f"{distribution} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def module_from_file(name: str, path: Path) -> ModuleType:
    """Load one file of the parser's package as a module, without its package's imports."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AdapterGlueError(str(path), "cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def definitions_from_source(
    path: Path,
    roots: Iterable[str],
    *,
    module_name: str,
    package: str,
    stand_ins: dict[str, Any] | None = None,
) -> ModuleType:
    """Run, from a release's file that cannot be imported whole (its imports need a GPU
    stack), just the top-level definitions ``roots`` need: the roots and, transitively, every
    function, class and assignment of the file they name, in the file's order, and of its
    imports only those they name.  ``stand_ins`` are names the adapter supplies instead.
    They run in a new module ``module_name`` (of ``package``, for relative imports), put in
    ``sys.modules`` as an import would (dataclasses look their module up there).
    A name the release no longer has, or a needed import that fails here, is glue breakage."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bound: dict[str, list[ast.stmt]] = {}
    imports: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imports[(alias.asname or alias.name).split(".")[0]] = (
                    ast.Import(names=[alias])
                    if isinstance(node, ast.Import)
                    else ast.ImportFrom(module=node.module, names=[alias], level=node.level)
                )
        for name in _bound_names(node):
            bound.setdefault(name, []).append(node)
    module = ModuleType(module_name)
    module.__package__, module.__file__ = package, str(path)
    module.__dict__.update(stand_ins or {})
    sys.modules[module_name] = module
    namespace = module.__dict__
    wanted: set[int] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in namespace or (name in bound and id(bound[name][0]) in wanted):
            continue
        if name in bound:
            wanted.update(id(node) for node in bound[name])
            todo.extend(free for node in bound[name] for free in _free_names(node))
        elif name in imports:
            _execute([imports[name]], path, namespace)
        elif not hasattr(builtins, name):
            raise AdapterGlueError(f"{path.name}: {name}", "not defined in the installed release")
    _execute([node for node in tree.body if id(node) in wanted], path, namespace)
    return module


def _execute(body: list[ast.stmt], path: Path, namespace: dict[str, Any]) -> None:
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    try:
        exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the release's own code
    except Exception as exc:  # an import the definitions need fails here
        raise AdapterGlueError(
            f"{path.name}: {ast.unparse(module)[:200]}", f"{type(exc).__name__}: {exc}"
        ) from exc


def _bound_names(node: ast.stmt) -> list[str]:
    """The module-level names a top-level def, class or assignment binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [target.id for target in targets if isinstance(target, ast.Name)]
    return []


def _free_names(node: ast.stmt) -> set[str]:
    """The names a statement reads without binding them itself: the module-level ones."""
    read: set[str] = set()
    local: set[str] = set()
    declared_global: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (read if isinstance(sub.ctx, ast.Load) else local).add(sub.id)
        elif isinstance(sub, ast.arg):
            local.add(sub.arg)
        elif isinstance(sub, ast.ExceptHandler) or (
            sub is not node
            and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ):
            local.add(sub.name)  # an inner def, or the name an except clause binds
        elif isinstance(sub, ast.Global):
            declared_global.update(sub.names)
    return (read - local) | declared_global
