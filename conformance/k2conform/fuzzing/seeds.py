"""Seed corpora for the fuzz targets, built from the case corpus (never by hand).

Every completion case becomes one fuzz input (see :mod:`k2conform.fuzzing.envelope`):
its model output, its thinking flag, whether it declares tools, and the cuts of its
recorded deltas when it has some.  Files are named by content hash, so building twice
gives the same directory.  ``dictionary_text`` is the libFuzzer dictionary of the markers
(``fuzz/kimi_k2.dict`` is this text).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from k2conform import markers as mk
from k2conform.case.corpus import load_corpus
from k2conform.fuzzing.envelope import DECLARE_TOOLS, THINKING, FuzzInput


def seed_inputs(corpus_root: Path | str | None = None) -> list[FuzzInput]:
    inputs = []
    for case in load_corpus(corpus_root).completions:
        flags = (THINKING if case.request.thinking else 0) | (DECLARE_TOOLS if case.request.tools else 0)
        cuts = None
        if case.deltas:
            cuts, position = [], 0
            for piece in case.deltas[:-1]:
                position += len(piece)
                cuts.append(position)
            cuts = tuple(cuts)
        inputs.append(FuzzInput(case.model_output, flags, cuts))
    return inputs


def build_seed_corpus(out: Path | str, corpus_root: Path | str | None = None) -> int:
    """Write the seeds into ``out``; returns how many distinct inputs it holds."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = set()
    for fuzz in seed_inputs(corpus_root):
        data = fuzz.encode()
        name = hashlib.sha1(data).hexdigest()
        if name not in written:
            (out / name).write_bytes(data)
            written.add(name)
    return len(written)


def dictionary_text() -> str:
    """A libFuzzer dictionary: every marker, the think tags, and the id pieces."""
    entries = {
        "section_begin": mk.SECTION_BEGIN, "section_end": mk.SECTION_END, "call_begin": mk.CALL_BEGIN,
        "argument_begin": mk.ARGUMENT_BEGIN, "call_end": mk.CALL_END,
        "section_begin_singular": mk.SECTION_BEGIN_SINGULAR, "section_end_singular": mk.SECTION_END_SINGULAR,
        "think_begin": mk.THINK_BEGIN, "think_end": mk.THINK_END, "im_end": mk.IM_END,
        "im_assistant": mk.IM_ASSISTANT, "im_middle": mk.IM_MIDDLE,
        "functions_prefix": "functions.", "index_0": ":0", "index_1": ":1",
        "marker_head": "<|", "marker_tail": "|>", "json_open": '{"', "json_string_end": '"}',
        "escaped_quote": '\\"',
    }
    lines = ["# Kimi K2 tool-call markers for libFuzzer (-dict=fuzz/kimi_k2.dict).",
             "# Written by k2conform.fuzzing.seeds.dictionary_text() (tests check the two agree)."]
    for key, value in entries.items():
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"
