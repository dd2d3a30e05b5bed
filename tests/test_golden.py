"""The spec's byte-exact streams: the renderer reproduces every golden prompt, and the
reference parser every golden completion, whole and streamed per character."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k2conform.case.corpus import load_corpus
from k2conform.reference.render import render, render_with_template

from entry_points import K2CONFORM

GOLDEN = load_corpus(Path(__file__).resolve().parent.parent / "corpus" / "golden")
TEMPLATE = (
    Path(__file__).resolve().parent.parent
    / "conformance"
    / "k2conform"
    / "data"
    / "reference_chat_template.jinja"
).read_text()


def test_golden_corpus_covers_the_spec_streams():
    ids = {c.id for c in GOLDEN.prompts} | {c.id for c in GOLDEN.completions}
    for required in (
        "y_prompt_tool_declare_turn",
        "y_prompt_stage1",
        "y_prompt_stage2_tool_result",
        "y_prompt_tool_result_without_name",
        "y_spec_single_call",
        "y_spec_parallel_calls",
        "y_spec_stage1_generation",
        "y_spec_final_answer",
    ):
        assert required in ids
    assert all(
        "tool_call_guidance.md" in c.source and "section" in c.source
        for c in GOLDEN.prompts + GOLDEN.completions
    )


@pytest.mark.parametrize("case", GOLDEN.prompts, ids=lambda c: c.id)
def test_reference_renderer_reproduces_golden_prompt(case):
    assert render(case.messages, case.tools, case.add_generation_prompt) == case.expected_prompt


@pytest.mark.parametrize("case", GOLDEN.prompts, ids=lambda c: c.id)
def test_shipped_jinja_template_reproduces_golden_prompt(case):
    rendered = render_with_template(TEMPLATE, case.messages, case.tools, case.add_generation_prompt)
    assert rendered == case.expected_prompt


def _cli(args, payload):
    completed = subprocess.run(
        [K2CONFORM, *args], input=json.dumps(payload).encode(), capture_output=True, check=True
    )
    return completed.stdout


@pytest.mark.parametrize("case", GOLDEN.prompts, ids=lambda c: c.id)
def test_cli_render_is_byte_exact(case, tmp_path):
    payload = {
        "messages": list(case.messages),
        "tools": list(case.tools),
        "add_generation_prompt": case.add_generation_prompt,
    }
    assert _cli(["render"], payload) == case.expected_prompt.encode()
    template = tmp_path / "chat_template.jinja"
    template.write_text(TEMPLATE)
    assert (
        _cli(["render", "--chat-template", str(template)], payload) == case.expected_prompt.encode()
    )


@pytest.mark.parametrize("delivery", ["whole", "stream-char", "stream-token"])
@pytest.mark.parametrize("case", GOLDEN.completions, ids=lambda c: c.id)
def test_cli_parse_reference_reproduces_openai_mapping(case, delivery):
    payload = {"model_output": case.model_output, "tools": list(case.request.tools)}
    result = json.loads(_cli(["parse", "--adapter", "reference", "--delivery", delivery], payload))
    assert result["outcome"] == "ok"
    assert result["tool_calls"] == [c.to_json() for c in case.expected.tool_calls]
    assert (result["content"], result["reasoning"]) == (
        case.expected.content,
        case.expected.reasoning,
    )
    if delivery != "whole":
        assert result["meta"]["stream_violations"] == []
