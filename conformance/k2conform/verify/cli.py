"""``k2conform verify --base SIDE --head SIDE``: one adapter's base against its head, run side by
side, one process per side (an environment: ``parsers``, a name of ``setup-parsers``, or a
candidate such as ``vllm==0.34.0`` or ``vllm --source DIR``'s), or read from ``run --json``
files.  Exit status: 0 no regression, 1 regression, 2 usage or harness error, 3 not comparable
(different corpus, modes or seed; an adapter-error; an empty, partial or short side)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from k2conform.adapter.registry import create_adapter
from k2conform.delivery import modes
from k2conform.errors import HarnessError, UsageError
from k2conform.run.results import read_results
from k2conform.setup.parsers import (
    CANDIDATE_LINES,
    MANIFEST,
    candidate,
    environments,
    installed,
    release_of,
)
from k2conform.verify.compare import Side, compare, html_page, markdown, to_json

#: The project venv: the pinned in-process releases.
PROJECT = "parsers"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify", help="a candidate against its base: fixed, regressed, changed, unchanged"
    )
    p.description = (__doc__ or "").replace("\n", " ")
    p.add_argument("--adapter", default="vllm", help="the adapter both sides run (default vllm)")
    p.add_argument("--base", required=True, metavar="SIDE", help="environment or results file")
    p.add_argument("--head", required=True, metavar="SIDE", help="environment or results file")
    p.add_argument(
        "--delivery", action="append", choices=list(modes.MODES), help="modes (default: run's)"
    )
    p.add_argument("--opt-in", action="append", choices=list(modes.OPT_IN_MODES), default=[])
    p.add_argument("--case", action="append", metavar="GLOB", help="only these cases")
    p.add_argument("--seed", type=int, help="stream-random's base seed (default: run's)")
    p.add_argument("--timeout", type=float, help="seconds per cell (default: run's)")
    p.add_argument(
        "--venv-root",
        type=Path,
        default=Path(os.environ.get("K2CONFORM_VENVS", ".venvs")),
        help="where the environments are (default .venvs, or $K2CONFORM_VENVS)",
    )
    p.add_argument("--out", type=Path, default=Path("verify"), help="where each side's run goes")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the Markdown")
    p.add_argument(
        "--html", type=Path, metavar="FILE", help="also write a page with every behaviour"
    )
    p.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    adapter = create_adapter(args.adapter)  # an unknown name: a usage error before any run
    sides = [_side(args, "base", args.base, adapter), _side(args, "head", args.head, adapter)]
    comparison = compare(*sides)
    text = markdown(comparison)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(to_json(comparison), indent=1) + "\n", encoding="utf-8")
    if args.html:
        args.html.write_text(html_page(comparison), encoding="utf-8")
    sys.stdout.write(text)
    return comparison.status


def _side(args: argparse.Namespace, role: str, spec: str, adapter: Any) -> Side:
    if spec.endswith(".json"):
        path = Path(spec)
        if not path.is_file():
            raise UsageError(f"--{role} {spec}: no such results file")
        return Side(spec, read_results(path))
    python, release = _environment(spec, args.venv_root, role)
    files = _kimi_files(python, adapter)
    out = args.out / role
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "k2conform.cli",
        "run",
        f"--adapter={args.adapter}=cmd:{Path(python).parent / 'k2conform'} serve-adapter "
        f"{args.adapter}" + (f" --release {release}" if release else ""),
        "--json",
        str(out / "results.json"),
    ]
    for flag, values in (("--delivery", args.delivery), ("--opt-in", args.opt_in),
                         ("--case", args.case)):
        command += [f"{flag}={value}" for value in values or ()]
    if args.seed is not None:
        command.append(f"--seed={args.seed}")
    if args.timeout is not None:
        command.append(f"--timeout={args.timeout}")
    print(f"== verify: {role} {spec}: {args.adapter} through {python}", file=sys.stderr)
    with open(out / "run.log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode not in (0, 1, 130):  # 130: interrupted, marked partial: not comparable
        raise HarnessError(
            f"the {role} run exited {done.returncode}: see {out / 'run.log'}\n"
            + (out / "run.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        )
    return Side(spec, read_results(out / "results.json"), files)


def _environment(spec: str, root: Path, role: str) -> tuple[str, str | None]:
    """The interpreter of an environment that serves an adapter (the project venv for
    ``parsers``, else a built one: ``setup-parsers NAME`` or a candidate spec), and the
    release its adapter must import (a release layer's; None for the others)."""
    if spec == PROJECT:
        return sys.executable, None
    environment = environments().get(spec)
    if environment is None and (root / spec / MANIFEST).is_file():  # a candidate built before,
        # named by its environment (``vllm-0.34.0``; a source overlay's ``vllm-src-*`` names no
        # release)
        return str(root / spec / "bin" / "python"), release_of(spec)
    if environment is None:
        try:
            environment = candidate(spec, root)
        except UsageError:
            raise UsageError(
                f"--{role} {spec}: neither a results file (.json) nor an environment "
                f"({PROJECT}, a name of `k2conform setup-parsers`, or "
                f"{' / '.join(f'{line}==VERSION' for line in CANDIDATE_LINES)})"
            ) from None
    if not installed(environment, root):
        raise UsageError(
            f"--{role} {spec}: environment {environment.name} is not built: "
            f"k2conform setup-parsers {spec}"
        )
    return str(environment.venv(root) / "bin" / "python"), environment.release


def _kimi_files(python: str, adapter: Any) -> dict[str, str]:
    """sha256 of each Kimi-relevant file the adapter declares, as that environment imports it."""
    paths = (*adapter.coverage_files, *adapter.coverage_shared_files, *adapter.serving_files)
    packages = sorted({p.split("/")[0] for p in paths})
    if not packages:
        return {}
    code = (
        "import importlib.util, json, os, sys\n"
        "roots = {}\n"
        "for name in sys.argv[1:]:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    roots[name] = os.path.dirname(os.path.dirname(spec.origin)) if spec else None\n"
        "print(json.dumps(roots))\n"
    )
    done = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True)
    if done.returncode != 0:
        return {}
    roots = json.loads(done.stdout)
    hashes = {}
    for path in paths:
        root = roots.get(path.split("/")[0])
        file = Path(root) / path if root else None
        if file is not None and file.is_file():
            hashes[path] = hashlib.sha256(file.read_bytes()).hexdigest()
    return hashes
