"""Adapter plugins: a separate package that declares a ``k2conform.adapters`` entry point
shows up in ``list-adapters`` and in ``k2conform run``, with no change to this project.

The shipped example (examples/k2conform-example-adapter) is installed into a temporary
virtual environment that sees this k2conform (``--system-site-packages`` plus the running
environment's site directory), then that environment's ``k2conform`` is run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from k2conform.adapter.contract import Adapter
from k2conform.adapter.registry import ENTRY_POINT_GROUP, adapter_names, create_adapter

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "k2conform-example-adapter"


def _can_build() -> str | None:
    """Why the example cannot be built without build isolation here, or None."""
    try:
        import setuptools
    except ImportError:
        return "setuptools is not installed"
    major_minor = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
    if major_minor < (70, 1):
        try:
            import wheel  # noqa: F401 - setuptools < 70.1 builds wheels with it
        except ImportError:
            return f"setuptools {setuptools.__version__} needs 'wheel' (install k2conform[test])"
    return None


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory):
    reason = _can_build()
    if reason:
        pytest.skip(reason)
    venv = tmp_path_factory.mktemp("plugin") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    python = venv / "bin" / "python"
    # --system-site-packages shows the base interpreter's packages; when the tests run in
    # a virtual environment, its site directory (k2conform, pip, setuptools) is added too.
    site_dir = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    parents = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site_dir / "k2conform-parent.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in sorted(parents))
    )
    installed = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    return venv


def _k2conform(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "k2conform.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_the_plugin_is_listed_with_its_version(plugin_venv):
    completed = _k2conform(plugin_venv, "list-adapters", "--json")
    assert completed.returncode == 0, completed.stderr
    rows = {row["name"]: row for row in json.loads(completed.stdout)}
    assert rows["example-tiny"]["status"] == "ok"
    assert rows["example-tiny"]["version"] == "0.1.0" and rows["example-tiny"]["supported"] is True
    assert "reference" in rows  # the built-ins are still there
    text = _k2conform(plugin_venv, "list-adapters", "example-tiny").stdout
    assert text.split()[:4] == ["example-tiny", "0.1.0", "ok", "supported"], text


@pytest.mark.slow
def test_the_plugin_runs_in_the_matrix(plugin_venv, tmp_path):
    out = tmp_path / "results.json"
    completed = _k2conform(
        plugin_venv,
        "run",
        "--case",
        "y_spec_*",
        "--case",
        "y_split_marker_think_end",
        "--delivery",
        "whole",
        "--delivery",
        "stream-token",
        "--jobs",
        "1",
        "--json",
        str(out),
    )
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    assert "example-tiny" in completed.stdout  # the Markdown summary names every adapter
    results = json.loads(out.read_text())
    cells = [c for c in results["cells"] if c["adapter"] == "example-tiny"]
    assert {c["delivery"] for c in cells} == {"whole", "stream-token"}
    by_case = {(c["case"], c["delivery"]): c for c in cells}
    assert by_case[("y_spec_single_call", "whole")]["outcome"] == "agree"
    # the tiny parser has no reasoning parser: the matrix finds that
    assert by_case[("y_split_marker_think_end", "whole")]["outcome"] == "differs"
    assert any(a["name"] == "example-tiny" and a["status"] == "ok" for a in results["adapters"])


def test_the_plugin_is_not_visible_outside_its_environment():
    """Nothing in this project names the example: it exists only where it is installed."""
    import importlib.util

    if importlib.util.find_spec("k2conform_example_adapter") is None:
        assert "example-tiny" not in adapter_names()


def test_built_in_adapters_are_entry_points_too():
    import importlib.metadata

    names = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert {"reference", "vllm", "sglang", "aphrodite", "lmdeploy", "mlx-lm"} <= names
    for name in ("aphrodite", "lmdeploy", "mlx-lm"):
        adapter = create_adapter(name)
        assert isinstance(adapter, Adapter)
        assert adapter.package and adapter.supported_versions and adapter.description


def test_the_example_adapter_follows_the_contract(corpus):
    """The example as a library (no install): its adapter is a plain Adapter subclass."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from k2conform_example_adapter.adapter import TinyAdapter
        from k2conform.adapter.harness import execute
        from k2conform.delivery.modes import Delivery
        from k2conform.model import Delta

        adapter = TinyAdapter()
        adapter.load()
        case = next(c for c in corpus.completions if c.id == "y_spec_single_call")
        result = execute(adapter, case.request, Delivery("whole", (Delta(case.model_output),)))
        assert (
            result.outcome == "ok" and result.tool_calls[0].name == case.expected.tool_calls[0].name
        )
        script = adapter.repro_script(case.request, [Delta(case.model_output)], "whole")
        assert "k2conform" not in script.replace("k2conform_example_adapter", "")
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in [m for m in sys.modules if m.startswith("k2conform_example_adapter")]:
            del sys.modules[name]
