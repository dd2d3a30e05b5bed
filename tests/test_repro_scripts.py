"""Reproduction scripts (``k2conform_adapters.repro``): every driver, built into one
standalone file, reproduces a known finding of its parser on its own (exit 1, the adapter's
own result on its last line) and does not reproduce an agreeing case (exit 0); the scripts
judge by k2conform's own comparison (``true`` is not ``1``) and pass pyflakes.

vLLM and SGLang run in this venv; the other parsers' scripts run with the python of their
own venv (``k2conform setup-parsers NAME``), and are skipped when it is not installed."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lanes import missing

from k2conform.adapter.harness import execute
from k2conform.adapter.registry import create_adapter, load
from k2conform.delivery import modes
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform.errors import HarnessError
from k2conform.judge.compare import compare_results
from k2conform.model import Delta, Request, Result, ToolCall
from k2conform.report_finding.bug_report import run_script
from k2conform_adapters.repro.build import SHARED, Bundle, build_script, case_data

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("K2CONFORM_VENVS", ROOT / ".venvs"))
#: driver module -> (adapter name, its own venv; None: this one)
DRIVERS = {
    "vllm": ("vllm", None),
    "sglang": ("sglang", None),
    "aphrodite": ("aphrodite", "aphrodite"),
    "lmdeploy": ("lmdeploy", "lmdeploy"),
    "mlx_lm": ("mlx-lm", "mlx-lm"),
    "easydel": ("easydel", "easydel"),
    "sglang_kt": ("sglang-kt", "sglang-kt"),
}
#: The K3 adapters -> their engine's driver, which drives kimi_k3 for a K3 case.
K3_DRIVERS = {"vllm-k3": "vllm", "sglang-k3": "sglang"}
#: (driver, case, mode, reproduces): a finding of the shipped baseline, and an agreeing cell
CELLS = [
    ("vllm", "y_marker_in_json_string_after_escaped_quote", "whole", True),
    ("vllm", "y_spec_single_call", "stream-token", False),
    ("sglang", "y_marker_in_json_string_whole_call", "whole", True),
    ("sglang", "y_spec_single_call", "stream-token", False),
    ("aphrodite", "y_ws_around_marker_after_argument_begin_space", "whole", True),  # a crash
    ("aphrodite", "y_spec_single_call", "stream-token", False),
    ("lmdeploy", "y_spec_single_call", "stream-char", True),
    ("lmdeploy", "y_spec_single_call", "stream-token", False),
    ("mlx_lm", "y_think_on_leading_open_tag", "whole", True),
    ("mlx_lm", "y_spec_single_call", "whole", False),
    ("easydel", "y_spec_parallel_calls", "whole", True),  # two calls merged into one
    ("easydel", "y_spec_single_call", "stream-token", False),
    ("sglang_kt", "y_id_hyphenated_name_dotted_and_hyphen", "whole", True),
    ("sglang_kt", "y_spec_single_call", "stream-token", False),
    ("vllm-k3", "n_k3_message_close_without_response_close", "stream-token", True),  # a leak
    ("vllm-k3", "y_k3_typed_values", "stream-token", False),
    ("vllm-k3", "n_k3_max_tokens_inside_call", "whole", True),
    ("sglang-k3", "n_k3_max_tokens_inside_call", "stream-token", True),  # the call lost
    ("sglang-k3", "y_k3_think_then_call", "whole", False),
]


def _spec(driver: str) -> tuple[str, str, str | None]:
    """A cell's driver (a driver module, or a K3 adapter) as (module, adapter, venv)."""
    if driver in K3_DRIVERS:
        return K3_DRIVERS[driver], driver, DRIVERS[K3_DRIVERS[driver]][1]
    return (driver, *DRIVERS[driver])


def _lane(driver: str) -> pytest.MarkDecorator:
    return pytest.mark.extra if _spec(driver)[2] else pytest.mark.slow


def _python(driver: str) -> str:
    """The interpreter where the driver's parser is installed (skip when there is none)."""
    _, adapter, venv = _spec(driver)
    if venv is None:
        if load(create_adapter(adapter)).status != "ok":
            missing(f"{adapter} is not installed here")
        return sys.executable
    python = VENVS / venv / "bin" / "python"
    if not python.exists():
        missing(f"{python} is not installed: run k2conform setup-parsers {venv}")
    return str(python)


def _message(result: Result) -> dict:
    """The adapter's result in the script's output shape."""
    if result.outcome == "crash":
        return {"crash": result.error}
    assert result.outcome == "ok", result
    return {
        "content": result.content,
        "reasoning": result.reasoning,
        "tool_calls": [call.to_json() for call in result.tool_calls],
    }


@pytest.fixture(scope="module")
def served():
    """The other venvs' adapters, each served from its venv through the adapter protocol
    (started on first use, stopped at the end)."""
    adapters: dict = {}
    yield adapters
    for adapter in adapters.values():
        adapter.close()


def _adapter_message(driver: str, served: dict, case, delivery: modes.Delivery) -> dict:
    """What the k2conform adapter returns on the same delivery."""
    _, name, venv = _spec(driver)
    if venv is None:
        adapter = create_adapter(name)
    else:
        if driver not in served:
            served[driver] = create_adapter(
                f"{name}=cmd:{VENVS / venv / 'bin' / 'k2conform'} serve-adapter {name}"
            )
        adapter = served[driver]
        assert load(adapter).status == "ok", load(adapter)
    return _message(execute(adapter, case.request, delivery))


def _in_process(driver: str, data: dict) -> dict:
    """The driver module imported here and run on the case, in the script's output shape."""
    from k2conform_adapters.repro.shared import Case

    module = importlib.import_module(f"k2conform_adapters.repro.{_spec(driver)[0]}")
    try:
        return module.run(Case(**data))
    except Exception as exc:  # noqa: BLE001 - the parser raised, as the script reports it
        return {"crash": f"{type(exc).__name__}: {exc}"}


@pytest.mark.parametrize(
    ("driver", "case_id", "mode", "reproduces"),
    [
        # a driver in its own venv runs in the extra lane; the in-process ones, ~10 s each, slow
        pytest.param(*cell, id="-".join(cell[:3]), marks=_lane(cell[0]))
        for cell in CELLS
    ],
)
def test_the_script_reproduces_a_finding_and_not_an_agreeing_case(
    tmp_path, corpus, served, driver, case_id, mode, reproduces
):
    python = _python(driver)
    case = next(c for c in corpus.completions if c.id == case_id)
    (delivery,) = modes.deliveries(
        case.model_output,
        mode,
        load_tokenizer(),
        seed=modes.case_seed(modes.DEFAULT_SEED, case.id),
        recorded=case.deltas,
        format=case.format,
    )
    script = create_adapter(_spec(driver)[1]).repro_script(
        case.request, list(delivery.deltas), mode, expected=case.expected.to_json(), case_id=case.id
    )
    assert "k2conform" not in script  # one standalone file: nothing of k2conform imported
    path = tmp_path / "repro.py"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run(
        [python, str(path)], cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == (1 if reproduces else 0), done.stdout[-2000:] + done.stderr[-2000:]
    assert ("NOT REPRODUCED" in done.stdout) is not reproduces
    observed = _masked(json.loads(done.stdout.splitlines()[-1]))
    assert observed == _adapter_message(driver, served, case, delivery)
    if python == sys.executable:
        data = case_data(case.request, delivery.deltas, mode, case.format)
        assert _masked(_in_process(driver, data)) == observed


def _masked(message: dict) -> dict:
    """The script's message with the ids a server mints at random masked, as the adapter
    reports them (``RandomIds``: vLLM's K3 parser mints ``chatcmpl-tool-…``)."""
    from k2conform.adapter.glue import RandomIds

    ids = RandomIds.chatcmpl()
    calls = [{**call, "id": ids.mask(call.get("id"))} for call in message.get("tool_calls") or ()]
    return {**message, "tool_calls": calls} if "tool_calls" in message else message


#: (expected, observed) messages, and what k2conform's comparison says of each
PAIRS = [
    (
        {"tool_calls": [{"name": "f", "arguments": '{"a": true}'}]},
        {"tool_calls": [{"name": "f", "arguments": '{"a": 1}'}]},
    ),
    (
        {"tool_calls": [{"name": "f", "arguments": '{"a": 1}'}]},
        {"tool_calls": [{"name": "f", "arguments": '{"a":1.0}'}]},
    ),
    (
        {"tool_calls": [{"name": "f", "arguments": '{"a": 1, "a": 2}'}]},
        {"tool_calls": [{"name": "f", "arguments": '{"a": 2}'}]},
    ),
    (
        {"content": None, "tool_calls": [{"name": "f", "arguments": "{}", "id": "functions.f:0"}]},
        {"content": "", "tool_calls": [{"name": "g", "arguments": "{}", "id": "call_1"}]},
    ),
    (
        {"content": "Hi", "tool_calls": []},
        {"content": "Hi ", "tool_calls": [{"name": "f", "arguments": "{}"}]},
    ),
]


def _result(message: dict) -> Result:
    return Result(
        content=message.get("content"),
        tool_calls=tuple(
            ToolCall(c["name"], c["arguments"], c.get("id")) for c in message["tool_calls"]
        ),
    )


def test_the_scripts_comparison_is_k2conforms_own_true_is_not_1():
    """The code every script shares, run with k2conform unimportable, on messages whose
    arguments differ as JSON only in ``true`` vs ``1``, and more."""
    probe = (
        Bundle([SHARED]).source() + f"\n\nPAIRS = {PAIRS!r}\n"
        "print(json.dumps([[[d.field, d.how, d.call] for d in differences(e, o)]"
        " for e, o in PAIRS]))\n"
    )
    run = run_script(probe)
    assert run["status"] == 0, run["stderr"][-2000:]
    found = run["observed"]
    assert found[0] == [["arguments", "json", 0]]  # true is not 1
    assert found[1] == []  # 1 and 1.0 are the same JSON number, whatever the spacing
    assert found == [
        [[d.field, d.how, d.call] for d in compare_results(_result(e), _result(o))]
        for e, o in PAIRS
    ]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", *args],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_drivers_and_the_scripts_they_make_pass_ruff(tmp_path):
    linted = _ruff("adapters/k2conform_adapters/repro")
    assert linted.returncode == 0, linted.stdout[-3000:]
    request = Request(tools=({"type": "function", "function": {"name": "f", "parameters": {}}},))
    deltas = [Delta("<|tool_calls_section_begin|>", (163595,)), Delta("text")]
    drivers = sorted(
        p.stem
        for p in (ROOT / "adapters" / "k2conform_adapters" / "repro").glob("*.py")
        if p.stem not in ("__init__", "build", "shared")
    )
    assert set(DRIVERS) <= set(drivers)
    for driver in drivers:  # every driver in the package, not only those tested above
        path = tmp_path / f"{driver}.py"
        path.write_text(build_script(driver, request, deltas, "stream-token"), encoding="utf-8")
    # pyflakes: no undefined name (an inlined function's dependency left out), no unused
    # or twice-imported name, no syntax error.
    scripts = _ruff("--isolated", "--select", "F,E9", str(tmp_path))
    assert scripts.returncode == 0, scripts.stdout[-3000:]


def test_building_a_script_does_not_import_the_parser():
    code = (
        "import sys\nfrom k2conform.model import Delta, Request\n"
        "from k2conform_adapters.repro import build_script\n"
        f"for driver in {sorted(DRIVERS)!r}:\n"
        "    build_script(driver, Request(), [Delta('x')], 'whole')\n"
        f"print(sorted(set({sorted(DRIVERS)!r}) & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_a_name_two_parts_define_is_refused():
    with pytest.raises(HarnessError, match="is defined twice in one script"):
        Bundle([SHARED, "k2conform_adapters.repro.vllm", "k2conform_adapters.repro.sglang"])


def test_a_driver_that_reproduces_only_some_modes_gives_no_script_for_the_others():
    from k2conform.model import Delta, Request
    from k2conform_adapters.vllm_mlx_parser import VllmMlxAdapter

    adapter = VllmMlxAdapter()
    assert adapter.repro_modes == ("whole",)
    assert adapter.repro_script(Request(), [Delta("x")], "stream-token") is None
    assert "vllm_mlx" in adapter.repro_script(Request(), [Delta("x")], "whole")
