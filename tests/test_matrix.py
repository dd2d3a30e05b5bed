"""The main job, run once per session exactly as a user runs it (``k2conform run`` with the
shipped baseline), and everything that hangs off it: the gate, the reports, and syrupy
snapshots of every adapter's observed result on every case in every delivery mode."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from k2conform.adapter.registry import adapter_names
from k2conform.model import CellOutcome

ROOT = Path(__file__).resolve().parent.parent
#: as `make matrix`: the opt-in stream-holdback too, so CI judges every cell the local gate does
MATRIX_MODES = ("--opt-in", "stream-holdback")


@pytest.fixture(scope="session")
def matrix_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "run",
            *MATRIX_MODES,
            "--baseline",
            str(ROOT / "baseline.json"),
            "--json",
            str(out / "results.json"),
            "--html",
            str(out / "index.html"),
            "--markdown",
            str(out / "summary.md"),
        ],
        capture_output=True,
        text=True,
    )
    results = json.loads((out / "results.json").read_text())
    return completed, results, out


def test_run_passes_the_shipped_baseline(matrix_run):
    """Exit 0: every disagreement is known and explained; no baseline entry is stale."""
    completed, results, _ = matrix_run
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    assert (
        results["gate"]["passed"] and results["gate"]["new"] == 0 and results["gate"]["stale"] == []
    )


def test_every_registered_adapter_and_mode_produced_cells(matrix_run):
    _, results, _ = matrix_run
    seen = {(c["adapter"], c["delivery"]) for c in results["cells"]}
    available = [a["name"] for a in results["adapters"] if a["status"] != "unavailable"]
    assert {"reference", "vllm", "sglang"} <= set(available), (
        "make setup installs the pinned parsers"
    )
    assert not {c["adapter"] for c in results["cells"]} - set(available), (
        "no cells for unavailable adapters"
    )
    for adapter in available:
        for mode in (
            "whole",
            "stream-token",
            "stream-burst",
            "stream-char",
            "stream-marker-split",
            "stream-random",
        ):
            assert (adapter, mode) in seen
    assert len(results["cases"]) >= 300


def test_reference_adapter_agrees_everywhere(matrix_run):
    _, results, _ = matrix_run
    bad = [
        c
        for c in results["cells"]
        if c["adapter"] == "reference" and c["outcome"] not in ("agree", "impl-defined")
    ]
    assert bad == []


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.text = []

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_names_every_adapter_and_taxonomy_class(matrix_run):
    _, results, out = matrix_run
    page = _Text()
    page.feed((out / "index.html").read_text())
    text = " ".join(page.text)
    for adapter in results["adapters"]:
        assert adapter["name"] in text
    for tag in {t for case in results["cases"] for t in case["tags"]}:
        assert tag in text, tag
    assert (out / "index.svg").read_text().startswith("<svg")
    assert "| adapter |" in (out / "summary.md").read_text()


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("adapter", adapter_names())
def test_adapter_behaviour_snapshot(matrix_run, json_snapshot, adapter):
    """One diff-friendly file per adapter: case → delivery → observed behaviour.

    ``pytest --snapshot-update`` records; a change in vLLM, SGLang or the reference shows
    as a diff naming the case, the adapter and the mode.
    """
    _, results, _ = matrix_run
    cells = [c for c in results["cells"] if c["adapter"] == adapter]
    if not cells:
        pytest.skip(f"{adapter} is not installed here")
    behaviour: dict[str, dict[str, object]] = defaultdict(dict)
    for cell in cells:
        if (
            cell["outcome"] == "agree"
        ):  # the observed result is the expectation: nothing more to say
            behaviour[cell["case"]][cell["delivery"]] = "agree"
            continue
        observed = {k: v for k, v in (cell["observed"] or {}).items() if k != "meta"}
        behaviour[cell["case"]][cell["delivery"]] = {
            "outcome": cell["outcome"],
            "fields": cell["fields"],
            "variant": cell["variant"],
            "variants_differing": cell["variants_differing"],
            "observed": observed,
        }
    assert dict(sorted(behaviour.items())) == json_snapshot


def _comparable(results: dict) -> dict:
    """Cells by key, without timings (a cell's seconds, and ``meta.slow`` when a loaded machine
    made it finish only in its slower retry): what must not depend on how the run was split."""

    def untimed(cell: dict) -> dict:
        observed = dict(cell["observed"] or {})
        observed["meta"] = {k: v for k, v in (observed.get("meta") or {}).items() if k != "slow"}
        return {k: v for k, v in cell.items() if k != "seconds"} | {"observed": observed}

    return {(c["case"], c["adapter"], c["delivery"]): untimed(c) for c in results["cells"]}


#: the cases the shard test splits: the JSON-value and the Kimi K3 negative cases, both formats
#: and many findings (the snapshots above pin every cell of the whole run; this test is about
#: splitting and merging, which does not depend on how many cases there are: 68 cases cost a
#: third of the 138 ``n_*`` ones it took before, 7 Dec 2026)
SHARDED = ("n_json_*", "n_k3_*")


@pytest.mark.slow
def test_three_shards_merged_equal_the_unsharded_run(tmp_path):
    """``run --shard K/3`` on three "machines", then ``merge``: cell for cell the unsharded run
    of the same cases, and the merged gate judged over all cells passes as the unsharded one
    does.  It runs those cases unsharded itself: in the lanes' session (``slow``) nothing else
    needs ``matrix_run``, whose whole corpus would cost more than the shards."""
    shards = []
    for k in (0, 1, 2, 3):  # 0: unsharded
        path = tmp_path / f"results-{k}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "k2conform.cli",
                "run",
                *(["--shard", f"{k}/3"] if k else []),
                *MATRIX_MODES,
                *(option for glob in SHARDED for option in ("--case", glob)),
                "--json",
                str(path),
                "--baseline",
                str(ROOT / "baseline.json"),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        shards.append(json.loads(path.read_text()))
    whole = shards.pop(0)
    ids = [c["id"] for c in whole["cases"]]
    assert all(any(fnmatch(i, glob) for glob in SHARDED) for i in ids)
    assert all(sum(fnmatch(i, glob) for i in ids) >= 20 for glob in SHARDED)  # both formats
    case_sets = [{c["id"] for c in s["cases"]} for s in shards]
    assert all(case_sets) and not (
        case_sets[0] & case_sets[1] or case_sets[0] & case_sets[2] or case_sets[1] & case_sets[2]
    )
    merged_path = tmp_path / "all.json"
    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "merge",
            *(str(tmp_path / f"results-{k}.json") for k in (1, 2, 3)),
            "--json",
            str(merged_path),
            "--html",
            str(tmp_path / "all.html"),
            "--baseline",
            str(ROOT / "baseline.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    merged_results = json.loads(merged_path.read_text())
    assert _comparable(merged_results) == _comparable(whole)
    assert {c["id"] for c in merged_results["cases"]} == {c["id"] for c in whole["cases"]}
    assert merged_results["gate"]["passed"]
    findings = sum(CellOutcome(c["outcome"]).finding for c in whole["cells"])
    assert merged_results["gate"]["baselined"] == findings > 0
    assert (tmp_path / "all.html").read_text().count("<table") >= 1
    twice = subprocess.run(
        [
            sys.executable,
            "-m",
            "k2conform.cli",
            "merge",
            str(tmp_path / "results-1.json"),
            str(tmp_path / "results-1.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert (
        twice.returncode == 2
        and "the same shard twice" in twice.stderr
        and twice.stderr.count("\n") == 1
    )


def test_a_shard_outside_k_of_n_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "k2conform.cli", "run", "--shard", "4/3"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "K must be between 1 and N" in done.stderr


def test_a_server_level_case_reaches_the_adapters_that_apply_its_options():
    """``case_unfit``: a case with server options is judged in the server modes, and in an
    in-process adapter's own modes only when that adapter applies every one of them."""
    from k2conform.adapter.registry import create_adapter
    from k2conform.case.corpus import default_corpus_dir, load_corpus
    from k2conform.run.cell import case_unfit
    from k2conform.run.matrix import plan

    cases = {c.id: c for c in load_corpus(default_corpus_dir()).completions}
    stream_off = cases["y_server_stream_reasoning_off_reasoning_then_call"]
    spacing = cases["y_server_spacing_off"]
    names = ["reference", "vllm", "sglang"]
    options = {n: create_adapter(n).request_options for n in names}
    cells = plan(
        [stream_off, spacing], names, ("whole", "stream-token", "server-whole"), None, options
    )
    reached = {(case, adapter, mode) for case, adapter, mode in cells if mode != "server-whole"}
    assert reached == {
        (stream_off.id, adapter, mode)
        for adapter in ("reference", "sglang")
        for mode in ("whole", "stream-token")
    }
    assert all(case_unfit(c, "server-whole") is None for c in (stream_off, spacing))
    reason = case_unfit(spacing, "whole", options["sglang"])
    assert reason is not None and "spaces_between_special_tokens" in reason
