"""Markers spelled from ordinary token pieces (sgl-project/sglang PR #32677): the same text with
other token ids, from the tokenizer through a case file, the matrix's cell, the differential
fuzzer's findings and ``minimize``; and the detokenizer's spaces around added tokens
(vllm-project/vllm#33457) as a mutation."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from k2conform import markers
from k2conform.case.corpus import CorpusError, case_from_json, load_case
from k2conform.case.verdict import case_verdict
from k2conform.delivery import modes
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform.fuzzing.envelope import DECLARE_TOOLS, SPELLED, FuzzInput, decode
from k2conform.fuzzing.mutator import apply, space_added_tokens
from k2conform.model import Request

ROOT = Path(__file__).resolve().parent.parent
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
REQUEST = Request(tools=(TOOL,))
CALL = (
    f"{markers.CALL_BEGIN}functions.get_weather:0{markers.ARGUMENT_BEGIN}"
    f'{{"city": "Paris"}}{markers.CALL_END}'
)
TEXT = f"Hi{markers.SECTION_BEGIN}{CALL}{markers.SECTION_END}"
#: Where the call's begin marker starts: the one spelled below.
AT = TEXT.index(markers.CALL_BEGIN)

pytestmark = pytest.mark.filterwarnings("ignore")


def _case(**extra):
    data = {
        "id": "i_token_axis_spelled_call_begin",
        "kind": "completion",
        "description": "the call's begin marker written from ordinary pieces",
        "tags": ["TOKEN.spelled"],
        "source": "sgl-project/sglang PR #32677",
        "request": REQUEST.to_json(),
        "model_output": TEXT,
        "spelled_markers": [AT],
    }
    data.update(extra)
    return case_from_json(data)


# -- the tokenizer -------------------------------------------------------------------------------


def test_a_spelled_marker_is_the_same_text_in_ordinary_tokens():
    tokenizer = load_tokenizer()
    plain, spelled = tokenizer.tokenize_spans(TEXT), tokenizer.tokenize_spans(TEXT, (AT,))
    assert "".join(p for _, p in spelled) == TEXT
    ids = [i for i, _ in spelled]
    assert markers.SPECIAL_TOKEN_IDS[markers.CALL_BEGIN] not in ids  # spelled ...
    for marker in (
        markers.SECTION_BEGIN,
        markers.ARGUMENT_BEGIN,
        markers.CALL_END,
        markers.SECTION_END,
    ):
        assert markers.SPECIAL_TOKEN_IDS[marker] in ids  # ... and only that one
    pieces = tokenizer.encode_ordinary(markers.CALL_BEGIN)
    assert len(pieces) > 1 and not any(tokenizer.is_added(i) for i in pieces)
    assert ids[3 : 3 + len(pieces)] == pieces and len(spelled) == len(plain) - 1 + len(pieces)
    with pytest.raises(ValueError, match="offset 3"):
        tokenizer.tokenize_spans(TEXT, (3,))  # no added token starts there


def test_only_token_aligned_deliveries_carry_a_spelled_marker():
    tokenizer = load_tokenizer()
    token = modes.deliveries(TEXT, "stream-token", tokenizer, spelled=(AT,))[0]
    assert markers.SPECIAL_TOKEN_IDS[markers.CALL_BEGIN] not in [
        i for d in token.deltas for i in d.token_ids
    ]
    with pytest.raises(ValueError, match="no token ids"):
        modes.deliveries(TEXT, "stream-char", tokenizer, spelled=(AT,))


# -- the case file -------------------------------------------------------------------------------


def test_a_case_records_its_spelled_markers_and_is_implementation_defined(tmp_path):
    case = _case()
    assert case.spelled_markers == (AT,)
    assert case.to_json()["spelled_markers"] == [AT]
    assert case_verdict(case).prefix == "i"
    assert case_verdict(_case(spelled_markers=[])).prefix == "y"
    for bad, why in (([AT + 1], "not where"), ([AT, AT], "ascend"), (["x"], "integer")):
        with pytest.raises(CorpusError, match=why):
            _case(spelled_markers=bad)


def test_a_text_level_mode_plans_no_cell_of_a_spelled_case():
    from k2conform.run.cell import case_unfit

    assert "text-level" in case_unfit(_case(), "stream-char")
    assert case_unfit(_case(), "stream-token") is None


@pytest.fixture(scope="module")
def vllm():
    pytest.importorskip("vllm")
    from k2conform.adapter.registry import create_adapter, load

    adapter = create_adapter("vllm")
    assert load(adapter).status == "ok"
    return adapter


def test_vllms_stream_loses_the_call_when_its_begin_marker_is_spelled(vllm):
    """The matrix judges a spelled case: vLLM's one-shot parse reads the text and finds the
    call; its stream matches markers by token id and drops it (stream != one-shot: a finding
    even of an ``i_`` case).  Unspelled, the same cell agrees."""
    from k2conform.run.cell import run_cell

    spelled = run_cell(vllm, _case(), "stream-token")
    assert spelled.outcome.value == "differs" and "stream-invariant" in spelled.fields
    expected = {
        "content": "Hi",
        "reasoning": None,
        "tool_calls": [
            {
                "id": "functions.get_weather:0",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            }
        ],
    }
    plain = _case(id="y_token_axis_plain", spelled_markers=[], expected=expected)
    assert run_cell(vllm, plain, "stream-token").outcome.value == "agree"
    assert run_cell(vllm, _case(), "whole").outcome.value == "impl-defined"


def test_a_spelled_k3_think_closer_keeps_vllms_k3_stream_in_think(corpus):
    """The K3 corpus's spelled think closer (``i_k3_spelled_think_close``): its token-aligned
    deliveries send the ``<|close|>`` as ordinary ids; vLLM's K3 stream leaves think on the
    closer's ids only, so it loses the call and streams the tools markup as content, while its
    one-shot parse and SGLang's K3 stream (text) keep the call.  Unspelled, vLLM's stream
    agrees with its one-shot parse."""
    pytest.importorskip("vllm")
    pytest.importorskip("sglang")
    from k2conform.adapter.registry import create_adapter, load
    from k2conform.run.cell import run_cell

    case = next(c for c in corpus.completions if c.id == "i_k3_spelled_think_close")
    assert case.model_output[case.spelled_markers[0] :].startswith("<|close|>think")
    tokenizer = load_tokenizer()
    [close] = tokenizer.encode("<|close|>")
    spelled = [i for i, _ in tokenizer.tokenize_spans(case.model_output, case.spelled_markers)]
    plain = [i for i, _ in tokenizer.tokenize_spans(case.model_output)]
    assert spelled.count(close) == plain.count(close) - 1
    vllm, sglang = create_adapter("vllm-k3"), create_adapter("sglang-k3")
    assert load(vllm).status == "ok" and load(sglang).status == "ok"
    streamed = run_cell(vllm, case, "stream-token")
    assert streamed.outcome.value == "differs" and "stream-invariant" in streamed.fields
    assert not streamed.observed.tool_calls
    assert "<|open|>tools<|sep|>" in streamed.observed.content
    for adapter, mode in ((vllm, "whole"), (sglang, "stream-token")):
        kept = run_cell(adapter, case, mode)
        assert kept.outcome.value == "impl-defined", (adapter.name, mode, kept.fields)
        assert [c.name for c in kept.observed.tool_calls] == ["get_weather"]
    unspelled = replace(case, id="y_k3_unspelled_think_close", spelled_markers=())
    assert run_cell(vllm, unspelled, "stream-token").outcome.value == "agree"


# -- the fuzzer ----------------------------------------------------------------------------------


def test_the_spelled_flag_picks_one_marker_before_the_end_of_turn():
    fuzz = FuzzInput(TEXT + markers.IM_END + markers.SECTION_BEGIN, DECLARE_TOOLS | SPELLED)
    (at,) = fuzz.spelled_markers()
    assert any(TEXT.startswith(m, at) for m in markers.TOOL_MARKERS)
    assert decode(fuzz.encode()).spelled_markers() == (at,)
    assert FuzzInput(TEXT, DECLARE_TOOLS).spelled_markers() == ()
    assert FuzzInput("no markers", SPELLED).spelled_markers() == ()
    import random

    assert apply("spell", FuzzInput(TEXT), random.Random(0)).flags & SPELLED


def test_the_detokenizers_spaces_surround_every_added_token():
    spaced = space_added_tokens(f"a{markers.THINK_END}{TEXT}", None)
    assert spaced == (
        f"a {markers.THINK_END} Hi {markers.SECTION_BEGIN} {markers.CALL_BEGIN} "
        "functions.get_weather:0 "
        f'{markers.ARGUMENT_BEGIN} {{"city": "Paris"}} {markers.CALL_END} {markers.SECTION_END}'
    )
    # the singular section marker is ordinary text in the real vocabulary: no spaces
    assert space_added_tokens(f"x{markers.SECTION_BEGIN_SINGULAR}y", None) == (
        f"x{markers.SECTION_BEGIN_SINGULAR}y"
    )


@pytest.fixture(scope="module")
def engine(vllm):
    from k2conform.fuzzing.differential import Differential

    return Differential(["vllm"])


def test_a_spelled_finding_is_its_own_axis_and_its_case_replays_it(engine, tmp_path):
    """The differential engine delivers the spelled marker, keys the finding apart from the
    same kind seen unspelled (else the plain finding would hide it), and writes a case file
    with ``spelled_markers`` that the matrix judges as a finding again."""
    from k2conform.fuzzing.differential import FindingStore, finding_case, judge_finding

    observation = engine.observe(REQUEST, TEXT, "stream-token", spelled=(AT,))
    assert observation.signature == "vllm:dropped-call"
    assert observation.axis == "stream-token+spelled" and observation.spelled == (AT,)
    store = FindingStore(tmp_path, "differential")
    store.counts["stream-token vllm:dropped-call"] = 1
    store.files["stream-token vllm:dropped-call"] = "elsewhere.json"
    assert store.is_new(observation)
    (key,) = store.record(REQUEST, TEXT, observation)
    assert key == "stream-token+spelled vllm:dropped-call"
    case = load_case(store.files[key])
    assert case.spelled_markers == (AT,) and case.id.startswith("i_")
    cell = judge_finding(case, engine.adapters[0], "stream-token", 10.0)
    assert cell.outcome.value == "differs"
    # a later run reads the saved case back under the same key
    assert FindingStore(tmp_path, "differential").files[key] == store.files[key]
    # text-level deliveries send no ids: nothing is spelled there
    whole = finding_case(REQUEST, TEXT, engine.observe(REQUEST, TEXT, "stream-char"), "x")
    assert whole.spelled_markers == ()


def test_minimize_keeps_the_spelled_marker_where_the_text_shrinks(engine, tmp_path):
    """A raw fuzz input with the spelled flag: ``minimize`` shrinks the text around the spelled
    marker, moves its offset with the text and writes a case that still spells it."""
    from k2conform.minimize.delta_debug import Candidate, remove

    moved = remove(Candidate(REQUEST, TEXT, None, (AT,)), [(0, 2)])
    assert moved.spelled == (AT - 2,) and moved.text.startswith(
        markers.SECTION_BEGIN + markers.CALL_BEGIN
    )
    gone = remove(Candidate(REQUEST, TEXT, None, (AT,)), [(AT + 3, AT + 4)])
    assert gone.spelled == ()  # a character of the spelled marker went: nothing to spell

    raw = FuzzInput("Some text. " + TEXT, DECLARE_TOOLS | SPELLED)
    at = raw.spelled_markers()[0]
    path = tmp_path / "crash-input"
    path.write_bytes(raw.encode())
    out = tmp_path / "cases"
    import subprocess

    from entry_points import K2CONFORM

    done = subprocess.run(
        [K2CONFORM, "minimize", str(path), "--adapter", "vllm", "--delivery", "stream-token",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (written,) = out.glob("*.json")
    case = load_case(written)
    assert case.spelled_markers and len(case.model_output) < len(raw.text)
    marker = next(m for m in markers.SPECIAL_TOKEN_IDS if raw.text.startswith(m, at))
    assert case.model_output.startswith(marker, case.spelled_markers[0])
    assert json.loads(written.read_text())["spelled_markers"] == list(case.spelled_markers)


def test_a_spelled_behaviour_is_new_where_only_unspelled_cases_show_its_fields():
    """Spelled markers are a family of their own: vLLM's stream dropping calls is known from
    unspelled cases, for another reason; the same fields on the spelled axis are new."""
    from k2conform.minimize.known import Judgement, Known, axis_family

    known = Known.load()
    case = _case()
    plain = Judgement("vllm", "differs", ("stream-invariant",), "stream-token")
    spelled = Judgement("vllm", "differs", ("stream-invariant",), "stream-token+spelled")
    assert known.lookup(case, plain) and not known.lookup(case, spelled)
    assert axis_family("stream-token+spelled") == "token-aligned+spelled"
    assert axis_family("whole") == axis_family("stream-token") != axis_family("stream-char")
    known.spelled.add("i_some_spelled_case")  # a baseline entry of a spelled case knows it
    entry = next(e for _, e in known.baselines if e.adapter == "vllm")
    known.baselines.append(
        ("b.json", replace(entry, cases=("i_some_spelled_case",), deliveries=("stream-token",),
                           outcome="differs", fields=("stream-invariant",)))
    )  # fmt: skip
    assert known.lookup(case, spelled)[0].startswith("baseline: b.json")


def test_a_spelled_input_reports_only_what_the_spelling_changed(engine):
    """A stray think closer makes vLLM's content differ from the reference whatever the token
    ids (a finding of the text, which the unspelled input shows); spelling the section end,
    which vLLM's stream does not miss, adds nothing, and the one-shot parse reads no ids."""
    request = Request(tools=(TOOL,), thinking=True)
    text = "a</think>b</think>" + TEXT
    end = text.index(markers.SECTION_END)
    assert engine.observe(request, text, "stream-token").signature
    assert engine.observe(request, text, "stream-token", spelled=(end,)).signature == ""
    assert (
        engine.observe(request, text, "whole", spelled=(text.index(markers.CALL_BEGIN),)).signature
        == ""
    )
    spelled = engine.observe(
        request, text, "stream-token", spelled=(text.index(markers.CALL_BEGIN),)
    )
    assert spelled.signature == "vllm:dropped-call" and spelled.axis == "stream-token+spelled"
