"""``k2conform history`` on results of real runs.

Four "releases" of one line, ``ref-1.0`` … ``ref-4.0``: the reference parser served over the
adapter protocol under those names, each run against a small corpus of golden cases of its
own.  A deliberately wrong expectation makes the parser differ: in 2.0 and 3.0 on one case's
arguments, in 3.0 on another case's content, and in none in 1.0 and 4.0.  So the history must
say the arguments behaviour appeared in 2.0 and went away in 4.0, the content one appeared
in 3.0 and went away in 4.0.  A release that did not run a case must not count as a change,
nor hide the change of another case that shows the same behaviour (``ref-other``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from lanes import missing

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "corpus" / "golden" / "completions"
MODES = ("whole", "stream-token")
SINGLE, CONTENT = "y_spec_single_call", "y_spec_content_before_section"
PARALLEL = "y_spec_parallel_calls"


def k2conform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )


def _wrong_arguments(expected: dict) -> None:
    expected["tool_calls"][0]["arguments"] = '{"city": "Nowhere"}'


def _wrong_content(expected: dict) -> None:
    expected["content"] = "Something else. "


def _run_release(
    tmp: Path, version: str, wrong: dict, cases: tuple[str, ...] = (SINGLE, CONTENT)
) -> Path:
    """One release's results: the reference adapter named ref-VERSION, on a corpus whose
    expectations ``wrong`` (case → change) spoils."""
    corpus = tmp / f"corpus-{version}"
    corpus.mkdir()
    for case_id in cases:
        case = json.loads((GOLDEN / f"{case_id}.json").read_text())
        if case_id in wrong:
            wrong[case_id](case["expected"])
        (corpus / f"{case_id}.json").write_text(json.dumps(case))
    served = f"cmd:{shlex.quote(sys.executable)} -m k2conform.cli serve-adapter reference"
    out = tmp / f"results-{version}.json"
    done = k2conform(
        "run",
        "--adapter",
        f"ref-{version}={served}",
        "--corpus",
        str(corpus),
        *(f"--delivery={m}" for m in MODES),
        "--json",
        str(out),
        "--jobs",
        "1",
    )
    assert done.returncode == (1 if wrong else 0), done.stderr
    return out


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("history")
    return {
        "1.0": _run_release(tmp, "1.0", {}),
        "2.0": _run_release(tmp, "2.0", {SINGLE: _wrong_arguments}),
        "3.0": _run_release(tmp, "3.0", {SINGLE: _wrong_arguments, CONTENT: _wrong_content}),
        "4.0": _run_release(tmp, "4.0", {}),
        # 2.5 ran only the content case, and shows nothing there: no change for SINGLE.
        "2.5": _run_release(tmp, "2.5", {}, cases=(CONTENT,)),
        # Another line: two cases with one behaviour in 1.0; 2.0 ran only one of them.
        "other-1.0": _run_release(
            tmp,
            "other-1.0",
            {SINGLE: _wrong_arguments, PARALLEL: _wrong_arguments},
            cases=(SINGLE, PARALLEL),
        ),
        "other-2.0": _run_release(tmp, "other-2.0", {}, cases=(SINGLE,)),
    }


def _history(tmp_path: Path, files: list[Path]) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "history.json"
    done = k2conform(
        "history", *map(str, files), "--json", str(out), "--markdown", str(tmp_path / "history.md")
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads(out.read_text())


def _trace(document: dict, case: str) -> dict:
    (line,) = document["lines"]
    (found,) = [b for b in line["behaviours"] if case in b["cases"]]
    return found


def test_history_names_the_release_a_behaviour_appeared_and_went_away_in(releases, tmp_path):
    files = [releases[v] for v in ("4.0", "1.0", "3.0", "2.0")]  # any order: sorted by release
    done, document = _history(tmp_path, files)
    (line,) = document["lines"]
    assert line["line"] == "ref"
    assert [r["version"] for r in line["releases"]] == ["1.0", "2.0", "3.0", "4.0"]
    arguments = _trace(document, SINGLE)
    assert (arguments["signature"], arguments["modes"]) == ("differs: arguments", list(MODES))
    assert arguments["releases"] == ["2.0", "3.0"]
    assert arguments["changes"] == [
        {"release": "2.0", "change": "appeared", "now": []},
        {"release": "4.0", "change": "gone", "now": ["agree"]},
    ]
    content = _trace(document, CONTENT)
    assert (content["signature"], content["releases"]) == ("differs: content", ["3.0"])
    assert [(c["release"], c["change"]) for c in content["changes"]] == [
        ("3.0", "appeared"),
        ("4.0", "gone"),
    ]
    assert "in 2.0–3.0; appeared in 2.0 · gone in 4.0 (now agree)" in done.stdout
    markdown = (tmp_path / "history.md").read_text()
    assert f"`{SINGLE}` | 2.0–3.0 | appeared in 2.0 · gone in 4.0 (now agree) |" in markdown


def test_a_release_that_did_not_run_a_case_is_no_change(releases, tmp_path):
    files = [releases[v] for v in ("2.0", "2.5", "3.0")]
    done, document = _history(tmp_path, files)
    arguments = _trace(document, SINGLE)
    assert arguments["releases"] == ["2.0", "3.0"]
    assert arguments["changes"] == []
    assert arguments["unobserved"] == ["2.5"]
    assert "in 2.0, 3.0; no change in the releases run · not observed in 2.5" in done.stdout


def test_cases_one_release_judged_differently_are_traced_apart(releases, tmp_path):
    _, document = _history(tmp_path, [releases["other-1.0"], releases["other-2.0"]])
    (line,) = document["lines"]
    assert line["line"] == "ref-other"
    single, parallel = _trace(document, SINGLE), _trace(document, PARALLEL)
    assert single is not parallel and single["signature"] == parallel["signature"]
    assert single["changes"] == [{"release": "2.0", "change": "gone", "now": ["agree"]}]
    assert (parallel["changes"], parallel["unobserved"]) == ([], ["2.0"])


def test_one_merged_document_holds_several_releases(releases, tmp_path):
    merged = tmp_path / "merged.json"
    documents = [json.loads(releases[v].read_text()) for v in ("1.0", "2.0")]
    merge = k2conform("merge", *(str(releases[v]) for v in ("1.0", "2.0")), "--json", str(merged))
    assert merge.returncode in (0, 1), merge.stderr
    _, document = _history(tmp_path, [merged])
    (line,) = document["lines"]
    assert [r["adapter"] for r in line["releases"]] == [d["adapters"][0]["name"] for d in documents]
    assert _trace(document, SINGLE)["changes"][0] == {
        "release": "2.0",
        "change": "appeared",
        "now": [],
    }


def test_bad_input_is_one_line_and_exit_2(releases, tmp_path):
    twice = k2conform("history", str(releases["2.0"]), str(releases["2.0"]))
    assert twice.returncode == 2
    assert twice.stderr.count("\n") == 1 and "ref 2.0 is in both" in twice.stderr
    not_results = tmp_path / "not-results.json"
    not_results.write_text('{"lines": []}')
    wrong = k2conform("history", str(not_results))
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "is not a k2conform results document" in wrong.stderr


@pytest.mark.extra
def test_the_history_of_real_vllm_releases_names_0_33s_tool_choice_filter(tmp_path):
    """vLLM 0.30.0's stream hands out the calls the parser finds in a request without tools;
    0.33.0's ``ChatStreamProcessor`` drops them: a real change, where the glue changed."""
    old = ROOT / ".venvs" / "vllm-0.30.0" / "bin" / "k2conform"
    if not old.exists():
        missing("the vllm-0.30.0 environment is not built (k2conform setup-parsers vllm-0.30.0)")
    pytest.importorskip("vllm")
    files = []
    for name, script in (
        ("vllm-0.30.0", old),
        ("vllm-0.33.0", Path(sys.executable).parent / "k2conform"),
    ):
        out = tmp_path / f"{name}.json"
        done = k2conform(
            "run",
            "--adapter",
            f"{name}=cmd:{script} serve-adapter vllm",
            "--case",
            "i_id_undeclared_name_no_tools",
            "--case",
            "y_spec_single_call",
            "--delivery",
            "stream-token",
            "--jobs",
            "1",
            "--timeout",
            "120",
            "--json",
            str(out),
        )
        assert done.returncode in (0, 1), done.stderr
        assert not json.loads(out.read_text()).get("adapter_errors"), name
        files.append(out)
    _, document = _history(tmp_path, files)
    found = _trace(document, "i_id_undeclared_name_no_tools")
    assert (found["signature"], found["releases"]) == ("differs: stream-invariant", ["0.30.0"])
    assert found["changes"] == [{"release": "0.33.0", "change": "gone", "now": ["impl-defined"]}]
