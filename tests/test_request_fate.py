"""Request-side failures (issue 27 item 4): what a server does with the request itself, before
any reply can be judged.  A request-level case says what it must do (``expected.request``:
accepted, rejected, uncallable); a server adapter reports what it did (``RequestRefused``); the
cell judges one against the other in ``judge.cell``, and ``k2conform grammar`` reads the fate
off each engine's grammar."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from k2conform.adapter import ParserCrash, RequestRefused, call_parser
from k2conform.adapter.harness import guarded
from k2conform.adapter.registry import create_adapter
from k2conform.case.corpus import CorpusError, case_from_json, load_corpus
from k2conform.delivery import modes
from k2conform.delivery.tokenizer import load_tokenizer
from k2conform.grammar.check import Job, run_job
from k2conform.judge.cell import judge_result
from k2conform.model import RequestFate, Result, request_fate
from k2conform.run.cell import CellSettings, case_unfit
from k2conform.run.matrix import plan
from k2conform_adapters import vllm_server

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = ROOT / "corpus" / "requests"


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in load_corpus(REQUESTS).completions}


def _raising(error: Exception):
    def call():
        raise error

    return call


def _refused(fate: RequestFate) -> Result:
    return guarded(_raising(RequestRefused(fate, "HTTP 400: no")))


# -- judging ---------------------------------------------------------------------------------


def test_a_refused_request_is_a_result_with_its_fate_not_a_crash():
    result = _refused(RequestFate.REJECTED)
    assert result.outcome == "ok" and result.tool_calls == ()
    assert request_fate(result) == (RequestFate.REJECTED, "HTTP 400: no")
    assert request_fate(Result()) == (RequestFate.ACCEPTED, "")


def test_the_fate_is_judged_against_the_cases_and_only_then_the_reply(cases):
    served = cases["y_request_schema_id_keyword"]  # expects accepted, and one call
    refused = cases["y_request_required_without_tools"]  # expects rejected
    call = served.expected.tool_calls[0]
    judged = {
        "served, refused": judge_result(served, _refused(RequestFate.REJECTED), None),
        "served, uncallable": judge_result(served, _refused(RequestFate.UNCALLABLE), None),
        "served, served": judge_result(served, Result(tool_calls=(call,)), None),
        "refused, refused": judge_result(refused, _refused(RequestFate.REJECTED), None),
        "refused, served": judge_result(refused, Result(content="Hello."), None),
    }
    seen = {
        k: (o.value, [(d.field, d.expected, d.observed) for d in diffs])
        for k, (o, diffs, _) in judged.items()
    }
    assert seen == {
        "served, refused": ("differs", [("request", "accepted", "rejected")]),
        "served, uncallable": ("differs", [("request", "accepted", "uncallable")]),
        "served, served": ("agree", []),
        "refused, refused": ("agree", []),
        # served against the case's word: the reply is not compared (no content diff)
        "refused, served": ("differs", [("request", "rejected", "accepted")]),
    }


def test_a_case_without_a_word_on_its_request_must_be_served_and_an_i_case_is_recorded(cases):
    plain = replace(
        cases["y_request_schema_id_keyword"],
        expected=replace(cases["y_request_schema_id_keyword"].expected, request=None),
    )
    outcome, diffs, _ = judge_result(plain, _refused(RequestFate.REJECTED), None)
    assert (outcome.value, [d.field for d in diffs]) == ("differs", ["request"])
    recorded = replace(plain, id="i_request_recorded")
    outcome, diffs, _ = judge_result(recorded, _refused(RequestFate.REJECTED), None)
    assert (outcome.value, diffs) == ("impl-defined", [])


# -- the corpus -------------------------------------------------------------------------------


def _data(**changes):
    data = json.loads((REQUESTS / "y_request_required_empty_tools.json").read_text())
    for path, value in changes.items():
        target = data
        *parents, last = path.split(".")
        for key in parents:
            target = target[key]
        target[last] = value
    return data


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"expected.request": "refused"}, "expected.request"),
        ({"expected.request": 400}, "expected.request"),
        ({"request.server_options.empty_tools": "yes"}, "request.server_options.empty_tools"),
        (
            {"request.tools": [{"type": "function", "function": {"name": "f"}}]},
            "request.server_options.empty_tools",
        ),
    ],
)
def test_a_bad_fate_or_empty_tools_is_named_by_file_and_field(changes, field):
    with pytest.raises(CorpusError) as error:
        case_from_json(_data(**changes), "corpus/requests/y_request_required_empty_tools.json")
    assert error.value.field == field and "y_request_required_empty_tools.json" in str(error.value)


def test_the_fate_round_trips_and_only_a_case_that_states_one_is_request_level(cases):
    case = cases["y_request_null_for_non_nullable_string"]
    assert case.expected.request is RequestFate.UNCALLABLE and case.request_level
    again = case_from_json(case.to_json(), "<memory>")
    assert again.expected == case.expected and again.request_level
    assert not replace(case, expected=replace(case.expected, request=None)).request_level


def test_request_level_cases_are_planned_in_the_server_modes_only(cases):
    """No parser alone judges a request: the folder plans no in-process cell, which is why the
    release lanes' inputs (.ci/lanes.py) leave corpus/requests out."""
    assert len(cases) >= 10 and all(c.request_level for c in cases.values())
    names = ("reference", "vllm", "sglang", "vllm-server")
    per_adapter = {n: modes.adapter_modes(create_adapter(n)) for n in names}
    cells = plan(list(cases.values()), names, tuple(modes.MODES), per_adapter)
    assert {adapter for _, adapter, _ in cells} == {"vllm-server"}
    assert {mode for _, _, mode in cells} == set(modes.SERVER_MODES)
    reason = case_unfit(cases["y_request_schema_id_keyword"], "whole")
    assert reason is not None and "request-level" in reason


# -- the real server's answers, read as fates -------------------------------------------------


class _ClientError(Exception):
    """What the ``openai`` client raises, as ``_served`` reads it: an HTTP answer's status and
    its parsed JSON body (``APIStatusError``), or a stream's error chunk as the body
    (``APIError``, no status: the chunk's ``code`` is the status)."""

    def __init__(self, status: int | None, body: dict) -> None:
        super().__init__(str(body))
        self.status_code, self.body = status, body


def _status_error(status: int, message: str) -> _ClientError:
    return _ClientError(status, {"error": {"message": message, "type": "X", "code": status}})


def _stream_error(message: str) -> _ClientError:
    return _ClientError(None, {"message": message, "type": "InternalServerError", "code": 500})


@pytest.mark.parametrize(
    ("error", "fate"),
    [
        (_status_error(400, "When using `tool_choice`, `tools` must be set."), "rejected"),
        (_status_error(422, "unprocessable"), "rejected"),
        (_status_error(500, vllm_server.ENDED_BY_ENGINE), "uncallable"),
        (_stream_error(vllm_server.ENDED_BY_ENGINE), "uncallable"),
        (_status_error(500, "maximum recursion depth exceeded"), None),
        (_stream_error("maximum recursion depth exceeded"), None),
        (_status_error(503, vllm_server.ENDED_BY_ENGINE), None),
    ],
)
def test_the_vllm_server_reads_a_4xx_as_rejected_its_ended_request_as_uncallable(error, fate):
    """Anything else the server answers with stays the server's crash."""
    if fate is None:
        with pytest.raises(ParserCrash):
            vllm_server._served(_raising(error))
        return
    with pytest.raises(RequestRefused) as refused:
        vllm_server._served(_raising(error))
    assert refused.value.fate.value == fate
    status = getattr(error, "status_code", None) or error.body["code"]
    assert (
        refused.value.detail == f"HTTP {status}: {error.body.get('error', error.body)['message']}"
    )


def test_a_refusal_inside_the_parsers_own_call_is_still_a_crash():
    """``call_parser`` owns what the parser raises: only the server adapter's reading of an
    HTTP answer makes a fate."""
    result = guarded(lambda: call_parser(_raising(RequestRefused(RequestFate.REJECTED, "x"))))
    assert result.outcome == "crash"


# -- the grammar lane ------------------------------------------------------------------------


def test_the_grammar_lane_reads_each_fate_off_the_engines_grammar(cases):
    """vLLM's own grammar: a call the schema allows is accepted and then parsed (agree), a null
    for a string is refused (uncallable, as the case expects), and a grammar the engine cannot
    build is the request rejected."""
    chosen = (
        cases["y_request_schema_id_keyword"],
        cases["y_request_null_for_non_nullable_string"],
    )
    cells = {c["case"]: c for c in run_job(Job("vllm", chosen, 1, 0, CellSettings()))["cells"]}
    assert {k: (c["outcome"], c["fields"]) for k, c in cells.items()} == {
        "y_request_schema_id_keyword": ("agree", []),
        "y_request_null_for_non_nullable_string": ("agree", []),
    }
    uncallable = cells["y_request_null_for_non_nullable_string"]["observed"]["meta"]["request"]
    assert uncallable["fate"] == "uncallable" and "rejected at character" in uncallable["detail"]
    # the engine's grammar accepts the output the case expects refused: a request finding
    served = replace(
        cases["y_request_schema_id_keyword"],
        id="y_request_expects_refusal",
        expected=replace(
            cases["y_request_schema_id_keyword"].expected, request=RequestFate.UNCALLABLE
        ),
    )
    (cell,) = run_job(Job("vllm", (served,), 1, 0, CellSettings()))["cells"]
    assert (cell["outcome"], cell["diffs"][0]["observed"]) == ("differs", "accepted")


def test_a_grammar_the_engine_cannot_build_is_the_request_rejected(cases, monkeypatch):
    from k2conform_adapters.vllm_parser import VllmAdapter

    def broken(self, request):
        return call_parser(_raising(ValueError("unsupported keyword $id")))

    monkeypatch.setattr(VllmAdapter, "structural_tag", broken)
    case = cases["y_request_schema_id_keyword"]
    (cell,) = run_job(Job("vllm", (case,), 1, 0, CellSettings()))["cells"]
    assert (cell["outcome"], cell["fields"]) == ("differs", ["request"])
    assert cell["diffs"][0]["observed"] == "rejected"
    assert "unsupported keyword $id" in cell["observed"]["meta"]["request"]["detail"]


def test_the_request_before_is_sent_first_with_its_own_tools_and_its_refusal_ignored(
    cases, monkeypatch
):
    """``server_options.prior_tools``: the leak case's earlier request goes out first, with the
    earlier tools and nothing else of the option; what the server makes of it is not judged."""
    case = cases["y_request_previous_schema_does_not_leak"]
    sent = []

    def whole(self, body, script):
        sent.append(body)
        if len(sent) == 1:
            raise RequestRefused(RequestFate.UNCALLABLE, "HTTP 500: Internal server error")
        return Result(tool_calls=case.expected.tool_calls)

    monkeypatch.setattr(vllm_server.VllmServerAdapter, "_whole", whole)
    monkeypatch.delenv(vllm_server.env_name("vllm-server", "MEMO"), raising=False)
    adapter = vllm_server.VllmServerAdapter()
    (delivery,) = modes.deliveries(case.model_output, "server-whole", load_tokenizer())
    result = adapter.parse_whole(case.request, delivery.deltas[0])
    assert result.tool_calls == case.expected.tool_calls
    earlier, own = sent
    assert earlier["tools"] == case.request.server_options["prior_tools"]
    assert own["tools"] == list(case.request.tools)
    assert all("prior_tools" not in body["extra_body"] for body in sent)
