"""``k2conform catalogue build|check``: the findings catalogue (docs/findings-catalogue.md)."""

from __future__ import annotations

import argparse
from typing import Any

from k2conform.errors import UsageError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "catalogue",
        help="the findings catalogue: a minimised case and a bug report per distinct behaviour",
    )
    p.description = (
        "build: for each distinct behaviour of each adapter in the results (the report's "
        "grouping), minimise its example while that adapter in that delivery mode still shows "
        "it, and write the case, its report-finding report and the index under "
        "corpus/findings/catalogue/.  check: re-run every catalogue case through its own "
        "adapter; exit 1 when one no longer reproduces, 2 on a bad catalogue file."
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    from k2conform.catalogue import build, check

    b = sub.add_parser("build", help="build the catalogue from results JSON files")
    b.description = build.__doc__.split("\n\n")[0].replace("\n", " ")
    build.add_arguments(b)
    b.set_defaults(catalogue=build.cmd_build)
    c = sub.add_parser("check", help="re-run every catalogue case through its own adapter")
    c.description = check.__doc__.replace("\n", " ")
    check.add_arguments(c)
    c.set_defaults(catalogue=check.cmd_check)
    p.set_defaults(handler=_dispatch)


def _dispatch(args: argparse.Namespace) -> int:
    handler = getattr(args, "catalogue", None)
    if handler is None:
        raise UsageError("give an action: build or check")
    return handler(args)
