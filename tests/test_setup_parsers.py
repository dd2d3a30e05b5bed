"""The parser environments' closures: what each environment gets installed, in which order."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from lanes import missing

from k2conform.errors import UsageError
from k2conform.resources import bundled
from k2conform.setup import cli as setup_cli
from k2conform.setup import parsers
from k2conform.setup.parsers import K2CONFORM_CLOSURE, environments, installed

ROOT = Path(__file__).resolve().parents[1]
VENVS = Path(os.environ.get("K2CONFORM_VENVS", ROOT / ".venvs"))


def test_an_environment_of_its_own_gets_k2conforms_dependencies_first():
    """k2conform goes into each separate environment --no-deps, so its own imports (the
    tokenizer stand-in's tiktoken, the renderer's jinja2) come from k2conform.txt, installed
    before the parser's closure so the parser's pins win."""
    known = environments()
    assert known["parsers"].closure_files() == known["parsers"].requirements  # the project venv
    for name, environment in known.items():
        if environment.into_current or environment.over:
            continue
        assert environment.closure_files()[0] == K2CONFORM_CLOSURE, name
        assert environment.closure_files()[1:] == environment.requirements, name
    pins = {
        line.split("==")[0].lower()
        for line in (bundled("requirements") / K2CONFORM_CLOSURE).read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {"jinja2", "tiktoken", "regex"} <= pins


def test_every_closure_file_named_by_an_environment_exists():
    for name, environment in environments().items():
        for closure in environment.closure_files():
            assert (bundled("requirements") / closure).is_file(), (name, closure)


def test_a_layer_installs_only_its_own_pins_over_a_base_that_is_no_layer(tmp_path, monkeypatch):
    """A release environment is a layer over the project venv's closure: its closure is its
    own pins alone (k2conform's dependencies and torch come from the base), and a layer over
    a layer, or over an environment that does not exist, is refused with one line."""
    known = environments()
    layers = [e for e in known.values() if e.over]
    assert layers, "the release environments are layers over 'parsers'"
    for environment in layers:
        assert environment.closure_files() == environment.requirements
        assert K2CONFORM_CLOSURE not in environment.closure_files()
    table = (bundled("requirements") / "environments.toml").read_text()
    for over in ("vllm-0.30.0", "no-such-environment"):
        (tmp_path / "requirements").mkdir(exist_ok=True)
        (tmp_path / "requirements" / "environments.toml").write_text(
            table + f'\n["bad-layer"]\nrequirements = []\nadapters = []\nover = "{over}"\n'
        )
        monkeypatch.setattr(parsers, "bundled", lambda name: tmp_path / name)
        with pytest.raises(UsageError, match=f"'bad-layer': field 'over' .*{over!r}"):
            parsers.environments()


def test_a_failed_install_step_names_pips_own_error_in_its_one_line(tmp_path):
    """A disk that fills half-way through the set-up (CI, 5 Dec 2026) showed only "exit status
    1"; the line must carry pip's last ERROR line, so the cause is read without the log."""
    environment = environments()["vllm-0.11.0"]
    venv = tmp_path / "venv"
    venv.mkdir()
    fails = [
        "python3",
        "-c",
        "print('Collecting vllm'); print('ERROR: Could not install packages due to an OSError:"
        " [Errno 28] No space left on device'); raise SystemExit(1)",
    ]
    with pytest.raises(UsageError) as raised:
        parsers._step(environment, venv, fails, "install vllm-0.11.0.txt")
    line = "environment vllm-0.11.0: could not install vllm-0.11.0.txt"
    assert str(raised.value).startswith(line)
    assert "exit status 1, ERROR: Could not install packages" in str(raised.value)
    assert "No space left on device" in str(raised.value)
    assert "\nCollecting vllm\n" in (venv / "setup-parsers.log").read_text()


@pytest.mark.extra
def test_a_built_layer_sees_its_own_release_first_and_the_base_behind_it():
    """The layer's vllm shadows the project venv's 0.33.0; torch is the base's one copy."""
    environment = environments()["vllm-0.30.0"]
    if not installed(environment, VENVS):
        missing("vllm-0.30.0 is not built (k2conform setup-parsers vllm-0.30.0)")
    python = str(environment.venv(VENVS) / "bin" / "python")
    code = (
        "import importlib.metadata as m, torch, vllm, sys; "
        "print(m.version('vllm'), vllm.__file__.startswith(sys.prefix), "
        "torch.__file__.startswith(sys.prefix))"
    )
    shown = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["0.30.0", "True", "False"]


def test_adapter_options_can_be_narrowed_to_the_environments_a_baseline_vouches_for(
    tmp_path, capsys
):
    """``--adapters --baseline FILE`` lists only the built environments' runs the baseline
    names, so a lane gates exactly the parsers its reviewed baseline covers.  An environment's
    second adapter is labelled ``ADAPTER-RELEASE``, with the formats it parses when not K2 (a
    run plans by them before any hello)."""
    import argparse
    import json

    for name in ("vllm-0.30.0", "sglang-0.5.14", "sglang-0.5.22"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").write_text("")
        (tmp_path / name / f".k2conform-env-{name}").write_text(name)
    baseline = tmp_path / "baseline.json"
    vouched = ["vllm-0.30.0", "sglang-k3-0.5.22"]
    baseline.write_text(json.dumps({"version": 1, "adapters": vouched, "entries": []}))

    def listed(**options):
        args = argparse.Namespace(adapters=True, venv_root=tmp_path, baseline=None, names=[])
        vars(args).update(options)
        assert setup_cli.cmd_setup_parsers(args) == 0
        out = capsys.readouterr().out
        return [line.split("=")[1] for line in out.splitlines()]

    every = {
        "sglang-0.5.14",
        "vllm-0.30.0",
        "vllm-k3-0.30.0[k3]",
        "sglang-0.5.22",
        "sglang-k3-0.5.22[k3]",
    }
    assert set(listed()) == every
    assert listed(baseline=baseline) == ["vllm-0.30.0", "sglang-k3-0.5.22[k3]"]
    # an environment's adapters name one command, which serves both: one import of the release
    args = argparse.Namespace(adapters=True, venv_root=tmp_path, baseline=None, names=[])
    assert setup_cli.cmd_setup_parsers(args) == 0
    commands = {}
    for line in capsys.readouterr().out.splitlines():
        label, command = line.removeprefix("--adapter=").split("=cmd:")
        commands.setdefault(command, []).append(label)
    assert sorted(commands.values()) == [
        ["sglang-0.5.14"], ["sglang-0.5.22", "sglang-k3-0.5.22[k3]"],
        ["vllm-0.30.0", "vllm-k3-0.30.0[k3]"],
    ]  # fmt: skip
    vllm = next(c for c, labels in commands.items() if "vllm-0.30.0" in labels)
    assert vllm.split()[1:] == ["serve-adapter", "vllm", "vllm-k3", "--release", "0.30.0"]


def test_jobs_build_the_base_first_then_the_rest_at_once(monkeypatch, tmp_path):
    """--all --jobs 2: the project venv every release layer is laid over is built alone and
    first; every other environment is built once, two at a time; --jobs 0 is one line, exit 2."""
    import argparse
    import threading

    built: list[str] = []
    running, most = [0], [0]
    lock = threading.Lock()
    both = threading.Barrier(2, timeout=1)

    def fake_install(environment, root, spec, keep_unloadable):
        assert keep_unloadable is False
        with lock:
            built.append(environment.name)
            running[0] += 1
            most[0] = max(most[0], running[0])
        if environment.over:
            try:
                both.wait()  # two layers in flight together, or a timeout
            except threading.BrokenBarrierError:
                pass
        with lock:
            running[0] -= 1

    monkeypatch.setattr(parsers, "install", fake_install)
    monkeypatch.setattr(parsers, "installed", lambda environment, root: False)
    monkeypatch.setattr(parsers.Environment, "adapter_options", lambda self, root: [])
    args = argparse.Namespace(
        names=[], all=True, adapters=False, baseline=None, venv_root=tmp_path, k2conform="x",
        force=False, base=None, source=None, jobs=2, keep_unloadable=False,
    )  # fmt: skip
    assert setup_cli.cmd_setup_parsers(args) == 0
    known = environments()
    expected = {n for n, e in known.items() if e.extra or e.into_current}
    assert sorted(built) == sorted(expected)
    bases = {e.over for e in known.values() if e.over}
    assert bases and set(built[: len(bases)]) == bases
    assert most[0] == 2
    with pytest.raises(UsageError, match="--jobs must be at least 1, not 0"):
        setup_cli.cmd_setup_parsers(argparse.Namespace(**{**vars(args), "jobs": 0}))


def test_a_layers_k2conform_script_runs_its_interpreter_from_any_directory(tmp_path, monkeypatch):
    """The layer's ``bin/k2conform`` names its interpreter by absolute path, so it runs from
    anywhere, even when the layer was built under a relative ``--venv-root`` (``.venvs``)."""
    import sys

    root = tmp_path / "a root with spaces"
    (root / "layer" / "bin").mkdir(parents=True)
    python = root / "layer" / "bin" / "python"  # stands for the layer's interpreter
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.chdir(root)
    parsers._console_script(Path("layer"))  # a relative venv, as under .venvs
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(root / "layer" / "bin" / "k2conform"), "check-corpus", "--help"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
    )
    assert done.returncode == 0 and "check-corpus" in done.stdout, done.stderr
