"""The lanes (docs/testing.md): every test in exactly one, CI runs every one but llama.cpp, a
missing environment fails where CI requires it, and the release lanes run in full exactly when
one of their inputs changed since their last full pass."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from lanes import LANES, REQUIRE, missing

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name} :?= (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, name
    return match.group(1)


def _markers(expression: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", expression)) - {"not", "or", "and"}


def test_the_developer_lane_leaves_out_every_lane_and_ci_runs_the_rest():
    assert _markers(_make_variable("DEV_LANE")) == set(LANES)
    makefile = (ROOT / "Makefile").read_text()
    lanes_run = re.search(
        r'^test-lanes:.*\n\t\$\(PYTEST\) --dist loadgroup -m "([^"]*)"', makefile, re.MULTILINE
    )
    assert lanes_run and _markers(lanes_run.group(1)) == set(LANES) - {"llama_cpp"}
    ci = (ROOT / ".ci" / "run").read_text()
    for target in ("test", "test-lanes"):
        assert re.search(rf'^step "[^"]+" {target}$', ci, re.MULTILINE), target
    # the grammar lane is the grammar tests' run of it (tests/test_grammar.py), with its gate
    assert "matrix-grammar" not in ci and "test_grammar.py" in ci
    assert '"grammar-lane"' in (ROOT / "tests" / "test_grammar.py").read_text()
    # a lane with a stamp runs in full or as its guard, by its own stamp
    branch = re.search(
        r"^if python3 \.ci/lanes\.py check extra; then\n"
        r'  step "[^"]+" matrix-extra-parsers-guard\nelse\n'
        r'  step "[^"]+" matrix-extra-parsers\nfi$',
        ci,
        re.MULTILINE,
    )
    assert branch
    # the server lane's guard is the server tests' run (so the servers start once), the release
    # lanes' the release tests' (each release imported once): .ci/run runs only the full lane,
    # and only when its inputs changed
    for lane, target, test_file, guard in (
        ("servers", "matrix-servers", "test_vllm_server.py", "server-lane-guard"),
        ("releases", "matrix-releases", "test_more_parsers.py", "release-lanes-guard"),
    ):
        branch = re.search(
            rf"^if python3 \.ci/lanes\.py check {lane}; then\n((?:  (?!step ).*\n)+)else\n"
            rf'  step "[^"]+" {target}\nfi$',
            ci,
            re.MULTILINE,
        )
        assert branch and test_file in branch.group(1), lane
        assert f'"{guard}"' in (ROOT / "tests" / test_file).read_text(), lane
    assert f"export {REQUIRE}=1" in ci


def test_a_missing_environment_skips_here_and_fails_where_ci_requires_it(monkeypatch):
    monkeypatch.delenv(REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="not built"):
        missing("x is not built")
    monkeypatch.setenv(REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="not built"):
        missing("x is not built")


def _lanes(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(repo / ".ci" / "lanes.py"), *args],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("lane", "baseline"),
    [
        ("releases", "baseline-releases-vllm.json"),
        ("servers", "baseline-servers.json"),
        ("extra", "baseline-extra.json"),
    ],
)
def test_a_stamped_lane_runs_in_full_exactly_when_an_input_changed(tmp_path, lane, baseline):
    """A repository with the lane's inputs: recorded after a full pass, the guard is enough;
    a changed case, a new tracked file or a changed baseline asks for the whole lane; an
    untracked file (a generated script) does not."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "lanes.py", repo / ".ci" / "lanes.py")
    (repo / "corpus").mkdir()
    (repo / "corpus" / "y_a.json").write_text("{}\n")
    (repo / baseline).write_text("{}\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)

    assert _lanes(repo, "check", lane).returncode == 1  # never recorded
    assert _lanes(repo, "record", lane).returncode == 0
    assert _lanes(repo, "check", lane).returncode == 0
    (repo / "corpus" / "y_b.py").write_text("untracked\n")
    assert _lanes(repo, "check", lane).returncode == 0
    (repo / "corpus" / "y_a.json").write_text('{"changed": 1}\n')
    assert _lanes(repo, "check", lane).returncode == 1
    (repo / "corpus" / "y_a.json").write_text("{}\n")
    assert _lanes(repo, "check", lane).returncode == 0
    (repo / baseline).write_text("[]\n")
    assert _lanes(repo, "check", lane).returncode == 1
    usage = _lanes(repo, "check", "nosuch")
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1


def _ci_lanes():
    spec = importlib.util.spec_from_file_location("ci_lanes", ROOT / ".ci" / "lanes.py")
    ci_lanes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ci_lanes)
    return ci_lanes


def _inputs(lane: str) -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *_ci_lanes().INPUTS[lane]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(listed.split())


def test_each_stamped_lane_takes_its_own_glue_and_baselines_and_no_other_lanes():
    """A lane whose digest missed its own glue would keep its guard over a changed parser; one
    that took another lane's would run in full for nothing."""
    glue = "adapters/k2conform_adapters/"
    extra, servers, releases = _inputs("extra"), _inputs("servers"), _inputs("releases")
    assert f"{glue}sglang_kt_parser.py" in extra - releases - servers
    assert f"{glue}sglang_parser.py" in extra & releases - servers  # sglang-kt reuses it
    assert f"{glue}vllm_parser.py" in extra & releases - servers
    assert f"{glue}vllm_server.py" in servers - extra - releases
    assert "baseline-extra.json" in extra - servers - releases
    assert "baseline-servers.json" in servers - extra - releases
    assert "corpus/golden/completions/y_spec_final_answer.json" in extra & servers & releases


def test_the_server_lanes_glue_imports_only_its_own_inputs():
    """The server lane's digest leaves the in-process glue out because its adapters (the
    ``vllm-server`` entry points) import none of it: one that began to, however indirectly,
    would change its cells unseen."""
    servers = _inputs("servers")
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "k2conform.adapters"
    ]
    todo = [v.split(":")[0] for k, v in entry_points.items() if k.startswith("vllm-server")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        base = ROOT / "adapters" / name.replace(".", "/")
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        relative = str(path.relative_to(ROOT))
        if relative in seen:
            continue
        seen.add(relative)
        assert relative in servers, f"the server lane loads {relative}, not one of its inputs"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                # a module the server runs by name (``python -m``, a plugin's class path)
                todo.extend(re.findall(r"^(k2conform_adapters(?:\.\w+)+)(?::\w+)?$", node.value))
            elif isinstance(node, ast.ImportFrom) and node.module:
                todo.extend(m for m in [node.module] if m.startswith("k2conform_adapters"))
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.startswith("k2conform_adapters"))
    assert {"vllm_server.py", "vllm_model.py", "vllm_forcing.py"} <= {
        p.rsplit("/")[-1] for p in seen
    }


def test_loadgroup_sends_a_file_to_one_worker_whole():
    """The lanes' files go to workers whole only if xdist sees each file's group: pytest 9.2's
    node ids silently drop it (pytest-dev/pytest-xdist#1386), and a module fixture such as
    the real server's run was then made on one worker while the other waited on its lock."""
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"]
        + ["-p", "no:cacheprovider", "tests/test_lanes.py", "-k", "stamped_lane"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    passed = re.findall(r"^\[(gw\d)\] .*PASSED (\S+)", ran.stdout, re.MULTILINE)
    assert ran.returncode == 0 and len(passed) >= 3, ran.stdout[-3000:]
    assert {node.rsplit("@", 1)[-1] for _, node in passed} == {"test_lanes"}, passed
    assert len({worker for worker, _ in passed}) == 1, passed


def test_only_files_without_a_shared_fixture_are_spread_across_workers():
    """--dist loadgroup with one group per file (tests/conftest.py) keeps each file's module
    fixture to one worker; in a file that opts out, the tests of a shared fixture share one
    group of their own (test_more_parsers: the release guard), so it is not made twice."""
    assert re.search(r"^test-lanes:.*\n\t\$\(PYTEST\) --dist loadgroup ", MAKEFILE, re.M)
    spread = [
        path
        for path in sorted((ROOT / "tests").glob("test_*.py"))
        if re.search(r"^SPREAD_ACROSS_WORKERS = True$", path.read_text(), re.MULTILINE)
    ]
    assert spread, "test_more_parsers spreads its subprocess tests"
    for path in spread:
        shared = re.findall(
            r'^@pytest\.fixture\(scope="(?:module|session)"\)\ndef (\w+)', path.read_text(), re.M
        )
        module = importlib.import_module(path.stem)
        for fixture in shared:
            readers = [
                test
                for name, test in vars(module).items()
                if name.startswith("test_") and fixture in inspect.signature(test).parameters
            ]
            # each reader in exactly one xdist group, the same for all of them
            groups = [
                [m.args for m in getattr(test, "pytestmark", []) if m.name == "xdist_group"]
                for test in readers
            ]
            assert readers and all(len(g) == 1 and g == groups[0] for g in groups), (
                path.name,
                fixture,
                groups,
            )
