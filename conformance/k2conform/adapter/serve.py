"""``k2conform serve-adapter NAME [NAME...]``: in-process adapters, spoken over the adapter
protocol.

Run it in another environment (another virtual environment, another release of the
parser) and name it on the matrix's command line::

    k2conform run --adapter 'cmd:/other/venv/bin/k2conform serve-adapter vllm'

The protocol (docs/adapter-protocol.md): a hello line, then one response line per request
line, until stdin closes.  Whatever the parser under test prints goes to stderr: the real
stdout is kept for protocol lines only.  Several names (a release's K2 and K3 parsers) are
served by one process, which imports the release once; each request names its adapter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence, TextIO

from k2conform.adapter.contract import Adapter
from k2conform.delivery.modes import Delivery
from k2conform.adapter.harness import execute, guarded
from k2conform.model import Result, StreamReply
from k2conform.adapter.registry import Availability, create_adapter, load
from k2conform.adapter.protocol import (
    PROTOCOL,
    ProtocolError,
    formats_clash,
    hello_line,
    is_command_spec,
    parse_request_line,
    requested_adapter,
    served,
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve-adapter",
        help="speak the adapter protocol on stdin/stdout for in-process adapters",
    )
    p.description = (
        "Writes a hello line, then answers one JSON request line from stdin with one JSON response "
        "line on stdout until stdin closes (see 'k2conform --help' and docs/adapter-protocol.md). "
        "Use it as --adapter 'cmd:/path/to/venv/bin/k2conform serve-adapter NAME'.  Several "
        "names are served by one process (the parser imported once), each parsing other "
        "formats: a spec reaches the one parsing the formats it declares (NAME[k3]=cmd:...)."
    )
    p.add_argument(
        "names", nargs="+", metavar="NAME", help="an in-process adapter name (see list-adapters)"
    )
    p.add_argument(
        "--release",
        metavar="VERSION",
        help="the release this environment is built for: an adapter that imports another "
        "says hello as an adapter-error (a layer that fell through to its base's release)",
    )
    p.set_defaults(handler=cmd_serve_adapter)


def _protocol_stream() -> TextIO:
    """The real stdout, for protocol lines only; fd 1 then points at stderr, so a parser
    that prints (or a logger bound to stdout) cannot corrupt the protocol."""
    sys.stdout.flush()
    private = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(private, "w", encoding="utf-8", newline="\n", buffering=1)


def hello(adapter: Adapter, status: str, reason: str) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL,
        "name": adapter.name,
        "version": adapter.version(),
        "supported_versions": list(adapter.supported_versions),
        "cell_timeout": adapter.cell_timeout,
        "stop_string_holdback": adapter.stop_string_holdback,
        "request_options": sorted(adapter.request_options),
        "formats": list(adapter.formats),
        "status": status,
        "reason": reason,
        "description": adapter.description,
    }


def answer(adapters: Sequence[Adapter], line: str) -> dict[str, Any]:
    """The response line for one request line, by the adapter it names among those served
    (never raises for the parser's sake)."""
    try:
        data = json.loads(line)
        by_name = {adapter.name: adapter for adapter in adapters}
        adapter = by_name[requested_adapter(data, list(by_name))]
        mode, request, deltas = parse_request_line(data)
    except (json.JSONDecodeError, ProtocolError) as error:
        return Result.failed("adapter-error", f"bad request line: {error}").to_json()
    if mode == "whole":
        result = execute(adapter, request, Delivery("whole", deltas))
        return result.to_json()
    reply = guarded(lambda: adapter.parse_stream(request, deltas))
    if isinstance(reply, Result):
        return {"outcome": reply.outcome.value, "error": reply.error}
    events, wire = reply if isinstance(reply, StreamReply) else (reply, ())
    line: dict[str, Any] = {"events": [event.to_json() for event in events if event is not None]}
    if wire:
        line["wire"] = [v.to_json() for v in wire]
    return line


def _same_release(adapter: Adapter, release: str) -> bool:
    """The adapter's installed release is ``release`` (``0.11`` is ``0.11.0``: a candidate named
    by ``vllm==0.11`` installs 0.11.0)."""
    installed = adapter.version()
    try:  # packaging: a dependency of every engine, not of k2conform
        from packaging.version import Version

        return installed is not None and Version(installed) == Version(release)
    except (ImportError, ValueError):  # InvalidVersion is a ValueError
        return installed == release


def cmd_serve_adapter(args: argparse.Namespace) -> int:
    from k2conform.errors import UsageError

    for name in args.names:
        if is_command_spec(name):
            raise UsageError("serve-adapter serves in-process adapters, not a cmd: one")
    adapters = [create_adapter(name) for name in args.names]
    # checked before any parser loads, as a client checks the hellos (read_hellos)
    identities = [{"name": a.name, "formats": list(a.formats)} for a in adapters]
    if formats_clash(identities):
        raise UsageError(
            "the adapters one process serves must differ in the formats they parse (a spec "
            "reaches its adapter by them): " + served(identities)
        )
    out = _protocol_stream()
    hellos = [hello(adapter, *_availability(adapter, args.release)) for adapter in adapters]
    out.write(json.dumps(hello_line(hellos)) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        out.write(
            json.dumps(answer(adapters, line)) + "\n"
        )  # ASCII: a lone surrogate survives the pipe
    return 0


def _availability(adapter: Adapter, release: str | None) -> tuple[str, str]:
    """The adapter loaded: its status and reason for the hello, held to ``release``."""
    availability = load(adapter)
    if availability.status == "ok" and release and not _same_release(adapter, release):
        availability = Availability(
            "adapter-error",
            f"this environment is built for {adapter.name} {release}, but the adapter "
            f"imports {adapter.version()}",
        )
    return availability.status, availability.reason
