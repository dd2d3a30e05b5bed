"""Grammar conformance (``k2conform grammar``, docs/grammar.md): each engine's own grammar,
built by its own code path, against its own parser.

The first tests drive the real vLLM and SGLang code and xgrammar in the project venv (whatever
xgrammar it holds); the ones marked ``pinned`` run the command itself, in the environments with
each engine's pinned xgrammar (``make grammars``), and skip with that command where they are
not built."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from lanes import make_command, missing, run_once

from k2conform import markers
from k2conform.case.corpus import load_case
from k2conform.delivery import modes
from k2conform.case.samples import sample_id, source_of
from k2conform.grammar.check import OUTSIDE_REQUEST, Job, generated_calls, run_job
from k2conform.grammar.cli import ENVIRONMENTS
from k2conform.grammar.walk import CompiledTag
from k2conform.model import Cell, CellOutcome, Delta, Request
from k2conform.report.findings import repro_command
from k2conform.run.cell import CellSettings
from k2conform.setup.parsers import environments, installed
from k2conform_adapters.reference import ReferenceAdapter
from k2conform_adapters.sglang_parser import SglangAdapter
from k2conform_adapters.vllm_parser import VllmAdapter

ROOT = Path(__file__).resolve().parent.parent
GRAMMAR_CASES = ROOT / "corpus" / "grammar"
VENVS = Path(os.environ.get("K2CONFORM_VENVS", ROOT / ".venvs"))
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SPEC_CALL = (
    markers.SECTION_BEGIN
    + markers.CALL_BEGIN
    + "functions.get_weather:0"
    + markers.ARGUMENT_BEGIN
    + '{"city": "Paris"}'
    + markers.CALL_END
    + markers.SECTION_END
)


@pytest.fixture(scope="module")
def vllm():
    adapter = VllmAdapter()
    adapter.load()
    return adapter


@pytest.fixture(scope="module")
def sglang():
    adapter = SglangAdapter()
    adapter.load()
    return adapter


def k2conform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "K2CONFORM_VENVS": str(VENVS)},
    )


# -- each engine's own grammar ------------------------------------------------------------------


def test_vllm_constrains_required_not_auto_and_leaves_non_strict_arguments_free(vllm):
    """vLLM builds no grammar for auto without a strict tool; for required its non-strict tool's
    arguments get the schema ``true`` (any JSON): where class B starts."""
    assert vllm.structural_tag(Request(tools=(WEATHER,), tool_choice="auto")) is None
    tag = json.loads(vllm.structural_tag(Request(tools=(WEATHER,), tool_choice="required")))
    text = json.dumps(tag)
    assert f'"begin": "{markers.CALL_BEGIN}functions.get_weather:"' in text
    assert '"json_schema": true' in text and '"at_least_one": true' in text


def test_sglang_constrains_non_strict_arguments_to_an_object(sglang):
    """SGLang's KimiK2Detector rewrites a non-strict tool's schema to {"type": "object"}."""
    assert sglang.structural_tag(Request(tools=(WEATHER,), tool_choice="auto")) is None
    text = sglang.structural_tag(Request(tools=(WEATHER,), tool_choice="required"))
    assert '"json_schema": {"type": "object"}' in text and "functions.get_weather:" in text


def test_the_grammar_accepts_the_spec_call_and_says_where_it_rejects(vllm):
    grammar = CompiledTag(vllm.structural_tag(Request(tools=(WEATHER,), tool_choice="required")))
    assert grammar.rejection(SPEC_CALL) is None
    assert grammar.rejection("Sure." + SPEC_CALL).startswith("rejected at character 0 ('S'")
    assert (
        grammar.rejection(SPEC_CALL[: -len(markers.SECTION_END)])
        == "rejected: the grammar needs more after the end"
    )
    named = Request(
        tools=(WEATHER, TIME), tool_choice={"type": "function", "function": {"name": "get_time"}}
    )
    assert (
        CompiledTag(vllm.structural_tag(named))
        .rejection(SPEC_CALL)
        .startswith("rejected at character 61")
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_walks_stay_in_the_grammar_and_decode_as_the_reference_parses_them(engine, vllm, sglang):
    """Every walk is a string the grammar accepts, and the calls it wrote (``generated_calls``)
    are what k2conform's reference parser reads from it; the same seed walks the same way."""
    request = Request(tools=(WEATHER, TIME), tool_choice="required")
    grammar = CompiledTag({"vllm": vllm, "sglang": sglang}[engine].structural_tag(request))
    samples = [grammar.sample(random.Random(7)) for _ in range(2)]
    assert samples[0] == samples[1]
    rng = random.Random(20261201)
    walks = [grammar.sample(rng) for _ in range(40)]
    reference = ReferenceAdapter()
    for text in walks:
        assert grammar.rejection(text) is None, markers.visible(text)
        calls = generated_calls(text)
        parsed = reference.parse_whole(request, Delta(text)).tool_calls
        assert [(c.id, c.name, c.arguments) for c in calls] == [
            (c.id, c.name, c.arguments) for c in parsed
        ]
    assert len(set(walks)) == len(walks)
    assert any(len(generated_calls(t)) > 1 for t in walks)
    first_characters = {c.arguments[0] for t in walks for c in generated_calls(t)}
    if engine == "sglang":  # its grammar forces an object on a non-strict tool
        assert first_characters == {"{"}
    else:  # vLLM's admits any JSON there: class B
        assert first_characters - {"{"}, first_characters


def test_the_grammar_inventory_owes_a_cell_for_every_case_not_declined_and_every_walk():
    """A worker that lost a cell leaves the run short of its plan (so the gate refuses it); the
    ``auto`` cases an engine declines and the walks it drew move the plan, not the count."""
    from k2conform.grammar.cli import inventory

    whole = {"declined": ["y_a"], "samples": [{"id": "y_sample_x"}], "cells": [{}, {}, {}]}
    assert inventory([(3, whole)]) == {"planned": 3, "run": 3}
    lost = {**whole, "cells": [{}, {}]}
    assert inventory([(3, whole), (3, lost)]) == {"planned": 6, "run": 5}
    # each worker is owed its own cases (a format's adapter gets that format's cases only)
    k3 = {"declined": [], "samples": [], "cells": [{}]}
    assert inventory([(3, whole), (2, k3)]) == {"planned": 5, "run": 4}


def test_kimi_k3_cases_go_through_vllms_k3_tag_and_parser_without_walks():
    """A K3 case goes to the K3 adapter of the engine (``delivery.modes.GRAMMAR_ENGINES``),
    judged by the tag vLLM builds for it (``get_kimi_k3_structural_tag``): the constrained K3
    cases are accepted; a string value holding ``<|close|>`` (well-formed: string values are
    raw) is not, since the tag's argument text excludes it.  No walks: their vocabulary is
    K2's."""
    from k2conform.grammar.cli import constrainable_cases
    from k2conform_adapters.vllm_k3 import VllmK3Adapter

    k3_cases = [c for c in constrainable_cases(None, ["*k3*"]) if c.format == "k3"]
    assert {c.id for c in k3_cases} >= {"y_k3_tool_choice_required", "y_k3_tool_choice_named"}
    assert modes.GRAMMAR_ENGINES["vllm"]["k3"] == VllmK3Adapter.name
    assert modes.grammar_engine(VllmK3Adapter.name) == "vllm"
    adapter = VllmK3Adapter()
    required = k3_cases[0].request
    assert adapter.structural_tag(replace(required, tool_choice="auto")) is None
    assert "<|open|>tools<|sep|>" in adapter.structural_tag(
        replace(required, tool_choice="required")
    )
    constrained = tuple(c for c in k3_cases if c.request.tool_choice != "auto")
    job = Job("vllm-k3", constrained, 1, 5, CellSettings())
    document = run_job(job)
    assert document["samples"] == [] and {c["outcome"] for c in document["cells"]} == {"agree"}
    case = next(c for c in constrained if c.request.tool_choice == "required")
    value = "a<|close|>b"
    held = replace(
        case, id="y_k3_close_in_value", model_output=case.model_output.replace("Paris", value)
    )
    assert value in held.model_output
    (cell,) = run_job(Job("vllm-k3", (held,), 1, 0, CellSettings()))["cells"]
    assert (cell["outcome"], cell["fields"]) == ("differs", ["grammar"])


def test_sglangs_k3_tag_holds_after_think_stops_at_the_tools_closer_and_reads_tokens():
    """SGLang's K3 server (docs/grammar.md): the grammar holds from the reasoning parser's
    think closer on (``ReasonerGrammarObject``), generation stops at the tools closer
    (``tool_call_stop``), and the tag names ``<|close|>`` as a token.  So reasoning that writes
    a call opener is accepted, though fed from its start the tag rejects it (its free text
    excludes the opener); ``required`` is accepted, though the tag ends at the tools closer;
    a string value holding the ``<|close|>`` token is
    rejected where the same text spelled from ordinary pieces is not; and a call with no
    argument is rejected for a tool whose properties are all optional (the tag asks for one)."""
    from k2conform.grammar.check import output_pieces
    from k2conform.k3 import markers as k3
    from k2conform_adapters.sglang_k3 import SglangK3Adapter

    assert modes.GRAMMAR_ENGINES["sglang"]["k3"] == SglangK3Adapter.name
    adapter = SglangK3Adapter()
    k3_dir = ROOT / "corpus" / "k3"
    thinking, required, in_value, empty = (
        load_case(k3_dir / f"{name}.json")
        for name in (
            "y_k3_think_then_call",
            "y_k3_tool_choice_required",
            "y_k3_string_with_special_tokens",
            "y_k3_empty_arguments",
        )
    )
    use = adapter.grammar_use(thinking.request)
    assert use.think_end == k3.closer("think") and k3.closer("tools") in use.stops
    assert k3.CLOSE in use.tokens
    musing = replace(
        thinking,
        id="y_k3_call_opener_in_reasoning",
        model_output=thinking.model_output.replace(
            use.think_end, '<|open|>call tool="get_weather"' + use.think_end, 1
        ),
    )
    tag = CompiledTag(adapter.structural_tag(musing.request), use.tokens)
    text = modes.engine_output(musing.model_output)
    assert "<|open|>cal" in tag.rejection_of(output_pieces(text, use.tokens), text, must_end=True)

    def judged(case):
        (cell,) = run_job(Job("sglang-k3", (case,), 1, 0, CellSettings()))["cells"]
        return cell["outcome"], cell["fields"], cell["observed"]["meta"]["grammar"]["rejection"]

    assert judged(thinking) == judged(musing) == ("agree", [], None)
    assert judged(required) == ("agree", [], None)
    outcome, fields, rejection = judged(in_value)
    assert (outcome, fields) == ("differs", ["grammar"]) and "'d'" in rejection
    inner = in_value.model_output.index(k3.CLOSE + "d")
    assert judged(replace(in_value, spelled_markers=(inner,)))[:2] == ("agree", [])
    outcome, fields, rejection = judged(empty)
    assert (outcome, fields) == ("differs", ["grammar"]) and k3.CLOSE in rejection


def test_generated_calls_keep_marker_text_inside_strings():
    text = (
        markers.SECTION_BEGIN
        + markers.CALL_BEGIN
        + "functions.a.b:3"
        + markers.ARGUMENT_BEGIN
        + '{"q": "x'
        + markers.CALL_END
        + 'y"}'
        + markers.CALL_END
        + markers.CALL_BEGIN
        + "functions.c:4"
        + markers.ARGUMENT_BEGIN
        + "[1]"
        + markers.CALL_END
        + markers.SECTION_END
    )
    calls = generated_calls(text)
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("functions.a.b:3", "a.b", '{"q": "x' + markers.CALL_END + 'y"}'),
        ("functions.c:4", "c", "[1]"),
    ]


def test_a_case_outside_its_request_must_be_rejected_and_any_other_well_formed_one_accepted():
    """The cell rule on vLLM's real grammars: an output outside the request (a second call under
    a named tool_choice) agrees when rejected; the same output without that tag is a grammar
    finding, and so is an accepted output tagged outside the request."""
    two_calls = load_case(GRAMMAR_CASES / "y_grammar_named_two_calls.json")
    one_call = load_case(GRAMMAR_CASES / "y_grammar_named_single_call.json")
    untagged = replace(two_calls, id="y_untagged", tags=())
    mistagged = replace(one_call, id="y_mistagged", tags=(OUTSIDE_REQUEST,))
    job = Job("vllm", (two_calls, one_call, untagged, mistagged), 1, 0, CellSettings())
    cells = {c["case"]: c for c in run_job(job)["cells"]}
    assert {k: (c["outcome"], c["fields"]) for k, c in cells.items()} == {
        two_calls.id: ("agree", []),
        one_call.id: ("agree", []),
        "y_untagged": ("differs", ["grammar"]),
        "y_mistagged": ("differs", ["grammar"]),
    }
    assert cells["y_untagged"]["diffs"][0]["observed"].startswith("rejected at character")
    assert cells["y_mistagged"]["diffs"][0] == {
        "field": "grammar",
        "expected": "rejected",
        "observed": "accepted",
        "how": "grammar",
    }


def test_a_grammar_findings_reproduction_command_draws_it_again():
    sample = sample_id("sglang", 6, "y_grammar_required_strict_schema")
    assert source_of(sample) == "y_grammar_required_strict_schema"
    assert source_of("n_grammar_required_no_call") == "n_grammar_required_no_call"
    cell = Cell(sample, "sglang", modes.GRAMMAR_MODE, CellOutcome.DIFFERS)
    assert repro_command(cell, 5) == (
        "k2conform grammar --engine sglang --case y_grammar_required_strict_schema --seed 5"
    )
    # a K3 case's cell is its engine's K3 adapter's: the command names the engine
    k3 = Cell("y_k3_tool_choice_required", "vllm-k3", modes.GRAMMAR_MODE, CellOutcome.DIFFERS)
    assert repro_command(k3, 5) == (
        "k2conform grammar --engine vllm --case y_k3_tool_choice_required --seed 5"
    )


# -- the command's usage errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--samples", "-1"], "--samples must be 0 or more"),
        (["--timeout", "0"], "a deadline must be more than 0 seconds"),
        (["--case", "no_such_case_*"], "no case with tools"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = k2conform("grammar", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_a_missing_environment_names_the_command_that_builds_it(tmp_path):
    done = k2conform("grammar", "--engine", "sglang", "--venv-root", str(tmp_path))
    assert done.returncode == 2
    assert "k2conform setup-parsers grammar-sglang" in done.stderr and done.stderr.count("\n") == 1


# -- the command itself, with each engine's pinned xgrammar --------------------------------------


def _pinned_environments() -> None:
    for engine, name in ENVIRONMENTS.items():
        if not installed(environments()[name], VENVS):
            missing(f"{engine}'s grammar environment is not built: make grammars")


PINS = {"vllm": "0.2.8", "sglang": "0.2.7"}


@pytest.mark.grammar
def test_class_b_reproduced_with_each_engines_pinned_xgrammar(tmp_path, sglang):
    """Class B (docs/grammar.md): vLLM's required grammar (xgrammar 0.2.8) admits string, array
    and number arguments of a non-strict tool, and vLLM's parser keeps them as the spec says;
    SGLang's grammar (0.2.7) rejects them; SGLang's one-shot parser drops them while its
    stream-token path keeps them."""
    _pinned_environments()
    out = tmp_path / "grammar.json"
    cases = [
        "n_grammar_required_string_arguments",
        "n_grammar_required_array_arguments",
        "n_grammar_required_number_arguments",
    ]
    done = k2conform(
        "grammar", *(a for c in cases for a in ("--case", c)), "--samples", "0", "--json", str(out)
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cells = {(c["adapter"], c["case"]): c for c in json.loads(out.read_text())["cells"]}
    assert len(cells) == 6
    for case_id in cases:
        for engine, accepted in (("vllm", True), ("sglang", False)):
            cell = cells[(engine, case_id)]
            facts = cell["observed"]["meta"]["grammar"]
            assert (cell["outcome"], facts["accepted"], facts["xgrammar"]) == (
                "agree",
                accepted,
                PINS[engine],
            )
        case = load_case(GRAMMAR_CASES / f"{case_id}.json")
        assert sglang.parse_whole(case.request, Delta(case.model_output)).tool_calls == ()
        deltas = modes.deliveries(case.model_output, "stream-token", _tokenizer())[0].deltas
        streamed = [e for e in sglang.parse_stream(case.request, deltas) if e.tool_calls]
        assert (
            "".join(d.arguments or "" for e in streamed for d in e.tool_calls)
            == case.expected.tool_calls[0].arguments
        )


def _tokenizer():
    from k2conform.delivery.tokenizer import load_tokenizer

    return load_tokenizer(None)


@pytest.mark.grammar
def test_the_grammar_lane_passes_its_baseline_and_joins_the_matrix_as_a_column(
    tmp_path, tmp_path_factory
):
    """The grammar lane as ``make matrix-grammar`` runs it (.ci/run runs no other): the whole
    corpus's constrained cases and 20 walks per grammar, both engines pinned, gated by
    baseline-grammar.json (make's exit status 0); then merged beside a run as one more column."""
    _pinned_environments()
    command = make_command("grammar-lane", GRAMMAR_REPORT="{root}")
    root, done = run_once(tmp_path_factory, "grammar-lane", command, timeout=900)
    assert done["rc"] == 0, done["stdout"][-3000:] + done["stderr"][-3000:]
    out = root / "results.json"
    document = json.loads(out.read_text())
    assert document["modes"] == [modes.GRAMMAR_MODE] and document["gate"]["passed"]
    assert document["gate"]["baselined"] > 0 and document["gate"]["new"] == 0
    by_engine = {a["name"]: a for a in document["adapters"]}
    assert set(by_engine) == {"vllm", "sglang", "vllm-k3", "sglang-k3"}  # K3: each K3 adapter
    samples = [c for c in document["cases"] if c["id"].startswith("y_sample_")]
    assert len(samples) == 2 * 20 * len({source_of(c["id"]) for c in samples})
    assert document["inventory"] == {
        "planned": len(document["cells"]),
        "run": len(document["cells"]),
    }
    run = tmp_path / "run.json"
    k2conform(
        "run",
        "--adapter",
        "vllm",
        "--delivery",
        "whole",
        "--case",
        "y_grammar_*",
        "--json",
        str(run),
    )
    merged = tmp_path / "merged.json"
    joined = k2conform(
        "merge", str(run), str(out), "--json", str(merged), "--markdown", str(tmp_path / "m.md")
    )
    assert joined.returncode == 1, joined.stderr  # findings in both columns, and no baseline given
    merged_document = json.loads(merged.read_text())
    assert merged_document["modes"] == ["whole", modes.GRAMMAR_MODE]
    assert merged_document["inventory"]["run"] == len(merged_document["cells"])
    assert "| whole | grammar |" in (tmp_path / "m.md").read_text()
    clash = k2conform("merge", str(out), str(out))
    assert clash.returncode == 2 and "is also in" in clash.stderr
