"""The pinned parser environments, from the closures k2conform carries (``k2conform
setup-parsers``: :mod:`k2conform.setup.cli`).

One code path for ``make setup`` (the in-process vLLM + SGLang closure, installed into the
project venv), ``make parsers-extra`` (one venv per extra parser under ``.venvs/``) and a user
with only the wheel.  Every closure installs ``--no-deps``: the engines' full dependency trees
pull CUDA builds and gigabytes that the parsers never import.  The environments are data,
``requirements/environments.toml``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from k2conform.errors import UsageError
from k2conform.resources import bundled
from k2conform.setup.prune import prune
from k2conform.setup.share import Store

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

    @property
    def release(self) -> str | None:
        """The engine release a release layer is built for (``vllm-0.10.0``: ``0.10.0``), which
        its adapter must import: a layer that falls through to its base's release is an error,
        not a second run of the base.  None for any other environment."""
        return release_of(self.name) if self.over else None

    def adapter_options(self, root: Path) -> list[str]:
        """``--adapter LABEL=cmd:...`` for each adapter this environment serves (extra ones only),
        held to the environment's release where it has one (``serve-adapter --release``).  The
        environment's name labels its first adapter (its line's); another is labelled
        ``ADAPTER-RELEASE`` (``sglang-k3-0.5.22``: release 0.5.22 of the ``sglang-k3`` line in
        ``history``).  A label names the formats of an adapter that parses other than K2
        (``LABEL[k3]=cmd:...``), since a run plans its cells before any hello; by them a spec
        reaches its adapter in the one command that serves all of the environment's (a run
        of them imports the release once)."""
        if self.into_current:
            return []
        from k2conform.adapter.contract import Adapter
        from k2conform.adapter.registry import create_adapter

        script = self.venv(root) / "bin" / "k2conform"
        release = f" --release {self.release}" if self.release else ""
        command = f"{script} serve-adapter {' '.join(self.adapters)}{release}"
        options = []
        for n, adapter in enumerate(self.adapters):
            label = self.name if n == 0 else f"{adapter}-{self.release or self.name}"
            formats = create_adapter(adapter).formats
            if formats != Adapter.formats:
                label += f"[{','.join(formats)}]"
            options.append(f"--adapter={label}=cmd:{command}")
        return options


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


#: The engine lines a candidate can be built for: a published release (``vllm==X``) or a source
#: checkout (``vllm --source DIR``), each a layer over the project venv, run by the adapter that
#: drives the line's current glue (named like the line).
CANDIDATE_LINES = ("vllm", "sglang")
_RELEASE_SPEC = re.compile(r"^(?P<line>[a-z]+)==(?P<release>[0-9][0-9A-Za-z.+!-]*)$")
#: What an environment holds, written into its venv by ``install`` (and the overlay).
MANIFEST = "k2conform-environment.json"


def release_of(name: str) -> str | None:
    """The release a release layer's name says (``vllm-0.10.0``: ``0.10.0``; None for any other
    name, ``vllm-src-<commit>`` among them)."""
    line, _, release = name.partition("-")
    if line in CANDIDATE_LINES and _RELEASE_SPEC.match(f"{line}=={release}"):
        return release
    return None


def candidate(spec: str, root: Path) -> Environment:
    """``vllm==0.34.0``: that release as a layer over the project venv, as a pinned release
    environment is; a name ``environments.toml`` already has is that environment."""
    match = _RELEASE_SPEC.match(spec)
    if not match or match["line"] not in CANDIDATE_LINES:
        raise UsageError(
            f"unknown environment {spec!r} (a name of `k2conform setup-parsers`, or "
            f"{' / '.join(f'{line}==VERSION' for line in CANDIDATE_LINES)})"
        )
    line, release = match["line"], match["release"]
    return _layer(f"{line}-{release}", line, release, root, f"{line} {release} (candidate)")


def source_candidate(line: str, source: Path, base: str | None, root: Path) -> Environment:
    """``vllm --source DIR``: the release wheel the checkout's compiled parts match (``--base``,
    else the checkout's last release tag), with the checkout's Python files laid over it by
    :func:`overlay` once it is installed."""
    if line not in CANDIDATE_LINES:
        raise UsageError(f"--source takes one of {', '.join(CANDIDATE_LINES)}, not {line!r}")
    package = source_package(line, source)
    release = base or _last_release_tag(source)
    if release is None:
        raise UsageError(
            f"cannot tell which {line} release {source} matches (no release tag in its git "
            "history): pass --base VERSION, the release whose wheel its compiled parts match"
        )
    commit = _git(source, "rev-parse", "--short=12", "HEAD")
    label = commit or package.parent.resolve().name
    return _layer(f"{line}-src-{label}", line, release, root, f"{line} {release} + {source}")


def source_package(line: str, source: Path) -> Path:
    """The import package inside a checkout: ``DIR/vllm`` (vLLM) or ``DIR/python/sglang``."""
    for package in (source / line, source / "python" / line):
        if (package / "__init__.py").is_file():
            return package
    raise UsageError(f"{source} is not a {line} checkout: no {line}/__init__.py in it")


def overlay(environment: Environment, line: str, source: Path, root: Path) -> list[str]:
    """Copy the checkout's Python files over the installed release where they differ; record
    which in the environment's manifest.  Returns their paths (``vllm/parser/kimi_k2.py``)."""
    package = source_package(line, source)
    target = _site_packages(str(environment.venv(root) / "bin" / "python")) / line
    overlaid = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        destination = target / relative
        if destination.is_file() and destination.read_bytes() == path.read_bytes():
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.unlink(missing_ok=True)  # a new file: the old may be linked (setup.share)
        destination.write_bytes(path.read_bytes())
        overlaid.append(f"{line}/{relative}")
    _record(
        environment,
        root,
        source=str(source.resolve()),
        commit=_git(source, "rev-parse", "HEAD"),
        overlaid=overlaid,
    )
    return overlaid


def manifest(environment: Environment, root: Path) -> dict:
    """What the environment records it holds (``{}`` when it was built before manifests)."""
    path = environment.venv(root) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def _record(environment: Environment, root: Path, **facts: object) -> None:
    path = environment.venv(root) / MANIFEST
    path.write_text(json.dumps({**manifest(environment, root), **facts}, indent=1) + "\n")


def _layer(name: str, line: str, release: str, root: Path, description: str) -> Environment:
    known = environments().get(name)
    if known is not None:
        return known
    closure = root.resolve() / "candidates" / f"{name}.txt"
    closure.parent.mkdir(parents=True, exist_ok=True)
    closure.write_text(f"# {description}: written by k2conform setup-parsers\n{line}=={release}\n")
    return Environment(name, (str(closure),), (line,), description, over="parsers")


def _last_release_tag(source: Path) -> str | None:
    tag = _git(source, "describe", "--tags", "--abbrev=0")
    match = re.match(r"^v?(\d+\.\d+\.\d+\S*)$", tag or "")
    return match.group(1) if match else None


def _git(source: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def installed(environment: Environment, root: Path) -> bool:
    return (
        environment.stamp(root).is_file() and (environment.venv(root) / "bin" / "python").exists()
    )


def install(
    environment: Environment,
    root: Path,
    k2conform_spec: str | None,
    log: Callable[[str], None] = print,
    keep_unloadable: bool = False,
) -> Path:
    """Build (or refresh) one environment; returns its venv.  Raises UsageError with one line.
    The shared objects it cannot load on this machine are removed (``k2conform.setup.prune``)
    unless ``keep_unloadable``."""
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
        # A layer gets no pip of its own: its base's pip installs into it (``pip --python``),
        # 5 s less a release than seeding and upgrading one (41 release layers); a rebuilt one
        # starts empty, so no pip or k2conform of an earlier build shadows its base's.
        without_pip = ["--without-pip", "--clear"] if base is not None else []
        _step(
            environment,
            venv,
            [sys.executable, "-m", "venv", *without_pip, str(venv)],
            "create the venv",
        )
        if base is None:
            _step(
                environment,
                venv,
                [str(venv / "bin" / "python"), "-m", "pip", "install", "--upgrade", "pip"],
                "upgrade pip",
            )
    python = str(venv / "bin" / "python")
    pip = _pip(python, base.venv(root) if base is not None else None)
    layer = _layer_file(python, base.name) if base is not None else None
    if layer is not None:
        # pip must not see the base while installing: it would uninstall the base's copy of
        # a package this layer pins (vllm 0.33.0 from the project venv, say).
        layer.unlink(missing_ok=True)
    log(
        f"== {environment.name}: installing {pins} pinned packages --no-deps "
        f"({', '.join(environment.closure_files())})"
    )
    # A layer (a release) skips pip's bytecode: 50 MB of it a release, 2.6 GB over the lanes,
    # for the few of its modules the parser path imports (Python compiles those on import).
    compile_flags = ["--no-compile"] if environment.over else []
    for path in requirements:
        _step(
            environment,
            venv,
            [*pip, "install", "--no-deps", *compile_flags, "-r", str(path)],
            f"install {path.name}",
        )
    if base is not None:
        _console_script(venv)  # k2conform itself is the base's, seen through the layer file
    elif not environment.into_current:
        spec = ["-e", k2conform_spec] if Path(k2conform_spec).is_dir() else [k2conform_spec]
        _step(
            environment,
            venv,
            [*pip, "install", "--no-deps", *spec],
            "install k2conform",
        )
    base_packages = _site_packages(str(base.venv(root) / "bin" / "python")) if base else None
    removed = [] if keep_unloadable else _prune(environment, python, base_packages, log)
    if layer is not None:
        layer.write_text(f"import site; site.addsitedir({str(base_packages)!r})\n")
        log(f"== {environment.name}: a layer over {base.name} ({base.venv(root)})")
    log(f"== {environment.name}: {pip_check_summary(pip)}")
    pinned = [
        line.strip()
        for path in requirements
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not environment.into_current:
        _record(
            environment,
            root,
            name=environment.name,
            over=environment.over,
            pinned=pinned,
            removed_unloadable=removed,
        )
    environment.stamp(root).write_text(f"{environment.name} {' '.join(environment.requirements)}\n")
    log(f"== {environment.name}: ready in {time.monotonic() - started:.0f} s ({venv})")
    return venv


def _prune(
    environment: Environment, python: str, base: Path | None, log: Callable[[str], None]
) -> list[str]:
    """Remove the environment's shared objects that cannot load here; say what went."""
    own = _site_packages(python)
    try:
        gone = prune(own, [base] if base else [])
    except OSError as error:
        raise UsageError(
            f"environment {environment.name}: could not remove what it cannot load: {error} "
            "(--keep-unloadable keeps it)"
        ) from None
    if gone:
        size = sum(item.size for item in gone) / 1e9
        first = gone[0]
        log(
            f"== {environment.name}: removed {len(gone)} shared object(s) it cannot load on "
            f"this machine ({size:.2f} GB; {first.path.relative_to(own)} needs {first.missing}, "
            "found nowhere): --keep-unloadable keeps them"
        )
    return [f"{item.path.relative_to(own)} (needs {item.missing})" for item in gone]


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
        errors = [line.strip() for line in text.splitlines() if line.startswith("ERROR:")]
        if missing:
            cause = f"no reachable wheel for {missing[-1]}"
        elif errors:
            cause = f"exit status {done.returncode}, {errors[-1]}"
        else:
            cause = f"exit status {done.returncode}"
        raise UsageError(
            f"environment {environment.name}: could not {what}: {cause} (log: {log_path})"
        )


def _pip(python: str, base: Path | None) -> list[str]:
    """The pip that installs into an environment: its own, or for a layer (no pip of its own)
    its base's, pointed at the layer's interpreter."""
    if base is None:
        return [python, "-m", "pip"]
    return [str(base / "bin" / "python"), "-m", "pip", "--python", python]


def _console_script(venv: Path) -> None:
    """``bin/k2conform`` of a layer, whose k2conform package is its base's: the layer's
    interpreter by its absolute path (from any directory; a path with spaces too)."""
    script = venv / "bin" / "k2conform"
    python = shlex.quote(str((venv / "bin" / "python").absolute()))
    script.write_text(f'#!/bin/sh\nexec {python} -m k2conform.cli "$@"\n')
    script.chmod(0o755)


def pip_check_summary(pip: Sequence[str]) -> str:
    """``pip check`` in one line: the closure leaves the engines' other dependencies out and pins
    some packages away from the engines' own pins, on purpose; anything else is spelled out."""
    done = subprocess.run([*pip, "check"], capture_output=True, text=True)
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


def build(
    selected: Sequence[Environment],
    known: Mapping[str, Environment],
    root: Path,
    spec: str | None,
    *,
    jobs: int = 1,
    force: bool = False,
    keep_unloadable: bool = False,
) -> None:
    """Build the selected environments not built yet (or all, ``force``), each linked to the
    files of those built before it: a base another is laid over first, alone; the rest (each
    its own venv) ``jobs`` at a time.  The first failure, in order, is its one line."""
    store = _Shared([*known.values(), *selected], root)

    def one(environment: Environment) -> None:
        if installed(environment, root) and not force and _fresh(environment, root):
            print(f"== {environment.name}: up to date ({environment.venv(root)})", flush=True)
        else:
            install(environment, root, spec, keep_unloadable=keep_unloadable)
            store.add(environment)

    bases = {e.over for e in selected if e.over}
    for environment in (e for e in selected if e.name in bases):
        one(environment)
    rest = [e for e in selected if e.name not in bases]
    if jobs == 1 or len(rest) < 2:
        for environment in rest:
            one(environment)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(jobs) as pool:
            for _ in pool.map(one, rest):
                pass


class _Shared:
    """Each environment built, linked to the files of those built before it as soon as it is
    done (``k2conform.setup.share``), so the disk holds at most one unlinked environment."""

    def __init__(self, environments: list[Environment], root: Path) -> None:
        self._environments = environments
        self._root = root
        self._store: Store | None = None
        self._lock = threading.Lock()

    def add(self, environment: Environment) -> None:
        venv = environment.venv(self._root)
        started = time.monotonic()
        with self._lock:
            if self._store is None:  # the environments already built, seen (and linked) first
                self._store = Store()
                for other in self._environments:
                    if other.venv(self._root) != venv and installed(other, self._root):
                        self._store.add(other.venv(self._root))
            files, size = self._store.add(venv)
        print(
            f"== {environment.name}: {files} files stored once with the other environments' "
            f"({size / 1e9:.2f} GB saved, {time.monotonic() - started:.0f} s)",
            flush=True,
        )


def _fresh(environment: Environment, root: Path) -> bool:
    """Built after its closure files last changed."""
    stamp = environment.stamp(root).stat().st_mtime
    return all(
        (bundled("requirements") / f).stat().st_mtime <= stamp for f in environment.closure_files()
    )
