"""``k2conform serve-fake-engine``: the command line of :mod:`k2conform.engine.fake`, the engine
without a GPU that the live-engine plugin is tested against."""

from __future__ import annotations

import argparse
from typing import Any

from k2conform.engine.fake import FAULTS, FakeEngine, Server


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve-fake-engine", help="serve the probe replays as an OpenAI-compatible engine (CI)"
    )
    p.description = (
        "A Kimi engine without a GPU: generates each probe's replay, parses it with an adapter "
        "(of K2 by default; --adapter reference-k3 or vllm-k3: a K3 engine, its K3 probes) and "
        "serves /v1/chat/completions (JSON and SSE), /v1/models, /tokenize and /detokenize on "
        "loopback. "
        "Faults: " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items())
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", help="the served model name (default: kimi-FORMAT-fake)")
    p.add_argument(
        "--adapter", default="reference", help="the adapter whose parser serves the replies"
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=list(FAULTS),
        help="inject a broken behaviour (repeatable)",
    )
    p.add_argument("--api-key-env", help="require the key held by this environment variable")
    p.set_defaults(handler=cmd_serve_fake_engine)


def cmd_serve_fake_engine(args: argparse.Namespace) -> int:
    import os

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    engine = FakeEngine(faults=args.fault, adapter=args.adapter, model=args.model, api_key=key)
    server = Server(engine, args.host, args.port)
    print(
        f"serving {engine.model} ({engine.format}) on {server.url} "
        f"(faults: {', '.join(args.fault) or 'none'})",
        flush=True,
    )
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
