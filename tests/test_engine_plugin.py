"""The engine plugin against a real HTTP server on loopback (k2conform.engine.fake), run in
pytester sub-sessions: it passes against the clean server and fails, naming the check, on
every injected fault.  The API key never reaches any output."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from k2conform.engine.fake import FakeEngine, Server
from test_wire import WIRE_FAULTS

pytest_plugins = ["pytester"]

MODEL = "kimi-k2-fake"
SECRET = "sk-k2conform-test-7f3a9c1e5b"


@pytest.fixture(scope="module")
def probes():
    """The K2 probes: what a K2 engine (the fake engine's default) replays."""
    from k2conform.case.corpus import load_corpus

    return [p for p in load_corpus().probes if p.format == "k2"]


@pytest.fixture(scope="module")
def k3_probes():
    from k2conform.case.corpus import load_corpus

    return [p for p in load_corpus().probes if p.format == "k3"]


def run_plugin(pytester, url, *extra, key_var=None):
    args = ["-p", "no:cacheprovider", "--k2-engine-url", url, "--k2-model", MODEL, *extra]
    if key_var:
        args += ["--k2-api-key-env", key_var]
    return pytester.runpytest_subprocess(*args, timeout=180)


def test_inert_without_the_option(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "k2conform engine" not in result.stdout.str()


def test_clean_server_passes_every_check(pytester, probes, tmp_path):
    summary_path = tmp_path / "summary.json"
    with Server(FakeEngine(probes)) as url:
        result = run_plugin(pytester, url, "--k2-summary-json", str(summary_path))
    out = result.stdout.str()
    assert result.ret == 0, out
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 2 * len(probes) + 1
    assert "k2conform engine summary" in out and "schema accuracy: 11/11" in out
    summary = json.loads(summary_path.read_text())
    assert summary["finish_reasons"] == {"stop": 1, "tool_calls": 9}
    assert summary["schema_accuracy"] == 1.0 and summary["trigger_agreement"] == 1.0
    assert outcomes.get("skipped", 0) <= 4  # golden streams without a generation prompt only


def _k3_session(pytester, engine, tests):
    """The plugin's ``tests`` (a ``-k`` expression) against ``engine`` on loopback, taken for a
    K3 engine by its model's name."""
    with Server(engine) as url:
        return pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--k2-engine-url", url, "--k2-model", "kimi-k3-fake",
            "-k", tests, timeout=180,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "check", "needle"),
    [
        ("markers-in-content", "content-markers", "content carries marker bytes"),
        (
            "finish-stop-with-calls",
            "finish-reason",
            "finish_reason is 'stop' but 1 tool call(s) were returned",
        ),
        ("arguments-not-json", "arguments-json", "arguments are not JSON"),
        ("renamed-id", "id-format", "has id 'call_0', not functions.get_weather:IDX"),
    ],
)
def test_each_injected_fault_fails_naming_the_check(pytester, probes, fault, check, needle):
    with Server(FakeEngine(probes, faults=[fault])) as url:
        result = run_plugin(pytester, url)
    out = result.stdout.str()
    assert result.ret == 1
    assert f"[k2 check {check}] y_probe_single_call:" in out, out[-3000:]
    assert needle in out
    summary_line = rf"^failed checks: (.*, )?{re.escape(check)} x[1-9]"
    assert re.search(summary_line, out, re.MULTILINE), out[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(WIRE_FAULTS))
def test_each_wire_fault_fails_the_plugin_naming_its_check(pytester, probes, fault):
    """Over loopback, on the raw frames: each wire fault fails its own check, on its probe."""
    probe_id, kind = WIRE_FAULTS[fault]
    with Server(FakeEngine(probes, faults=[fault])) as url:
        result = run_plugin(pytester, url, "-k", "wire")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert f"[k2 check {kind.value}] {probe_id}:" in out, out[-3000:]
    assert re.search(rf"^failed checks: {re.escape(kind.value)} x[1-9]\d*$", out, re.MULTILINE), (
        out[-3000:]
    )


def test_streams_sent_at_once_must_equal_the_stream_sent_alone(pytester, probes):
    """--k2-concurrency 4: a conforming engine passes; one that loses calls while another
    stream is in flight (vllm-project/vllm#54701) fails concurrent-streams, and only that."""
    with Server(FakeEngine(probes)) as url:
        result = run_plugin(pytester, url, "-k", "wire", "--k2-concurrency", "4")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=len(probes))
    with Server(FakeEngine(probes, faults=["calls-lost-under-concurrency"])) as url:
        result = run_plugin(pytester, url, "-k", "wire", "--k2-concurrency", "4")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert re.search(
        r"\[k2 check concurrent-streams\] y_probe_single_call: stream \d of 4 sent", out
    )
    assert re.search(r"^failed checks: concurrent-streams x[1-9]\d*$", out, re.MULTILINE), out[
        -3000:
    ]


def test_arguments_held_back_to_one_chunk_fail_liveness_and_only_it(pytester, probes):
    """vllm-project/vllm#50604: a long call whose arguments arrive whole in its last chunk fails
    the liveness check on the long probe; short calls held back the same way do not (the
    threshold is a named policy, judge.stream.HELD_BACK), and no other check fails."""
    with Server(FakeEngine(probes, faults=["arguments-held-back"])) as url:
        result = run_plugin(pytester, url, "-k", "stream")
    _fails_liveness_alone(result, "y_probe_long_argument")


def _fails_liveness_alone(result, probe_id):
    """The session failed on ``probe_id``'s 1,907 characters of arguments in one delta, and on
    nothing else."""
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert re.search(
        rf"\[k2 check liveness\] {probe_id}: chunk \d+: 1907 characters of index 0's "
        r"arguments in one delta",
        out,
    ), out[-3000:]
    assert re.search(r"^failed checks: liveness x1$", out, re.MULTILINE), out[-3000:]


def test_stream_faults_are_caught_by_the_sse_checks(pytester, probes):
    with Server(FakeEngine(probes, faults=["markers-in-content"])) as url:
        result = run_plugin(pytester, url, "-k", "stream")
    out = result.stdout.str()
    assert "[k2 check sse-invariants] y_probe_single_call: chunk" in out
    assert "marker bytes in a content delta" in out


@pytest.mark.slow
def test_summary_thresholds_gate_a_drop(pytester, probes):
    with Server(FakeEngine(probes, faults=["arguments-not-json"])) as url:
        strict = run_plugin(pytester, url, "-k", "whole or summary")
        lenient = run_plugin(
            pytester, url, "-k", "whole or summary", "--k2-min-schema-accuracy", "0"
        )
        alone = run_plugin(pytester, url, "-k", "summary")
    assert "[k2 check summary] schema accuracy 0.000 < 1.0" in strict.stdout.str()
    assert (
        "schema accuracy: 0/" in lenient.stdout.str()
        and "[k2 check summary]" not in lenient.stdout.str()
    )
    # no threshold passes on zero observations
    assert alone.ret == 1 and "schema accuracy has no observations" in alone.stdout.str()


def test_server_without_tokenize_skips_prompt_conformance_with_a_reason(pytester, probes):
    with Server(FakeEngine(probes, faults=["no-tokenize"])) as url:
        result = run_plugin(pytester, url, "-rs", "-k", "prompt")
    out = result.stdout.str()
    assert result.ret == 0
    assert "the server cannot render a chat: no /tokenize" in out


@pytest.mark.slow
def test_api_key_from_the_environment_is_used_and_never_written(
    pytester, probes, monkeypatch, tmp_path
):
    monkeypatch.setenv("K2_TEST_ENGINE_KEY", SECRET)
    summary_path = tmp_path / "summary.json"
    junit = tmp_path / "junit.xml"
    with Server(FakeEngine(probes, api_key=SECRET)) as url:
        good = run_plugin(
            pytester,
            url,
            "-l",
            "-v",
            "--junitxml",
            str(junit),
            "--k2-summary-json",
            str(summary_path),
            key_var="K2_TEST_ENGINE_KEY",
        )
        monkeypatch.setenv("K2_TEST_ENGINE_KEY", SECRET + "-wrong")
        bad = run_plugin(
            pytester, url, "-l", "--tb=long", "-k", "whole", key_var="K2_TEST_ENGINE_KEY"
        )
    assert good.ret == 0, good.stdout.str()[-3000:]
    assert "api key: from $K2_TEST_ENGINE_KEY" in good.stdout.str()
    assert bad.ret == 1 and "401" in bad.stdout.str()
    for text in (
        good.stdout.str(),
        good.stderr.str(),
        bad.stdout.str(),
        bad.stderr.str(),
        junit.read_text(),
        summary_path.read_text(),
    ):
        assert SECRET not in text
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_missing_key_variable_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.delenv("K2_TEST_NO_SUCH_KEY", raising=False)
    result = pytester.runpytest_subprocess(
        "--k2-engine-url",
        "http://127.0.0.1:9/v1",
        "--k2-model",
        MODEL,
        "--k2-api-key-env",
        "K2_TEST_NO_SUCH_KEY",
    )
    assert result.ret == 4
    assert "K2_TEST_NO_SUCH_KEY is not set" in result.stderr.str()


def test_a_conforming_server_without_the_default_system_newline_passes_the_prompt_check(
    pytester, probes
):
    with Server(FakeEngine(probes, faults=["no-default-system-newline"])) as url:
        result = run_plugin(pytester, url, "-k", "prompt", "-s")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert (
        "y_prompt_default_system_injected: after the injected default system prompt the server "
        "wrote ''" in out
    )


def test_the_prompt_check_accepts_only_the_documented_artifacts():
    from k2conform.engine.checks import DEFAULT_SYSTEM_TURN, prompt_matches

    golden = (
        "<|im_system|>tool_declare<|im_middle|>[]<|im_end|>"
        + DEFAULT_SYSTEM_TURN
        + "\n<|im_user|>user<|im_middle|>hi"
    )
    for artifact in ("", "\n", "\n  "):
        assert prompt_matches(
            golden, golden.replace("\n<|im_user|>", artifact + "<|im_user|>")
        ) == (True, artifact)
    assert prompt_matches(golden, golden.replace("\n<|im_user|>", "\n\n<|im_user|>"))[0] is False
    assert prompt_matches(golden, golden.replace("hi", "hi ")) == (False, None)
    assert prompt_matches("<|im_user|>user<|im_middle|>x", "<|im_user|>user<|im_middle|>x") == (
        True,
        None,
    )


def test_a_model_choice_is_a_statistic_not_a_failure(pytester, probes, tmp_path):
    """One call where the probe hoped for two: the calls that came back are checked, the choice is
    counted."""
    summary_path = tmp_path / "summary.json"
    with Server(FakeEngine(probes, faults=["one-call-of-two"])) as url:
        result = run_plugin(pytester, url, "--k2-summary-json", str(summary_path))
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["trigger_agreement"] < 1.0 and summary["trigger_f1"] == 1.0
    with Server(FakeEngine(probes, faults=["one-call-of-two"])) as url:
        strict = run_plugin(
            pytester, url, "-k", "whole or summary", "--k2-min-trigger-agreement", "1.0"
        )
    assert strict.ret == 1 and "[k2 check summary] trigger agreement" in strict.stdout.str()


def test_a_dead_url_ends_the_session_at_once_in_one_line(pytester):
    result = pytester.runpytest_subprocess(
        "--k2-engine-url", "http://127.0.0.1:9/v1", "--k2-model", MODEL
    )
    assert result.ret == 4
    err = result.stderr.str()
    assert (
        "k2conform: cannot reach the engine at http://127.0.0.1:9/v1" in err
        and "Connection refused" in err
    )
    assert "Traceback" not in err and len(result.stdout.lines) < 20


# -- Kimi K3: a K3 engine is sent the K3 probes -------------------------------------------------


def _collected(out: str) -> set[str]:
    return set(re.findall(r"\[(y_probe_\w+)\]", out))


def test_a_k3_engine_named_by_its_model_is_sent_the_k3_probes_and_passes(
    pytester, probes, k3_probes, tmp_path
):
    """A served model whose name names K3 is a K3 engine: the session sends the K3 probes, no
    K2 one; the golden prompt streams (K2's) are one skip with the reason; the clean engine
    passes every check, its server-minted ids included."""
    summary_path = tmp_path / "summary.json"
    with Server(FakeEngine(k3_probes, adapter="reference-k3", model="moonshotai/Kimi-K3")) as url:
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-v", "-rs", "--k2-engine-url", url,
            "--k2-model", "moonshotai/Kimi-K3", "--k2-summary-json", str(summary_path),
            timeout=180,
        )  # fmt: skip
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "format=k3 (from the model name)" in out
    assert _collected(out) == {p.id for p in k3_probes}
    assert not _collected(out) & {p.id for p in probes}
    follow_ups = sum(p.follow_up is not None for p in k3_probes)
    result.assert_outcomes(passed=3 * len(k3_probes) + follow_ups + 1, skipped=1)
    assert "no golden k3 prompt streams" in out
    summary = json.loads(summary_path.read_text())
    assert summary["finish_reasons"] == {"stop": 1, "tool_calls": 9}
    assert summary["schema_accuracy"] == 1.0 and summary["trigger_f1"] == 1.0


def test_the_format_option_overrides_the_model_name(pytester, k3_probes):
    with Server(FakeEngine(k3_probes, adapter="reference-k3", model="next-model")) as url:
        told = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--k2-engine-url", url, "--k2-model", "next-model",
            "--k2-format", "k3", "-k", "whole", timeout=180,
        )  # fmt: skip
        guessed = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--k2-engine-url", url, "--k2-model", "next-model",
            "-k", "whole", timeout=180,
        )  # fmt: skip
    assert told.ret == 0 and "format=k3 (from --k2-format)" in told.stdout.str()
    told.assert_outcomes(passed=len(k3_probes))
    # taken for K2, the engine is asked the K2 conversations, which it has no replay for
    assert guessed.ret == 1 and "format=k2 (from the default)" in guessed.stdout.str()


@pytest.mark.parametrize(
    ("model", "format"),
    [
        ("moonshotai/Kimi-K3", "k3"),
        ("kimi-k3-preview", "k3"),
        ("moonshotai/Kimi-K2-Instruct", "k2"),
        ("kimi-k30", "k2"),
        ("gpt-4o", "k2"),
    ],
)
def test_the_format_is_read_from_the_model_name(model, format):
    from types import SimpleNamespace

    from k2conform.engine.plugin import engine_format

    options = {"k2_format": None, "k2_model": model}
    config = SimpleNamespace(getoption=options.__getitem__)
    assert engine_format(config)[0] == format


@pytest.mark.parametrize(
    ("fault", "check", "needle"),
    [
        ("markers-in-content", "content-markers", "['<|open|>', '<|close|>', '<|sep|>']"),
        ("finish-stop-with-calls", "finish-reason", "finish_reason is 'stop' but 1 tool call"),
        ("arguments-not-json", "arguments-json", "arguments are not JSON"),
    ],
)
def test_each_fault_of_a_k3_engine_fails_its_check(pytester, k3_probes, fault, check, needle):
    """The checks read the K3 format's record: K3's marker bytes in content are a leak."""
    result = _k3_session(
        pytester, FakeEngine(k3_probes, faults=[fault], adapter="reference-k3"), "whole"
    )
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert f"[k2 check {check}] y_probe_k3_single_call:" in out and needle in out, out[-3000:]


def test_ids_a_second_turn_reuses_fail_the_round_trip(pytester, k3_probes):
    """A K3 engine whose ids restart each turn (``renamed-id``: ``call_0`` in every reply):
    the second turn's call reuses the first's id, so a client cannot tell their results apart;
    K3 has no id format to check, so only ``id-round-trip`` says it, on the two-turn probe."""
    engine = FakeEngine(k3_probes, faults=["renamed-id"], adapter="reference-k3")
    out = _k3_session(pytester, engine, "follow_up").stdout.str()
    assert (
        "[k2 check id-round-trip] y_probe_k3_calls_in_two_turns: the next turn's calls reuse "
        "ids ['call_0']" in out
    ), out[-3000:]
    assert re.search(r"^failed checks: id-round-trip x1$", out, re.MULTILINE), out[-3000:]


def test_the_plugin_finds_vllms_held_back_k3_arguments(pytester):
    """vLLM 0.33.0's K3 parser behind the fake engine's HTTP layer (``k2conform
    serve-fake-engine --adapter vllm-k3``, its own process: vLLM stays out of this one): a
    call's arguments go out whole when it closes (vllm-project/vllm#50604, baseline entry
    y_k3_long_argument), so the long probe fails liveness, and nothing else fails."""
    if importlib.util.find_spec("vllm") is None:  # not imported: pytester unloads what a test
        pytest.skip("vllm is not installed")  # imports, and torch does not load twice
    command = [sys.executable, "-m", "k2conform.cli", "serve-fake-engine", "--adapter", "vllm-k3"]
    engine = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = engine.stdout.readline()
        url = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", line)
        assert url, line + engine.stdout.read() if engine.poll() is not None else line
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "--k2-engine-url", url[1], "--k2-model", "kimi-k3-fake",
            timeout=180,
        )  # fmt: skip
    finally:
        engine.terminate()
        engine.wait(timeout=30)
    assert "format=k3 (from the model name)" in result.stdout.str()
    _fails_liveness_alone(result, "y_probe_k3_long_argument")
