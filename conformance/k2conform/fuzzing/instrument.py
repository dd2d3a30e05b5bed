"""Coverage instrumentation of exactly the parser code under test, for libFuzzer's feedback.

``atheris.instrument_imports`` instruments by top-level package and only what is imported
inside it: it either misses a parser module that an earlier import already loaded, or takes
every other model's parser along (119 modules of vLLM and SGLang when the adapters load).
Here the modules are the files each adapter declares for ``k2conform coverage``
(``coverage_files`` and ``coverage_shared_files``), imported normally and then patched in
place, function by function, so import order does not matter and nothing else is counted.

Left out of those files (:data:`SET_UP_ONLY`): the few functions whose only inputs are the
parser's configuration and the tokenizer (vLLM builds its lexer tables for every parser
engine, ten an execution).  They run, untraced, on every parse as before; traced, they took
a seventh of all branch events and gave libFuzzer the same edges on every execution.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

#: ``--instrument`` choices, the default first: the reference and the parsers' own Kimi files
#: (``kimi``), every file the parsers declare (``parsers``: their engines' shared machinery
#: too), or the reference only (libFuzzer then steers by k2conform's code alone).  The default
#: is the one that rediscovered most catalogued behaviours (``bench --rediscovery``, 5 Dec
#: 2026: 91 % of 53 in 120 CPU s, median of 3 trials, against 89 % and 87 %, and sooner on 6
#: of the 9 slowest goals; docs/performance.md), not the fastest.
INSTRUMENT_CHOICES = ("kimi", "parsers", "reference")
#: ``--instrument kimi``: of the parsers' declared files only their own (``coverage_files``:
#: the Kimi parser and detector files), not the engines' shared machinery.
KIMI = "kimi"
#: Per module, the functions (``__qualname__``) not patched: set-up whose inputs are only the
#: parser's configuration (fixed per thinking flag, which the patched constructors that choose
#: it already show libFuzzer) and the tokenizer, never the request's tools or the model output,
#: so their edges are the same on every execution.  A name a release lacks is ignored.
SET_UP_ONLY: dict[str, tuple[str, ...]] = {
    # the lexer's literal and prefix tables, from the config's terminals and the special tokens
    "vllm.parser.engine.incremental_lexer": ("LexerShape.__init__",),
    "vllm.parser.engine.streaming_parser_engine": (
        "_build_drop_info",  # a drop terminal per special token the config does not name
        "StreamingParserEngine._compute_reasoning_markup_terminals",  # from config.transitions
    ),
    # from config.transitions and the vocabulary
    "vllm.parser.engine.parser_engine": ("ParserEngine._derive_reasoning_end_token_ids",),
    "vllm.parser.engine.token_id_scanner": ("TokenIDScanner.__init__",),  # stores its arguments
}


def module_name(path: str) -> str:
    """``vllm/parser/kimi_k2.py`` -> ``vllm.parser.kimi_k2``."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def declared_modules(adapters: Iterable[Any], shared: bool = True) -> list[str]:
    """The modules of every file the adapters declare as their parser's (``shared``: and the
    engine's shared files), in order, once each."""
    names: dict[str, None] = {}
    for adapter in adapters:
        for path in (*adapter.coverage_files, *(adapter.coverage_shared_files if shared else ())):
            names.setdefault(module_name(path))
    return list(names)


def _functions(
    namespace: Any, module: types.ModuleType, seen: set[int]
) -> Iterator[types.FunctionType]:
    """Every Python function defined in ``module`` reachable from its namespace or a class of
    it: plain functions, methods, static and class methods, property accessors, the function
    under a decorator (``__wrapped__``), and those of nested classes."""
    for value in list(vars(namespace).values()):
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, type):
            if value.__module__ == module.__name__:
                yield from _functions(value, module, seen)
            continue
        for candidate in _unwrapped(value):
            if _defined_in(candidate, module):
                yield candidate


def _defined_in(candidate: Any, module: types.ModuleType) -> bool:
    """A function compiled from the module's own source.  By the path the code was compiled
    under, which ends with the module's name (a PyInstaller bundle, as OSS-Fuzz builds, compiles
    ``vllm/parser/kimi_k2.py`` relative, not under ``__file__``); so neither generated code
    (a dataclass's ``__init__``, from ``<string>``) nor a decorator's wrapper from elsewhere."""
    if not isinstance(candidate, types.FunctionType):
        return False
    compiled = candidate.__code__.co_filename.removesuffix(".py").removesuffix("/__init__")
    own = module.__name__.replace(".", "/")
    return compiled == own or compiled.endswith("/" + own)


def _unwrapped(value: Any) -> Iterator[Any]:
    """The functions a namespace entry holds: itself, or a descriptor's, down a decorator chain
    (only through ``__wrapped__`` in the object's own ``__dict__``: no lazy attribute runs)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        yield from (f for f in (value.fget, value.fset, value.fdel) if f is not None)
        return
    if isinstance(value, functools.cached_property):
        value = value.func
    for _ in range(8):  # a decorator chain, never endless
        yield value
        value = getattr(value, "__dict__", {}).get("__wrapped__")
        if value is None:
            return


def instrument_modules(names: Iterable[str], atheris: Any) -> dict[str, int]:
    """Import each module and patch every function defined in it with atheris's branch and
    comparison tracing; returns the number of functions per module (0: nothing to patch)."""
    counts = {}
    for name in names:
        module = importlib.import_module(name)
        left_out = SET_UP_ONLY.get(name, ())
        functions = [f for f in _functions(module, module, set()) if f.__qualname__ not in left_out]
        for function in functions:
            function.__code__ = atheris.patch_code(function.__code__, trace_dataflow=True)
        counts[name] = len(functions)
    return counts


def instrument_adapters(
    adapters: Iterable[Any], atheris: Any, shared: bool = True
) -> dict[str, int]:
    """Instrument the files the adapters declare (``shared``: their engines' shared files
    too); one stderr line says what ``cov:`` counts."""
    counts = instrument_modules(declared_modules(adapters, shared), atheris)
    modules = ", ".join(f"{name} ({count})" for name, count in counts.items())
    print(
        f"[k2conform fuzz] instrumented {sum(counts.values())} functions in {len(counts)} modules: "
        f"{modules}",
        file=sys.stderr,
        flush=True,
    )
    return counts
