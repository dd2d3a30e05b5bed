"""Seed corpora for the fuzz targets, built from the case corpus (never by hand).

Every completion case becomes one fuzz input (see :mod:`k2conform.fuzzing.envelope`):
its model output, its thinking flag, whether it declares tools, and the cuts of its
recorded deltas when it has some.  Files are named by content hash, so building twice
gives the same directory; a format's seeds are its cases (``--format``).  ``dictionary_text``
is the libFuzzer dictionary of a format's markers (``fuzz/kimi_k2.dict``, ``fuzz/kimi_k3.dict``
are these texts).  :func:`write_service_files` lays out, per target, what
OSS-Fuzz and ClusterFuzzLite read beside its executable (docs/fuzzing.md).
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from k2conform import formats
from k2conform.case.corpus import CompletionCase, load_corpus
from k2conform.delivery.modes import cut_points
from k2conform.fuzzing.envelope import DECLARE_TOOLS, THINKING, FuzzInput
from k2conform.fuzzing.syntax import SYNTAXES


def fuzz_input(case: CompletionCase) -> FuzzInput:
    """A case as a fuzz input: its model output, thinking flag, whether it declares tools, and
    the cuts of its recorded deltas."""
    flags = (THINKING if case.request.thinking else 0) | (
        DECLARE_TOOLS if case.request.tools else 0
    )
    cuts = cut_points(case.deltas) if case.deltas else None
    return FuzzInput(case.model_output, flags, cuts, case.format)


def seed_inputs(
    corpus_root: Path | str | None = None, format: str = formats.DEFAULT
) -> list[FuzzInput]:
    """The cases of ``format`` as fuzz inputs (a target fuzzes one format)."""
    return [fuzz_input(c) for c in load_corpus(corpus_root).completions if c.format == format]


def seed_files(
    corpus_root: Path | str | None = None, format: str = formats.DEFAULT
) -> dict[str, bytes]:
    """The seed inputs by file name (their content hash), each once."""
    encoded = (fuzz.encode() for fuzz in seed_inputs(corpus_root, format))
    return {hashlib.sha1(data).hexdigest(): data for data in encoded}


def build_seed_corpus(
    out: Path | str, corpus_root: Path | str | None = None, format: str = formats.DEFAULT
) -> int:
    """Write the seeds of ``format`` into ``out``; returns how many distinct inputs it holds."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = seed_files(corpus_root, format)
    for name, data in files.items():
        (out / name).write_bytes(data)
    return len(files)


def write_service_files(out: Path | str, corpus_root: Path | str | None = None) -> list[Path]:
    """Per service target ``fuzz_NAME`` in ``out`` (the services' ``$OUT``):
    ``fuzz_NAME.options`` (the libFuzzer flags ``k2conform fuzz`` passes) and, for the targets
    that read the envelope, ``fuzz_NAME_seed_corpus.zip`` and ``fuzz_NAME.dict`` of its format.
    The zip is byte-for-byte the same on every build (sorted names, fixed timestamps)."""
    from k2conform.fuzzing.differential import DEFAULT_DEADLINE
    from k2conform.fuzzing.targets import (
        ENVELOPE_TARGETS,
        MAX_LEN,
        SERVICE_TARGETS,
        libfuzzer_timeout,
    )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    seeds: dict[str, dict[str, bytes]] = {}  # per format: the corpus is read once
    for name, (target, format) in SERVICE_TARGETS.items():
        stem = out / f"fuzz_{name}"
        options = stem.with_name(stem.name + ".options")
        options.write_text(
            f"[libfuzzer]\nmax_len = {MAX_LEN[target]}\n"
            f"timeout = {libfuzzer_timeout(DEFAULT_DEADLINE)}\n",
            encoding="utf-8",
        )
        written.append(options)
        if target not in ENVELOPE_TARGETS:
            continue
        if format not in seeds:
            seeds[format] = seed_files(corpus_root, format)
        files = seeds[format]
        archive = stem.with_name(stem.name + "_seed_corpus.zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for file_name in sorted(files):
                entry = zipfile.ZipInfo(file_name, date_time=(1980, 1, 1, 0, 0, 0))
                bundle.writestr(entry, files[file_name])
        dictionary = stem.with_name(stem.name + ".dict")
        dictionary.write_text(dictionary_text(format), encoding="utf-8")
        written += [archive, dictionary]
    return written


def dictionary_file(format: str = formats.DEFAULT) -> str:
    """The dictionary's file name in ``fuzz/``: ``kimi_k2.dict``, ``kimi_k3.dict``."""
    return f"kimi_{format}.dict"


def dictionary_text(format: str = formats.DEFAULT) -> str:
    """A libFuzzer dictionary: every marker of ``format`` and the pieces of its calls
    (:attr:`k2conform.fuzzing.syntax.Syntax.dictionary`)."""
    lines = [
        f"# Kimi {format.upper()} tool-call markers for libFuzzer "
        f"(-dict=fuzz/{dictionary_file(format)}).",
        "# Written by k2conform.fuzzing.seeds.dictionary_text() (tests check the two agree).",
    ]
    for key, value in SYNTAXES[format].dictionary.items():
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"
