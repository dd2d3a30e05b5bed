"""``k2conform session --adapter NAME -- COMMAND``: the adapters' run-wide set-up (a real
server, started once), with COMMAND run under it.

A lane that needs two runs against one server (the whole corpus, then a few cases 8 streams at
once) pays the server's start once: each ``k2conform run`` inside sees the server's variables
(``K2CONFORM_VLLM_SERVER_URL``) and uses that server instead of starting its own.  The server is
stopped on every exit path, the command's included; the exit status is the command's.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "session",
        help="start the adapters' run-wide set-up (a real server) once and run a command under it",
    )
    p.description = (
        "Starts what each adapter needs for a whole run (vllm-server: the real server) in "
        "RUN_DIR/NAME, runs COMMAND with the variables that point a run at it, and stops it "
        "when COMMAND ends. Each `k2conform run` inside uses that server instead of starting "
        "its own. Exit status: COMMAND's; 2 for a usage error."
    )
    p.add_argument("--adapter", action="append", required=True, metavar="NAME")
    p.add_argument(
        "--run-dir",
        type=Path,
        default=Path(".k2conform-run"),
        help="where each adapter's session keeps its files (default .k2conform-run)",
    )
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")
    p.set_defaults(handler=cmd_session)


def cmd_session(args: argparse.Namespace) -> int:
    from k2conform.adapter.registry import create_adapter
    from k2conform.errors import UsageError
    from k2conform.run.matrix import adapter_sessions

    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        raise UsageError("no command to run: k2conform session --adapter NAME -- COMMAND ARGS")
    adapters = [create_adapter(name) for name in args.adapter]
    with adapter_sessions(adapters, args.run_dir):
        try:
            child = subprocess.Popen(command)  # inherits the sessions' variables
        except OSError as error:
            raise UsageError(f"cannot run {command[0]}: {error}") from None
        try:
            return child.wait()
        except BaseException:  # Ctrl-C, or SIGTERM unwinding as Ctrl-C: the command goes too
            child.terminate()
            child.wait()
            raise
