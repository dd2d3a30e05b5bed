"""``k2conform setup-parsers``: build the pinned parser environments
(:mod:`k2conform.setup.parsers`), list them, or print the ``--adapter`` options of those built."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from k2conform.adapter.protocol import split_spec
from k2conform.errors import UsageError
from k2conform.resources import checkout_root
from k2conform.setup import parsers


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup-parsers", help="build the pinned parser environments")
    p.description = (
        "Installs the pinned parser closures that k2conform carries "
        "(requirements/environments.toml): "
        "'parsers' (vLLM + SGLang) into the running venv, every other one into VENV_ROOT/NAME with "
        "k2conform beside it (a release layer sees the project venv's), each adapter then run as "
        "--adapter 'NAME=cmd:VENV/bin/k2conform serve-adapter ADAPTER' (--release VERSION for a "
        "release layer).  Without NAME, lists the environments and whether they are built."
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="environments to build: a name listed without NAME, a release of an engine line "
        "(vllm==0.34.0, sglang==0.5.24), or with --source the line (vllm, sglang)",
    )
    p.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="a source checkout of the one line named (a pull request's worktree, say): its "
        "Python files laid over the release wheel its compiled parts match",
    )
    p.add_argument(
        "--base",
        metavar="VERSION",
        help="with --source: that release (default: the checkout's last release tag)",
    )
    p.add_argument(
        "--all", action="store_true", help="every environment marked extra, and 'parsers'"
    )
    p.add_argument(
        "--venv-root",
        type=Path,
        default=Path(os.environ.get("K2CONFORM_VENVS", ".venvs")),
        help="where the separate environments go (default .venvs, or $K2CONFORM_VENVS)",
    )
    p.add_argument(
        "--k2conform",
        metavar="SPEC",
        help="what to install as k2conform into new environments "
        "(default: this source checkout, editable)",
    )
    p.add_argument("--force", action="store_true", help="rebuild even when already built")
    p.add_argument(
        "--keep-unloadable",
        action="store_true",
        help="keep the shared objects an environment cannot load on this machine (its CUDA "
        "kernels, without a CUDA torch; by default removed: 1.3 GB of a vLLM release)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="build N environments at once (their layers' base first); default 1",
    )
    p.add_argument(
        "--adapters",
        action="store_true",
        help="print the --adapter options of the built environments",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="with --adapters: only the environments this reviewed baseline vouches for",
    )
    p.set_defaults(handler=cmd_setup_parsers)


def cmd_setup_parsers(args: argparse.Namespace) -> int:
    known = parsers.environments()
    root = args.venv_root
    if args.adapters:
        vouched = None
        if args.baseline is not None:
            from k2conform.gate.baseline import load_baseline

            vouched = set(load_baseline(args.baseline).adapters)
        for environment in known.values():
            if not parsers.installed(environment, root):
                continue
            for option in environment.adapter_options(root):  # none for the project venv
                label = split_spec(option.removeprefix("--adapter="))[0]
                if vouched is None or label in vouched:
                    print(option)
        return 0
    names: Sequence[str] = args.names or (
        [n for n, e in known.items() if e.extra or e.into_current] if args.all else []
    )
    if not names:
        for environment in known.values():
            state = "built" if parsers.installed(environment, root) else "not built"
            where = "this venv" if environment.into_current else str(environment.venv(root))
            print(f"{environment.name:<14} {state:<10} {where:<24} {environment.description}")
        return 0
    if args.base and not args.source:
        raise UsageError("--base goes with --source")
    if args.source:
        if len(names) != 1:
            raise UsageError("--source DIR takes one engine line: vllm or sglang")
        selected = [parsers.source_candidate(names[0], args.source, args.base, root)]
    else:
        selected = [known[n] if n in known else parsers.candidate(n, root) for n in names]
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    checkout = checkout_root()
    spec = args.k2conform or (str(checkout) if checkout else None)

    parsers.build(
        selected,
        known,
        root,
        spec,
        jobs=args.jobs,
        force=args.force,
        keep_unloadable=args.keep_unloadable,
    )
    for environment in selected:
        if args.source:
            files = parsers.overlay(environment, names[0], args.source, root)
            print(
                f"== {environment.name}: {len(files)} file(s) of {args.source} laid over "
                f"{names[0]} {parsers.manifest(environment, root)['pinned'][0].split('==')[1]}"
                + "".join(f"\n   {f}" for f in files[:20])
                + (f"\n   ... and {len(files) - 20} more" if len(files) > 20 else "")
            )
        for option in environment.adapter_options(root):
            print(f"== {environment.name}: run it with --adapter '{option.split('=', 1)[1]}'")
    return 0
