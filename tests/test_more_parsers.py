"""The extra real parsers (aphrodite's Rust parser, lmdeploy, mlx-lm, vllm-mlx, ms-swift, easydel,
sglang-kt), each in its own
virtual environment made by k2conform setup-parsers and run through the adapter protocol
(``NAME=cmd:.venvs/NAME/bin/k2conform serve-adapter NAME``).  A parser whose environment is
not installed is skipped with the command that installs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lanes import make_command, missing, run_once

from k2conform.adapter.registry import create_adapter, load

ROOT = Path(__file__).resolve().parent.parent
#: every test here is one subprocess of its own (no module fixture): tests/conftest.py spreads
#: them over the workers instead of sending the file to one
SPREAD_ACROSS_WORKERS = True
VENVS = Path(os.environ.get("K2CONFORM_VENVS", ROOT / ".venvs"))
PINNED = {
    "aphrodite": "0.24.1",
    "lmdeploy": "0.18.0",
    "mlx-lm": "0.32.2",
    "vllm-mlx": "0.6.0",
    "ms-swift": "4.6.0",
    "easydel": "0.3.0",
    "sglang-kt": "0.7.2",
}
#: The parsers whose servers return the spec's golden calls exactly (vllm-mlx and ms-swift mint
#: random ids: their tests below say what they return instead).
AGREE_ON_GOLDEN_CALLS = ("aphrodite", "lmdeploy", "mlx-lm", "sglang-kt")
pytestmark = pytest.mark.extra


def _venv(name: str) -> Path:
    venv = VENVS / name
    if not (venv / "bin" / "k2conform").exists():
        missing(f"{venv} is not installed: run k2conform setup-parsers {name} (make parsers-extra)")
    return venv


def _spec(name: str) -> str:
    return f"{name}=cmd:{_venv(name)}/bin/k2conform serve-adapter {name}"


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _matrix(
    tmp_path: Path, name: str, cases: list[str], modes: list[str]
) -> dict[tuple[str, str], dict]:
    out = tmp_path / "results.json"
    args = ["run", "--adapter", _spec(name), "--jobs", "1", "--json", str(out)]
    for case in cases:
        args += ["--case", case]
    for mode in modes:
        args += ["--delivery", mode]
    completed = _run(*args)
    assert completed.returncode in (0, 1), completed.stderr[-3000:]
    results = json.loads(out.read_text())
    row = next(a for a in results["adapters"] if a["name"] == name)
    assert row["status"] == "ok", row
    return {(c["case"], c["delivery"]): c for c in results["cells"]}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_venv_serves_its_pinned_release(name):
    venv = _venv(name)
    completed = subprocess.run(
        [str(venv / "bin" / "k2conform"), "list-adapters", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    row = next(r for r in json.loads(completed.stdout) if r["name"] == name)
    assert row["status"] == "ok", row
    assert row["version"] == PINNED[name] and row["supported"] is True


@pytest.mark.parametrize("name", AGREE_ON_GOLDEN_CALLS)
def test_golden_calls_parse_through_the_protocol(tmp_path, name):
    cells = _matrix(
        tmp_path, name, ["y_spec_single_call", "y_spec_parallel_calls"], ["whole", "stream-token"]
    )
    assert {c["outcome"] for c in cells.values()} == {"agree"}, {
        k: (v["outcome"], v["fields"]) for k, v in cells.items()
    }


def test_aphrodite_rust_parser_rejects_a_space_after_the_argument_marker(tmp_path):
    """The Rust parser wants `{` right after <|tool_call_argument_begin|>: a space is a parse
    error."""
    cells = _matrix(
        tmp_path,
        "aphrodite",
        ["y_ws_around_marker_after_argument_begin_space"],
        ["whole", "stream-token"],
    )
    for mode in ("whole", "stream-token"):
        cell = cells[("y_ws_around_marker_after_argument_begin_space", mode)]
        assert (
            cell["outcome"] == "crash"
            and "invalid JSON object argument" in cell["observed"]["error"]
        )


def test_aphrodite_thinking_requests_are_unavailable(tmp_path):
    """aphrodite separates reasoning in Python (torch): a thinking request is one
    ``unavailable`` cell, never a finding, and never no cell at all."""
    cells = _matrix(tmp_path, "aphrodite", ["y_split_marker_think_end"], ["whole"])
    outcomes = {key: cell["outcome"] for key, cell in cells.items()}
    assert outcomes == {("y_split_marker_think_end", "whole"): "unavailable"}, outcomes


def test_lmdeploy_expects_markers_as_whole_tokens(tmp_path):
    """Token streams agree; a text-level stream that cuts a call marker loses the call."""
    cells = _matrix(tmp_path, "lmdeploy", ["y_spec_single_call"], ["stream-token", "stream-char"])
    assert cells[("y_spec_single_call", "stream-token")]["outcome"] == "agree"
    char = cells[("y_spec_single_call", "stream-char")]
    assert char["outcome"] == "differs" and "count" in char["fields"]


def test_lmdeploy_class_level_parser_state_does_not_leak_between_configurations():
    """set_parsers writes class attributes: thinking on, then off, in one process."""
    venv = _venv("lmdeploy")
    script = """
from k2conform_adapters.lmdeploy_parser import LmdeployAdapter
from k2conform.model import Delta, Request
text = "<think>plan</think>answer"
adapter = LmdeployAdapter()
before = adapter.parse_whole(Request(thinking=False), Delta(text))
on = adapter.parse_whole(Request(thinking=True), Delta(text))
after = adapter.parse_whole(Request(thinking=False), Delta(text))
assert on.reasoning == "plan" and on.content == "answer", on
assert before.to_json() == after.to_json(), (before, after)
assert before.reasoning is None, before
print("ok")
"""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_mlx_lm_takes_a_leading_think_tag_into_reasoning(tmp_path):
    """mlx-lm's state machine starts in reasoning and does not strip an explicit <think>."""
    cells = _matrix(tmp_path, "mlx-lm", ["y_think_on_leading_open_tag"], ["whole"])
    cell = cells[("y_think_on_leading_open_tag", "whole")]
    assert cell["outcome"] == "differs" and cell["fields"] == ["reasoning"]
    assert cell["observed"]["reasoning"].startswith("<think>")


@pytest.mark.parametrize(
    ("name", "case"),
    [
        ("aphrodite", "y_ws_around_marker_after_argument_begin_space"),
        ("mlx-lm", "y_think_on_leading_open_tag"),
        ("vllm-mlx", "y_spec_content_before_section"),
        ("ms-swift", "y_policy_args_marker_in_string"),
        ("easydel", "y_spec_parallel_calls"),
        ("sglang-kt", "y_id_hyphenated_name_dotted_and_hyphen"),
    ],
)
def test_report_finding_reproduces_in_the_parsers_own_venv(tmp_path, name, case):
    venv = _venv(name)
    out = tmp_path / "report.md"
    completed = subprocess.run(
        [
            str(venv / "bin" / "k2conform"),
            "report-finding",
            case,
            "--adapter",
            name,
            "--out",
            str(out),
            "--compare",
            "reference",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "reproduced on its own" in out.read_text()
    alone = subprocess.run(
        [str(venv / "bin" / "python"), str(out.with_suffix(".py"))],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert alone.returncode == 1 and "REPRODUCED" in alone.stdout


@pytest.mark.parametrize("name", sorted(PINNED))
def test_without_the_package_the_adapter_is_unavailable(name):
    adapter = create_adapter(name)
    if adapter.version() is not None:
        pytest.skip(f"{adapter.package} is installed in this environment")
    assert load(adapter).status == "unavailable"


def test_setup_parsers_knows_the_extra_parsers():
    listed = [line.split()[0] for line in _run("setup-parsers", timeout=60).stdout.splitlines()]
    assert set(PINNED) <= set(listed)
    bad = _run("setup-parsers", "no-such-parser", timeout=60)
    assert bad.returncode == 2 and "unknown environment 'no-such-parser'" in bad.stderr
    for name in PINNED:
        assert (ROOT / "requirements" / f"{name}.txt").read_text().count(f"=={PINNED[name]}") == 1


def test_vllm_mlx_server_streams_kimi_calls_as_raw_content(tmp_path):
    """One-shot, only the ids differ (call_<8 hex>); streamed, the server never calls the Kimi
    parser (no Kimi marker opens its streaming gate): the markup goes out as content."""
    cells = _matrix(tmp_path, "vllm-mlx", ["y_spec_single_call"], ["whole", "stream-token"])
    whole = cells[("y_spec_single_call", "whole")]
    stream = cells[("y_spec_single_call", "stream-token")]
    assert (whole["outcome"], whole["fields"]) == ("differs", ["id"]), whole
    assert whole["observed"]["tool_calls"][0]["id"] == "call_<random>"
    assert whole["observed"]["meta"]["masked_random_ids"] == 1
    assert stream["outcome"] == "differs"
    assert {"count", "content", "stream-invariant"} <= set(stream["fields"]), stream["fields"]
    assert stream["observed"]["tool_calls"] == []
    assert "<|tool_call_begin|>functions.get_weather:0" in stream["observed"]["content"]


def test_vllm_mlx_content_refusals_and_crash(tmp_path):
    """Content before the section is stripped; a dotted tool name is refused by the request
    model (HTTP 400: unavailable, not a finding); thinking has no Kimi reasoning parser; 1000
    nested arrays crash the generic fallback parser."""
    cases = {
        "strip": "y_spec_content_before_section",
        "dotted": "y_id_dotted_name_api_tools_search",
        "thinking": "y_think_on_calls_only",
        "deep": "y_json_deep_nesting_1000_levels",
    }
    cells = _matrix(tmp_path, "vllm-mlx", list(cases.values()), ["whole"])
    strip, dotted, thinking, deep = (cells[(case, "whole")] for case in cases.values())
    assert strip["fields"] == ["id", "content"]
    assert strip["observed"]["content"] == "Let me check the weather."
    assert dotted["outcome"] == "unavailable"
    assert "function.name must match" in dotted["observed"]["error"]
    assert thinking["outcome"] == "unavailable"
    assert "no Kimi reasoning parser" in thinking["observed"]["error"]
    assert deep["outcome"] == "crash" and deep["observed"]["error"].startswith("RecursionError")


def test_ms_swift_keeps_the_raw_response_as_content(tmp_path):
    """swift deploy: content is the response itself, ids are toolcall-<uuid4 hex>, dotted names
    are kept whole, arguments are re-encoded (a Python dict becomes JSON, a JSON string is
    unwrapped); its streams are unavailable (get_toolcall parses whole responses only)."""
    cases = [
        "y_spec_single_call",
        "y_id_dotted_name_api_tools_search",
        "n_json_single_quotes_python_dict",
        "n_json_non_object_string",
    ]
    cells = _matrix(tmp_path, "ms-swift", cases, ["whole", "stream-token"])
    single, dotted, python_dict, json_string = (cells[(case, "whole")] for case in cases)
    assert single["fields"] == ["id", "content"], single
    assert single["observed"]["content"].startswith("<|tool_calls_section_begin|><|tool_call_")
    assert single["observed"]["tool_calls"][0]["id"] == "toolcall-<random>"
    assert dotted["observed"]["tool_calls"][0]["name"] == "api.tools.search"
    assert python_dict["observed"]["tool_calls"][0]["arguments"] == '{"city": "Paris"}'
    assert json_string["observed"]["tool_calls"][0]["arguments"] == "Paris"
    stream = cells[("y_spec_single_call", "stream-token")]
    assert stream["outcome"] == "unavailable"
    assert "whole responses only" in stream["observed"]["error"]


MS_SWIFT_PROMPT_PIECES = """
import json, sys
from k2conform.case.corpus import load_corpus
from k2conform_adapters.ms_swift_parser import MsSwiftAdapter
template = MsSwiftAdapter().agent_template()
golden = {c.id: c for c in load_corpus(sys.argv[1]).prompts}
system = "You are Kimi, an AI assistant created by Moonshot AI."
calls = [{"role": "tool_call", "content": {"name": "get_weather", "arguments": {"city": city}}}
         for city in ("Beijing", "Shanghai")]
section = template._format_tool_calls(calls)
result = {"role": "tool", "tool_call_id": "functions.get_weather:0",
          "content": '{"weather": "Sunny"}'}
results = template._format_tool_responses(section, [result])[1]
print(json.dumps({"declare": template._format_tools(list(golden["y_prompt_stage1"].tools), system),
                  "section": section, "results": "".join(results),
                  "golden": {k: c.expected_prompt for k, c in golden.items()}}))
"""


def test_ms_swift_prompt_pieces_against_the_golden_streams():
    """ms-swift's kimi_k25 agent template declares tools in TypeScript (K2.5), not the golden
    JSON list, and names every tool result turn `tool`; its tool-call section is the golden one."""
    venv = _venv("ms-swift")
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            MS_SWIFT_PROMPT_PIECES,
            str(ROOT / "corpus" / "golden"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    golden = out["golden"]
    assert out["declare"].startswith(
        "tool_declare<|im_middle|># Tools\n\n## functions\nnamespace functions {\n"
    )
    assert out["declare"].endswith(
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
    )
    assert golden["y_prompt_stage1"].startswith('<|im_system|>tool_declare<|im_middle|>[{"type":')
    assert out["section"] in golden["y_prompt_parallel_calls_in_history"]
    assert out["results"] in golden["y_prompt_tool_result_without_name"]
    assert out["results"] not in golden["y_prompt_stage2_tool_result"]
    named = golden["y_prompt_stage2_tool_result"]
    assert "<|im_system|>get_weather<|im_middle|>## Return of" in named


def test_easydel_merges_one_line_calls_and_keeps_one_dotted_segment(tmp_path):
    """easydel's one-shot regex takes a greedy `.+:\\d+` id (two calls on one line become one,
    with the second call's arguments); names are id.split('.')[1]; eSurge sends content=None
    with calls one-shot but streams the text before the section."""
    cases = [
        "y_spec_parallel_calls",
        "y_id_dotted_name_api_tools_search",
        "y_spec_content_before_section",
    ]
    cells = _matrix(tmp_path, "easydel", cases, ["whole", "stream-token"])
    merged = cells[("y_spec_parallel_calls", "whole")]
    assert merged["fields"] == ["count", "arguments", "id"], merged
    [call] = merged["observed"]["tool_calls"]
    assert call["arguments"] == '{"city": "Shanghai"}'
    assert call["id"].startswith("functions.get_weather:0<|tool_call_argument_begin|>")
    streamed = cells[("y_spec_parallel_calls", "stream-token")]["observed"]["tool_calls"]
    assert streamed[0]["arguments"] == '{"city": "Beijing"}{"city": "Shanghai"}', streamed
    for mode in ("whole", "stream-token"):
        dotted = cells[("y_id_dotted_name_api_tools_search", mode)]
        assert dotted["fields"] == ["name"] and dotted["observed"]["tool_calls"][0]["name"] == "api"
    before = cells[("y_spec_content_before_section", "whole")]
    assert before["fields"] == ["content"] and before["observed"]["content"] is None
    assert cells[("y_spec_content_before_section", "stream-token")]["outcome"] == "agree"


def test_easydel_id_without_a_dot_leaves_the_section_as_content(tmp_path):
    """`search:0`.split('.')[1] raises IndexError; the parser catches it and returns the output."""
    cells = _matrix(tmp_path, "easydel", ["i_policy_id_no_prefix"], ["whole"])
    observed = cells[("i_policy_id_no_prefix", "whole")]["observed"]
    assert observed["tool_calls"] == []
    assert observed["content"].startswith("<|tool_calls_section_begin|><|tool_call_begin|>")


def test_sglang_kt_drops_hyphenated_names_and_numbers_streamed_ids_by_position(tmp_path):
    """The fork's `[\\w\\.]+:\\d+` id regex: a hyphenated name gives no call (one-shot the whole
    output is the content, streamed nothing); streamed ids count calls from 0 while one-shot
    ids keep the model's index; a whole call in one delta streams arguments '{}'."""
    cases = [
        "y_id_hyphenated_name_dotted_and_hyphen",
        "n_id_index_not_from_zero_starts_at_1",
        "y_split_marker_empty_deltas",
    ]
    cells = _matrix(tmp_path, "sglang-kt", cases, ["whole", "stream-token", "stream-recorded"])
    hyphen = cells[("y_id_hyphenated_name_dotted_and_hyphen", "whole")]
    assert hyphen["fields"] == ["count", "content"] and hyphen["observed"]["tool_calls"] == []
    assert hyphen["observed"]["content"].startswith("<|tool_calls_section_begin|>")
    streamed = cells[("y_id_hyphenated_name_dotted_and_hyphen", "stream-token")]["observed"]
    assert streamed["tool_calls"] == [] and streamed["content"] is None
    whole = cells[("n_id_index_not_from_zero_starts_at_1", "whole")]["observed"]["tool_calls"]
    stream = cells[("n_id_index_not_from_zero_starts_at_1", "stream-token")]
    assert whole[0]["id"] == "functions.read_file:1" and stream["fields"] == ["id"]
    assert stream["observed"]["tool_calls"][0]["id"] == "functions.read_file:0"
    recorded = cells[("y_split_marker_empty_deltas", "stream-recorded")]["observed"]["tool_calls"]
    assert [c["arguments"] for c in recorded] == ["{}"], recorded


def test_sglang_kt_required_tool_choice_is_unavailable():
    """The fork parses required/named tool_choice as a JSON array, never with the kimi_k2
    detector: such a request is unavailable, not a finding."""
    venv = _venv("sglang-kt")
    request = {
        "model_output": "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        "<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "required",
    }
    done = subprocess.run(
        [str(venv / "bin" / "k2conform"), "parse", "--adapter", "sglang-kt"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    result = json.loads(done.stdout)
    assert result["outcome"] == "unavailable" and "JSON array" in result["error"], result


@pytest.mark.parametrize(
    ("name", "break_release", "missing"),
    [
        (
            "easydel",
            "import sys, types\nname = 'easydel.inference.parsing.delegating_parser'\n"
            "sys.modules[name] = types.ModuleType(name)",
            "DelegatingParser",
        ),
        (
            "sglang-kt",
            "from sglang.srt.parser.reasoning_parser import ReasoningParser\n"
            "del ReasoningParser.DetectorMap['kimi_k2']",
            "ReasoningParser['kimi_k2']",
        ),
    ],
    ids=["easydel", "sglang-kt"],
)
def test_a_release_the_glue_does_not_fit_is_an_adapter_error(name, break_release, missing):
    """Drift safety: a release without what the glue needs is adapter-error, naming the API."""
    venv = _venv(name)
    script = (
        f"{break_release}\nfrom k2conform.adapter.registry import create_adapter, load\n"
        f"print(load(create_adapter({name!r})))\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "status='adapter-error'" in done.stdout and missing in done.stdout, done.stderr[-2000:]


#: The adapters of the extra lane (`make matrix-extra`): the extra parsers, each named as
#: `k2conform setup-parsers --adapters` names it (the older vLLM and SGLang releases have
#: baseline-releases-vllm.json and baseline-releases-sglang.json).
EXTRA_LANE = set(PINNED)


def test_baseline_extra_covers_exactly_the_extra_parsers_with_reviewed_entries():
    """baseline-extra.json, the extra lane's gate, loads; it vouches for exactly the extra lane's
    adapters (each with entries, none of baseline.json's); every entry has a reviewed reason
    and one upstream link of the shipped form or null (not reported upstream, docs/baseline.md)."""
    from k2conform.gate.baseline import load_baseline

    baseline = load_baseline(ROOT / "baseline-extra.json")
    assert set(baseline.adapters) == EXTRA_LANE, sorted(set(baseline.adapters) ^ EXTRA_LANE)
    assert {e.adapter for e in baseline.entries} == EXTRA_LANE
    assert not EXTRA_LANE & set(load_baseline(ROOT / "baseline.json").adapters)
    _assert_every_entry_reviewed(baseline.entries)


def _assert_every_entry_reviewed(entries) -> None:
    """Each entry has a reviewed reason (no TODO), cases and modes, and one upstream link of the
    shipped form or null (not reported upstream, docs/baseline.md)."""
    import re

    from k2conform.gate.baseline import TODO

    link = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|commit)/[0-9a-f]+$")
    for entry in entries:
        where = f"{entry.adapter} {entry.outcome} {','.join(entry.fields)} {entry.cases[:3]}"
        assert entry.reason.strip() and TODO not in entry.reason, where
        assert entry.link is None or link.match(entry.link), (where, entry.link)
        assert entry.cases and entry.deliveries, where


#: The release environments (docs/releases.md): each serves one release of a parser line
#: through that line's adapter, `--adapter NAME=cmd:.venvs/NAME/bin/k2conform serve-adapter LINE`.
RELEASE_ENVIRONMENTS = {
    f"sglang-{release}": ("sglang", release)
    for release in (
        "0.5.1", "0.5.2", "0.5.3", "0.5.5", "0.5.5.post3", "0.5.9", "0.5.10", "0.5.12",
        "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.21",
        "0.5.22",
    )
}  # fmt: skip
RELEASE_ENVIRONMENTS.update(
    {f"vllm-{release}": ("vllm-legacy", release) for release in (
        "0.10.0", "0.10.1", "0.11.0", "0.11.1", "0.12.0", "0.13.0", "0.14.0", "0.15.0",
        "0.16.0", "0.17.0", "0.18.0", "0.19.0",
    )}
    | {f"vllm-{release}": ("vllm", release) for release in (
        "0.20.0", "0.21.0", "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0",
        "0.30.0", "0.31.0", "0.32.0",
    )}
)  # fmt: skip
#: The releases with kimi_k3 run each engine's K3 adapter too, labelled with the format it parses.
RELEASE_ENVIRONMENTS.update(
    {f"sglang-k3-{release}[k3]": ("sglang-k3", release) for release in (
        "0.5.17", "0.5.18", "0.5.19", "0.5.21", "0.5.22",
    )}
    | {f"vllm-k3-{release}[k3]": ("vllm-k3", release) for release in (
        "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
    )}
)  # fmt: skip


def test_each_release_environment_holds_its_adapter_to_its_release():
    """The lanes run each release environment as ``serve-adapter LINE --release RELEASE``, so a
    layer whose adapter imports another release (its base's) says hello as an adapter-error on
    every cell, which fails the lane's gate: the release lanes (and .ci/run's guard, which runs
    every environment) check every environment's release, this test that each is asked to."""
    from k2conform.setup.parsers import environments

    options = {}
    for environment in environments().values():
        for option in environment.adapter_options(VENVS):
            name, _, command = option.removeprefix("--adapter=").partition("=cmd:")
            options[name] = command.split()[1:]
    for environment, (adapter, release) in RELEASE_ENVIRONMENTS.items():
        command = options[environment]  # a release's K2 and K3 adapters: one command
        assert command[0] == "serve-adapter" and command[-2:] == ["--release", release], command
        assert adapter in command[1:-2], environment
        assert release in create_adapter(adapter).supported_versions, environment  # has glue
    assert all("--release" not in options[name] for name in PINNED)  # not release layers
    # and the other way round: each release the vLLM and SGLang glue tables name is one a lane
    # runs (or the project's own pin), or a patch release with the very record of the minor
    # release a lane runs, so no table row is glue nobody checks
    from k2conform_adapters.sglang_parser import GLUE
    from k2conform_adapters.vllm_parser import RELEASES

    ran = {(adapter, release) for adapter, release in RELEASE_ENVIRONMENTS.values()}
    for adapter, table, pin in (("vllm", RELEASES, "0.33.0"), ("sglang", GLUE, "0.5.23")):
        assert tuple(table) == create_adapter(adapter).supported_versions
        for release, record in table.items():
            minor = re.sub(r"\.[1-9][0-9]*$", ".0", release)
            checked = (adapter, release) in ran or release == pin
            assert checked or ((adapter, minor) in ran and table[minor] == record), release
    # the K3 adapters: each release one was written for is run by a lane, or is the pin
    for adapter, pin in (("sglang-k3", "0.5.23"), ("vllm-k3", "0.33.0")):
        k3_runs = {release for name, release in ran if name == adapter}
        assert k3_runs | {pin} == set(create_adapter(adapter).supported_versions), adapter


def _hello(environment: str, adapter: str, *options: str) -> dict:
    completed = subprocess.run(
        [str(_venv(environment) / "bin" / "k2conform"), "serve-adapter", adapter, *options],
        input="",
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_CONFIGURE_LOGGING": "0"},  # vLLM logs to stdout otherwise
    )
    return json.loads(completed.stdout.splitlines()[0])


@pytest.mark.parametrize("environment", ["vllm-0.10.0", "vllm-0.32.0", "sglang-0.5.22"])
def test_a_release_environment_refuses_to_stand_for_another_release(environment):
    """One environment of each glue generation, held to another release: an adapter-error
    naming both.  (Held to its own, every environment says hello ok, supported, at its release:
    the guard's rows, checked by the guard's test.)"""
    adapter, release = RELEASE_ENVIRONMENTS[environment]
    wrong = _hello(environment, adapter, "--release", "0.0.1")
    assert wrong["status"] == "adapter-error", wrong
    assert "0.0.1" in wrong["reason"] and release in wrong["reason"], wrong


def _parse(environment: str, adapter: str, request: dict, *options: str) -> dict:
    done = subprocess.run(
        [str(_venv(environment) / "bin" / "k2conform"), "parse", "--adapter", adapter, *options],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "VLLM_CONFIGURE_LOGGING": "0"},  # vLLM logs to stdout otherwise
    )
    return json.loads(done.stdout)


def reads_the_guard(test):
    """A test that reads the release lanes' guard: with the others on one worker (the guard is
    run once), and a time limit that holds the run (6-9 minutes of both cores' imports on a
    loaded machine) with the test."""
    return pytest.mark.xdist_group("release-guard")(pytest.mark.timeout(2700)(test))


@pytest.fixture(scope="session")
def release_guard(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The release lanes' guard (``make release-lanes-guard``), run once: every release
    environment on the guard's cases, each line merged and gated by its baseline.  The tests of
    the releases' glue read its cells, so each release is imported once for both (.ci/run runs
    no other guard)."""
    for label in RELEASE_ENVIRONMENTS:
        _venv(_venv_of(label))
    command = make_command("release-lanes-guard", RELEASE_REPORT="{root}/run")
    root, info = run_once(tmp_path_factory, "release-guard", command, timeout=2400)
    return {"info": info, "report": root / "run"}


def _venv_of(label: str) -> str:
    """The environment a release run's label names (``vllm-k3-0.30.0[k3]`` → vllm-0.30.0)."""
    adapter, release = RELEASE_ENVIRONMENTS[label]
    return f"{adapter.split('-')[0]}-{release}"


def _guard_run(guard: dict, label: str) -> dict:
    """The run of the environment serving ``label``'s adapter: one run an environment, its
    adapters served by one process (its release imported once)."""
    name = _venv_of(label)
    path = guard["report"] / f"releases-{name.split('-')[0]}" / "runs" / f"{name}.json"
    assert path.exists(), f"the guard wrote no run of {name}:\n{guard['info']['stderr']}"
    return json.loads(path.read_text())


def _guard_cell(guard: dict, label: str, case: str, mode: str) -> dict:
    cells = {(c["adapter"], c["case"], c["delivery"]): c for c in _guard_run(guard, label)["cells"]}
    return cells[label.split("[")[0], case, mode]


@pytest.mark.parametrize("line", ["vllm", "sglang"])
@reads_the_guard
def test_the_release_guard_runs_every_environment_and_passes_its_baselines(release_guard, line):
    """The release lanes' guard (.ci/run runs no other): every release environment of the line
    ran its planned cells as its own release, supported by its glue (no adapter-error: the
    ``--release`` hello held),
    and the line's findings are its baseline's reviewed deviations, none stale (make's exit
    status and the merged gate)."""
    from k2conform.gate.baseline import gate, load_baseline
    from k2conform.model import RunResults

    assert release_guard["info"]["rc"] == 0, release_guard["info"]
    labels = [label for label in RELEASE_ENVIRONMENTS if label.split("-")[0] == line]
    for label in labels:
        run, name = _guard_run(release_guard, label), label.split("[")[0]
        served = [other.split("[")[0] for other in labels if _venv_of(other) == _venv_of(label)]
        assert sorted(row["name"] for row in run["adapters"]) == sorted(served), name
        (row,) = [row for row in run["adapters"] if row["name"] == name]
        assert (row["status"], row["version"]) == ("ok", RELEASE_ENVIRONMENTS[label][1]), row
        assert row["supported"] and row["version"] in row["supported_versions"], row
        assert run["inventory"]["run"] == run["inventory"]["planned"] == len(run["cells"]) > 0
        cells = [c for c in run["cells"] if c["adapter"] == name]
        assert cells and not [c for c in cells if c["outcome"] == "adapter-error"], label
    merged = json.loads((release_guard["report"] / f"releases-{line}" / "results.json").read_text())
    assert {a["name"] for a in merged["adapters"]} == {label.split("[")[0] for label in labels}
    results, passed = gate(
        RunResults.from_json(merged), load_baseline(ROOT / f"baseline-releases-{line}.json")
    )
    verdict = results.extra["gate"]
    assert verdict["new_cells"] == [] and verdict["stale"] == [] and verdict["missing"] == [], (
        verdict
    )
    assert passed


#: The guard's cases the glue tests read: reasoning then a call, ``tool_choice`` auto (a think
#: closer without its opener: the output K2 writes after a thinking prompt) and ``required``.
THINK, REQUIRED = "y_split_marker_think_end", "y_grammar_required_thinking"


@pytest.mark.parametrize(
    ("environment", "case", "expected"),
    [
        # no kimi_k2 reasoning parser before 0.5.5; ids call_<uuid> in 0.5.1 only
        ("sglang-0.5.1", THINK, {"content": "Need the file.</think>", "id": "call_<random>"}),
        (
            "sglang-0.5.2",
            THINK,
            {"content": "Need the file.</think>", "id": "functions.read_file:0"},
        ),
        # a message without text: content null before 0.5.13, "" from it
        ("sglang-0.5.12", THINK, {"content": None, "reasoning": "Need the file."}),
        ("sglang-0.5.13", THINK, {"content": "", "reasoning": "Need the file."}),
        # 0.5.3-0.5.10 parse a required tool_choice as a JSON array; 0.5.2 with the detector
        ("sglang-0.5.10", REQUIRED, {"outcome": "unavailable"}),
        ("sglang-0.5.2", REQUIRED, {"outcome": "ok", "id": "functions.get_weather:0"}),
        # vLLM: the parser's own id until 0.11.0; from 0.11.1 the server's ToolCall mints one
        # vLLM: no kimi_k2 reasoning parser before 0.11.1 (then DeepSeek-R1's)
        (
            "vllm-0.11.0",
            THINK,
            {"content": "Need the file.</think>", "id": "functions.read_file:0"},
        ),
        (
            "vllm-0.11.1",
            THINK,
            {"content": None, "reasoning": "Need the file.", "id": "chatcmpl-tool-<random>"},
        ),
        ("vllm-0.12.0", THINK, {"content": None, "reasoning": "Need the file."}),
        # vLLM: from 0.16.0 a one-shot call keeps the parser's id
        ("vllm-0.15.0", THINK, {"id": "chatcmpl-tool-<random>"}),
        ("vllm-0.16.0", THINK, {"id": "functions.read_file:0"}),
        # vLLM: before 0.24.0's structural tag a required tool_choice is constrained to JSON
        ("vllm-0.23.0", REQUIRED, {"outcome": "unavailable"}),
        ("vllm-0.24.0", REQUIRED, {"outcome": "ok"}),
        (
            "vllm-0.20.0",
            THINK,
            {"content": None, "reasoning": "Need the file.", "id": "functions.read_file:0"},
        ),
    ],
    ids=[
        "0.5.1",
        "0.5.2",
        "0.5.12-null",
        "0.5.13-empty",
        "0.5.10-required",
        "0.5.2-required",
        "vllm-0.11.0",
        "vllm-0.11.1",
        "vllm-0.12.0",
        "vllm-0.15.0",
        "vllm-0.16.0",
        "vllm-0.23.0-required",
        "vllm-0.24.0-required",
        "vllm-0.20.0",
    ],
)
@reads_the_guard
def test_glue_generations_differ_where_their_serving_code_does(
    release_guard, environment, case, expected
):
    """One request through neighbouring glue generations, as the guard ran it one-shot: each
    difference is the release's serving code (docs/releases.md), and a wrong generation in
    GLUE / SERVING breaks one."""
    cell = _guard_cell(release_guard, environment, case, "whole")
    result = cell["observed"] or {}
    calls = result.get("tool_calls") or []
    observed = {
        "outcome": cell["outcome"] if cell["outcome"] in ("unavailable", "crash") else "ok",
        "content": result.get("content"),
        "reasoning": result.get("reasoning"),
        "id": calls[0]["id"] if calls else None,
    }
    assert {key: observed[key] for key in expected} == expected, cell


_THINK_THEN_CALL = {
    "model_output": "<think>plan</think><|tool_calls_section_begin|><|tool_call_begin|>"
    "functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "thinking": True,
}


@pytest.mark.parametrize(
    ("environment", "reasoning"), [("vllm-0.12.0", "plan"), ("vllm-0.13.0", None)]
)
def test_the_output_that_ends_the_reasoning_goes_on_to_the_tool_parser_from_0_13(
    environment, reasoning
):
    """One engine output holding the think block and the call: 0.11.1-0.12.0 give it to the
    reasoning parser alone (its reasoning is sent); from 0.13.0 it goes on to the tool parser,
    whose message replaces the reasoning parser's (the reasoning is lost)."""
    burst = ("--delivery", "stream-burst", "--burst", "64")
    result = _parse(environment, "vllm-legacy", _THINK_THEN_CALL, *burst)
    assert (result["outcome"], result["reasoning"]) == ("ok", reasoning), result


@pytest.mark.parametrize(("environment", "quoted"), [("vllm-0.16.0", True), ("vllm-0.17.0", False)])
@reads_the_guard
def test_from_0_17_the_end_of_stream_step_takes_an_arguments_string_as_it_is(
    release_guard, environment, quoted
):
    """4-token bursts leave the last delta carrying arguments, so the server's end-of-stream step
    sends what it expected beyond what was streamed: 0.16.0 expects ``json.dumps`` of the string
    the parser stored (a quoted copy is appended), 0.17.0 the string itself (the guard's
    stream-burst cell of the spec's single call)."""
    cell = _guard_cell(release_guard, environment, "y_spec_single_call", "stream-burst")
    (call,) = cell["observed"]["tool_calls"]
    assert ('{\\"city' in call["arguments"]) is quoted, cell


@pytest.mark.parametrize("line", ["vllm", "sglang"])
def test_each_release_baseline_vouches_for_exactly_its_lines_release_environments(line):
    """baseline-releases-LINE.json, the gate of LINE's release environments, names exactly those
    environments (the in-process release is baseline.json's), each with entries, every entry
    with a reason and no extra parser's (baseline-extra.json) among them."""
    from k2conform.gate.baseline import load_baseline

    # a run's report name is its label without the formats it declares (``NAME[k3]``)
    releases = {name.split("[")[0] for name in RELEASE_ENVIRONMENTS if name.split("-")[0] == line}
    baseline = load_baseline(ROOT / f"baseline-releases-{line}.json")
    assert set(baseline.adapters) == releases, sorted(set(baseline.adapters) ^ releases)
    assert {e.adapter for e in baseline.entries} == releases
    assert not releases & set(load_baseline(ROOT / "baseline-extra.json").adapters)
    _assert_every_entry_reviewed(baseline.entries)
