"""The command-line contract: names, shapes and exit statuses that users script against."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from k2conform.delivery.modes import case_seed

from entry_points import K2CONFORM

OUTPUT = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
    '{"a": 1}<|tool_call_end|><|tool_calls_section_end|>'
)


def run(*args, stdin=""):
    return subprocess.run([K2CONFORM, *args], input=stdin, capture_output=True, text=True)


@pytest.mark.parametrize(
    "mode",
    [
        "whole",
        "stream-token",
        "stream-burst",
        "stream-char",
        "stream-marker-split",
        "stream-random",
    ],
)
def test_parse_every_delivery_mode(mode):
    completed = run(
        "parse",
        "--adapter",
        "reference",
        "--delivery",
        mode,
        stdin=json.dumps({"model_output": OUTPUT}),
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert set(result) >= {"content", "reasoning", "tool_calls", "outcome", "error"}
    assert result["tool_calls"] == [{"id": "functions.f:0", "name": "f", "arguments": '{"a": 1}'}]
    assert result["meta"]["delivery"].startswith(mode)
    if mode == "stream-random":
        assert result["meta"]["seed"] == case_seed(20261130, "i_adhoc")  # the per-case rule of run


def test_parse_recorded_deltas_and_thinking():
    payload = {"deltas": ["<think>plan</th", "ink>ok"], "thinking": True}
    result = json.loads(
        run("parse", "--delivery", "stream-recorded", stdin=json.dumps(payload)).stdout
    )
    assert (result["reasoning"], result["content"]) == ("plan", "ok")


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["parse"], "not json", "stdin is not JSON"),
        (["parse"], '{"model_outptu": ""}', "unknown field"),
        (["parse", "--adapter", "nope"], '{"model_output": ""}', "unknown adapter"),
        (["parse", "--delivery", "stream-recorded"], '{"model_output": ""}', "needs 'deltas'"),
        (["render"], "{}", "'messages' is required"),
        (["run", "--delivery", "whole", "--opt-in", "stream-holdback"], "", "--opt-in adds to"),
        # a tokenizer that cannot load, said once before any cell (was: a worker's traceback)
        (["run", "--tokenizer", "/nonexistent"], "", "--tokenizer /nonexistent: "),
        (["parse", "--tokenizer", "/nonexistent"], '{"model_output": ""}', "--tokenizer"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, stdin, message):
    completed = run(*args, stdin=stdin)
    assert completed.returncode == 2
    assert message in completed.stderr and "Traceback" not in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr


@pytest.mark.slow
def test_list_adapters_names_every_adapter_reference_with_its_version():
    from k2conform.adapter.registry import adapter_names

    rows = json.loads(run("list-adapters", "--json").stdout)
    assert [r["name"] for r in rows] == adapter_names()
    reference = next(r for r in rows if r["name"] == "reference")
    assert reference["status"] == "ok" and reference["version"]


def test_list_adapters_lists_the_adapters_named_and_refuses_an_unknown_one():
    """Named, only those are loaded and listed (one parser's import, not every one's); an
    unknown name is one line and exit 2."""
    listed = run("list-adapters", "reference-k3", "reference")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        ["reference-k3", "0.1.0", "ok"],
        ["reference", "0.1.0", "ok"],
    ]
    unknown = run("list-adapters", "reference", "no-such-parser")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "unknown adapter 'no-such-parser'" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``k2conform ... | head -1``: the closed pipe ends the command quietly.  (check-corpus: a
    command that imports no parser, so the wait does not grow with the machine's load, as
    list-adapters' did, over a minute beside a real server.)"""
    process = subprocess.Popen(
        [K2CONFORM, "check-corpus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # before the first line is written
    assert process.wait(timeout=60) == 1
    errors = process.stderr.read()
    assert b"Traceback" not in errors and b"BrokenPipe" not in errors


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_stops_its_workers_and_keeps_partial_results(tmp_path, signum):
    out = tmp_path / "results.json"
    process = subprocess.Popen(
        [
            K2CONFORM,
            "run",
            "--adapter",
            "reference",
            "--adapter",
            "vllm",
            "--adapter",
            "sglang",
            "--jobs",
            "2",
            "--json",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Ctrl-C as a terminal sends it: a run started in the background of a non-interactive
        # shell (a CI job) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Interrupt once cells are being done: the first progress line ("1/N cells") comes when the
    # workers have imported the parsers, which takes longer on a loaded machine than a fixed wait.
    lines: list[str] = []
    progress = threading.Event()

    def read() -> None:
        for line in process.stderr:
            lines.append(line)
            if re.fullmatch(r"\d+/\d+ cells\n", line):
                progress.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert progress.wait(300), "".join(lines)[-2000:]
    time.sleep(2)
    workers = _children(process.pid)
    assert workers
    stopped = time.monotonic()
    os.killpg(process.pid, signum) if signum == signal.SIGINT else process.send_signal(signum)
    process.wait(timeout=60)
    reader.join(10)
    stderr = "".join(lines)
    assert time.monotonic() - stopped < 10  # about 3 s: the busy workers are killed, not waited for
    assert process.returncode == 130
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("k2conform run: interrupted after ")
    results = json.loads(out.read_text())
    assert results["partial"]["cells"] == len(results["cells"]) < results["partial"]["planned"]
    time.sleep(2)
    left = {pid: _cmdline(pid) for pid in workers if os.path.exists(f"/proc/{pid}")}
    assert not left, f"processes left behind: {left}"
    again = run("report", str(out), "--markdown", str(tmp_path / "s.md"))
    assert again.returncode == 0 and "**PARTIAL:**" in (tmp_path / "s.md").read_text()


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def test_an_unwritable_output_path_is_refused_before_the_run():
    completed = run("run", "--adapter", "reference", "--json", "/dev/null/x.json")
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and "cannot write /dev/null/x.json" in completed.stderr
    assert "cells" not in completed.stdout


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_a_deadline_must_be_positive_everywhere(timeout):
    for args in (["parse"], ["run", "--adapter", "reference"]):
        completed = run(*args, "--timeout", timeout, stdin=json.dumps({"model_output": OUTPUT}))
        assert completed.returncode == 2 and "more than 0 seconds" in completed.stderr, args
        assert "Traceback" not in completed.stderr


@pytest.mark.parametrize(
    "payload,message",
    [
        ({"model_output": 42}, "'model_output' must be a string"),
        ({"model_output": "x", "deltas": [1, 2]}, "'deltas' must be an array of strings"),
        ({"model_output": "x", "tools": "x"}, "'request.tools': must be an array"),
        ({"model_output": "x", "tools": [{"name": "f"}]}, "request.tools[0]"),
        ({"model_output": "x", "thinking": "false"}, "'request.thinking': must be true or false"),
    ],
)
def test_bad_parse_input_is_one_line_and_exit_2(payload, message):
    completed = run("parse", stdin=json.dumps(payload))
    assert completed.returncode == 2, completed.stdout
    assert message in completed.stderr and completed.stderr.count("\n") == 1


def test_report_without_an_output_is_a_usage_error(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    nothing = run("report", str(tmp_path / "r.json"))
    assert nothing.returncode == 2 and "nothing to write" in nothing.stderr
    wrong = run("report", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "s.md"))
    assert wrong.returncode == 2 and "is not a k2conform results document" in wrong.stderr


HELLO = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "payload,message",
    [
        ({"messages": "hi"}, "'messages': must be an array, not str"),
        ({"messages": [{"content": "hi"}]}, "'messages[0].role': missing"),
        ({"messages": [{"role": None}]}, "'messages[0].role': must be a non-empty string"),
        ({"messages": [42]}, "'messages[0]': must be an object, not int"),
        (
            {"messages": [{"role": "user", "content": 42}]},
            "'messages[0].content': must be a string",
        ),
        (
            {"messages": [{"role": "tool", "content": "18°C"}]},
            "'messages[0].tool_call_id': missing",
        ),
        ({**HELLO, "tools": "x"}, "'tools': must be an array"),
        (
            {**HELLO, "add_generation_prompt": "no"},
            "'add_generation_prompt': must be true or false",
        ),
    ],
)
def test_bad_render_input_is_one_line_naming_the_field(payload, message):
    """Never a traceback, and never a turn named None: the conversation is checked as a prompt
    case's is."""
    completed = run("render", stdin=json.dumps(payload))
    assert completed.returncode == 2, completed.stdout
    assert completed.stdout == "" and completed.stderr.count("\n") == 1
    assert completed.stderr.startswith(f"k2conform render: stdin: field {message}")


@pytest.mark.parametrize(
    "source,message",
    [
        ("{% if %}", ": line 1: Expected an expression"),
        ("ok\n{{ 1 + 'x' }}", ": line 2: TypeError: unsupported operand"),
        ("{{ raise_exception('no system turn') }}", ": line 1: TemplateError: no system turn"),
        (
            "{% set q = [] %}\n{{ q.append(1) }}",
            ": line 2: the template calls list.append, which the immutable sandbox",
        ),
    ],
)
def test_a_broken_chat_template_is_one_line_naming_the_file_and_line(tmp_path, source, message):
    template = tmp_path / "chat_template.jinja"
    template.write_text(source)
    completed = run("render", "--chat-template", str(template), stdin=json.dumps(HELLO))
    assert completed.returncode == 2, completed.stdout
    assert completed.stderr.startswith(f"k2conform render: {template}{message}")
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr


def test_an_unreadable_chat_template_is_one_line(tmp_path):
    template = tmp_path / "latin1.jinja"
    template.write_bytes(b"\xff\xfe")
    completed = run("render", "--chat-template", str(template), stdin=json.dumps(HELLO))
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert f"cannot read the chat template {template}: 'utf-8' codec" in completed.stderr


def test_serve_fake_engine_on_a_busy_port_is_one_line_naming_it():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        completed = subprocess.run(
            [K2CONFORM, "serve-fake-engine", "--port", str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr == (
        f"k2conform serve-fake-engine: cannot serve on 127.0.0.1:{port}: Address already in use\n"
    )


# -- a gate that cannot pass on a fraction of the work -------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The reference on the spec's golden completions, as shards 1..3 of 3 and 1 of 2."""
    out = tmp_path_factory.mktemp("shards")
    for spec in ("1/3", "2/3", "3/3", "1/2"):
        path = out / f"r{spec.replace('/', 'of')}.json"
        done = run("run", "--adapter", "reference", "--case", "y_spec_*", "--shard", spec,
                   "--json", str(path))
        assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_run_says_what_it_planned_and_ran(shards):
    inventory = json.loads((shards / "r1of3.json").read_text())["inventory"]
    assert inventory["planned"] == inventory["run"] > 0


def test_merge_of_every_shard_passes_and_adds_the_inventories_up(shards, tmp_path):
    parts = [shards / f"r{k}of3.json" for k in (1, 2, 3)]
    done = run("merge", *map(str, parts), "--json", str(tmp_path / "all.json"))
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "all.json").read_text())["inventory"]
    planned = sum(json.loads(p.read_text())["inventory"]["planned"] for p in parts)
    assert merged == {"planned": planned, "run": planned}


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (["r1of3", "r2of3"], "shards of reference: 3/3 missing (given 1/3, 2/3)"),
        (["r1of3", "r1of2"], "shards of reference out of different totals N"),
    ],
    ids=["missing-shard", "mixed-n"],
)
def test_merge_refuses_an_incomplete_set_of_shards(shards, parts, message):
    done = run("merge", *(str(shards / f"{p}.json") for p in parts))
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_merge_refuses_a_partial_run(shards, tmp_path):
    document = json.loads((shards / "r1of3.json").read_text())
    document["partial"] = {"cells": 3, "planned": 9, "reason": "interrupted (Ctrl-C or SIGTERM)"}
    (tmp_path / "p.json").write_text(json.dumps(document))
    done = run("merge", str(tmp_path / "p.json"))
    assert done.returncode == 2 and "a partial run" in done.stderr
    assert done.stderr.count("\n") == 1


def test_merge_refuses_a_shard_that_lost_its_inventory(shards, tmp_path):
    """One shard without the inventory its siblings carry: the merged run could not say what
    it planned, so the gate could pass on less; refused in one line, naming the input."""
    document = json.loads((shards / "r2of3.json").read_text())
    document.pop("inventory")
    (tmp_path / "r2of3.json").write_text(json.dumps(document))
    parts = [str(shards / "r1of3.json"), str(tmp_path / "r2of3.json"), str(shards / "r3of3.json")]
    done = run("merge", *parts)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "r2of3.json: no inventory" in done.stderr


def test_fewer_cells_run_than_planned_fail_the_gate(shards, tmp_path):
    """Whatever the cause, a document that ran fewer cells than it planned cannot pass."""
    document = json.loads((shards / "r1of2.json").read_text())
    document["inventory"]["planned"] += 1
    document.pop("shard")
    (tmp_path / "short.json").write_text(json.dumps(document))
    done = run("merge", str(tmp_path / "short.json"))
    assert done.returncode == 1 and "**INCOMPLETE:**" in done.stdout


def test_baseline_over_a_small_run_keeps_what_it_did_not_run(shards, tmp_path):
    """The natural way to add one case: the run's entries are rewritten, every other kept."""
    previous = {
        "version": 1,
        "adapters": ["vllm"],
        "entries": [
            {"adapter": "vllm", "outcome": "differs", "fields": ["content"], "deliveries": ["*"],
             "reason": "reviewed", "link": None, "cases": [f"y_case_{i}" for i in range(95)]}
        ],
    }
    (tmp_path / "baseline.json").write_text(json.dumps(previous))
    done = run("baseline", str(shards / "r1of3.json"), "--previous",
               str(tmp_path / "baseline.json"), "--out", str(tmp_path / "baseline.json"))
    assert done.returncode == 0, done.stderr
    assert "0 (behaviour, delivery, case) added, 0 removed, 95 kept" in done.stdout
    written = json.loads((tmp_path / "baseline.json").read_text())
    assert written["entries"] == previous["entries"]
    assert written["adapters"] == ["reference", "vllm"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--adapter", "cmd:"], "no command after 'cmd:'"),
        (["run", "--adapter", "cmd:python -c 'x"], "No closing quotation"),
        (["fuzz", "differential", "--adapter", "nosuch", "--seconds", "5"], "unknown adapter"),
        (["fuzz", "reference", "--seconds", "0"], "must be more than 0"),
        (["fuzz", "reference", "--runs", "-1"], "must be more than 0"),
    ],
    ids=["empty-cmd", "unbalanced-quote", "fuzz-unknown-adapter", "fuzz-seconds-0", "fuzz-runs"],
)
def test_bad_input_is_one_line_and_exit_2_before_any_work(args, message):
    done = run(*args, "--case", "y_spec_single_call") if args[0] == "run" else run(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_internal_error_exits_2_with_its_traceback_never_1(monkeypatch, capsys):
    from k2conform import cli

    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "cmd_list_adapters", broken)
    assert cli.main(["list-adapters"]) == 2
    error = capsys.readouterr().err
    assert "internal error (a bug in k2conform" in error and "ZeroDivisionError: a bug" in error


class _SessionToy:
    """An adapter whose run-wide session publishes a variable and records its end."""

    name = "toy"
    ended: list[str] = []

    @contextlib.contextmanager
    def run_session(self, run_dir):
        try:
            yield {"K2CONFORM_TOY_URL": str(run_dir / "toy")}
        finally:
            self.ended.append(str(run_dir))


@pytest.mark.parametrize("status", [0, 1, 3])
def test_session_runs_the_command_under_the_adapters_session_and_ends_it(
    monkeypatch, tmp_path, status
):
    """The command sees the session's variables; its exit status is the session's; the session
    ends when the command does, whatever its status, and its variables go with it."""
    from k2conform import cli
    from k2conform.adapter import registry

    monkeypatch.setattr(registry, "create_adapter", lambda name: _SessionToy())
    _SessionToy.ended.clear()
    check = (
        "import os, sys; "
        f"sys.exit({status} if os.environ.get('K2CONFORM_TOY_URL') == {str(tmp_path / 'toy')!r} "
        "else 9)"
    )
    argv = ["session", "--adapter", "toy", "--run-dir", str(tmp_path), "--", sys.executable]
    assert cli.main([*argv, "-c", check]) == status
    assert _SessionToy.ended == [str(tmp_path)]
    assert "K2CONFORM_TOY_URL" not in os.environ


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no command to run"),
        (["--", "/nonexistent/command"], "cannot run /nonexistent/command"),
    ],
)
def test_a_session_without_a_command_it_can_run_is_one_line_and_exit_2(args, message):
    done = run("session", "--adapter", "reference", *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_a_session_that_could_not_start_runs_nothing_and_says_why(monkeypatch, tmp_path, capsys):
    """A session whose set-up failed (a server that did not start) is exit 2 with its reason,
    and the command is not run against nothing."""
    from k2conform import cli
    from k2conform.adapter import registry

    class Failed(_SessionToy):
        @contextlib.contextmanager
        def run_session(self, run_dir):
            yield {"K2CONFORM_TOY_ERROR": "the server exited\nport 1 in use"}

    monkeypatch.setattr(registry, "create_adapter", lambda name: Failed())
    marker = tmp_path / "ran"
    argv = ["session", "--adapter", "toy", "--run-dir", str(tmp_path), "--", "touch", str(marker)]
    assert cli.main(argv) == 2
    assert "could not start (K2CONFORM_TOY_ERROR): port 1 in use" in capsys.readouterr().err
    assert not marker.exists()


def test_a_command_killed_by_a_signal_is_the_sessions_128_plus_n(monkeypatch, tmp_path):
    from k2conform import cli
    from k2conform.adapter import registry

    monkeypatch.setattr(registry, "create_adapter", lambda name: _SessionToy())
    argv = ["session", "--adapter", "toy", "--run-dir", str(tmp_path), "--", "sh", "-c"]
    assert cli.main([*argv, "kill -TERM $$"]) == 128 + signal.SIGTERM
