"""The package's layering (docs/architecture.md): each stage of the pipeline imports only the
stages below it, no stage imports a user-facing tool or the command line, and no module imports
another module's private names.  Read off the source with ``ast`` (imports under
``TYPE_CHECKING`` are annotations, not dependencies)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "conformance" / "k2conform"
#: The pipeline, lowest first (docs/architecture.md, Repository layout).
STAGES = ("case", "delivery", "judge", "adapter", "run", "gate", "report")
#: What no stage may import: the tools built on the pipeline, and the command line.
TOOLS = (
    "bench",
    "bundle",
    "catalogue",
    "cli",
    "coverage",
    "engine",
    "exits",
    "fuzzing",
    "grammar",
    "history",
    "minimize",
    "outputs",
    "report_finding",
    "setup",
    "testkit",
    "verify",
)


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) of every ``k2conform`` import the module runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("k2conform"):
            found.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [
                (a.name, [], node.lineno) for a in node.names if a.name.startswith("k2conform")
            ]
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules() -> list[tuple[str, Path]]:
    return [(p.relative_to(PACKAGE).parts[0].removesuffix(".py"), p) for p in PACKAGE.rglob("*.py")]


def _stage_violations() -> list[str]:
    wrong = []
    for own, path in _modules():
        if own not in STAGES:
            continue
        for module, _, line in _imports(path):
            other = _package(module)
            if other in TOOLS or (other in STAGES and STAGES.index(other) > STAGES.index(own)):
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    return wrong


def _private_imports() -> list[str]:
    return [
        f"{path.relative_to(PACKAGE)}:{line} imports {name} from {module}"
        for _, path in _modules()
        for module, names, line in _imports(path)
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]


def test_each_stage_imports_only_the_stages_below_it_and_no_tool():
    assert _stage_violations() == []


def test_no_module_imports_another_modules_private_names():
    assert _private_imports() == []


def test_no_module_imports_the_command_line():
    """The command line translates flags and prints; a tool that runs a command in process
    (``catalogue build`` runs ``report-finding``) builds it from that command's own parser and
    ``k2conform.exits.run_command``, never through ``k2conform.cli``."""
    assert [
        f"{path.relative_to(PACKAGE)}:{line}"
        for own, path in _modules()
        for module, _, line in _imports(path)
        if module == "k2conform.cli" and own != "__main__"
    ] == []


def test_the_rules_catch_what_they_exist_for(tmp_path, monkeypatch):
    """A report module importing a tool, a judge module importing the run stage and a tool
    importing a private name of the command line are each caught; an import for annotations
    only is not a dependency."""
    fake = tmp_path / "k2conform"
    annotation = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from k2conform.adapter import A\n"
    )
    for where, text in (
        ("report/x.py", "from k2conform.grammar.check import source_of\n"),
        ("judge/y.py", "from k2conform.run.cell import run_cell\n"),
        ("grammar/z.py", "from k2conform.cli import _gate_options\n"),
        ("delivery/ok.py", annotation),
    ):
        (fake / where).parent.mkdir(parents=True, exist_ok=True)
        (fake / where).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert sorted(_stage_violations()) == [
        "judge/y.py:1 imports k2conform.run.cell",
        "report/x.py:1 imports k2conform.grammar.check",
    ]
    assert _private_imports() == ["grammar/z.py:1 imports _gate_options from k2conform.cli"]
