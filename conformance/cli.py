"""The ``k2conform`` command line.  Exit status: 0 success, 1 findings, 2 usage or harness error."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from k2conform import delivery as dl
from k2conform.corpus import CorpusError, default_corpus_dir, iter_problems, load_corpus
from k2conform.harness import execute
from k2conform.model import Request, Result
from k2conform.registry import UnknownAdapter, adapter_names, create_adapter, load

DESCRIPTION = """\
Conformance suite and fuzzing corpus for the Kimi K2 tool-calling format.

The canonical result every adapter returns (one JSON object):
  {"content": str|null, "reasoning": str|null,
   "tool_calls": [{"id": str|null, "name": str, "arguments": str}],
   "outcome": "ok"|"crash"|"timeout"|"unavailable"|"adapter-error", "error": str|null,
   "meta": {...recorded, never compared...}}
"""


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit status 2."""


class _Deadline(BaseException):
    """Raised by the alarm; a BaseException so no parser ``except Exception`` swallows it."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (UsageError, UnknownAdapter, CorpusError) as error:
        print(f"k2conform {args.command}: {error}", file=sys.stderr)
        return 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="k2conform", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("parse", help="parse one model output (JSON on stdin) with one adapter")
    p.description = (
        'Reads {"model_output": str, "tools": [...]?, "tool_choice": ...?, "thinking": bool?, '
        '"deltas": [str]?} on stdin; writes the canonical result on stdout.'
    )
    p.add_argument("--adapter", default="reference", help="adapter name (see list-adapters)")
    _delivery_options(p)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds before the parse is a timeout")
    p.set_defaults(handler=cmd_parse)

    p = sub.add_parser("render", help="render a conversation (JSON on stdin) to the prompt stream")
    p.description = (
        'Reads {"messages": [...], "tools": [...]?, "add_generation_prompt": bool} on stdin; writes '
        "the prompt stream to stdout exactly, with no added newline."
    )
    p.add_argument("--chat-template", type=Path, help="render with this chat_template.jinja (as transformers does)")
    p.set_defaults(handler=cmd_render)

    p = sub.add_parser("check-corpus", help="validate every case file")
    p.add_argument("directory", nargs="?", type=Path, help="corpus directory (default: the shipped corpus)")
    p.set_defaults(handler=cmd_check_corpus)

    p = sub.add_parser("list-adapters", help="each adapter's name, version and availability")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_list_adapters)
    return parser


def _delivery_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--delivery", default="whole", choices=list(dl.MODES), help="delivery mode")
    p.add_argument("--seed", type=int, default=dl.DEFAULT_SEED, help="seed of stream-random")
    p.add_argument("--burst", type=int, default=dl.DEFAULT_BURST, help="tokens per delta of stream-burst")
    p.add_argument("--tokenizer", help="directory with the real tiktoken.model and tokenizer_config.json")


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
    from k2conform.tokenizer import load_tokenizer

    data = _read_json_stdin((), ("model_output", "tools", "tool_choice", "thinking", "deltas"))
    recorded = data.get("deltas")
    text = data.get("model_output")
    if text is None:
        if recorded is None:
            raise UsageError("field 'model_output' (or 'deltas') is required on stdin")
        text = "".join(recorded)
    request = Request(
        tools=tuple(data.get("tools") or ()),
        tool_choice=data.get("tool_choice", "auto"),
        thinking=bool(data.get("thinking", False)),
    )
    if args.delivery == "stream-recorded" and recorded is None:
        raise UsageError("--delivery stream-recorded needs 'deltas' on stdin")
    adapter = create_adapter(args.adapter)
    availability = load(adapter)
    if availability.status != "ok":
        _write_json(Result.failed(availability.status, availability.reason, adapter=adapter.name).to_json())
        return 0
    tokenizer = load_tokenizer(args.tokenizer)
    variants = dl.deliveries(text, args.delivery, tokenizer, seed=args.seed, recorded=recorded, burst=args.burst)
    results = [_with_deadline(adapter, request, d, args.timeout) for d in variants]
    _write_json(representative(results).to_json())
    return 0


def _with_deadline(adapter: Any, request: Request, delivery: dl.Delivery, seconds: float) -> Result:
    def alarm(signum: int, frame: Any) -> None:
        raise _Deadline()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return execute(adapter, request, delivery)
    except _Deadline:
        return Result.failed("timeout", f"no result within {seconds:g} s", adapter=adapter.name, delivery=delivery.label)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def representative(results: Sequence[Result]) -> Result:
    """One result for a mode with several variants: the first that differs from the first, if any."""
    first = results[0]
    key = _observable(first)
    differing = [r for r in results[1:] if _observable(r) != key]
    chosen = differing[0] if differing else first
    if len(results) > 1:
        chosen = chosen.with_meta(
            variants=len(results), variants_differing=[r.meta.get("delivery") for r in differing]
        )
    return chosen


def _observable(result: Result) -> tuple:
    return (result.content or None, result.reasoning or None, result.tool_calls, result.outcome)


def cmd_render(args: argparse.Namespace) -> int:
    from k2conform.render import render, render_with_template

    data = _read_json_stdin(("messages",), ("messages", "tools", "add_generation_prompt"))
    messages, tools = data["messages"], data.get("tools") or []
    add = bool(data.get("add_generation_prompt", False))
    if args.chat_template:
        try:
            source = args.chat_template.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot read the chat template: {error}") from None
        text = render_with_template(source, messages, tools, add)
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
    corpus = load_corpus(root)
    print(f"{len(corpus)} cases OK ({len(corpus.completions)} completions, {len(corpus.prompts)} prompts) under {root}")
    return 0


def cmd_list_adapters(args: argparse.Namespace) -> int:
    rows = []
    for name in adapter_names():
        adapter = create_adapter(name)
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
