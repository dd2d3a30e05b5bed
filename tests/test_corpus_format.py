"""The loader rejects every malformed case file with its path and the offending field."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from entry_points import K2CONFORM
from k2conform.case.corpus import CorpusError, iter_problems, load_case, load_corpus

ROOT = Path(__file__).resolve().parent.parent

GOOD = {
    "id": "y_example",
    "kind": "completion",
    "description": "one line",
    "tags": ["X.y"],
    "source": "test",
    "request": {"tools": [], "thinking": False},
    "model_output": "hi",
    "expected": {"content": "hi", "reasoning": None, "tool_calls": []},
}


def write(tmp_path, data, name=None):
    path = tmp_path / f"{name or data.get('id', 'case')}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def mutated(**changes):
    data = json.loads(json.dumps(GOOD))
    for dotted, value in changes.items():
        target, *path = dotted.split("__")
        node = data
        for key in [target, *path][:-1]:
            node = node[key]
        last = [target, *path][-1]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (mutated(description=KeyError), "description"),
        (mutated(id="x_bad"), "id"),
        (mutated(tags="X.y"), "tags"),
        (mutated(model_output=3), "model_output"),
        (mutated(request__thinking="yes"), "request.thinking"),
        (
            mutated(request__tools=[{"type": "function", "function": {}}]),
            "request.tools[0].function.name",
        ),
        (mutated(request__tool_choice="sometimes"), "request.tool_choice"),
        (
            mutated(request__server_options={"chat_template_kwargs": {"thinking": True}}),
            "request.server_options.chat_template_kwargs",
        ),
        (
            mutated(request__server_options={"stream_reasoning": "no"}),
            "request.server_options.stream_reasoning",
        ),
        (
            mutated(expected__tool_calls=[{"id": None, "name": "f"}]),
            "expected.tool_calls[0].arguments",
        ),
        (mutated(expected__content=1), "expected.content"),
        (mutated(expected=KeyError), "expected"),
        (mutated(model_outptu="typo"), "model_outptu"),
        (mutated(description="two\nlines"), "description"),
        (mutated(deltas=["h", "x"]), "deltas"),
        (mutated(kind="other"), "kind"),
    ],
)
def test_bad_field_is_named_with_the_file(tmp_path, data, field):
    path = write(
        tmp_path,
        data,
        name=data["id"] if str(data.get("id", "")).startswith(("y_", "n_", "i_")) else "x_bad",
    )
    with pytest.raises(CorpusError) as error:
        load_case(path)
    assert error.value.field == field
    assert str(path) in str(error.value) and f"'{field}'" in str(error.value)


def test_file_name_must_match_id_and_json_must_parse(tmp_path):
    with pytest.raises(CorpusError, match="differs from the file name"):
        load_case(write(tmp_path, GOOD, name="y_other"))
    with pytest.raises(CorpusError, match="not JSON"):
        load_case(write(tmp_path, "{", name="y_broken"))


def test_i_cases_may_omit_the_expectation_and_deltas_may_replace_the_output(tmp_path):
    data = mutated(id="i_open", expected=KeyError, model_output=KeyError)
    data["deltas"] = ["h", "i"]
    case = load_case(write(tmp_path, data))
    assert case.expected is None and case.model_output == "hi" and case.deltas == ("h", "i")


def test_duplicate_ids_and_every_problem_are_reported(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write(tmp_path / "a", GOOD)
    write(tmp_path / "b", GOOD)
    write(tmp_path, mutated(id="y_two", tags=1))
    problems = list(iter_problems(tmp_path))
    assert {p.field for p in problems} == {"id", "tags"}
    with pytest.raises(CorpusError):
        load_corpus(tmp_path)


def test_check_corpus_cli_exit_status_and_message(tmp_path):
    ok = subprocess.run([K2CONFORM, "check-corpus"], capture_output=True, text=True)
    assert ok.returncode == 0 and "cases OK" in ok.stdout
    write(tmp_path, mutated(request__thinking="yes"))
    bad = subprocess.run([K2CONFORM, "check-corpus", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "y_example.json: field 'request.thinking'" in bad.stderr


def test_check_corpus_holds_every_id_to_the_verdict_rule(tmp_path):
    """A well-formed golden call filed as ``n_``: the file loads, the rule says ``y_``."""
    case = json.loads((ROOT / "corpus/golden/completions/y_spec_single_call.json").read_text())
    case["id"] = "n_spec_single_call"
    (tmp_path / "n_spec_single_call.json").write_text(json.dumps(case))
    bad = subprocess.run([K2CONFORM, "check-corpus", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "n_spec_single_call.json: id: the verdict rule gives y_, not n_" in bad.stderr


def test_shipped_case_files_are_in_canonical_layout():
    """What write_case would write: reviewers diff stable files, generators stay idempotent."""
    from k2conform.model import dumps_canonical

    for case in load_corpus().completions + load_corpus().prompts:
        with open(case.path, encoding="utf-8") as handle:
            assert handle.read() == dumps_canonical(case.to_json()), case.path


def test_every_case_source_is_something_a_reader_can_find(corpus):
    """A spec section, a URL, a generator class or a file of this repository; never a path
    outside it or a reference to the project's private tracker."""
    import re

    for case in [*corpus.completions, *corpus.prompts, *corpus.probes]:
        assert "shared/" not in case.source and not re.search(r"\bissue \d+\b(?!:)", case.source), (
            case.id,
            case.source,
        )


# -- the verdict rule (k2conform.case.verdict) ----------------------------------------------


def test_every_shipped_id_carries_the_prefix_the_verdict_rule_gives(corpus):
    """Golden, generated, policy, server, finding and probe cases alike: one rule, no exceptions."""
    from pathlib import Path

    from k2conform.case.verdict import case_verdict

    cases = [*corpus.completions, *corpus.prompts, *corpus.probes]
    folders = {Path(c.path).parent.name for c in cases}
    every_kind = {"completions", "prompts", "policies", "server", "findings", "probes", "id"}
    assert folders >= every_kind
    wrong = {}
    for case in cases:
        decided = case_verdict(case)
        if decided.prefix != case.id[0]:
            wrong[case.id] = (decided.prefix, decided.reasons)
    assert wrong == {}
    assert {c.id[0] for c in corpus.completions} == {"y", "n", "i"}


WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object"}},
}


def _call(call_id: str = "functions.get_weather:0", arguments: str = '{"city": "Oslo"}') -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"


def _section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


@pytest.mark.parametrize(
    ("output", "request_fields", "prefix", "reason"),
    [
        (_section(_call()), {}, "y", None),
        ("It's sunny.<|im_end|>ignored", {}, "y", None),
        (_section(_call(arguments='{"data": ' + "[" * 1000 + "]" * 1000 + "}")), {}, "y", None),
        (_section(_call("functions.get_weather:15")), {}, "n", "index 15 at position 0"),
        (_section(_call(arguments='{"city": NaN}')), {}, "n", "not a JSON object"),
        (_section(_call(arguments="[1]")), {}, "n", "not a JSON object"),
        (_section(_call()), {"tool_choice": "none"}, "n", "tool_choice is none"),
        (_section(_call(arguments='{"city": "Pa')) + " Done.", {}, "n", "ARGS.unterminated-string"),
        (_section(_call()) + " Done.", {}, "i", "STRUCT.text-after-section"),
        (_section(_call("functions.my.get_weather:0")), {}, "i", "naming a declared tool"),
        (_section(_call()), {"tools": []}, "i", "naming a declared tool"),
        (_section(_call(arguments='{"a": 1, "a": 2}')), {}, "i", "duplicate keys"),
        (_section(_call(arguments='{"a": "\\ud83d"}')), {}, "i", "lone surrogate"),
        (
            _section(_call(arguments='{"a": ' + "[" * 3000 + "]" * 3000 + "}")),
            {},
            "i",
            "nested too deep",
        ),
        (
            _section(_call(arguments='{"a": "x'), _call("functions.get_weather:1")),
            {},
            "i",
            "marker text in arguments",
        ),
        ("Hi <|im_user|> there", {}, "i", "markup in the content"),
        ("\n" + _section(_call()), {}, "i", "whitespace-only content"),
        ("<think>hmm</think>42", {}, "i", "</think> with thinking off"),
        (
            "Nothing.<|tool_calls_section_begin|>\n<|tool_calls_section_end|>",
            {},
            "i",
            "a section without calls",
        ),
        ('functions.get_weather:0{"city": "Oslo"}', {}, "i", "no markers"),
        (_section(_call()), {"server_options": {"max_tokens": 5}}, "i", "max_tokens"),
    ],
)
def test_the_verdict_rule_decides_each_fact_it_names(output, request_fields, prefix, reason):
    from k2conform.case.verdict import verdict
    from k2conform.model import Request

    fields = {"tools": (WEATHER,), **request_fields}
    fields["tools"] = tuple(fields["tools"])
    decided = verdict(Request(**fields), output)
    assert decided.prefix == prefix, decided.reasons
    if reason is None:
        assert decided.reasons == ()
    else:
        assert any(reason in r for r in decided.reasons), decided.reasons


def test_minimize_and_the_fuzzers_name_a_finding_by_the_same_rule():
    """A finding the old policy-only rule would have called ``y_`` (a dotted name, no tools)."""
    from k2conform.fuzzing.differential import Observation, finding_case
    from k2conform.model import Request
    from k2conform.reference.parser import parse

    request, text = Request(), _section(_call("functions.my.ns.f:0", "{}"))
    observation = Observation(
        "whole",
        parse(text, request),
        "sig",
        {"vllm": ("wrong-name",)},
        {"vllm": parse(text, request)},
        None,
    )
    assert finding_case(request, text, observation, "differential").id.startswith("i_fuzz_")
    assert finding_case(request, text, observation, "roundtrip").id.startswith("y_fuzz_")
