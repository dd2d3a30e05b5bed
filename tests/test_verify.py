"""``k2conform verify`` and ``setup-parsers --source``: a pull request's files laid over the
installed vLLM release, verified against it.  The overlay is made here from the release's own
``vllm/parser/kimi_k2.py`` with two deliberate changes (never shipped): one fixes a known
behaviour (reasoning's trailing whitespace kept, as the reference keeps it), one breaks another
(hyphens in tool names become underscores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from k2conform.model import CaseSummary, Cell, CellOutcome, FieldDiff, Request, RunResults
from k2conform.verify.compare import Side, classify, compare, html_page

FIX = ("strip_trailing_reasoning_whitespace=True", "strip_trailing_reasoning_whitespace=False")
BREAK = (
    'tool_name = tool_id.split(":")[0].removeprefix("functions.")',
    'tool_name = tool_id.split(":")[0].removeprefix("functions.").replace("-", "_")',
)
CASES = ("y_think_on_reasoning_trailing_whitespace", "y_id_hyphenated_name_gtasks", "y_spec_*")


def k2conform(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def _checkout(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    """A "checkout" holding the installed release's package marker and its Kimi parser."""
    vllm = pytest.importorskip("vllm")
    package = Path(vllm.__file__).parent
    source = tmp_path / "checkout"
    (source / "vllm" / "parser").mkdir(parents=True)
    (source / "vllm" / "__init__.py").write_bytes((package / "__init__.py").read_bytes())
    text = (package / "parser" / "kimi_k2.py").read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (source / "vllm" / "parser" / "kimi_k2.py").write_text(text)
    return source


def _verify(tmp_path: Path, head: str, *extra: str) -> subprocess.CompletedProcess:
    cases = [f"--case={c}" for c in CASES]
    return k2conform(
        "verify",
        "--base",
        "parsers",
        "--head",
        head,
        "--delivery",
        "whole",
        "--venv-root",
        str(tmp_path / "venvs"),
        "--out",
        str(tmp_path / "out"),
        "--json",
        str(tmp_path / "verify.json"),
        *cases,
        *extra,
    )


def _overlay(tmp_path: Path, source: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """``setup-parsers vllm --source`` over vLLM 0.33.0; the build's output and its venv."""
    built = k2conform(
        "setup-parsers", "vllm", "--source", str(source), "--base", "0.33.0",
        "--venv-root", str(tmp_path / "venvs"),
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (venv,) = (tmp_path / "venvs").glob("vllm-src-*")
    return built, venv


@pytest.mark.slow
def test_a_pull_request_that_fixes_one_behaviour_and_breaks_another(tmp_path):
    source = _checkout(tmp_path, FIX, BREAK)
    built, venv = _overlay(tmp_path, source)
    assert "1 file(s) of" in built.stdout and "vllm/parser/kimi_k2.py" in built.stdout
    manifest = json.loads((venv / "k2conform-environment.json").read_text())
    assert manifest["overlaid"] == ["vllm/parser/kimi_k2.py"]
    assert manifest["pinned"] == ["vllm==0.33.0"] and manifest["source"] == str(source)

    done = _verify(tmp_path, venv.name)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    report = json.loads((tmp_path / "verify.json").read_text())
    kinds = [(b["kind"], b["cases"]) for b in report["behaviours"]]
    assert kinds == [
        ("regressed", ["y_id_hyphenated_name_gtasks"]),
        ("fixed", ["y_think_on_reasoning_trailing_whitespace"]),
    ]
    assert report["changed_files"] == ["vllm/parser/kimi_k2.py"]
    assert done.stdout.index("### Regressed") < done.stdout.index("### Fixed")
    assert "k2conform report-finding y_id_hyphenated_name_gtasks --adapter vllm" in done.stdout
    assert len(done.stdout.splitlines()) <= 60

    # the same base and head from their results files: the same verdict, nothing re-run
    again = k2conform(
        "verify",
        "--base",
        str(tmp_path / "out" / "base" / "results.json"),
        "--head",
        str(tmp_path / "out" / "head" / "results.json"),
    )
    assert again.returncode == 1 and "### Regressed" in again.stdout


@pytest.mark.slow
def test_an_unchanged_overlay_changes_no_cell_and_other_modes_are_not_comparable(tmp_path):
    source = _checkout(tmp_path)
    built, venv = _overlay(tmp_path, source)
    assert "0 file(s) of" in built.stdout, built.stderr[-2000:]
    done = _verify(tmp_path, venv.name)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "**NO REGRESSION**" in done.stdout and "behaves as parsers on all" in done.stdout
    base = tmp_path / "out" / "base" / "results.json"
    other = tmp_path / "other.json"
    rerun = k2conform(
        "run",
        "--adapter",
        "reference",
        "--case",
        "y_spec_*",
        "--delivery",
        "stream-token",
        "--json",
        str(other),
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    mismatch = k2conform("verify", "--base", str(base), "--head", str(other))
    assert mismatch.returncode == 3 and "**NOT COMPARABLE**" in mismatch.stdout
    assert "different corpora" in mismatch.stdout and "different modes" in mismatch.stdout


def test_a_checkout_that_cannot_be_matched_to_a_release_is_refused_in_one_line(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    done = k2conform(
        "setup-parsers", "vllm", "--source", str(tmp_path), "--venv-root", str(tmp_path / "venvs")
    )
    assert done.returncode == 2 and "pass --base VERSION" in done.stderr
    assert done.stderr.count("\n") == 1
    not_a_checkout = k2conform("setup-parsers", "vllm", "--source", str(tmp_path / "nothing"))
    assert not_a_checkout.returncode == 2 and "is not a vllm checkout" in not_a_checkout.stderr


def _cell(case: str, outcome: str, fields: tuple[str, ...] = (), content: str = "") -> Cell:
    from k2conform.model import Result

    diffs = tuple(FieldDiff(f, None, None, "text") for f in fields)
    return Cell(case, "vllm", "whole", CellOutcome(outcome), diffs, Result(content=content))


def _results(*cells: Cell, **extra) -> RunResults:
    cases = tuple(
        CaseSummary(c, "y", "", (), Request(), "") for c in sorted({cell.case for cell in cells})
    )
    return RunResults("0", 1, ("whole",), (), cases, cells, extra=extra)


def test_each_cell_is_fixed_regressed_changed_or_unchanged():
    assert classify(_cell("a", "differs", ("content",)), _cell("a", "agree")) == "fixed"
    assert classify(_cell("a", "agree"), _cell("a", "crash")) == "regressed"
    assert classify(_cell("a", "differs", ("content",)), _cell("a", "differs", ("count",))) == (
        "changed"
    )
    assert classify(_cell("a", "impl-defined", content="x"), _cell("a", "impl-defined")) == (
        "changed"
    )
    assert classify(_cell("a", "agree"), _cell("a", "agree")) == "unchanged"


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (
            _results(
                _cell("a", "agree"), partial={"reason": "interrupted", "cells": 1, "planned": 2}
            ),
            "a partial run",
        ),
        (_results(_cell("a", "agree"), inventory={"planned": 2, "run": 1}), "1 of 2 planned"),
        (_results(), "no cell was run"),
        (_results(_cell("a", "adapter-error")), "adapter-error"),
        (_results(_cell("b", "agree")), "different corpora"),
    ],
    ids=["partial", "short", "empty", "adapter-error", "corpus"],
)
def test_no_regression_is_never_claimed_over_less_than_the_base(head, why):
    comparison = compare(Side("base", _results(_cell("a", "agree"))), Side("head", head))
    assert comparison.status == 3 and any(why in line for line in comparison.not_comparable)


def test_the_page_lists_every_behaviour_regressions_first_with_their_command():
    """--html: beyond the comment's 60 lines, every behaviour, escaped, regressions first."""
    base = _results(
        *[_cell(f"c{i}", "agree") for i in range(80)], _cell("x", "differs", ("content",))
    )
    head = _results(
        *[_cell(f"c{i}", "crash" if i < 70 else "agree") for i in range(80)], _cell("x", "agree")
    )
    page = html_page(compare(Side("base<1>", base), Side("head", head)))
    assert "<b>REGRESSION</b>" in page and "base&lt;1&gt;" in page and "base<1>" not in page
    assert page.index("Regressed: 1 behaviour") < page.index("Fixed: 1 behaviour")
    assert "report-finding c0 --adapter" in page and page.count("<tr><td><code>") == 2
    assert all(f"c{i}," in page or f"c{i}<" in page for i in range(70))
