"""The HTML report's per-adapter findings view and summary.md, on results of real runs.

A small corpus of its own: golden cases, and copies of them whose expectation is wrong on
purpose, so the reference parser differs in known fields; beside it the crashing toy process
(``tests/toys/crashing_adapter.py``), whose cells on the trigger case crash.  A baseline
written by ``k2conform baseline`` is then reviewed by the test: one reason with a link, one
with ``"link": null``, the crash left out (new), one stale entry.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from k2conform.markers import visible
from k2conform.report import style

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "corpus" / "golden" / "completions"
CRASHING = Path(__file__).parent / "toys" / "crashing_adapter.py"
#: The crashing toy process; it writes garbage instead of an answer when a request holds "Shanghai".
TOY = f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(CRASHING))} garbage"
MODES = ("whole", "stream-token", "stream-char")
LINK = "https://example.org/k2conform/issues/1"
ARGS_REASON = "Reviewed: the arguments are not the ones expected."
CONTENT_REASON = "Reviewed: the content is not the one expected."


def k2conform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k2conform.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )


def _write_case(corpus: Path, source: str, case_id: str, tags: list[str], change) -> None:
    case = json.loads((GOLDEN / f"{source}.json").read_text())
    case.update(id=case_id, tags=tags)
    change(case["expected"])
    (corpus / f"{case_id}.json").write_text(json.dumps(case, indent=2))


def _wrong_arguments(expected: dict) -> None:
    expected["tool_calls"][0]["arguments"] = '{"city": "Paris"}'


def _wrong_content(expected: dict) -> None:
    expected["content"] = "Something else. "


def _review(baseline: dict) -> dict:
    """What a reviewer does to a written baseline: reasons and links; the toy's crash is left
    out (so it is new) and an entry for a case that agrees is added (so it is stale)."""
    entries = []
    for entry in baseline["entries"]:
        if entry["outcome"] == "crash":
            continue
        arguments = entry["fields"] == ["arguments"]
        entry.update(
            reason=ARGS_REASON if arguments else CONTENT_REASON, link=LINK if arguments else None
        )
        entries.append(entry)
    entries.append(
        {
            "adapter": "reference",
            "outcome": "differs",
            "fields": ["name"],
            "deliveries": ["*"],
            "cases": ["y_spec_single_call"],
            "reason": "stale on purpose",
            "link": None,
        }
    )
    return {**baseline, "entries": entries}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two real runs of the small corpus: without a baseline, then with the reviewed one."""
    tmp = tmp_path_factory.mktemp("report")
    corpus = tmp / "corpus"
    corpus.mkdir()
    for source in ("y_spec_single_call", "y_spec_parallel_calls"):
        (corpus / f"{source}.json").write_text((GOLDEN / f"{source}.json").read_text())
    _write_case(
        corpus,
        "y_spec_single_call",
        "y_report_args_short",
        ["REPORT.wrong-arguments"],
        _wrong_arguments,
    )
    _write_case(
        corpus,
        "y_spec_content_before_section",
        "y_report_args_long",
        ["REPORT.wrong-arguments", "REPORT.long"],
        _wrong_arguments,
    )
    _write_case(
        corpus,
        "y_spec_content_before_section",
        "y_report_content",
        ["REPORT.wrong-content"],
        _wrong_content,
    )
    common = [
        "--corpus",
        str(corpus),
        "--adapter",
        "reference",
        "--adapter",
        TOY,
        "--jobs",
        "1",
        *(arg for mode in MODES for arg in ("--delivery", mode)),
    ]
    first = k2conform("run", *common, "--json", str(tmp / "first.json"))
    assert first.returncode == 1, first.stderr
    written = k2conform("baseline", str(tmp / "first.json"), "--out", str(tmp / "written.json"))
    assert written.returncode == 0, written.stderr
    baseline = tmp / "baseline.json"
    baseline.write_text(json.dumps(_review(json.loads((tmp / "written.json").read_text()))))
    gated = k2conform(
        "run",
        *common,
        "--baseline",
        str(baseline),
        "--json",
        str(tmp / "results.json"),
        "--html",
        str(tmp / "index.html"),
        "--markdown",
        str(tmp / "summary.md"),
    )
    assert gated.returncode == 1, gated.stderr  # the crash is new, one entry is stale
    return {
        "tmp": tmp,
        "corpus": corpus,
        "console": gated.stdout,
        "html": (tmp / "index.html").read_text(),
        "summary": (tmp / "summary.md").read_text(),
        "results": json.loads((tmp / "results.json").read_text()),
    }


class Node:
    def __init__(self, tag: str, attrs: dict[str, str]):
        self.tag, self.attrs, self.children = tag, attrs, []

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if (
                    (tag is None or child.tag == tag)
                    and (cls is None or cls in child.classes)
                    and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
                ):
                    found.append(child)
                found += child.all(tag, cls, **attrs)
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        (node,) = self.all(tag, cls, **attrs)
        return node

    def child(self, tag: str) -> Node:
        return next(c for c in self.children if isinstance(c, Node) and c.tag == tag)


class Tree(HTMLParser):
    """A small DOM of the page, to assert on its structure rather than on substrings."""

    VOID = frozenset({"meta", "br", "col", "input", "rect", "img", "hr"})

    def __init__(self, page: str):
        super().__init__()
        self.root = self.current = Node("#document", {})
        self.parents: list[Node] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.current.children.append(node)
        if tag not in self.VOID:
            self.parents.append(self.current)
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.current.tag != tag and self.parents:
            self.current = self.parents.pop()
        if self.parents:
            self.current = self.parents.pop()

    def handle_data(self, data):
        self.current.children.append(data)


@pytest.fixture(scope="module")
def page(run) -> Node:
    return Tree(run["html"]).root


def behaviours(page: Node, adapter: str) -> list[Node]:
    return page.all("details", "behaviour", data_adapter=adapter)


def test_the_page_opens_on_the_findings_view_one_section_per_adapter_that_ran(run, page):
    headings = [h.attrs.get("id") for h in page.all("h2")]
    assert headings[0] == "findings" and headings.index("matrix") > 0 and headings[-1] == "cases"
    sections = page.all("section", "adapter-findings")
    assert [s.attrs["data-adapter"] for s in sections] == ["reference", TOY]
    for section in sections:
        families = section.all("div", "family-list")
        assert [f.child("h4").text().split(" modes")[0] for f in families] == [
            "Token-aligned",
            "Text-level",
        ]
        for family, name in zip(families, ("token-aligned", "text-level")):
            assert {b.attrs["data-family"] for b in family.all("details", "behaviour")} == {name}


def test_each_distinct_behaviour_once_per_mode_family_with_its_status(page):
    def view(adapter: str) -> list[tuple[str, str, str]]:
        return [
            (b.attrs["data-family"], b.attrs["data-upstream"], b.child("summary").one("b").text())
            for b in behaviours(page, adapter)
        ]

    expected = [
        ("token-aligned", "not reported", "differs: content"),
        ("token-aligned", "linked", "differs: arguments"),
        ("text-level", "not reported", "differs: content"),
        ("text-level", "linked", "differs: arguments"),
    ]
    assert view("reference") == expected
    # the toy crashes on a request holding its trigger word, which only the one-shot delivers whole
    assert view(TOY) == [("token-aligned", "new", "crash"), *expected]
    new = behaviours(page, TOY)[0]
    assert "NEW" in new.child("summary").one("span", "new").text() and "new" in new.classes
    baselined = behaviours(page, "reference")
    assert all(
        b.child("summary").all("span", "baselined") and not b.child("summary").all("span", "new")
        for b in baselined
    )


def test_a_null_link_is_marked_not_reported_upstream_and_a_link_is_linked(page):
    content, arguments = behaviours(page, "reference")[:2]
    assert content.child("summary").one("span", "unreported").text() == "not reported upstream"
    assert CONTENT_REASON in content.child("summary").text()
    assert not content.all("a", href=LINK)
    assert not arguments.child("summary").all("span", "unreported")
    assert arguments.one("a", href=LINK).text() == LINK and ARGS_REASON in arguments.text()


def test_every_case_count_links_to_its_case_list_and_each_case_to_its_details(page):
    arguments = behaviours(page, "reference")[1]
    count = next(a for a in arguments.child("summary").all("a") if a.text().endswith("case(s)"))
    assert count.text() == "2 case(s)" and "4 cell(s)" in arguments.child("summary").text()
    listed = page.one("details", id=count.attrs["href"][1:])
    items = listed.all("li")
    assert [li.one("a").text() for li in items] == ["y_report_args_long", "y_report_args_short"]
    assert all(li.text().endswith(": whole, stream-token") for li in items)
    for li in items:
        target = li.one("a").attrs["href"][1:]
        assert page.one("section", "case", id=target).one("h3").text() == li.one("a").text()


def test_the_minimal_example_is_the_shortest_output_with_its_field_diff(run, page):
    arguments = behaviours(page, "reference")[1]
    label = arguments.all("div", "label")[0]
    assert label.one("a").text() == "y_report_args_short" and " in whole" in label.text()
    (diff_table,) = [
        t for t in arguments.all("table") if t.all("th") and t.all("th")[0].text() == "field"
    ]
    row = [td.text() for td in diff_table.all("tr")[1].all("td")]
    assert row == ["arguments", "0", "json", '{"city": "Paris"}', '{"city": "Beijing"}']
    shown = arguments.all("pre")[0].text()  # the model output, markers made visible
    assert shown.startswith("⟦SB⟧⟦TB⟧functions.get_weather:0⟦AB⟧") and "<|" not in shown


def test_a_streamed_example_shows_every_delta_it_received(run, page):
    text_level = [
        b for b in behaviours(page, "reference") if b.attrs["data-family"] == "text-level"
    ][1]
    label = text_level.all("div", "label")[0]
    assert label.one("a").text() == "y_report_args_short" and " in stream-char" in label.text()
    output = json.loads((run["corpus"] / "y_report_args_short.json").read_text())["model_output"]
    deltas = text_level.one("ol", "deltas").all("li")
    # one character per delta, markers cut too; a lone space shows as ␣
    assert [d.text() for d in deltas] == [visible(character) for character in output]


def test_the_repro_command_is_report_finding_with_the_cli_s_own_flags_and_reproduces(run, page):
    arguments = behaviours(page, "reference")[1]
    command = arguments.one("code", "cmd").text()
    assert command == (
        "k2conform report-finding y_report_args_short --adapter reference --delivery whole "
        "--out y_report_args_short.md"
    )
    out = run["tmp"] / "finding.md"
    done = k2conform(
        *shlex.split(command)[1:],
        "--corpus",
        str(run["corpus"]),
        "--compare",
        "reference",
        "--out",
        str(out),
    )
    # the report is written; 2, "no script": the reference adapter has no standalone script
    assert done.returncode == 2, done.stderr
    assert "NO SCRIPT: the reference adapter" in done.stderr and "script to" not in done.stderr
    assert "**Finding**: differs (arguments) in delivery `whole`" in out.read_text()
    crash = behaviours(page, TOY)[0].one("code", "cmd").text()
    words = shlex.split(crash)
    assert words[:3] == ["k2conform", "report-finding", "y_spec_parallel_calls"]
    assert (
        words[words.index("--adapter") + 1] == TOY
        and words[words.index("--delivery") + 1] == "whole"
    )


def test_filters_list_the_adapters_classes_and_modes_of_the_findings(page):
    def options(name: str) -> list[str]:
        return [o.attrs["value"] for o in page.one("select", id=f"f-{name}").all("option")][1:]

    assert options("adapter") == ["reference", TOY]
    assert options("class") == [
        "REPORT.long",
        "REPORT.wrong-arguments",
        "REPORT.wrong-content",
        "SPEC.openai-mapping",
        "SPEC.parallel-calls",
    ]
    assert options("mode") == list(MODES)
    arguments = behaviours(page, "reference")[1]
    assert arguments.attrs["data-classes"] == "REPORT.long REPORT.wrong-arguments"
    assert arguments.attrs["data-modes"] == "whole stream-token"
    assert page.all("input", id="f-new") and page.all("input", id="f-unreported")


def test_the_overview_counts_distinct_behaviours_per_adapter_and_summary_md_too(run, page):
    rows = [
        [td.text() for td in tr.all("td")] for tr in page.one("table", "overview").all("tr")[1:]
    ]
    assert [r[:1] + r[2:] for r in rows] == [
        ["reference", "2", "2", "0", "2", "9"],
        [TOY, "3", "2", "1", "2", "10"],
    ]
    for tr in page.one("table", "overview").all("tr")[1:]:
        for count in tr.all("a")[1:]:  # each family's count leads to that family's list
            family = page.one("div", "family-list", id=count.attrs["href"][1:])
            assert len(family.all("details", "behaviour")) == int(count.text())
    summary = run["summary"]
    assert "### Distinct behaviours per adapter" in summary
    assert (
        "| reference | 2 | 2 | 0 | 2 | 9 |" in summary
        and f"| {TOY} | 3 | 2 | 1 | 2 | 10 |" in summary
    )
    for text in (summary, run["console"]):
        assert f"- NEW: y_spec_parallel_calls {TOY} whole: crash" in text
        assert "- STALE: y_spec_single_call reference *: differs name no longer occurs" in text
    stale = [li.text() for li in page.all("li") if li.text().startswith("STALE:")]
    assert stale == ["STALE: y_spec_single_call reference *: differs name no longer occurs"]


def test_the_summary_lists_each_behaviour_on_one_line_with_its_status_and_reason(run, page):
    """What a maintainer acts on, in the console and summary.md alike: one line a behaviour."""
    for text in (run["summary"], run["console"]):
        section = text.split("#### reference\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert len(section) == len(behaviours(page, "reference")) == 4
        assert any(
            line.startswith("- not reported upstream: differs: content in ")
            and line.endswith(CONTENT_REASON)
            for line in section
        )
        toy = text.split(f"#### {TOY}\n\n", 1)[1].splitlines()
        assert any(line.startswith("- **NEW**: crash in whole") for line in toy)


def test_report_rebuilds_the_same_page_from_the_results_json_alone(run):
    again = run["tmp"] / "again.html"
    done = k2conform("report", str(run["tmp"] / "results.json"), "--html", str(again))
    assert done.returncode == 0, done.stderr
    assert again.read_text() == run["html"]


def test_report_with_a_baseline_judges_results_written_without_one(run):
    again = run["tmp"] / "regated.html"
    done = k2conform(
        "report",
        str(run["tmp"] / "first.json"),
        "--baseline",
        str(run["tmp"] / "baseline.json"),
        "--html",
        str(again),
    )
    assert done.returncode == 0, done.stderr
    page = Tree(again.read_text()).root
    assert [b.attrs["data-upstream"] for b in behaviours(page, "reference")] == [
        "not reported",
        "linked",
    ] * 2
    gated_run = Tree(run["html"]).root
    assert [b.child("summary").text() for b in behaviours(page, TOY)] == [
        b.child("summary").text() for b in behaviours(gated_run, TOY)
    ]


def test_long_values_wrap_inside_their_cells(page):
    css = page.one("style").text()
    pre = re.search(r"(?<![\w.-])pre\{([^}]*)\}", css).group(1)
    for rule in ("white-space:pre-wrap", "overflow-wrap:anywhere", "overflow:auto", "max-height:"):
        assert rule in pre
    assert "table-layout:fixed;width:100%" in re.search(r"table\.fixed\{([^}]*)\}", css).group(1)
    assert "overflow-wrap:anywhere" in re.search(r"td,th\{([^}]*)\}", css).group(1)
    holding_pre = [t for t in page.all("table") if t.all("pre")]
    assert holding_pre and all("fixed" in t.classes for t in holding_pre)


def test_every_coloured_fill_has_text_of_aa_contrast(page):
    css = page.one("style").text()
    pairs = re.findall(r"\{background:(#[0-9a-f]{6});color:(#[0-9a-f]{6})\}", css)
    assert len(pairs) >= len(style.OUTCOME_COLOURS) + 3  # the outcomes and the status badges
    svg = page.one("svg")
    cells = list(zip(svg.all("rect")[1:], [t for t in svg.all("text") if "fill" in t.attrs]))
    assert cells
    pairs += [(rect.attrs["fill"], text.attrs["fill"]) for rect, text in cells]
    assert min(style.contrast(fill, text) for fill, text in pairs) >= 4.5
    assert style.text_on("#19dc46") == "#000000" and style.text_on("#5c6bc0") == "#ffffff"


def test_the_class_matrix_keeps_token_aligned_and_text_level_apart(page):
    svg = page.one("svg")
    labels = [t.text() for t in svg.all("text")]
    assert labels.count("token-aligned") == 2 and labels.count("text-level") == 2  # two adapters
    row = labels.index("REPORT.wrong-arguments")
    # 2 cases: token-aligned has whole and stream-token (4 cells), text-level stream-char (2)
    assert labels[row + 1 : row + 5] == ["0/4", "0/2", "0/4", "0/2"]


@pytest.fixture(scope="module")
def vllm_page(tmp_path_factory) -> Node:
    """vLLM on a case whose stream puts marker bytes in content deltas (stream-burst)."""
    pytest.importorskip("vllm")
    tmp = tmp_path_factory.mktemp("vllm")
    done = k2conform(
        "run",
        "--adapter",
        "vllm",
        "--case",
        "n_struct_call_without_section_after_content",
        "--delivery",
        "stream-burst",
        "--jobs",
        "1",
        "--html",
        str(tmp / "index.html"),
    )
    assert done.returncode == 1, done.stderr
    return Tree((tmp / "index.html").read_text()).root


def test_a_stream_violation_is_shown_with_the_token_aligned_deltas(vllm_page):
    (behaviour,) = behaviours(vllm_page, "vllm")
    assert (
        behaviour.attrs["data-upstream"] == "new"
        and behaviour.attrs["data-family"] == "token-aligned"
    )
    violations = next(ul for ul in behaviour.all("ul") if ul.all("li") and "chunk" in ul.text())
    assert all(
        re.fullmatch(r"chunk \d+: marker bytes in a content delta", li.text())
        for li in violations.all("li")
    )
    deltas = behaviour.one("ol", "deltas").all("li")
    assert deltas and all(
        li.all("sub") and li.one("sub").text().replace(" ", "").isdigit() for li in deltas
    )
    assert "--delivery stream-burst" in behaviour.one("code", "cmd").text()


def test_parsers_this_machine_does_not_have_collapse_to_one_line():
    from k2conform.model import AdapterRow, RunResults
    from k2conform.report import pages

    rows = (
        AdapterRow("aphrodite", None, status="unavailable", reason="x"),
        AdapterRow("lmdeploy", None, status="unavailable", reason="x"),
        AdapterRow("vllm-legacy", "0.33.0", status="unavailable", reason="another release"),
    )
    lines = pages._header_warnings(RunResults("0", 0, (), rows, (), ()), "- ")
    assert lines[0] == (
        "- not installed here (unavailable): aphrodite, lmdeploy; `k2conform setup-parsers` "
        "lists the environments that bring them"
    )
    assert lines[1] == "- vllm-legacy: unavailable (another release)" and len(lines) == 3


def test_a_finding_only_in_the_stream_says_its_script_cannot_show_it():
    """The standalone script prints the message a client ends up with: a cell whose every
    difference is in the delivery (index, stream-invariant, wire:KIND) says so beside its
    command, in the page too; a cell with a message difference does not."""
    from k2conform.model import Cell, CellOutcome, FieldDiff
    from k2conform.report.findings import script_cannot_show
    from k2conform.report.findings_html import _cannot_show

    def cell(*fields: str) -> Cell:
        diffs = tuple(FieldDiff(f, None, "x", "stream") for f in fields)
        return Cell("y_a", "vllm", "stream-token", CellOutcome.DIFFERS, diffs=diffs)

    for only_delivery in (("stream-invariant",), ("index", "stream-invariant"), ("wire:usage",)):
        why = script_cannot_show(cell(*only_delivery))
        assert why and "cannot show" in why, only_delivery
        note = _cannot_show(cell(*only_delivery))
        assert "<p class='note'>Its standalone script cannot show" in note
    for shown in (("content",), ("content", "stream-invariant"), ()):
        assert script_cannot_show(cell(*shown)) is None and _cannot_show(cell(*shown)) == ""


def test_a_stream_after_cutoff_example_shows_the_deltas_of_its_own_prelude_tool():
    """The report derives a streamed example's deltas again from the results document; for
    stream-after-cutoff the variant names the case's first declared tool, so the summary must
    carry the request (without it the label would name the default tool and no deltas show)."""
    from k2conform.adapter.registry import create_adapter
    from k2conform.case.corpus import load_corpus
    from k2conform.delivery import modes
    from k2conform.delivery.tokenizer import load_tokenizer
    from k2conform.report.findings import delivered_deltas
    from k2conform.run.cell import CellSettings, run_cell
    from k2conform.run.results import case_summary

    case = next(c for c in load_corpus().completions if c.id == "i_id_bare_counter_parallel")
    first_tool = case.request.tools[0]["function"]["name"]
    assert first_tool != modes.CUTOFF_TOOL
    settings = CellSettings(seed=7)
    cell = run_cell(create_adapter("reference"), case, "stream-after-cutoff", settings)
    assert cell.variant == f"stream-after-cutoff[after {first_tool}]"
    (delivered,) = modes.deliveries(
        case.model_output,
        "stream-after-cutoff",
        load_tokenizer(None),
        seed=modes.case_seed(7, case.id),
        tool=first_tool,
    )
    assert delivered_deltas(case_summary(case), cell, 7) == delivered.deltas


def test_a_case_summary_reads_back_as_it_was_written_with_its_request_typed():
    """A results document keeps each case as a typed summary: written and read back it is the
    same document, key for key (a K3 case's format, spelled markers, recorded deltas and
    server options included), and a reader gets the request's tools, not a dict to dig in."""
    from dataclasses import replace

    from k2conform.case.corpus import load_corpus
    from k2conform.model import CaseSummary
    from k2conform.run.results import case_summary

    corpus = {c.id: c for c in load_corpus().completions}
    k3 = case_summary(corpus["y_k3_think_response_call"])
    assert k3.format == "k3" and k3.request.tool_names == corpus[k3.id].request.tool_names != ()
    recorded = next(c for c in corpus.values() if c.deltas)
    served = next(c for c in corpus.values() if c.request.server_options)
    spelled = replace(case_summary(corpus["y_spec_single_call"]), spelled_markers=(0,))
    for summary in (k3, case_summary(recorded), case_summary(served), spelled):
        document = json.loads(json.dumps(summary.to_json()))
        assert CaseSummary.from_json(document) == summary
        assert CaseSummary.from_json(document).to_json() == document
    assert "format" not in spelled.to_json() and spelled.to_json()["spelled_markers"] == [0]


def test_the_reports_of_one_run_group_its_behaviours_once(run, tmp_path, monkeypatch):
    """The summary and the HTML page of one gated run show one grouping, made once: both
    reports are rendered from it, and they are the reports a fresh grouping gives."""
    import argparse

    from k2conform import outputs
    from k2conform.gate import behaviours as grouping
    from k2conform.gate.baseline import load_baseline
    from k2conform.model import RunResults
    from k2conform.report import pages

    results = RunResults.from_json(json.loads((run["tmp"] / "first.json").read_text()))
    made = []
    real = grouping.behaviours
    monkeypatch.setattr(grouping, "behaviours", lambda *a: made.append(1) or real(*a))
    html_path, md_path = tmp_path / "report.html", tmp_path / "summary.md"
    args = argparse.Namespace(allow_missing=(), json=None, html=html_path, markdown=md_path)
    outputs.gate_and_report(results, load_baseline(run["tmp"] / "baseline.json"), args)
    assert len(made) == 1
    gated = RunResults.from_json(json.loads((run["tmp"] / "results.json").read_text()))
    fresh = pages.markdown(gated)
    assert "### Distinct behaviours per adapter" in md_path.read_text()
    assert md_path.read_text().split("### Distinct behaviours")[1] == fresh.split(
        "### Distinct behaviours"
    )[1]
    shown = sum(len(group) for group in grouping.gated_behaviours(gated).values())
    assert shown and html_path.read_text().count("<details class='behaviour ") == shown
