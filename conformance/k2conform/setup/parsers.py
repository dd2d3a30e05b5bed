"""``k2conform setup-parsers``: the pinned parser environments, from the closures k2conform carries.

One code path for ``make setup`` (the in-process vLLM + SGLang closure, installed into the
project venv), ``make parsers-extra`` (one venv per extra parser under ``.venvs/``) and a user
with only the wheel.  Every closure installs ``--no-deps``: the engines' full dependency trees
pull CUDA builds and gigabytes that the parsers never import.  The environments are data,
``requirements/environments.toml``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from k2conform.errors import UsageError
from k2conform.resources import bundled, checkout_root

_MISSING = re.compile(r"^(\S+) [^ ]+ requires (\S+), which is not installed\.$")
_MISMATCH = re.compile(r"^(\S+) [^ ]+ has requirement (\S+?)[<>=!~;\[ ]")
_NOT_FOUND = re.compile(
    r"(?:No matching distribution found for|Could not find a version that satisfies the "
    r"requirement) (\S+)"
)


#: k2conform's own runtime dependencies, pinned (requirements/k2conform.txt).
K2CONFORM_CLOSURE = "k2conform.txt"


@dataclass(frozen=True)
class Environment:
    """One parser environment: its closure files, the adapters it serves, where it goes."""

    name: str
    requirements: tuple[str, ...]
    adapters: tuple[str, ...]
    description: str = ""
    into_current: bool = False
    extra: bool = False
    over: str | None = None

    def closure_files(self) -> tuple[str, ...]:
        """The closure files installed, in order: an environment of its own gets k2conform's
        own dependencies first (k2conform is installed there --no-deps), unless it is a layer
        over another environment, which has them already."""
        if self.into_current or self.over:
            return self.requirements
        return (K2CONFORM_CLOSURE, *self.requirements)

    def venv(self, root: Path) -> Path:
        return Path(sys.prefix) if self.into_current else root / self.name

    def stamp(self, root: Path) -> Path:
        """Written last by a complete install: its absence means "not built"."""
        return self.venv(root) / f".k2conform-env-{self.name}"

    def adapter_options(self, root: Path) -> list[str]:
        """``--adapter NAME=cmd:...`` for each adapter this environment serves (extra ones only)."""
        if self.into_current:
            return []
        script = self.venv(root) / "bin" / "k2conform"
        return [
            f"--adapter={self.name}=cmd:{script} serve-adapter {adapter}"
            for adapter in self.adapters
        ]


def environments() -> dict[str, Environment]:
    """Every environment of ``requirements/environments.toml``, by name."""
    path = bundled("requirements") / "environments.toml"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"{path}: {error}") from None
    found = {}
    for name, entry in table.items():
        try:
            found[name] = Environment(
                name=name,
                requirements=tuple(entry["requirements"]),
                adapters=tuple(entry["adapters"]),
                description=entry.get("description", ""),
                into_current=entry.get("into") == "current",
                extra=bool(entry.get("extra", False)),
                over=entry.get("over"),
            )
        except (KeyError, TypeError) as error:
            raise UsageError(
                f"{path}: environment {name!r}: missing or bad field {error}"
            ) from None
    for environment in found.values():
        base = found.get(environment.over) if environment.over else None
        if environment.over and (base is None or base.over or environment.into_current):
            raise UsageError(
                f"{path}: environment {environment.name!r}: field 'over' must name an "
                f"environment that is not itself a layer (got {environment.over!r})"
            )
    return found


def installed(environment: Environment, root: Path) -> bool:
    return (
        environment.stamp(root).is_file() and (environment.venv(root) / "bin" / "python").exists()
    )


def install(
    environment: Environment,
    root: Path,
    k2conform_spec: str | None,
    log: Callable[[str], None] = print,
) -> Path:
    """Build (or refresh) one environment; returns its venv.  Raises UsageError with one line."""
    venv = environment.venv(root)
    started = time.monotonic()
    base = environments()[environment.over] if environment.over else None
    if base is not None and not installed(base, root):
        raise UsageError(
            f"environment {environment.name} is a layer over {base.name}, which is not built: "
            f"k2conform setup-parsers {base.name}"
        )
    requirements = [bundled("requirements") / name for name in environment.closure_files()]
    for path in requirements:
        if not path.is_file():
            raise UsageError(f"environment {environment.name}: no closure file {path}")
    pins = sum(
        1
        for path in requirements
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    if not environment.into_current:
        if k2conform_spec is None:
            raise UsageError(
                "this k2conform is not a source checkout: pass --k2conform WHEEL_OR_URL, "
                "what to install as k2conform into the new environments"
            )
        log(f"== {environment.name}: creating {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        _step(environment, venv, [sys.executable, "-m", "venv", str(venv)], "create the venv")
        _step(
            environment,
            venv,
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--upgrade", "pip"],
            "upgrade pip",
        )
    python = str(venv / "bin" / "python")
    layer = _layer_file(python, base.name) if base is not None else None
    if layer is not None:
        # pip must not see the base while installing: it would uninstall the base's copy of
        # a package this layer pins (vllm 0.33.0 from the project venv, say).
        layer.unlink(missing_ok=True)
    log(
        f"== {environment.name}: installing {pins} pinned packages --no-deps "
        f"({', '.join(environment.closure_files())})"
    )
    for path in requirements:
        _step(
            environment,
            venv,
            [python, "-m", "pip", "install", "--no-deps", "-r", str(path)],
            f"install {path.name}",
        )
    if not environment.into_current:
        spec = ["-e", k2conform_spec] if Path(k2conform_spec).is_dir() else [k2conform_spec]
        _step(
            environment,
            venv,
            [python, "-m", "pip", "install", "--no-deps", *spec],
            "install k2conform",
        )
    if layer is not None:
        base_packages = _site_packages(str(base.venv(root) / "bin" / "python"))
        layer.write_text(f"import site; site.addsitedir({str(base_packages)!r})\n")
        log(f"== {environment.name}: a layer over {base.name} ({base.venv(root)})")
    log(f"== {environment.name}: {pip_check_summary(python)}")
    environment.stamp(root).write_text(f"{environment.name} {' '.join(environment.requirements)}\n")
    log(f"== {environment.name}: ready in {time.monotonic() - started:.0f} s ({venv})")
    return venv


def _site_packages(python: str) -> Path:
    done = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def _layer_file(python: str, base: str) -> Path:
    """The ``.pth`` file that puts the base environment's packages after the layer's own: the
    layer's pins shadow the base's, everything else (torch, transformers, k2conform's own
    dependencies) is the base's, installed once."""
    return _site_packages(python) / f"k2conform-layer-over-{base}.pth"


def _step(environment: Environment, venv: Path, command: list[str], what: str) -> None:
    log_path = (venv if venv.exists() else venv.parent) / "setup-parsers.log"
    with open(log_path, "a", encoding="utf-8") as log_file:
        log_file.write(f"$ {' '.join(command)}\n")
        log_file.flush()
        done = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        text = log_path.read_text(encoding="utf-8", errors="replace")
        missing = _NOT_FOUND.findall(text)
        cause = (
            f"no reachable wheel for {missing[-1]}" if missing else f"exit status {done.returncode}"
        )
        raise UsageError(
            f"environment {environment.name}: could not {what}: {cause} (log: {log_path})"
        )


def pip_check_summary(python: str) -> str:
    """``pip check`` in one line: the closure leaves the engines' other dependencies out and pins
    some packages away from the engines' own pins, on purpose; anything else is spelled out."""
    done = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith("WARNING")]
    missing = [line for line in lines if _MISSING.match(line)]
    mismatched = sorted({m.group(2).lower() for line in lines if (m := _MISMATCH.match(line))})
    other = [line for line in lines if not _MISSING.match(line) and not _MISMATCH.match(line)]
    if not lines:
        return "pip check: no broken requirements"
    summary = (
        f"pip check: as expected for a --no-deps CPU closure, {len(missing)} declared dependencies "
        f"are not installed and {len(mismatched)} pins differ from the engines' own "
        f"({', '.join(mismatched) or 'none'})"
    )
    return summary + "".join(f"; unexpected: {line}" for line in other)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("setup-parsers", help="build the pinned parser environments")
    p.description = (
        "Installs the pinned parser closures that k2conform carries "
        "(requirements/environments.toml): "
        "'parsers' (vLLM + SGLang) into the running venv, every other one into VENV_ROOT/NAME with "
        "k2conform beside it, each adapter then run as --adapter 'NAME=cmd:VENV/bin/k2conform "
        "serve-adapter ADAPTER'.  Without NAME, lists the environments and whether they are built."
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="environments to build")
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
    known = environments()
    root = args.venv_root
    if args.adapters:
        vouched = None
        if args.baseline is not None:
            from k2conform.gate.baseline import load_baseline

            vouched = set(load_baseline(args.baseline).adapters)
        for environment in known.values():
            if not installed(environment, root):
                continue
            if vouched is not None and environment.name not in vouched:
                continue
            for option in environment.adapter_options(root):  # none for the project venv
                print(option)
        return 0
    names: Sequence[str] = args.names or (
        [n for n, e in known.items() if e.extra or e.into_current] if args.all else []
    )
    if not names:
        for environment in known.values():
            state = "built" if installed(environment, root) else "not built"
            where = "this venv" if environment.into_current else str(environment.venv(root))
            print(f"{environment.name:<14} {state:<10} {where:<24} {environment.description}")
        return 0
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown environment {unknown[0]!r} (known: {', '.join(known)})")
    checkout = checkout_root()
    spec = args.k2conform or (str(checkout) if checkout else None)
    for name in names:
        environment = known[name]
        if installed(environment, root) and not args.force and _fresh(environment, root):
            print(f"== {name}: up to date ({environment.venv(root)})")
            continue
        install(environment, root, spec)
    return 0


def _fresh(environment: Environment, root: Path) -> bool:
    """Built after its closure files last changed."""
    stamp = environment.stamp(root).stat().st_mtime
    return all(
        (bundled("requirements") / f).stat().st_mtime <= stamp for f in environment.closure_files()
    )
