"""What ``k2conform coverage`` measures: which adapters (and why the others are not measured),
their files on disk, and the cases run through them (the corpus, or a fuzz corpus replayed)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from k2conform.case.corpus import CompletionCase, load_corpus
from k2conform.delivery import modes
from k2conform.errors import UsageError

KIMI, SHARED = "kimi", "shared"


@dataclass(frozen=True)
class Target:
    """One adapter to measure: its spec, the modes it runs in, its files (path, role, real path)."""

    spec: str
    name: str
    modes: tuple[str, ...]
    files: tuple[
        tuple[str, str, str], ...
    ]  #: (path like "vllm/parser/kimi_k2.py", role, real path)
    format: str = "k2"  #: the format whose classes are Kimi's in the reachability rules


@dataclass(frozen=True)
class NotMeasured:
    name: str
    reason: str


def targets(
    specs: Sequence[str], asked_modes: Sequence[str]
) -> tuple[list[Target], list[NotMeasured]]:
    """Split the adapters into those measured here and those not, with the reason."""
    from k2conform.adapter.command import CommandAdapter
    from k2conform.adapter.registry import create_adapter

    measured, skipped = [], []
    for spec in specs:
        adapter = create_adapter(spec)
        own_modes = modes.adapter_modes(adapter)
        files = [(path, KIMI) for path in adapter.coverage_files]
        files += [(path, SHARED) for path in adapter.coverage_shared_files]
        chosen = tuple(m for m in (asked_modes or own_modes) if m in own_modes)
        if isinstance(adapter, CommandAdapter):
            reason = "runs in another process (cmd:): coverage.py traces this process only"
        elif set(own_modes) & set(modes.SERVER_MODES):
            reason = "a server adapter: its parser runs behind the server, in the server modes only"
        elif not files:
            reason = "declares no coverage_files (k2conform.adapter.contract.Adapter)"
        elif not chosen:
            reason = f"takes none of the delivery modes asked for (it takes {', '.join(own_modes)})"
        else:
            located, reason = _locate(files)
            if located:
                format = adapter.formats[0]
                measured.append(Target(spec, adapter.name, chosen, located, format))
                continue
        skipped.append(NotMeasured(adapter.name, reason))
    return measured, skipped


def _locate(files: Sequence[tuple[str, str]]) -> tuple[tuple[tuple[str, str, str], ...], str]:
    """Each declared file's real path (the first part of a path is its import package); or
    nothing and why not."""
    located = []
    for path, role in files:
        package = path.split("/")[0]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return (), f"unavailable: the package {package!r} is not installed"
        real = Path(next(iter(spec.submodule_search_locations))).parent / path
        if not real.is_file():
            return (), f"{path} is not in the installed {package} (declared in coverage_files)"
        located.append((path, role, str(real)))
    return tuple(located), ""


@dataclass(frozen=True)
class Source:
    """Where the cases come from: the corpus (``--corpus``, ``--case``) or a fuzz corpus
    (``--replay``)."""

    corpus: Path | None = None
    replay: Path | None = None
    case_globs: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.replay is not None:
            return f"fuzz corpus {self.replay}"
        return f"corpus {self.corpus}" + (
            f" (cases {', '.join(self.case_globs)})" if self.case_globs else ""
        )

    def cases(self) -> list[CompletionCase]:
        """The cases to run; a selection that holds none is a usage error."""
        from k2conform.run.matrix import select_cases

        if self.replay is not None:
            found = replay_cases(self.replay)
        else:
            found = load_corpus(self.corpus).completions
        cases = select_cases(found, self.case_globs)
        if not cases:
            raise UsageError(f"no case to run in the {self.describe()}")
        return cases


_UNSAFE_ID = re.compile(r"[^a-z0-9_.\-]")


def replay_cases(directory: Path) -> list[CompletionCase]:
    """Each input file of a fuzz corpus (the envelope of the reference and differential targets,
    ``k2conform.fuzzing.envelope``) as a case: its request flags, its model output, and its cuts
    as the recorded deltas (so ``stream-recorded`` is the fuzzer's ``stream-split``).  Inputs the
    targets skip (longer than ``MAX_TEXT``) are skipped here too."""
    from k2conform.fuzzing.envelope import decode
    from k2conform.fuzzing.targets import MAX_TEXT
    from k2conform.run.cell import adhoc_case

    if not directory.is_dir():
        raise UsageError(f"--replay {directory}: not a directory")
    cases = []
    for path in sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")
    ):
        fuzz = decode(path.read_bytes())
        if len(fuzz.text) > MAX_TEXT:
            continue
        deltas = tuple(delta.text for delta in modes.cut(fuzz.text, fuzz.split_points()))
        case_id = "i_replay_" + _UNSAFE_ID.sub("_", path.name.lower())
        cases.append(adhoc_case(fuzz.request(), fuzz.text, deltas, case_id=case_id))
    if not cases:
        raise UsageError(f"--replay {directory}: no fuzz input in it")
    return cases
