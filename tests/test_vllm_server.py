"""The ``vllm-server`` adapter: a real vLLM OpenAI server with scripted Kimi token ids.

The server tests (marker ``server``) need ``.venvs/vllm-server``
(requirements/vllm-server.txt) and skip with the install command without it (fail in CI:
``tests/lanes.py``).  They share ONE run of the real servers per test session, across xdist
workers too: the first worker to need it runs the server lane's guard (``make
server-lane-guard``: each server started once, its cases, shutdown: the real path end to end,
gated by ``baseline-servers.json``) and every test reads that run's results; a lock file keeps
the other workers waiting for it.  The guard is thus the server tests' run: ``.ci/run`` runs no
second one.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lanes import make_command, missing, run_once

from k2conform.delivery import modes
from k2conform.adapter import AdapterUnavailable
from k2conform.case.corpus import CorpusError, case_from_json, load_corpus
from k2conform.adapter.registry import Availability, create_adapter, load
from k2conform.run.cell import run_cell
from k2conform.run.matrix import plan
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform_adapters import vllm_server

ROOT = Path(__file__).resolve().parents[1]
VENV = vllm_server.venv_dir()
INSTALLED = (VENV / "bin" / "python").exists()


def _needs_venv() -> None:
    if not INSTALLED:
        missing(f"{VENV} is not installed; install it with: {vllm_server.install_command()}")


CASES = (
    "y_spec_single_call",
    "y_spec_parallel_calls",
    "y_spec_content_before_section",
    "y_server_spacing_default",
    "y_server_spacing_off",
    "i_server_max_tokens_cut_in_arguments",
    "y_server_tool_choice_required",
    "n_server_multi_turn_second_call",
    "y_server_stream_include_usage",
    "n_server_tool_choice_none_call_in_output",
    "y_request_required_without_tools",
    "y_request_null_for_non_nullable_string",
)
#: Kimi K3 cases: run by vllm-server-k3, a second server with the kimi_k3 parsers
K3_CASES = ("y_k3_think_response_call", "n_k3_tools_opened_inside_think")


# -- without a server ------------------------------------------------------------------------


def test_server_modes_are_a_closed_set_apart_from_the_defaults():
    server_modes = {"server-whole", "server-stream", "server-concurrent"}
    assert set(modes.SERVER_MODES) == server_modes <= set(modes.MODES)
    assert not set(modes.SERVER_MODES) & set(modes.DEFAULT_MODES)
    assert set(modes.SERVER_MODES) <= set(modes.TOKEN_ALIGNED_MODES)
    assert modes.adapter_modes(create_adapter("vllm-server")) == modes.SERVER_MODES
    assert modes.planned_modes(create_adapter("vllm-server")) == ("server-whole", "server-stream")
    assert not set(modes.adapter_modes(create_adapter("reference"))) & set(modes.SERVER_MODES)
    whole, stream, concurrent = (
        modes.deliveries("a<|im_end|>b", m, load_tokenizer())[0] for m in modes.SERVER_MODES
    )
    assert not whole.streaming and stream.streaming and concurrent.streaming
    assert (stream.copies, concurrent.copies) == (0, modes.CONCURRENT_STREAMS)
    assert whole.deltas == stream.deltas == concurrent.deltas
    assert whole.deltas[0].token_ids == tuple(load_tokenizer().encode("a"))


def test_missing_venv_is_unavailable_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_server.VENV_ENV, str(tmp_path / "absent"))
    monkeypatch.delenv(vllm_server.URL_ENV, raising=False)
    adapter = create_adapter("vllm-server")
    availability = load(adapter)
    assert availability.status == "unavailable"
    assert (
        "k2conform setup-parsers vllm-server" in availability.reason
        and str(tmp_path / "absent") in availability.reason
    )
    with pytest.raises(AdapterUnavailable):
        adapter.load()


def test_other_adapters_are_unavailable_in_server_modes_and_vice_versa(corpus):
    case = next(c for c in corpus.completions if c.id == "y_spec_single_call")
    cell = run_cell(
        create_adapter("reference"), case, "server-whole", availability=Availability("ok")
    )
    assert cell.outcome == "unavailable" and "server-whole" in cell.error
    cell = run_cell(create_adapter("vllm-server"), case, "whole", availability=Availability("ok"))
    assert cell.outcome == "unavailable" and "server-whole" in cell.error


def test_server_level_cases_are_planned_for_server_modes_only(corpus):
    server_cases = [c for c in corpus.completions if c.request.server_options]
    assert len(server_cases) >= 10
    names = ("reference", "vllm-server")
    per_adapter = {n: modes.adapter_modes(create_adapter(n)) for n in names}
    cells = plan(server_cases, names, tuple(modes.MODES), per_adapter)
    assert cells and {mode for _, _, mode in cells} == set(modes.SERVER_MODES)
    assert {adapter for _, adapter, _ in cells} == {"vllm-server"}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_tokens": 0}, "request.server_options.max_tokens"),
        ({"max_tokens": True}, "request.server_options.max_tokens"),
        (
            {"spaces_between_special_tokens": "no"},
            "request.server_options.spaces_between_special_tokens",
        ),
        ({"stream_options": {"include_usage": 1}}, "request.server_options.stream_options"),
        ({"messages": []}, "request.server_options.messages"),
        ({"temperature": 0.5}, "request.server_options.temperature"),
    ],
)
def test_server_options_are_validated_naming_file_and_field(options, field):
    data = {
        "id": "y_x",
        "kind": "completion",
        "description": "d",
        "tags": [],
        "source": "s",
        "request": {"tools": [], "server_options": options},
        "model_output": "hi",
        "expected": {"content": "hi", "reasoning": None, "tool_calls": []},
    }
    with pytest.raises(CorpusError) as error:
        case_from_json(data, "corpus/server/y_x.json")
    assert error.value.field == field and "y_x.json" in str(error.value)


def test_server_options_round_trip_in_the_request():
    case = load_corpus(ROOT / "corpus" / "server").completions[0]
    assert case.request.to_json()["server_options"] == dict(case.request.server_options)


@pytest.mark.server
def test_served_tokenizer_has_the_stand_in_ids(tmp_path):
    """The model directory's tokenizer (tiktoken.model + our class, trust_remote_code) gives
    the stand-in's ids for text and markers alike, and decodes them back."""
    _needs_venv()
    texts = [
        "Hi 你好 😀 <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
        "  trailing\tspaces \n\n and <think>thought</think><|im_end|>",
    ]
    script = (
        "import json, sys\n"
        "from k2conform_adapters.vllm_model import build\n"
        "from transformers import AutoTokenizer\n"
        "d = build(sys.argv[1])\n"
        "t = AutoTokenizer.from_pretrained(str(d), trust_remote_code=True)\n"
        "texts = json.loads(sys.argv[2])\n"
        "print(json.dumps({'len': len(t), 'eos': t.eos_token_id, 'ids': [t.encode(x, "
        "add_special_tokens=False) for x in texts],"
        " 'decoded': [t.decode(t.encode(x, add_special_tokens=False)) for x in texts]}))\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", script, str(tmp_path / "model"), json.dumps(texts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    standin = load_tokenizer()
    assert got["ids"] == [standin.encode(t) for t in texts]
    assert got["decoded"] == texts
    assert got["len"] == 163842 and got["eos"] == 163586
    stamp = (tmp_path / "model" / "k2conform-model.stamp").read_text()
    mtime = (tmp_path / "model" / "model.safetensors").stat().st_mtime
    again = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            "-m",
            "k2conform_adapters.vllm_model",
            str(tmp_path / "model"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert (
        again.returncode == 0
        and (tmp_path / "model" / "k2conform-model.stamp").read_text() == stamp
    )
    assert (
        tmp_path / "model" / "model.safetensors"
    ).stat().st_mtime == mtime  # reused, not rebuilt


# -- one real server for the session -------------------------------------------------------


@pytest.fixture(scope="session")
def server_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The server lane's guard (``make server-lane-guard``), run once: each real server started
    once, the guard's cases (every case here among them), merged and gated by
    ``baseline-servers.json``, then the engine plugin against it (tests/server_plugin_runs.py);
    the tests read what the servers did in it."""
    _needs_venv()
    command = make_command(
        "server-lane-guard",
        SERVER_REPORT="{root}/run",
        # the engine plugin against each server, in its session (no server of its own)
        SERVER_THEN=f"{sys.executable} {ROOT / 'tests' / 'server_plugin_runs.py'} {{root}}",
    )
    root, info = run_once(
        tmp_path_factory, "vllm-server", command, timeout=2400, unset=(vllm_server.URL_ENV,)
    )
    results_path = root / "run" / "results.json"
    assert results_path.exists(), f"the guard wrote no results:\n{info['stderr']}"
    results = json.loads(results_path.read_text())
    server = json.loads((root / "run" / "vllm-server" / "server.json").read_text())
    cells = {(c["case"], c["delivery"]): c for c in results["cells"]}
    return {"info": info, "results": results, "cells": cells, "server": server, "root": root}


def _cell(run: dict, case: str, mode: str) -> dict:
    return run["cells"][(case, mode)]


def _calls(cell: dict) -> list[tuple[str, str, str]]:
    return [(c["id"], c["name"], c["arguments"]) for c in cell["observed"]["tool_calls"]]


@pytest.mark.server
@pytest.mark.parametrize("mode", modes.SERVER_MODES)
def test_golden_calls_come_back_through_the_real_server(server_run, mode):
    single = _cell(server_run, "y_spec_single_call", mode)
    assert single["outcome"] == "agree", single
    assert [(i, n, json.loads(a)) for i, n, a in _calls(single)] == [
        ("functions.get_weather:0", "get_weather", {"city": "Beijing"})
    ]
    parallel = _cell(server_run, "y_spec_parallel_calls", mode)
    assert parallel["outcome"] == "agree", parallel
    assert [i for i, _, _ in _calls(parallel)] == [
        "functions.get_weather:0",
        "functions.get_weather:1",
    ]
    for case in (
        "y_server_spacing_off",
        "y_server_tool_choice_required",
        "n_server_multi_turn_second_call",
        "n_server_tool_choice_none_call_in_output",
        "y_server_stream_include_usage",
    ):
        assert _cell(server_run, case, mode)["outcome"] == "agree", _cell(server_run, case, mode)


@pytest.mark.server
@pytest.mark.parametrize("mode", modes.SERVER_MODES)
def test_the_server_refuses_a_request_or_ends_it_and_each_is_its_fate(server_run, mode):
    """An HTTP 400 (tool_choice required without tools) is the request rejected; a forced call
    the request's grammar refuses (null for a string of a strict tool) makes the engine end the
    request (an HTTP 500, or the stream's error chunk): uncallable.  Neither is a crash."""
    for case, fate, said in (
        ("y_request_required_without_tools", "rejected", "HTTP 400: "),
        ("y_request_null_for_non_nullable_string", "uncallable", "HTTP 500: "),
    ):
        cell = _cell(server_run, case, mode)
        assert cell["outcome"] == "agree", cell
        recorded = cell["observed"]["meta"]["request"]
        assert recorded["fate"] == fate and recorded["detail"].startswith(said), cell


@pytest.mark.server
def test_every_planned_cell_ran_and_the_forcing_held(server_run):
    """The guard ran every cell it planned (its inventory), every case here among them in both
    server modes and server-concurrent on its concurrent cases; none of this file's cases
    crashed, and each whole reply carried the script's ids."""
    results, cells = server_run["results"], server_run["cells"]
    assert "partial" not in results
    assert results["inventory"]["planned"] == results["inventory"]["run"] == len(cells)
    assert {mode for _, mode in cells} == set(modes.SERVER_MODES)
    for case in CASES + K3_CASES:
        assert {(case, mode) for mode in ("server-whole", "server-stream")} <= cells.keys(), case
    assert ("y_spec_single_call", "server-concurrent") in cells
    rows = {a["name"]: a for a in results["adapters"]}
    for name in ("vllm-server", "vllm-server-k3"):
        assert rows[name]["status"] == "ok" and rows[name]["version"] == "0.32.0", rows[name]
    for (case, mode), cell in cells.items():
        if case not in CASES + K3_CASES:
            continue
        assert cell["outcome"] not in ("crash", "timeout", "adapter-error"), cell
        served = "request" not in cell["observed"]["meta"]  # a refused request has no reply
        if mode == "server-whole" and served and case != "i_server_max_tokens_cut_in_arguments":
            assert cell["observed"]["meta"]["forced"] is True, (
                cell
            )  # the server returned the script's ids


@pytest.mark.server
def test_spaces_between_special_tokens_default_pads_content_and_streamed_arguments(server_run):
    """vllm-project/vllm#33457: with a Kimi-style slow tokenizer the default
    spaces_between_special_tokens=True puts spaces around the markers: content gains them in
    both modes, arguments only when streamed (a stream/non-stream mismatch)."""
    whole = _cell(server_run, "y_server_spacing_default", "server-whole")
    stream = _cell(server_run, "y_server_spacing_default", "server-stream")
    expected = "I'll check the weather. "
    for cell in (whole, stream):
        assert cell["outcome"] == "differs" and "content" in cell["fields"], cell
        assert (
            cell["observed"]["content"] != expected
            and cell["observed"]["content"].strip() == expected.strip()
        )
    (_, _, whole_args), (_, _, stream_args) = _calls(whole)[0], _calls(stream)[0]
    assert whole_args == '{"city": "Paris"}'
    assert stream_args != whole_args and stream_args.strip() == whole_args
    off = _cell(server_run, "y_server_spacing_off", "server-stream")
    assert off["observed"]["content"] == expected and _calls(off)[0][2] == '{"city": "Paris"}'


@pytest.mark.server
def test_max_tokens_cut_inside_the_arguments(server_run):
    cell = _cell(server_run, "i_server_max_tokens_cut_in_arguments", "server-whole")
    meta = cell["observed"]["meta"]
    calls = _calls(cell)
    # 12 tokens end inside the arguments: what comes back is a cut call, never the full one.
    assert meta["script_tokens"] > 12
    assert (
        not calls
        or calls[0][2] != '{"city": "San Francisco, California, United States of America"}'
    )
    # Recorded: vLLM 0.32.0 reports "tool_calls" here, where its docs promise "length".
    assert meta["finish_reason"] in ("length", "tool_calls")


@pytest.mark.server
def test_the_server_is_stopped_and_its_port_freed(server_run):
    info, server = server_run["info"], server_run["server"]
    assert info["rc"] == 0, info  # the guard passed its gate (the spacing finding is reviewed)
    with pytest.raises(ProcessLookupError):
        os.killpg(server["pgid"], 0)
    # a session of its own (its process group), whose share of the CPU is as low as the
    # server's nice (the lane's 19): else its spin-wait took the share of a session (Linux's
    # autogroup) from the tests beside it, whatever its nice value
    assert server["pgid"] == server["session"] == server["pid"], server
    if Path("/proc/self/autogroup").exists():
        assert server["autogroup"].endswith(" nice 19"), server
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert sock.connect_ex(("127.0.0.1", server["port"])) != 0  # nobody listens there
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
        )  # TIME_WAIT of old requests is fine
        sock.bind(("127.0.0.1", server["port"]))  # free again: a listener would make this fail
        sock.listen(1)
    assert server["url"].startswith("http://127.0.0.1:")
    log = Path(server["log"]).read_text(errors="replace")
    assert "--logits-processors" in log and "k2conform_adapters.vllm_forcing:ScriptedTokens" in log
    assert (server_run["root"] / "run" / "vllm-server" / "cache").is_dir()


# -- the engine plugin against the real servers ------------------------------------------------


def _plugin(server_run: dict, server: str, label: str) -> dict:
    """A plugin run of tests/server_plugin_runs.py, inside the guard's session of ``server``."""
    path = server_run["root"] / f"plugin-{server}-{label}.json"
    if not path.exists():  # the script's own failure, when it had one, else the guard's output
        error = server_run["root"] / f"plugin-{server}-error.json"
        why = json.loads(error.read_text())["stderr"] if error.exists() else server_run["info"]
        pytest.fail(f"no plugin run against {server}:\n{why}")
    return json.loads(path.read_text())


@pytest.mark.server
def test_the_engine_plugin_passes_the_real_server_and_names_the_check_a_broken_replay_breaks(
    server_run,
):
    """The live-engine plugin against the guard's real vLLM server, which runs k2conform's
    forcing processor (``--k2-script`` sends each probe's replay): the clean probe passes every
    server check; a replay whose call arguments are not JSON fails, naming ``arguments-json``."""
    clean = _plugin(server_run, "vllm-server", "clean")
    failing = _plugin(server_run, "vllm-server", "broken")
    assert clean["returncode"] == 0, clean["stdout"][-4000:] + clean["stderr"]
    assert "schema accuracy: " in clean["stdout"] and "failed checks" not in clean["stdout"]
    assert failing["returncode"] == 1, failing["stdout"][-4000:] + failing["stderr"]
    assert "[k2 check arguments-json] y_probe_broken_arguments:" in failing["stdout"]
    # the clean probe still passes
    assert "y_probe_single_call:" not in failing["stdout"].split("k2conform engine summary")[0]


@pytest.mark.server
def test_the_engine_plugin_sends_a_k3_server_the_k3_probes(server_run):
    """``--k2-format k3`` against the guard's server with vLLM's K3 parsers (``--k2-script``
    sends each K3 probe's replay as K3 token ids): every check passes, the wire contract and the
    id round trip included, but the two reviewed vLLM K3 behaviours of
    ``baseline-servers.json``: a named ``tool_choice`` finishes with ``stop``
    (y_k3_tool_choice_named), and the long call's arguments are held back to one chunk
    (vllm-project/vllm#50604, y_k3_long_argument)."""
    k3_probes = {p.id for p in load_corpus().probes if p.format == "k3"}
    plugin = _plugin(server_run, "vllm-server-k3", "k3")
    out = plugin["stdout"]
    assert "format=k3 (from --k2-format)" in out, out[-4000:] + plugin["stderr"]
    assert set(re.findall(r"\[(y_probe_\w+)\]", out)) == k3_probes
    assert re.search(r"^failed checks: finish-reason x2, liveness x1$", out, re.MULTILINE), out[
        -4000:
    ]
    failed = set(re.findall(r"^FAILED \S+\[(y_probe_\w+)\]", out, re.MULTILINE))
    assert failed == {"y_probe_k3_tool_choice_named", "y_probe_k3_long_argument"}, out[-4000:]
    assert plugin["returncode"] == 1


@pytest.mark.server
def test_kimi_k3_through_a_second_real_server_with_the_kimi_k3_parsers(server_run):
    """vllm-server-k3 starts its own server (--tool-call-parser/--reasoning-parser kimi_k3)
    beside vllm-server's; the spec's call comes back, and a tools channel opened inside think
    loses its call there as in process (vllm-project/vllm#53246)."""
    log = (server_run["root"] / "run" / "vllm-server-k3" / "server.log").read_text()
    assert "--tool-call-parser kimi_k3" in log and "--reasoning-parser kimi_k3" in log
    for mode in modes.SERVER_MODES:
        spec = _cell(server_run, "y_k3_think_response_call", mode)
        assert spec["adapter"] == "vllm-server-k3" and spec["outcome"] == "agree", spec
        assert [(n, json.loads(a)) for _, n, a in _calls(spec)] == [
            ("get_weather", {"city": "Paris"})
        ]
        lost = _cell(server_run, "n_k3_tools_opened_inside_think", mode)["observed"]
        assert lost["tool_calls"] == [] and "<|open|>tools<|sep|>" in lost["reasoning"]


@pytest.mark.server
def test_the_reviewed_server_baseline_covers_what_the_server_does(server_run):
    """The server lane's guard passes (.ci/run runs no other): every finding of the real
    servers on its cases is a reviewed deviation of baseline-servers.json, none of its entries
    for them is stale, and the guard's own gate said so (make's exit status)."""
    assert server_run["info"]["rc"] == 0, server_run["info"]
    from k2conform.gate.baseline import gate, load_baseline
    from k2conform.model import RunResults

    results, passed = gate(
        RunResults.from_json(server_run["results"]), load_baseline(ROOT / "baseline-servers.json")
    )
    verdict = results.extra["gate"]
    assert verdict["new_cells"] == [] and verdict["stale"] == [] and verdict["missing"] == [], (
        verdict
    )
    assert passed
