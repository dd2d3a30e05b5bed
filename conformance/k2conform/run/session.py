"""``k2conform session --adapter NAME -- COMMAND``: the adapters' run-wide set-up (a real
server, started once), with COMMAND run under it.

A lane that needs two runs against one server (the whole corpus, then a few cases 8 streams at
once) pays the server's start once: each ``k2conform run`` inside sees the server's variables
(``K2CONFORM_VLLM_SERVER_URL``) and uses that server instead of starting its own.  The server is
stopped on every exit path, the command's included; the exit status is the command's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

#: An adapter's run session that could not set up says so in a variable named ``..._ERROR``
#: (``K2CONFORM_VLLM_SERVER_ERROR``: why the server did not start), as ``Adapter.run_session``
#: documents.
SESSION_ERROR_SUFFIX = "_ERROR"


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
    if shutil.which(command[0]) is None:  # said before a server is started for nothing
        raise UsageError(f"cannot run {command[0]}: no such command")
    adapters = [create_adapter(name) for name in args.adapter]
    before = dict(os.environ)
    with adapter_sessions(adapters, args.run_dir):
        failed = {
            k: v
            for k, v in os.environ.items()
            if k.endswith(SESSION_ERROR_SUFFIX) and before.get(k) != v
        }
        if failed:
            name, why = next(iter(failed.items()))
            raise UsageError(f"the session could not start ({name}): {why.splitlines()[-1]}")
        try:  # its own process group: an interrupt of the session reaches all of it
            child = subprocess.Popen(command, process_group=0)
        except OSError as error:
            raise UsageError(f"cannot run {command[0]}: {error}") from None
        try:
            status = child.wait()
        except BaseException:  # Ctrl-C, or SIGTERM unwinding as Ctrl-C: the command goes too
            _stop(child)
            raise
    return 128 - status if status < 0 else status  # killed by signal N: 128 + N, as a shell


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM to the command's process group (a ``k2conform run`` keeps its partial results),
    SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
