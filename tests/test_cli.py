"""The command-line contract: names, shapes and exit statuses that users script against."""

from __future__ import annotations

import json
import subprocess

import pytest

from k2conform.delivery.modes import case_seed

from entry_points import K2CONFORM

OUTPUT = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>'
          '{"a": 1}<|tool_call_end|><|tool_calls_section_end|>')


def run(*args, stdin=""):
    return subprocess.run([K2CONFORM, *args], input=stdin, capture_output=True, text=True)


@pytest.mark.parametrize("mode", ["whole", "stream-token", "stream-burst", "stream-char", "stream-marker-split", "stream-random"])
def test_parse_every_delivery_mode(mode):
    completed = run("parse", "--adapter", "reference", "--delivery", mode, stdin=json.dumps({"model_output": OUTPUT}))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert set(result) >= {"content", "reasoning", "tool_calls", "outcome", "error"}
    assert result["tool_calls"] == [{"id": "functions.f:0", "name": "f", "arguments": '{"a": 1}'}]
    assert result["meta"]["delivery"].startswith(mode)
    if mode == "stream-random":
        assert result["meta"]["seed"] == case_seed(20261130, "i_adhoc")  # the per-case rule of run


def test_parse_recorded_deltas_and_thinking():
    payload = {"deltas": ["<think>plan</th", "ink>ok"], "thinking": True}
    result = json.loads(run("parse", "--delivery", "stream-recorded", stdin=json.dumps(payload)).stdout)
    assert (result["reasoning"], result["content"]) == ("plan", "ok")


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["parse"], "not json", "stdin is not JSON"),
        (["parse"], '{"model_outptu": ""}', "unknown field"),
        (["parse", "--adapter", "nope"], '{"model_output": ""}', "unknown adapter"),
        (["parse", "--delivery", "stream-recorded"], '{"model_output": ""}', "needs 'deltas'"),
        (["render"], "{}", "'messages' is required"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, stdin, message):
    completed = run(*args, stdin=stdin)
    assert completed.returncode == 2
    assert message in completed.stderr and "Traceback" not in completed.stderr


def test_list_adapters_names_reference_with_its_version():
    rows = json.loads(run("list-adapters", "--json").stdout)
    reference = next(r for r in rows if r["name"] == "reference")
    assert reference["status"] == "ok" and reference["version"]
    assert "reference" in run("list-adapters").stdout
