"""Seed corpora for the fuzz targets, built from the case corpus (never by hand).

Every completion case becomes one fuzz input (see :mod:`k2conform.fuzzing.envelope`):
its model output, its thinking flag, whether it declares tools, and the cuts of its
recorded deltas when it has some.  Files are named by content hash, so building twice
gives the same directory.  ``dictionary_text`` is the libFuzzer dictionary of the markers
(``fuzz/kimi_k2.dict`` is this text).  :func:`write_service_files` lays out, per target, what
OSS-Fuzz and ClusterFuzzLite read beside its executable (docs/fuzzing.md).
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from k2conform import markers
from k2conform.case.corpus import CompletionCase, load_corpus
from k2conform.delivery.modes import cut_points
from k2conform.fuzzing.envelope import DECLARE_TOOLS, THINKING, FuzzInput


def fuzz_input(case: CompletionCase) -> FuzzInput:
    """A case as a fuzz input: its model output, thinking flag, whether it declares tools, and
    the cuts of its recorded deltas."""
    flags = (THINKING if case.request.thinking else 0) | (
        DECLARE_TOOLS if case.request.tools else 0
    )
    cuts = cut_points(case.deltas) if case.deltas else None
    return FuzzInput(case.model_output, flags, cuts)


def seed_inputs(corpus_root: Path | str | None = None) -> list[FuzzInput]:
    # the fuzz targets drive the K2 adapters: K3 outputs are no seeds of theirs (docs/k3.md)
    return [
        fuzz_input(c) for c in load_corpus(corpus_root).completions if c.format == markers.FORMAT
    ]


def seed_files(corpus_root: Path | str | None = None) -> dict[str, bytes]:
    """The seed inputs by file name (their content hash), each once."""
    encoded = (fuzz.encode() for fuzz in seed_inputs(corpus_root))
    return {hashlib.sha1(data).hexdigest(): data for data in encoded}


def build_seed_corpus(out: Path | str, corpus_root: Path | str | None = None) -> int:
    """Write the seeds into ``out``; returns how many distinct inputs it holds."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = seed_files(corpus_root)
    for name, data in files.items():
        (out / name).write_bytes(data)
    return len(files)


def write_service_files(out: Path | str, corpus_root: Path | str | None = None) -> list[Path]:
    """Per target ``fuzz_NAME`` in ``out`` (the services' ``$OUT``): ``fuzz_NAME.options`` (the
    libFuzzer flags ``k2conform fuzz`` passes) and, for the targets that read the envelope,
    ``fuzz_NAME_seed_corpus.zip`` and ``fuzz_NAME.dict``.  The zip is byte-for-byte the same
    on every build (sorted names, fixed timestamps)."""
    from k2conform.fuzzing.differential import DEFAULT_DEADLINE
    from k2conform.fuzzing.targets import ENVELOPE_TARGETS, MAX_LEN, TARGETS, libfuzzer_timeout

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = seed_files(corpus_root)
    written = []
    for target in TARGETS:
        stem = out / f"fuzz_{target}"
        options = stem.with_name(stem.name + ".options")
        options.write_text(
            f"[libfuzzer]\nmax_len = {MAX_LEN[target]}\n"
            f"timeout = {libfuzzer_timeout(DEFAULT_DEADLINE)}\n",
            encoding="utf-8",
        )
        written.append(options)
        if target not in ENVELOPE_TARGETS:
            continue
        archive = stem.with_name(stem.name + "_seed_corpus.zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name in sorted(files):
                bundle.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), files[name])
        dictionary = stem.with_name(stem.name + ".dict")
        dictionary.write_text(dictionary_text(), encoding="utf-8")
        written += [archive, dictionary]
    return written


def dictionary_text() -> str:
    """A libFuzzer dictionary: every marker, the think tags, and the id pieces."""
    entries = {
        "section_begin": markers.SECTION_BEGIN,
        "section_end": markers.SECTION_END,
        "call_begin": markers.CALL_BEGIN,
        "argument_begin": markers.ARGUMENT_BEGIN,
        "call_end": markers.CALL_END,
        "section_begin_singular": markers.SECTION_BEGIN_SINGULAR,
        "section_end_singular": markers.SECTION_END_SINGULAR,
        "think_begin": markers.THINK_BEGIN,
        "think_end": markers.THINK_END,
        "im_end": markers.IM_END,
        "im_assistant": markers.IM_ASSISTANT,
        "im_middle": markers.IM_MIDDLE,
        "functions_prefix": "functions.",
        "index_0": ":0",
        "index_1": ":1",
        "marker_head": "<|",
        "marker_tail": "|>",
        "json_open": '{"',
        "json_string_end": '"}',
        "escaped_quote": '\\"',
    }
    lines = [
        "# Kimi K2 tool-call markers for libFuzzer (-dict=fuzz/kimi_k2.dict).",
        "# Written by k2conform.fuzzing.seeds.dictionary_text() (tests check the two agree).",
    ]
    for key, value in entries.items():
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"
