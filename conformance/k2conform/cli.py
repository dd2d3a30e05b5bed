"""The ``k2conform`` command line.  Exit status: 0 success, 1 findings, 2 usage or harness error."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from k2conform.delivery import modes
from k2conform.case.corpus import (
    add_case_options,
    default_corpus_dir,
    iter_problems,
    load_corpus,
)
from k2conform.model import Result
from k2conform.adapter.registry import (
    adapter_names,
    create_adapter,
    default_adapter_names,
    load,
)
from k2conform.run.results import read_results
from k2conform.errors import UsageError
from k2conform.exits import INTERRUPTED, run_command
from k2conform.outputs import add_gate_options, check_writable, gate_and_report, write_reports

DESCRIPTION = """\
Conformance suite and fuzzing corpus for the Kimi K2 tool-calling format.

The canonical result every adapter returns (one JSON object):
  {"content": str|null, "reasoning": str|null,
   "tool_calls": [{"id": str|null, "name": str, "arguments": str}],
   "outcome": "ok"|"crash"|"timeout"|"unavailable"|"adapter-error", "error": str|null,
   "meta": {...recorded, never compared...}}

Adapters in another process (the adapter protocol, docs/adapter-protocol.md):
  --adapter 'cmd:COMMAND ARGS' (or 'NAME=cmd:COMMAND ARGS'; 'NAME[k3]=cmd:...' for a parser
  of Kimi K3 output, the formats a run plans by) wherever an adapter name is accepted.  The
  command is started once and speaks one JSON object per line:
    hello (its first stdout line):
      {"protocol": "k2conform-adapter/1", "name": str, "version": str|null,
       "formats": ["k2"|"k3", ...] (default ["k2"]; must be the spec's),
       "status": "ok"|"unavailable"|"adapter-error", "reason": str}
    request (one stdin line per parse):
      {"mode": "whole"|"stream", "request": {"tools": [...], "tool_choice": ..., "thinking": bool},
       "deltas": [{"text": str, "token_ids": [int]}]}        (whole: exactly one delta)
    response (one stdout line per request):
      whole:  the canonical result above
      stream: {"events": [{"content"?: str, "reasoning"?: str, "finish_reason"?: str,
                           "tool_calls"?: [{"index": int, "id"?: str, "name"?: str,
                                            "arguments"?: str}]}]}
      either: {"outcome": "crash"|"adapter-error"|"unavailable", "error": str} on failure
  Exit, garbage on stdout or a hang past --timeout makes the cell crash/timeout; the
  process is restarted and the run goes on.  Reports name it NAME, else the whole
  'cmd:...' value, with the version from the hello.  `k2conform serve-adapter NAME`
  speaks the protocol for any in-process adapter, so it can run in another environment:
  --adapter 'cmd:/other/venv/bin/k2conform serve-adapter vllm'.  `serve-adapter NAME NAME...`
  serves several (each parsing other formats) from one process: its first line is
  {"protocol": ..., "adapters": [hello, ...]}, each request names its "adapter", and a spec
  reaches the one parsing the formats it declares (NAME[k3]=cmd:...).
"""


#: Modules that each add one subcommand with ``add_parser(subparsers)``; their handlers
#: raise UsageError for bad input and return the exit status.
COMMAND_MODULES: tuple[str, ...] = (
    "k2conform.adapter.serve",
    "k2conform.run.session",
    "k2conform.engine.cli",
    "k2conform.fuzzing.cli",
    "k2conform.minimize.cli",
    "k2conform.bench.cli",
    "k2conform.report_finding.cli",
    "k2conform.setup.cli",
    "k2conform.coverage.cli",
    "k2conform.history.cli",
    "k2conform.grammar.cli",
    "k2conform.catalogue.cli",
    "k2conform.verify.cli",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return run_command(args)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="k2conform",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("parse", help="parse one model output (JSON on stdin) with one adapter")
    p.description = (
        'Reads {"model_output": str, "tools": [...]?, "tool_choice": ...?, "thinking": bool?, '
        '"deltas": [str]?} on stdin; writes the canonical result on stdout.'
    )
    p.add_argument("--adapter", default="reference", help="adapter name (see list-adapters)")
    _delivery_options(p)
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before the parse is a timeout"
    )
    p.set_defaults(handler=cmd_parse)

    p = sub.add_parser("render", help="render a conversation (JSON on stdin) to the prompt stream")
    p.description = (
        'Reads {"messages": [...], "tools": [...]?, "add_generation_prompt": bool} on stdin; '
        "writes "
        "the prompt stream to stdout exactly, with no added newline."
    )
    p.add_argument(
        "--chat-template",
        type=Path,
        help="render with this chat_template.jinja (as transformers does)",
    )
    p.set_defaults(handler=cmd_render)

    p = sub.add_parser("check-corpus", help="validate every case file")
    p.add_argument(
        "directory", nargs="?", type=Path, help="corpus directory (default: the shipped corpus)"
    )
    p.set_defaults(handler=cmd_check_corpus)

    _add_run_parser(sub)
    p = sub.add_parser(
        "merge", help="join the results of sharded runs (run --shard K/N --json ...) into one"
    )
    p.description = (
        "Joins the --json results of the shards of one run into the results an unsharded run gives "
        "(cells, cases, adapters), judges the gate again over all of them with --baseline, and "
        "writes the reports.  Exit status as for run."
    )
    p.add_argument("results", type=Path, nargs="+", help="the shards' results JSON files")
    add_gate_options(p, "these results")
    p.set_defaults(handler=cmd_merge)

    p = sub.add_parser(
        "report", help="rebuild the reports from a results JSON written by run --json"
    )
    p.add_argument("results", type=Path)
    p.add_argument("--html", type=Path)
    p.add_argument("--markdown", type=Path)
    p.add_argument(
        "--coverage",
        type=Path,
        help="a `k2conform coverage --json` document: add its section to the HTML",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="judge the results against this baseline again (its reviewed "
        "reasons and links group the findings); the exit status stays 0",
    )
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser(
        "baseline", help="write a baseline covering every failing cell of a results JSON"
    )
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path, required=True, help="baseline file to write")
    p.add_argument(
        "--previous", type=Path, help="an older baseline whose reasons and links to keep"
    )
    p.set_defaults(handler=cmd_baseline)

    p = sub.add_parser("list-adapters", help="each adapter's name, version and availability")
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="only these adapters (each loads its parser: one is quicker than every one)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list_adapters)

    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_parser(sub)
    return parser


def _add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="the conformance matrix: every case x adapter x delivery mode")
    p.description = (
        "Runs every selected case through every selected adapter in every selected delivery mode, "
        "in parallel worker processes, and gives each cell one outcome: agree, differs (with the "
        "fields), impl-defined (i_ cases), crash, timeout, unavailable or adapter-error. "
        "Exit status: 0 when every cell passes (agree, impl-defined, unavailable) or is listed in "
        "the baseline; 1 on a new disagreement or a stale baseline entry; 2 on usage or harness "
        "errors."
    )
    p.add_argument(
        "--adapter", action="append", help="adapter to run (repeatable; default: all registered)"
    )
    p.add_argument(
        "--delivery",
        action="append",
        choices=list(modes.MODES),
        help="delivery mode (repeatable; default: all but the opt-in ones)",
    )
    p.add_argument(
        "--opt-in",
        action="append",
        choices=list(modes.OPT_IN_MODES),
        help="an opt-in mode to run beside the planned ones (repeatable)",
    )
    add_case_options(p)
    add_gate_options(p, "this run")
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="worker processes (default: a core each, one per 3,000 cells at most)",
    )
    p.add_argument(
        "--timeout", type=float, default=20.0, help="seconds per cell before it is a timeout"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=modes.DEFAULT_SEED,
        help="base seed of stream-random (per-case seeds derive from it)",
    )
    p.add_argument(
        "--burst", type=int, default=modes.DEFAULT_BURST, help="tokens per delta of stream-burst"
    )
    p.add_argument(
        "--tokenizer", help="directory with the real tiktoken.model and tokenizer_config.json"
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        help="logs and caches of run-wide sessions such as vllm-server's server "
        "(default: beside --json/--html/--markdown, else ./.k2conform-run)",
    )
    p.add_argument(
        "--bench",
        type=Path,
        help="a `k2conform bench --json` file: add its streaming-cost check to the reports",
    )
    p.add_argument(
        "--shard",
        type=_shard,
        metavar="K/N",
        help="run only shard K of N (every cell of a case in one "
        "shard, the same partition on every machine); `k2conform merge` joins the shards' --json "
        "files",
    )
    p.set_defaults(handler=cmd_run)


def _delivery_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--delivery", default="whole", choices=list(modes.MODES), help="delivery mode")
    p.add_argument("--seed", type=int, default=modes.DEFAULT_SEED, help="seed of stream-random")
    p.add_argument(
        "--burst", type=int, default=modes.DEFAULT_BURST, help="tokens per delta of stream-burst"
    )
    p.add_argument(
        "--tokenizer", help="directory with the real tiktoken.model and tokenizer_config.json"
    )


def _read_json_stdin(required: Sequence[str], allowed: Sequence[str]) -> dict[str, Any]:
    try:
        data = json.loads(sys.stdin.read())
    except json.JSONDecodeError as error:
        raise UsageError(f"stdin is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise UsageError("stdin must hold one JSON object")
    for key in data:
        if key not in allowed:
            raise UsageError(f"unknown field {key!r} on stdin (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in data:
            raise UsageError(f"field {key!r} is required on stdin")
    return data


def _write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def cmd_parse(args: argparse.Namespace) -> int:
    from k2conform.case.corpus import request_from_json
    from k2conform.run.cell import CellSettings, adhoc_case, run_cell

    data = _read_json_stdin((), ("model_output", "tools", "tool_choice", "thinking", "deltas"))
    recorded = data.get("deltas")
    if recorded is not None and not (
        isinstance(recorded, list) and all(isinstance(d, str) for d in recorded)
    ):
        raise UsageError("field 'deltas' must be an array of strings")
    text = data.get("model_output")
    if text is None:
        if recorded is None:
            raise UsageError("field 'model_output' (or 'deltas') is required on stdin")
        text = "".join(recorded)
    if not isinstance(text, str):
        raise UsageError(f"field 'model_output' must be a string, not {type(text).__name__}")
    request = request_from_json(
        {k: data[k] for k in ("tools", "tool_choice", "thinking") if k in data}, "stdin"
    )
    if args.delivery == "stream-recorded" and recorded is None:
        raise UsageError("--delivery stream-recorded needs 'deltas' on stdin")
    adapter = create_adapter(args.adapter, args.timeout)
    case = adhoc_case(request, text, tuple(recorded) if recorded is not None else None)
    cell = run_cell(adapter, case, args.delivery, CellSettings.from_args(args))
    result = cell.observed or Result.failed(cell.outcome.value, cell.error or "")
    if cell.variants_differing:
        result = result.with_meta(variants_differing=list(cell.variants_differing))
    _write_json(result.with_meta(adapter=adapter.name).to_json())
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from k2conform.case.corpus import conversation_from_json
    from k2conform.reference.render import render, render_with_template

    data = _read_json_stdin(("messages",), ("messages", "tools", "add_generation_prompt"))
    messages, tools, add = conversation_from_json(data, "stdin")
    if args.chat_template:
        try:
            source = args.chat_template.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(
                f"cannot read the chat template {args.chat_template}: {error}"
            ) from None
        text = render_with_template(
            source, messages, tools, add, template_name=str(args.chat_template)
        )
    else:
        text = render(messages, tools, add)
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()
    return 0


def cmd_check_corpus(args: argparse.Namespace) -> int:
    root = args.directory or default_corpus_dir()
    if not root.is_dir():
        raise UsageError(f"no such directory: {root}")
    problems = list(iter_problems(root))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} bad case file(s) under {root}", file=sys.stderr)
        return 1
    from k2conform.case.verdict import case_verdict  # imports the reference parser: not
    # before `k2conform coverage` has started measuring it

    corpus = load_corpus(root)
    wrong = [
        f"{case.path}: id: the verdict rule gives {decided.prefix}_, not {case.id[0]}_"
        + (f" ({'; '.join(decided.reasons)})" if decided.reasons else "")
        for case in (*corpus.completions, *corpus.prompts, *corpus.probes)
        if (decided := case_verdict(case)).prefix != case.id[0]
    ]
    for line in wrong:
        print(line, file=sys.stderr)
    if wrong:
        print(f"{len(wrong)} id(s) with the wrong verdict prefix under {root}", file=sys.stderr)
        return 1
    print(
        f"{len(corpus)} cases OK ({len(corpus.completions)} completions, {len(corpus.prompts)} "
        f"prompts) under {root}"
    )
    return 0


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be between 1 and N")
    return k, n


def cmd_run(args: argparse.Namespace) -> int:
    from k2conform.gate.baseline import load_baseline
    from k2conform.run.cell import CellSettings
    from k2conform.run.matrix import RunConfig, in_shard, run_matrix, select_cases

    opt_in = tuple(args.opt_in or ())
    if args.delivery and opt_in:
        raise UsageError("--opt-in adds to the planned modes; with --delivery, name it there")
    root = args.corpus or default_corpus_dir()
    corpus = load_corpus(root)
    cases = select_cases(corpus.completions, args.case)
    if not cases:
        raise UsageError(f"no case matches {args.case}")
    if args.shard:
        cases = [c for c in cases if in_shard(c.id, *args.shard)]
    names = args.adapter or default_adapter_names()
    adapters = {name: create_adapter(name, args.timeout) for name in names}
    planned = tuple(
        args.delivery or (m for m in modes.MODES if m not in modes.OPT_IN_MODES or m in opt_in)
    )
    # No --delivery: each adapter in the modes it takes (server modes for server adapters).
    per_adapter = (
        None if args.delivery else {n: modes.planned_modes(a, opt_in) for n, a in adapters.items()}
    )
    baseline = load_baseline(args.baseline) if args.baseline else None
    streaming = _read_json(args.bench, "bench results") if args.bench else None
    check_writable(args.json, args.html, args.markdown)
    run_dir = args.run_dir or next(
        (p.parent for p in (args.json, args.html, args.markdown) if p), None
    )
    config = RunConfig(root, tuple(names), args.jobs, CellSettings.from_args(args), run_dir)
    results = run_matrix(cases, adapters, planned, per_adapter, config, args.seed, args.shard)
    if streaming is not None:
        from k2conform.bench.scaling import streaming_cost

        results = results.with_extra(streaming_cost=streaming_cost(streaming))
    status = gate_and_report(results, baseline, args)
    partial = results.extra.get("partial")
    if partial:
        written = (
            ", ".join(str(p) for p in (args.json, args.html, args.markdown) if p)
            or "nowhere (no --json)"
        )
        print(
            f"k2conform run: interrupted after {partial['cells']} of {partial['planned']} cells; "
            f"partial results written to {written}, marked partial",
            file=sys.stderr,
        )
        return INTERRUPTED
    return status


#: The exit status of an interrupted run (128 + SIGINT, as a shell reports it).


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {what} {path}: {error}") from None


def cmd_report(args: argparse.Namespace) -> int:
    if not (args.html or args.markdown):
        raise UsageError("nothing to write: give --html FILE and/or --markdown FILE")
    results = read_results(args.results)
    if args.baseline:
        from k2conform.gate.baseline import load_baseline
        from k2conform.gate.baseline import gate

        results, _ = gate(results, load_baseline(args.baseline))
    if args.coverage:
        from k2conform.report.coverage_section import read_coverage

        results = results.with_extra(coverage=read_coverage(args.coverage))
    write_reports(results, None, args.html, args.markdown)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from k2conform.gate.baseline import load_baseline
    from k2conform.run.results import merge

    merged = merge([(str(path), read_results(path)) for path in args.results])
    baseline = load_baseline(args.baseline) if args.baseline else None
    return gate_and_report(merged, baseline, args)


def cmd_baseline(args: argparse.Namespace) -> int:
    from k2conform.gate.baseline import baseline_from_cells, behaviour_units, load_baseline

    results = read_results(args.results)
    previous = load_baseline(args.previous) if args.previous else None
    ran = {
        row.name
        for row in results.adapters
        if row.status == "ok" and any(c.adapter == row.name for c in results.cells)
    }
    document = baseline_from_cells(
        results.cells,
        previous.entries if previous else (),
        ran | set(previous.adapters if previous else ()),
    )
    if previous is not None:
        before = behaviour_units(e.to_json() for e in previous.entries)
        after = behaviour_units(document["entries"])
        print(
            f"{args.previous}: {len(after - before)} (behaviour, delivery, case) added, "
            f"{len(before - after)} removed, {len(before & after)} kept"
        )
    args.out.write_text(
        json.dumps(document, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8",
        errors="backslashreplace",
    )  # lone surrogates: see outputs.write_reports
    print(f"{len(document['entries'])} baseline entries written to {args.out}")
    return 0


def cmd_list_adapters(args: argparse.Namespace) -> int:
    rows = []
    adapters = {name: create_adapter(name) for name in args.names or adapter_names()}
    for name, adapter in adapters.items():  # every name known before any parser loads
        availability = load(adapter)
        rows.append(
            {
                "name": name,
                "version": adapter.version(),
                "supported_versions": list(adapter.supported_versions),
                "supported": adapter.supported(),
                "status": availability.status,
                "reason": availability.reason,
                "description": adapter.description,
            }
        )
    if args.json:
        _write_json(rows)
        return 0
    for row in rows:
        support = {True: "supported", False: "UNSUPPORTED release", None: ""}[row["supported"]]
        line = f"{row['name']:<12} {row['version'] or '-':<12} {row['status']:<14} {support}"
        if row["reason"]:
            line += f"  ({row['reason']})"
        print(line.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
