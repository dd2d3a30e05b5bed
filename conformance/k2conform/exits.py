"""Running one parsed ``k2conform`` command and giving its exit status, for the command line and
for a tool that runs a command in process (``catalogue build`` runs ``report-finding``): a
usage or harness error is exit 2 with one line, never a traceback with exit 1."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from k2conform.adapter.registry import UnknownAdapter
from k2conform.case.corpus import CorpusError
from k2conform.errors import HarnessError, UsageError

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130


def run_command(args: argparse.Namespace) -> int:
    """``args.handler(args)``, its exceptions mapped to exit statuses (docs/cli.md)."""
    try:
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except (UsageError, UnknownAdapter, CorpusError) as error:
        print(f"k2conform {args.command}: {error}", file=sys.stderr)
        return 2
    except HarnessError as error:
        print(
            f"k2conform {args.command}: harness error (a bug in k2conform, not a parser "
            f"finding):\n{error}",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        # The reader left (``| head``): no traceback, and none at exit's flush either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # before a command's own handling (a run's) takes over
        print(f"k2conform {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception:  # a bug in k2conform: never a finding's exit 1
        print(
            f"k2conform {args.command}: internal error (a bug in k2conform, not a parser "
            f"finding):\n{traceback.format_exc()}",
            file=sys.stderr,
        )
        return 2
