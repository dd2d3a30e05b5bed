"""The path from a fuzz finding to a committed case a user can trust: the minimiser holds the
matrix's judgement (verdict class and differing fields), "new" means new to the corpus, the
baselines and the catalogue, a fuzz run ends with one verdict line, and ``minimize
--baseline`` writes the entries the gate then refuses until they are reviewed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from k2conform import markers
from k2conform.model import Request

ROOT = Path(__file__).resolve().parent.parent
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
REQUEST = Request(tools=(TOOL,), thinking=True)
#: A stray think closer (vLLM keeps one in content: content-drift) before a call whose
#: arguments are not JSON (the verdict rule makes the case ``n_``).
BAD_CALL = (
    f"{markers.SECTION_BEGIN}{markers.CALL_BEGIN}functions.get_weather:0{markers.ARGUMENT_BEGIN}"
    f'{{"city": }}{markers.CALL_END}{markers.SECTION_END}'
)
TEXT = "a</think>b</think>" + BAD_CALL

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("vllm")
    from k2conform.fuzzing.differential import Differential

    return Differential(["vllm"])


def test_the_minimiser_keeps_the_verdict_class_the_fuzz_kind_alone_loses(engine):
    """Holding only the fuzzer's kind, the shrunk input drops the broken call and becomes a
    ``y_`` case; held to the matrix's judgement it stays ``n_`` with the same fields."""
    from k2conform.case.verdict import verdict
    from k2conform.minimize.delta_debug import JudgedEngine, minimize_input

    assert verdict(REQUEST, TEXT).prefix == "n"
    raw = minimize_input(engine, REQUEST, TEXT, "whole", None, "vllm:content-drift", judged=False)
    assert verdict(raw[2].request, raw[2].text).prefix == "y"
    observation, start, small, minimizer = minimize_input(
        engine, REQUEST, TEXT, "whole", None, "vllm:content-drift"
    )
    assert observation is not None and len(small.text) < len(start.text)
    assert verdict(small.request, small.text).prefix == "n"
    held = minimizer.engine
    assert isinstance(held, JudgedEngine)
    before, after = held.start_cells["vllm"], held.cells_of(small, "whole")["vllm"]
    assert (after.outcome, after.fields) == (before.outcome, before.fields)
    # the fuzz kind alone would have accepted the y_ input: the hold is what refused it
    assert engine.observe(raw[2].request, raw[2].text, "whole").signature
    assert not held.observe(raw[2].request, raw[2].text, "whole").signature


def test_the_minimiser_keeps_the_differing_fields_the_fuzz_kind_alone_loses(engine):
    """vLLM keeps prose before ``<think>`` out of the reasoning (reasoning differs) and takes
    arguments from a call with no ``<|tool_call_begin|>`` (arguments differ); the fuzzer's
    kind is the first, wrong-arguments.  Holding only it, the shrunk input loses what the
    matrix judged; held to the matrix's fields, both stay."""
    from k2conform.minimize.delta_debug import minimize_input

    bash = {
        "type": "function",
        "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}},
    }
    request = Request(tools=(bash,), thinking=True)
    text = (
        "Sure.<think>The user wants a greeting.</think>Hello!"
        f"{markers.SECTION_BEGIN}{markers.CALL_BEGIN}functions.bash:0{markers.ARGUMENT_BEGIN}"
        '{"command": "ls"}'
        f'functions.bash:1{markers.ARGUMENT_BEGIN}{{"command": "pwd"}}'
        f"{markers.CALL_END}{markers.SECTION_END}"
    )  # n_struct_missing_call_begin_no_spaces after y_think_prose_before_then_answer
    found = minimize_input(engine, request, text, "whole", None, "vllm:wrong-arguments")
    held = found[3].engine
    assert held.start_cells["vllm"].fields == ("arguments", "reasoning")
    assert held.cells_of(found[2], "whole")["vllm"].fields == ("arguments", "reasoning")
    raw = minimize_input(engine, request, text, "whole", None, "vllm:wrong-arguments", False)
    assert held.cells_of(raw[2], "whole")["vllm"].fields != ("arguments", "reasoning")


def test_a_fuzz_kind_the_matrix_files_as_no_finding_is_refused(engine):
    """An ``i_`` input whose one-shot result is implementation-defined: the fuzzer's kind
    holds, the matrix files nothing, so there is no case to write."""
    from k2conform.minimize.delta_debug import Candidate, JudgedEngine, NoMatrixFinding

    from k2conform.case.corpus import load_case

    case = load_case(ROOT / "corpus" / "findings" / "i_fuzz_vllm_wrong-name_69bdf44a.json")
    start = Candidate(case.request, case.model_output, None)
    assert engine.observe(start.request, start.text, "whole").signature
    with pytest.raises(NoMatrixFinding, match="impl-defined, no finding"):
        JudgedEngine.for_signature(engine, "vllm:wrong-name", start, "whole")


def _finding(tmp_path: Path, engine) -> Path:
    from k2conform.fuzzing.differential import finding_case, write_case_file

    observation = engine.observe(REQUEST, TEXT, "whole")
    case = finding_case(REQUEST, TEXT, observation, "differential", focus="vllm:content-drift")
    return write_case_file(case, tmp_path / "findings")


def test_new_means_new_to_the_corpus_the_baselines_and_the_catalogue(tmp_path, engine):
    """The finding is judged as a matrix cell, then looked up: the shipped baseline and
    catalogue know vLLM's content drift in one-shot parses; an empty project knows nothing;
    a case whose output is already a corpus case is named by it."""
    from k2conform.minimize.known import Known, judge_table

    path = _finding(tmp_path, engine)
    rows = [{"key": "whole vllm:content-drift", "count": 3, "file": str(path)}]
    unseen = [{"key": "whole vllm:crash", "count": 0, "file": str(path)}]
    (row,) = judge_table(rows + unseen, 10.0, Known.load())
    assert row.behaviour is not None and row.case == path.stem
    assert (row.behaviour.adapter, row.behaviour.outcome) == ("vllm", "differs")
    assert "content" in row.behaviour.fields
    assert not row.new and any(w.startswith("baseline: baseline.json") for w in row.known)
    assert any(w.startswith("catalogue: ") for w in row.known)
    (fresh,) = judge_table(rows, 10.0, Known())
    assert fresh.new and "NEW: not in the corpus" in fresh.line()
    corpus_case = ROOT / "corpus" / "findings" / "n_fuzz_vllm_extra-call_c82955e6.json"
    copy = json.loads(corpus_case.read_text())
    copy["id"] = "n_fuzz_copy"
    twin = tmp_path / "n_fuzz_copy.json"  # a case file is named by its id
    twin.write_text(json.dumps(copy))
    rows = [{"key": "whole vllm:extra-call", "count": 1, "file": str(twin)}]
    (same,) = judge_table(rows, 10.0, Known.load())
    assert same.known[0] == "corpus: n_fuzz_vllm_extra-call_c82955e6 is the same output"


FAKE_TARGET = """
import json, sys
table, case = sys.argv[1], sys.argv[2]
row = {"key": "whole vllm:content-drift", "count": 2, "file": case, "new": True}
json.dump({"target": "differential", "executions": 7, "signatures": [row]}, open(table, "w"))
print("libFuzzer chatter", file=sys.stderr)
print("stat::number_of_executed_units: 7", file=sys.stderr)
"""


def test_a_fuzz_run_ends_with_a_verdict_line_and_fails_on_a_new_finding(
    tmp_path, engine, monkeypatch, capsys
):
    """libFuzzer's output goes to the log; the verdict line counts executions, findings, the
    new ones and crashes; exit 1 exactly when a finding is new (or the target crashed)."""
    from k2conform.fuzzing import cli
    from k2conform.minimize import known

    case = _finding(tmp_path, engine)
    findings = tmp_path / "findings"
    table = findings / "signatures-differential.json"
    command = [sys.executable, "-c", FAKE_TARGET, str(table), str(case)]
    log = tmp_path / "fuzz.log"
    assert cli.run_fuzz("differential", command, None, 1, findings, log) == 0
    out = capsys.readouterr().out
    assert "libFuzzer chatter" in log.read_text() and "libFuzzer chatter" not in out
    assert out.rstrip().splitlines()[-1] == (
        "k2conform fuzz differential: PASS: 7 executions, 1 distinct finding(s), 0 new to the "
        "corpus, the baselines and the catalogue, 0 crash(es)"
    )
    monkeypatch.setattr(known.Known, "load", classmethod(lambda cls, *a, **k: cls()))
    assert cli.run_fuzz("differential", command, None, 1, findings, log) == 1
    last = capsys.readouterr().out.rstrip().splitlines()
    assert last[-1].startswith("k2conform fuzz differential: NEW FINDINGS: 7 executions, 1 ")
    assert last[-2].startswith("whole vllm:content-drift: vllm differs") and "NEW" in last[-2]


def test_minimize_with_a_baseline_writes_todo_entries_the_gate_refuses(tmp_path, engine):
    """``minimize --baseline`` adds the failing cells of the written case with the reason TODO
    (what ``make matrix`` would otherwise call new), and the gate refuses them until a reviewer
    writes the why."""
    import subprocess

    from k2conform.gate.baseline import TODO, load_baseline, unreviewed_entries

    from entry_points import K2CONFORM

    path = _finding(tmp_path, engine)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"adapters": ["vllm"], "entries": []}))
    done = subprocess.run(
        [
            K2CONFORM, "minimize", str(path), "--adapter", "vllm", "--out", str(tmp_path / "out"),
            "--baseline", str(baseline),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(n_ case): known: baseline: " in done.stdout  # the shipped baseline knows it
    (written,) = (tmp_path / "out").glob("n_fuzz_*.json")
    generator = json.loads(written.read_text())["generator"]
    assert generator["cells"]["vllm"]["outcome"] == "differs"
    entries = load_baseline(baseline).entries
    assert entries and all(e.reason == TODO and e.adapter == "vllm" for e in entries)
    assert all(e.cases == (written.stem,) for e in entries)
    assert len(unreviewed_entries(entries)) == len(entries)  # what the gate refuses


def test_a_baseline_minimize_cannot_write_is_one_line_and_exit_2(tmp_path):
    """The case is written, the baseline cannot be: a usage error that says both, no
    traceback."""
    from k2conform.errors import UsageError
    from k2conform.gate.baseline import load_baseline
    from k2conform.minimize.cli import add_baseline_entries

    good = tmp_path / "baseline.json"
    good.write_text(json.dumps({"adapters": [], "entries": []}))
    case = type("Case", (), {"id": "i_fuzz_x"})()
    with pytest.raises(UsageError, match="the case is written \\(i_fuzz_x\\), the baseline is"):
        add_baseline_entries(tmp_path, load_baseline(good), case)  # a folder: not writable
