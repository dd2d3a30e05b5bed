"""The out-of-process adapter protocol: ``--adapter 'cmd:...'`` and ``k2conform serve-adapter``.

Toy processes (tests/toys/) crash, write garbage or hang on every request that holds the
trigger word; the run must file those cells as crash/timeout, restart the process and go on.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from k2conform.delivery import modes
from k2conform.case.corpus import load_corpus
from k2conform.adapter.contract import Adapter
from k2conform.adapter.harness import execute
from k2conform.adapter.registry import create_adapter, load
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform.adapter.command import CommandAdapter
from k2conform.delivery.modes import Delivery
from k2conform.model import Delta
from k2conform_adapters.reference import ReferenceAdapter

TOYS = Path(__file__).parent / "toys"
ROOT = Path(__file__).parent.parent
PY = shlex.quote(sys.executable)
SERVE_REFERENCE = f"cmd:{PY} -m k2conform.cli serve-adapter reference"
#: "Shanghai" is only in y_spec_parallel_calls among the golden completions.
TRIGGER_CASE = "y_spec_parallel_calls"


def k2run(
    tmp_path: Path, *args: str, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "results.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "run",
            "--case",
            "y_spec_*",
            "--delivery",
            "whole",
            "--delivery",
            "stream-token",
            "--jobs",
            "1",
            "--json",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert out.exists(), completed.stderr
    return completed, json.loads(out.read_text())


def toy_env(tmp_path: Path) -> dict:
    import os

    return {**os.environ, "K2_TOY_LOG": str(tmp_path / "starts.log")}


@pytest.mark.parametrize("mode", ["exit", "garbage"])
def test_crashing_process_is_a_crash_cell_and_the_run_goes_on(tmp_path, mode):
    spec = f"cmd:{PY} {TOYS / 'crashing_adapter.py'} {mode}"
    completed, results = k2run(tmp_path, "--adapter", spec, env=toy_env(tmp_path))
    assert completed.returncode == 1  # a crash is a finding
    cells = {(c["case"], c["delivery"]): c for c in results["cells"]}
    crashed = cells[(TRIGGER_CASE, "whole")]
    assert crashed["outcome"] == "crash" and crashed["adapter"] == spec
    expected = "exit status 139" if mode == "exit" else "not a JSON line on stdout"
    assert expected in crashed["observed"]["error"]
    if mode == "exit":
        assert "toy: segfault-like death" in crashed["observed"]["error"]  # stderr tail quoted
    others = [c for key, c in cells.items() if key[0] != TRIGGER_CASE]
    assert len(others) == 10 and all(c["outcome"] == "agree" for c in others)
    # Every crash discarded the process; the next request started a fresh one.
    starts = (tmp_path / "starts.log").read_text().splitlines()
    assert len(starts) >= 3 and len(set(starts)) == len(starts)


@pytest.mark.slow
def test_hanging_process_is_a_timeout_cell_and_the_run_goes_on(tmp_path):
    spec = f"cmd:{PY} {TOYS / 'hanging_adapter.py'}"
    completed, results = k2run(tmp_path, "--adapter", spec, "--timeout", "1", env=toy_env(tmp_path))
    assert completed.returncode == 1
    hung = [c for c in results["cells"] if c["case"] == TRIGGER_CASE]
    assert {c["outcome"] for c in hung} == {"timeout"}
    # filed only after a second try with ten times the deadline
    assert all(
        "no result within 1 s, nor within 10 s when run again" in c["observed"]["error"]
        for c in hung
    )
    assert all(c["adapter"] == spec for c in results["cells"])
    others = [c for c in results["cells"] if c["case"] != TRIGGER_CASE]
    assert len(others) == 10 and all(c["outcome"] == "agree" for c in others)
    # the hung toy died with its worker: no process is left behind
    leftover = subprocess.run(
        ["pgrep", "-f", str(TOYS / "hanging_adapter.py")], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""


def test_named_cmd_adapter_and_version_from_the_hello(tmp_path):
    completed, results = k2run(tmp_path, "--adapter", f"ref-remote={SERVE_REFERENCE}")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (row,) = results["adapters"]
    assert (row["name"], row["version"], row["status"]) == ("ref-remote", "0.1.0", "ok")
    assert {c["adapter"] for c in results["cells"]} == {"ref-remote"}


@pytest.mark.parametrize("jobs", [None, 1, 2])
def test_a_run_starts_a_command_once_per_worker_and_reports_the_workers_hello(tmp_path, jobs):
    """The hello costs a parser's whole import (about 10 s for a vLLM release): the report's
    release comes from the workers' hellos, so no process is started for it alone; the workers
    start at once (each toy's hello waits for the others' starts); and a run of a few cells
    (``y_spec_*``, two modes) gets one worker unless ``--jobs`` asks for more."""
    env = {
        **toy_env(tmp_path),
        "K2_TOY_TRIGGER": "no output holds this",
        "K2_TOY_HELLO_AFTER_STARTS": str(jobs or 1),
    }
    spec = f"toy=cmd:{PY} {TOYS / 'crashing_adapter.py'}"
    jobs_option = ["--jobs", str(jobs)] if jobs else ["--jobs", "0"]
    completed, results = k2run(tmp_path, "--adapter", spec, *jobs_option, env=env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (row,) = results["adapters"]
    assert (row["name"], row["version"], row["status"]) == ("toy", "1.0", "ok")
    events = [line.split()[0] for line in (tmp_path / "starts.log").read_text().splitlines()]
    workers = jobs or 1
    assert events == ["start"] * workers + ["hello"] * workers


def test_a_command_that_cannot_start_is_an_adapter_error(tmp_path):
    adapter = create_adapter("cmd:/nonexistent/k2conform serve-adapter vllm")
    availability = load(adapter)
    assert availability.status == "adapter-error" and "cannot start" in availability.reason
    adapter = create_adapter(f"cmd:{PY} -c print(42)")
    availability = load(adapter)
    assert availability.status == "adapter-error" and "hello" in availability.reason


@pytest.fixture(scope="module")
def served_and_local():
    remote = CommandAdapter(SERVE_REFERENCE)
    assert load(remote).status == "ok"
    yield remote, ReferenceAdapter()
    remote.close()


def _comparable(result):
    data = result.to_json()
    data["meta"] = {k: v for k, v in data.get("meta", {}).items() if k != "adapter"}
    return data


@pytest.mark.parametrize("mode", ["whole", "stream-token"])
def test_serve_adapter_reference_round_trips_identical_results(served_and_local, mode):
    """Every completion case of the shipped corpus (golden, policies, generated)."""
    remote, local = served_and_local
    tokenizer = load_tokenizer()
    cases = load_corpus().completions
    assert any(c.id.startswith("y_spec_") for c in cases)
    for case in cases:
        for delivery in modes.deliveries(case.model_output, mode, tokenizer):
            got = execute(remote, case.request, delivery)
            want = execute(local, case.request, delivery)
            assert _comparable(got) == _comparable(want), case.id


def test_parse_command_accepts_a_cmd_adapter():
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "parse",
            "--adapter",
            SERVE_REFERENCE,
            "--delivery",
            "stream-char",
        ],
        input=json.dumps(
            {
                "model_output": "hi<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
            }
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["content"] == "hi" and result["tool_calls"][0]["name"] == "f"


def test_serve_adapter_in_a_second_virtual_environment(tmp_path):
    """SECOND VENV (a few seconds): a fresh venv without pip whose site-packages reach this
    environment's packages through a .pth file, the way a release-gate venv holds its own
    parser release; serve-adapter runs under that venv's own interpreter."""
    venv = tmp_path / "venv-b"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    purelib = sysconfig.get_paths()["purelib"]
    (site / "zz_k2conform_closure.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    python_b = venv / "bin" / "python"
    spec = f"venv-b=cmd:{python_b} -m k2conform.cli serve-adapter reference"
    completed, results = k2run(tmp_path, "--adapter", spec)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert {c["outcome"] for c in results["cells"]} == {"agree"}
    prefix = subprocess.run(
        [str(python_b), "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(prefix) == venv


def test_a_lone_surrogate_in_a_result_survives_the_protocol(monkeypatch, capsys):
    """A parser may return text with an unpaired surrogate (from a "\\ud800" escape); the
    protocol's lines stay ASCII JSON so the pipe's UTF-8 never fails on it."""
    import io
    import json as _json

    from k2conform.adapter import serve as serve_adapter
    from k2conform.model import Result

    class Surrogate(Adapter):
        name, description = "surrogate", "test"

        def version(self):
            return "0"

        def parse_whole(self, request, output):
            return Result(content="a\ud800b")

        parse_stream = parse_whole

    out = io.BytesIO()
    wrapper = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    monkeypatch.setattr(serve_adapter, "create_adapter", lambda name: Surrogate())
    monkeypatch.setattr(serve_adapter, "_protocol_stream", lambda: wrapper)
    request = {
        "mode": "whole",
        "request": {"tools": []},
        "deltas": [{"text": "x", "token_ids": []}],
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(_json.dumps(request) + "\n"))
    args = type("Args", (), {"names": ["surrogate"], "release": None})()
    assert serve_adapter.cmd_serve_adapter(args) == 0
    hello_line, answer_line = out.getvalue().decode("ascii").splitlines()
    assert _json.loads(answer_line)["content"] == "a\ud800b"


# -- the startup handshake -------------------------------------------------------------------


def _script(tmp_path: Path, name: str, body: str) -> str:
    """A tiny adapter command written for the test; it logs each start to starts.log."""
    path = tmp_path / name
    log = tmp_path / "starts.log"
    path.write_text(f"import sys\nopen({str(log)!r}, 'a').write('start\\n')\n{body}\n")
    return f"{PY} {shlex.quote(str(path))}"


def test_the_handshake_deadline_scales_with_the_cell_deadline():
    from k2conform.adapter.command import HANDSHAKE_FLOOR, handshake_timeout

    assert handshake_timeout(0.5) == handshake_timeout(1) == HANDSHAKE_FLOOR == 10
    assert handshake_timeout(3) == 12 and handshake_timeout(20) == 80


@pytest.mark.parametrize(
    "body,reason",
    [
        (
            "sys.stderr.write('boom\\nbang\\n'); sys.exit(3)",
            " exited before its hello (exit status 3); stderr ends: boom | bang",
        ),
        (
            "print('Traceback? no, garbage', flush=True); import time; time.sleep(60)",
            ': the first line must be a hello with "protocol": "k2conform-adapter/1", '
            "got 'Traceback? no, garbage'",
        ),
        (
            'print(\'{"protocol": "k2conform-adapter/1"}\', flush=True)',
            ": the hello must carry the adapter's 'name'",
        ),
    ],
    ids=["exits", "garbage", "no-name"],
)
def test_a_command_that_exits_or_babbles_before_its_hello_says_so_at_once(tmp_path, body, reason):
    command = _script(tmp_path, "toy.py", body)
    adapter = create_adapter(f"cmd:{command}", 20.0)
    started = time.monotonic()
    availability = load(adapter)
    assert availability.status == "adapter-error"
    assert availability.reason == f"`{shlex.join(shlex.split(command))}`{reason}"
    assert "\n" not in availability.reason and time.monotonic() - started < 5  # no handshake wait
    # a failed start is final: asking again (the parent's report row does) starts nothing
    assert adapter.version() is None and load(adapter).reason == availability.reason
    assert (tmp_path / "starts.log").read_text().count("start") == 1


@pytest.mark.slow
def test_a_command_that_never_says_hello_is_an_adapter_error_within_its_deadline(tmp_path):
    """The handshake waits max(10 s, 4 x --timeout): 12 s here, once (in the worker: the report's
    row is the worker's), not 300 s; the other adapter's cells are done."""
    spec = f"cmd:{_script(tmp_path, 'silent.py', 'import time; time.sleep(600)')}"
    started = time.monotonic()
    completed, results = k2run(
        tmp_path, "--adapter", "reference", "--adapter", spec, "--timeout", "3"
    )
    elapsed = time.monotonic() - started
    assert completed.returncode == 1, completed.stderr  # adapter-error fails a run: nothing checked
    assert 12 <= elapsed < 12 + 20  # one wait, with room for a loaded machine
    rows = {row["name"]: row for row in results["adapters"]}
    assert rows[spec]["status"] == "adapter-error"
    command = shlex.join(shlex.split(spec[len("cmd:") :]))
    assert rows[spec]["reason"].startswith(f"no hello from `{command}` within 12 s (")
    assert "ADAPTER ERROR" in completed.stdout
    assert "not installed" not in completed.stdout  # there is no release to name
    outcomes = {"reference": [], spec: []}
    for cell in results["cells"]:
        outcomes[cell["adapter"]].append(cell["outcome"])
    assert len(outcomes["reference"]) == len(outcomes[spec]) == 2 * len(results["cases"]) > 0
    assert set(outcomes["reference"]) == {"agree"} and set(outcomes[spec]) == {"adapter-error"}
    leftover = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "silent.py")], check=False, capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""


def test_a_remote_adapter_that_asks_for_longer_cells_gets_them(tmp_path):
    """The hello's ``cell_timeout`` raises the run's deadline for that adapter's cells only
    (the worker watchdog's hard limit with it); a hello without it keeps the run's."""
    from k2conform.run.cell import CellSettings

    hello = (
        '{"protocol": "k2conform-adapter/1", "name": "slow", "version": "1", "status": "ok",'
        ' "reason": "", "cell_timeout": 300}'
    )
    slow = create_adapter(f"slow=cmd:{_script(tmp_path, 'slow.py', f'print({hello!r}); input()')}")
    assert load(slow).status == "ok"
    assert CellSettings(deadline=20).for_adapter(slow).deadline == 300
    assert CellSettings(deadline=500).for_adapter(slow).deadline == 500
    reference = create_adapter(f"ref-remote={SERVE_REFERENCE}")
    assert CellSettings(deadline=20).for_adapter(reference).deadline == 20
    for adapter in (slow, reference):
        adapter.close()


def test_the_hello_says_whether_the_adapter_takes_stream_holdback():
    """A cmd: peer's modes: ``stream-holdback`` only for an adapter whose server holds text
    back, told in the hello; before the hello the run plans the cells and the worker judges."""
    from k2conform.adapter.command import CommandAdapter
    from k2conform.adapter.registry import create_adapter
    from k2conform.adapter.serve import hello

    assert hello(create_adapter("reference"), "ok", "")["stop_string_holdback"] is True
    assert hello(create_adapter("sglang"), "ok", "")["stop_string_holdback"] is False
    peer = CommandAdapter("cmd:true")
    assert peer.stop_string_holdback is True  # no hello yet: asking starts nothing
    assert peer.starts == 0
    peer._hello = {"stop_string_holdback": False}
    assert peer.stop_string_holdback is False


def test_the_hello_says_which_request_options_the_adapter_applies():
    """A server-level case reaches a cmd: peer's own modes only when its hello says the peer
    applies every option; before the hello (planning) none is assumed."""
    from k2conform.adapter.command import CommandAdapter
    from k2conform.adapter.registry import create_adapter
    from k2conform.adapter.serve import hello

    assert "stream_reasoning" in hello(create_adapter("sglang"), "ok", "")["request_options"]
    assert hello(create_adapter("vllm"), "ok", "")["request_options"] == []
    peer = CommandAdapter("cmd:true")
    assert peer.request_options == frozenset() and peer.starts == 0
    peer._hello = {"request_options": ["stream_reasoning"]}
    assert peer.request_options == frozenset({"stream_reasoning"})


@pytest.mark.parametrize(
    ("release", "status"),
    [(None, "ok"), ("0.1.0", "ok"), ("0.1", "ok"), ("0.0.1", "adapter-error")],
)
def test_serve_adapter_holds_the_adapter_to_the_release_it_is_given(release, status):
    """``--release``: the hello is an adapter-error when the adapter imports another release
    (a release environment that fell through to its base's); ``0.1`` is ``0.1.0``."""
    from k2conform.adapter.registry import create_adapter

    assert create_adapter("reference").version() == "0.1.0"
    options = ["--release", release] if release else []
    done = subprocess.run(
        [sys.executable, "-m", "k2conform.cli", "serve-adapter", "reference", *options],
        input="",
        capture_output=True,
        text=True,
    )
    hello = json.loads(done.stdout.splitlines()[0])
    assert hello["status"] == status, hello
    if status != "ok":
        assert "0.0.1" in hello["reason"] and "0.1.0" in hello["reason"]


def test_a_cmd_adapter_is_planned_the_formats_its_spec_declares_and_held_to_its_hello(tmp_path):
    """``run`` plans before any hello, so a ``cmd:`` adapter's formats are the spec's
    (``NAME[k3]=cmd:...``; default K2): declared, the K3 reference in another process gets every
    K3 cell and answers as in process; undeclared, its K2 cells would be judged by the wrong
    format, so every cell is an adapter-error saying how to declare it; a format k2conform
    does not know is one line and exit 2."""
    serve_k3 = f"cmd:{PY} -m k2conform.cli serve-adapter reference-k3"
    k3_cases = ["--case", "y_k3_*", "--case", "n_k3_*"]

    def run(spec: str) -> tuple[subprocess.CompletedProcess, dict]:
        out = tmp_path / "results.json"
        out.unlink(missing_ok=True)
        completed = subprocess.run(
            [sys.executable, "-m", "k2conform.cli", "run", "--adapter", spec, *k3_cases,
             "--case", "y_spec_single_call", "--delivery", "whole", "--jobs", "1",
             "--json", str(out)],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        return completed, json.loads(out.read_text()) if out.exists() else {}

    completed, declared = run(f"k3-remote[k3]={serve_k3}")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # a server-level case is planned for no cmd: adapter (run plans before the hello)
    k3_case_ids = {
        c.id for c in load_corpus().completions if c.format == "k3" and not c.request.server_options
    }

    def judged_in(results: dict) -> dict:  # the meta says which process answered
        return {
            c["case"]: (c["outcome"], {k: v for k, v in c["observed"].items() if k != "meta"})
            for c in results["cells"]
        }

    judged = judged_in(declared)
    assert set(judged) == {i for i in k3_case_ids if i.startswith(("y_k3_", "n_k3_"))}
    _, in_process = run("reference-k3")
    assert judged == judged_in(in_process)
    assert {outcome for outcome, _ in judged.values()} == {"agree"}

    completed, undeclared = run(f"k3-remote={serve_k3}")
    assert completed.returncode == 1
    outcomes = {c["outcome"] for c in undeclared["cells"]}
    assert outcomes == {"adapter-error"} and {c["case"] for c in undeclared["cells"]} == {
        "y_spec_single_call"
    }
    (row,) = undeclared["adapters"]
    assert "k3-remote[k3]=cmd:" in row["reason"], row

    completed, _ = run(f"k3-remote[k4]={serve_k3}")
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0 and "k2, k3" in completed.stderr


#: One process serving a K2 and a K3 adapter, as a release environment's command does.
SERVE_BOTH = f"cmd:{PY} -m k2conform.cli serve-adapter reference reference-k3"


def test_one_process_serves_a_k2_and_a_k3_adapter_each_spec_reaching_its_own():
    """The adapters of one command line share its process (a release's K2 and K3 parsers
    imported once): each spec reaches the served adapter parsing the formats it declares, each
    request is routed to it (a K2 case parsed by the K2 reference, a K3 case by the K3 one, as
    in process), and a process discarded by one is started afresh for both."""
    cases = {c.id: c for c in load_corpus().completions}
    k2 = create_adapter(f"both={SERVE_BOTH}")
    k3 = create_adapter(f"both-k3[k3]={SERVE_BOTH}")
    try:
        assert load(k2).status == load(k3).status == "ok", (load(k2), load(k3))
        assert (k2.remote_name(), k3.remote_name()) == ("reference", "reference-k3")
        assert k2.starts == 1
        for adapter, local, case_id in (
            (k2, "reference", "y_spec_parallel_calls"),
            (k3, "reference-k3", "y_k3_typed_values"),
            (k2, "reference", "y_spec_single_call"),
        ):
            case = cases[case_id]
            for delivery in modes.deliveries(case.model_output, "stream-token", load_tokenizer()):
                got = execute(adapter, case.request, delivery)
                want = execute(create_adapter(local), case.request, delivery)
                assert got.outcome == "ok" and _comparable(got) == _comparable(want), case_id
        assert k2.starts == 1  # both adapters' requests went to the one process
        k3.close()
        execute(k2, cases["y_spec_single_call"].request, Delivery("whole", (Delta("hi"),)))
        assert k2.starts == k3.starts == 2
    finally:
        k2.close()


def test_a_spec_no_served_adapter_parses_is_an_adapter_error_naming_what_is_served():
    adapter = create_adapter(f"both-k2k3[k2,k3]={SERVE_BOTH}")
    try:
        availability = load(adapter)
    finally:
        adapter.close()
    assert availability.status == "adapter-error"
    assert "reference (k2), reference-k3 (k3); none parses k2,k3" in availability.reason


def test_a_request_to_several_adapters_must_name_one_and_two_must_parse_other_formats():
    """A request line without ``adapter`` is an adapter-error answer saying what is served;
    serving two adapters of the same formats is a usage error (no spec could reach one)."""
    from k2conform.adapter.protocol import request_line
    from k2conform.model import Request

    line = json.dumps(request_line("whole", Request(), (Delta("hi"),)))
    named = json.dumps(request_line("whole", Request(), (Delta("hi"),), "reference-k3"))
    done = subprocess.run(
        shlex.split(SERVE_BOTH.removeprefix("cmd:")),
        input=f"{line}\n{named}\n",
        capture_output=True,
        text=True,
    )
    hello, unnamed, answered = map(json.loads, done.stdout.splitlines())
    assert [h["name"] for h in hello["adapters"]] == ["reference", "reference-k3"]
    assert unnamed["outcome"] == "adapter-error"
    assert "names none; this process serves reference, reference-k3" in unnamed["error"]
    assert answered["outcome"] == "ok" and answered["content"] == "hi"
    done = subprocess.run(
        [sys.executable, "-m", "k2conform.cli", "serve-adapter", "reference", "vllm"],
        input="", capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done
    (said,) = done.stderr.strip().splitlines()
    assert "must differ in the formats they parse" in said and "reference (k2), vllm (k2)" in said
