"""The k2conform pytest plugin (``pytest11`` entry point ``k2conform``): inert unless
``--k2-engine-url`` is given.

    pytest --k2-engine-url http://127.0.0.1:8000/v1 --k2-model moonshotai/Kimi-K2-Instruct \\
           [--k2-format k2|k3] [--k2-api-key-env MY_KEY_VAR] [--k2-min-schema-accuracy 0.95]
           [--k2-min-trigger-agreement 0.95]

With the option, the session collects ``k2conform.engine.checks`` (prompt conformance
through the server's ``/tokenize``, the probe conversations of ``corpus/probes`` of the
engine's format whole and streamed, and a K2-Vendor-Verifier-style summary gated by the
thresholds); without explicit test paths, only those.  The API key is read from the
environment variable named by ``--k2-api-key-env`` and handed to the ``openai`` client; it is
never printed, and the summary file holds no part of it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from k2conform import formats
from k2conform.k3 import markers as k3

SUMMARY_KEY = pytest.StashKey["EngineSummary"]()


@dataclass
class EngineSummary:
    """K2-Vendor-Verifier's terms: finish_reason counts, schema accuracy, trigger agreement."""

    finish_reasons: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    schema_valid: int = 0
    trigger_total: int = 0
    trigger_agree: int = 0
    #: Call/no-call decisions against the probes' recorded reference decisions (K2VV: positive =
    #: a call was made): true/false positives, false negatives.
    trigger_tp: int = 0
    trigger_fp: int = 0
    trigger_fn: int = 0
    failed_checks: dict[str, int] = field(default_factory=dict)

    def count_finish(self, reason: str | None) -> None:
        key = str(reason)
        self.finish_reasons[key] = self.finish_reasons.get(key, 0) + 1

    @property
    def schema_accuracy(self) -> float | None:
        return self.schema_valid / self.calls if self.calls else None

    @property
    def trigger_agreement(self) -> float | None:
        return self.trigger_agree / self.trigger_total if self.trigger_total else None

    @property
    def trigger_precision(self) -> float | None:
        made = self.trigger_tp + self.trigger_fp
        return self.trigger_tp / made if made else None

    @property
    def trigger_recall(self) -> float | None:
        wanted = self.trigger_tp + self.trigger_fn
        return self.trigger_tp / wanted if wanted else None

    @property
    def trigger_f1(self) -> float | None:
        p, r = self.trigger_precision, self.trigger_recall
        return (
            2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "finish_reasons": dict(sorted(self.finish_reasons.items())),
            "tool_calls": self.calls,
            "schema_valid": self.schema_valid,
            "schema_accuracy": self.schema_accuracy,
            "trigger_total": self.trigger_total,
            "trigger_agree": self.trigger_agree,
            "trigger_agreement": self.trigger_agreement,
            "trigger_precision": self.trigger_precision,
            "trigger_recall": self.trigger_recall,
            "trigger_f1": self.trigger_f1,
            "failed_checks": dict(sorted(self.failed_checks.items())),
        }


def engine_format(config: pytest.Config) -> tuple[str, str]:
    """The format the engine's model writes, and how the plugin knows: ``--k2-format``, else
    the served model's name (one that names K3, as ``moonshotai/Kimi-K3``, is a K3 model),
    else Kimi K2."""
    chosen = config.getoption("k2_format")
    if chosen:
        return chosen, "--k2-format"
    if re.search(r"k3(?![0-9])", config.getoption("k2_model") or "", re.IGNORECASE):
        return k3.FORMAT, "the model name"
    return formats.DEFAULT, "the default"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("k2conform", "Kimi tool-calling conformance of a live engine")
    group.addoption(
        "--k2-engine-url",
        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (enables the plugin)",
    )
    group.addoption("--k2-model", help="the served model name")
    group.addoption(
        "--k2-format",
        choices=list(formats.FORMATS),
        help="the Kimi format the model writes, which picks the probes (default: k3 when the "
        "model name names K3, as moonshotai/Kimi-K3, else k2)",
    )
    group.addoption(
        "--k2-api-key-env",
        metavar="VAR",
        help="environment variable holding the API key (never printed)",
    )
    group.addoption("--k2-corpus", help="corpus directory (default: the shipped corpus)")
    group.addoption(
        "--k2-seed", type=int, default=1234, help="seed sent with every request (default 1234)"
    )
    group.addoption("--k2-timeout", type=float, default=120.0, help="seconds per request")
    group.addoption(
        "--k2-concurrency",
        type=int,
        default=1,
        help="also send each probe's stream N times at once; each must equal the stream sent "
        "alone (state shared across requests, vllm-project/vllm#54701); default 1: off",
    )
    group.addoption(
        "--k2-min-schema-accuracy",
        type=float,
        default=1.0,
        help="fail the summary below this share of calls whose arguments validate (default 1.0)",
    )
    group.addoption(
        "--k2-script",
        action="store_true",
        help="send each probe's replay as the forcing script (vllm_xargs.k2conform_script): for a "
        "server running k2conform's logits processor, as the vllm-server adapter's server does",
    )
    group.addoption(
        "--k2-min-trigger-f1",
        type=float,
        default=0.80,
        help="fail the summary below this f1 of call/no-call decisions against the probes' "
        "recorded "
        "reference decisions (K2-Vendor-Verifier's threshold; default 0.80)",
    )
    group.addoption(
        "--k2-min-trigger-agreement",
        type=float,
        default=0.0,
        help="fail the summary below this share of probes whose decision and call count match "
        "(default: off)",
    )
    group.addoption("--k2-summary-json", help="write the summary (no secrets) to this file")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("k2_engine_url"):
        return
    if not config.getoption("k2_model"):
        raise pytest.UsageError("--k2-engine-url needs --k2-model NAME")
    var = config.getoption("k2_api_key_env")
    if var and var not in os.environ:
        raise pytest.UsageError(f"--k2-api-key-env: the environment variable {var} is not set")
    _check_reachable(config.getoption("k2_engine_url"), config.getoption("k2_timeout"))
    config.stash[SUMMARY_KEY] = EngineSummary()
    checks = str(Path(__file__).with_name("checks.py"))
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(checks)
    else:
        config.args[:] = [checks]


def _check_reachable(url: str, timeout: float) -> None:
    """One request before any test: a dead or wrong URL ends the session at once, in one line."""
    import urllib.error
    import urllib.request

    models = url.rstrip("/") + "/models"
    try:
        urllib.request.urlopen(models, timeout=min(timeout, 10.0)).close()
    except urllib.error.HTTPError as error:
        if error.code not in (401, 403):  # a server that wants a key is there
            raise pytest.UsageError(
                f"k2conform: the engine at {url} answers GET /models with HTTP {error.code}"
            ) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise pytest.UsageError(f"k2conform: cannot reach the engine at {url}: {reason}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    url = config.getoption("k2_engine_url")
    if not url:
        return []
    var = config.getoption("k2_api_key_env")
    key = f"from ${var}" if var else "none"
    format, how = engine_format(config)
    return [
        f"k2conform engine: {url} model={config.getoption('k2_model')} format={format} "
        f"(from {how}) api key: {key}"
    ]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None:
        return
    data = summary.to_json()
    terminalreporter.section("k2conform engine summary")
    terminalreporter.line(f"finish_reason: {json.dumps(data['finish_reasons'])}")
    acc, trig = data["schema_accuracy"], data["trigger_agreement"]
    terminalreporter.line(
        f"schema accuracy: {summary.schema_valid}/{summary.calls}"
        + (f" = {acc:.3f}" if acc is not None else "")
    )
    terminalreporter.line(
        f"trigger agreement: {summary.trigger_agree}/{summary.trigger_total}"
        + (f" = {trig:.3f}" if trig is not None else "")
    )
    terminalreporter.line(
        "trigger precision / recall / f1: "
        + " / ".join(
            "-" if v is None else f"{v:.3f}"
            for v in (summary.trigger_precision, summary.trigger_recall, summary.trigger_f1)
        )
    )
    if data["failed_checks"]:
        terminalreporter.line(
            "failed checks: " + ", ".join(f"{k} x{v}" for k, v in data["failed_checks"].items())
        )
    path = config.getoption("k2_summary_json")
    if path:
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
