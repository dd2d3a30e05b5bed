"""The wheel carries everything: built from this checkout, installed into a bare venv, and used
from a directory outside the checkout (corpus, closures, docs and the test kit included)."""

from __future__ import annotations

import json
import os
import fcntl
import shutil
import subprocess
import sys
import tempfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from downstream import downstream_project, node_outcomes, run_pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # builds the wheel and a venv from it


def _run(command: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, the wheel, a working directory outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    # setuptools builds in ./build and reuses what it finds there: a file removed from the tree
    # since the last build would still ship.  build/ is a build artifact (.gitignore).  Each
    # pytest-xdist worker has its own module fixture: one build at a time in the checkout.
    with open(Path(tempfile.gettempdir()) / "k2conform-wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(ROOT / "build", ignore_errors=True)
        built = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(base / "dist"),
                str(ROOT),
            ],
            cwd=base,
        )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (base / "dist").glob("k2conform-*.whl")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "--quiet", str(wheel), "pytest"], cwd=base)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outside = base / "elsewhere"
    outside.mkdir()
    return python, wheel, outside


def test_the_wheel_carries_corpus_closures_docs_and_data(installed):
    python, wheel, outside = installed
    names = zipfile.ZipFile(wheel).namelist()
    corpus = ROOT / "corpus"
    shipped = {
        p.relative_to(corpus).as_posix()
        for p in [*corpus.rglob("*.json"), *corpus.glob("sources/*.toml")]
    }
    in_wheel = {
        n.removeprefix("k2conform/bundle/corpus/")
        for n in names
        if n.startswith("k2conform/bundle/corpus/")
    }
    assert (
        shipped == in_wheel and "sources/taxonomy.toml" in in_wheel
    )  # the case files and their sources
    expanded = _run(
        [
            str(python),
            "-c",
            "from k2conform.case.generate import generate_cases as g; print(len(g()))",
        ],
        cwd=outside,
    )
    generated = sum(
        1 for p in (corpus / "generated").rglob("*.json") if '"kind": "completion"' in p.read_text()
    )
    assert expanded.stdout.strip() == str(generated), expanded.stderr[
        -2000:
    ]  # the generator runs from the wheel
    for closure in (ROOT / "requirements").iterdir():
        assert f"k2conform/bundle/requirements/{closure.name}" in names
    for doc in (ROOT / "docs").glob("*.md"):
        assert f"k2conform/bundle/docs/{doc.name}" in names
    assert "k2conform/data/reference_chat_template.jinja" in names
    assert "k2conform/data/standin.tiktoken" in names
    assert any(n.startswith("k2conform_adapters/") for n in names)


def test_check_corpus_and_a_run_from_outside_the_checkout(installed):
    python, _, outside = installed
    k2conform = str(python.parent / "k2conform")
    checked = _run([k2conform, "check-corpus"], cwd=outside)
    assert checked.returncode == 0, checked.stderr
    assert "k2conform/bundle/corpus" in checked.stdout and str(ROOT) not in checked.stdout
    ran = _run(
        [
            k2conform,
            "run",
            "--adapter",
            "reference",
            "--delivery",
            "whole",
            "--delivery",
            "stream-token",
            "--json",
            "results.json",
        ],
        cwd=outside,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    results = json.loads((outside / "results.json").read_text())
    completions = sum(  # the findings catalogue is checked by `catalogue check`, not run
        1
        for p in (ROOT / "corpus").rglob("*.json")
        if '"kind": "completion"' in p.read_text() and "findings/catalogue" not in p.as_posix()
    )
    assert len(results["cases"]) == completions
    assert {c["outcome"] for c in results["cells"]} <= {"agree", "impl-defined"}
    listed = _run([k2conform, "setup-parsers"], cwd=outside)
    assert listed.returncode == 0 and "lmdeploy" in listed.stdout, listed.stderr
    refused = _run(
        [k2conform, "setup-parsers", "mlx-lm", "--venv-root", str(outside / "venvs")], cwd=outside
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "pass --k2conform WHEEL_OR_URL" in refused.stderr


def test_a_downstream_project_uses_the_test_kit_from_the_wheel(installed, tmp_path):
    python, _, _ = installed
    project = downstream_project(tmp_path, {"entries": []})
    completed = run_pytest(project, python=str(python))
    outcomes = node_outcomes(completed.stdout)
    assert outcomes["conftest.py::y_spec_single_call[whole]"] == "PASSED", completed.stdout[-3000:]
    assert outcomes["conftest.py::y_marker_in_json_string_call_end[whole]"] == "FAILED"
    where = _run([str(python), "-c", "import k2conform; print(k2conform.__file__)"], cwd=tmp_path)
    assert str(ROOT) not in where.stdout


def test_every_package_of_the_source_roots_is_packaged():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {
        "k2conform": ROOT / "conformance" / "k2conform",
        "k2conform_adapters": ROOT / "adapters" / "k2conform_adapters",
    }
    found = {
        ".".join((top, *init.parent.relative_to(path).parts))
        for top, path in roots.items()
        for init in path.rglob("__init__.py")
    }
    assert found <= set(config["packages"])


def test_every_package_of_the_source_roots_is_declared():
    """pyproject.toml lists the packages (the source roots map import names to folders): a new
    subpackage left out of the list is missing from the wheel, and only there."""
    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    for root in ("conformance", "adapters"):
        for init in (ROOT / root).rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(ROOT / root).parts)
            assert package in declared, (
                f"{package} is not in pyproject.toml's [tool.setuptools] packages"
            )
