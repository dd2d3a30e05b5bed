"""The engine plugin against a real HTTP server on loopback (k2conform.engine.fake), run in
pytester sub-sessions: it passes against the clean server and fails, naming the check, on
every injected fault.  The API key never reaches any output."""

from __future__ import annotations

import json

import pytest

from k2conform.engine.fake import FakeEngine, Server

pytest_plugins = ["pytester"]

MODEL = "kimi-k2-fake"
SECRET = "sk-k2conform-test-7f3a9c1e5b"


@pytest.fixture(scope="module")
def probes():
    from k2conform.case.corpus import load_corpus

    return load_corpus().probes


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
    assert "k2conform engine summary" in out and "schema accuracy: 9/9" in out
    summary = json.loads(summary_path.read_text())
    assert summary["finish_reasons"] == {"stop": 1, "tool_calls": 7}
    assert summary["schema_accuracy"] == 1.0 and summary["trigger_agreement"] == 1.0
    assert outcomes.get("skipped", 0) <= 4  # golden streams without a generation prompt only


@pytest.mark.parametrize(
    ("fault", "check", "needle"),
    [
        ("markers-in-content", "content-markers", "content carries marker bytes"),
        ("finish-stop-with-calls", "finish-reason", "finish_reason is 'stop' but 1 tool call(s) were returned"),
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
    assert f"failed checks: {check} x" in out or f"{check} x" in out


def test_stream_faults_are_caught_by_the_sse_checks(pytester, probes):
    with Server(FakeEngine(probes, faults=["markers-in-content"])) as url:
        result = run_plugin(pytester, url, "-k", "stream")
    out = result.stdout.str()
    assert "[k2 check sse-invariants] y_probe_single_call: chunk" in out
    assert "marker bytes in a content delta" in out


def test_summary_thresholds_gate_a_drop(pytester, probes):
    with Server(FakeEngine(probes, faults=["arguments-not-json"])) as url:
        strict = run_plugin(pytester, url, "-k", "whole or summary")
        lenient = run_plugin(pytester, url, "-k", "summary", "--k2-min-schema-accuracy", "0")
    assert "[k2 check summary] schema accuracy 0.000 < 1.0" in strict.stdout.str()
    lenient.assert_outcomes(passed=1, deselected=lenient.parseoutcomes()["deselected"])


def test_server_without_tokenize_skips_prompt_conformance_with_a_reason(pytester, probes):
    with Server(FakeEngine(probes, faults=["no-tokenize"])) as url:
        result = run_plugin(pytester, url, "-rs", "-k", "prompt")
    out = result.stdout.str()
    assert result.ret == 0
    assert "the server cannot render a chat: no /tokenize" in out


def test_api_key_from_the_environment_is_used_and_never_written(pytester, probes, monkeypatch, tmp_path):
    monkeypatch.setenv("K2_TEST_ENGINE_KEY", SECRET)
    summary_path = tmp_path / "summary.json"
    junit = tmp_path / "junit.xml"
    with Server(FakeEngine(probes, api_key=SECRET)) as url:
        good = run_plugin(pytester, url, "-l", "-v", "--junitxml", str(junit), "--k2-summary-json", str(summary_path),
                          key_var="K2_TEST_ENGINE_KEY")
        monkeypatch.setenv("K2_TEST_ENGINE_KEY", SECRET + "-wrong")
        bad = run_plugin(pytester, url, "-l", "--tb=long", "-k", "whole", key_var="K2_TEST_ENGINE_KEY")
    assert good.ret == 0, good.stdout.str()[-3000:]
    assert "api key: from $K2_TEST_ENGINE_KEY" in good.stdout.str()
    assert bad.ret == 1 and "401" in bad.stdout.str()
    for text in (good.stdout.str(), good.stderr.str(), bad.stdout.str(), bad.stderr.str(),
                 junit.read_text(), summary_path.read_text()):
        assert SECRET not in text
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_missing_key_variable_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.delenv("K2_TEST_NO_SUCH_KEY", raising=False)
    result = pytester.runpytest_subprocess("--k2-engine-url", "http://127.0.0.1:9/v1", "--k2-model", MODEL,
                                           "--k2-api-key-env", "K2_TEST_NO_SUCH_KEY")
    assert result.ret == 4
    assert "K2_TEST_NO_SUCH_KEY is not set" in result.stderr.str()
