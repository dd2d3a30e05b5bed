"""A marker-aware mutator for Kimi model outputs, shared by every fuzz target.

libFuzzer's byte-level mutations rarely produce a whole 28-byte marker, so this mutator
works on the structure instead: it inserts, drops, duplicates, reorders, truncates and
splits the format's marker units (K2: the five tool markers and the ``<think>`` tags; K3: its
tags, :mod:`k2conform.fuzzing.syntax`), changes a call's index and name, splices argument
bodies, and moves the chunk boundaries of the text-level stream.  Two operations
come from real bugs on the token axis: ``spell`` writes a marker from ordinary token pieces
(sgl-project/sglang PR #32677), ``spaces`` puts the spaces around added tokens that vLLM's
detokenizer puts there by default (vllm-project/vllm#33457).  One call in
five is left to libFuzzer's own mutation (``atheris.Mutate``).  Every result decodes as a
valid fuzz input whose text is valid UTF-8 (see :mod:`k2conform.fuzzing.envelope`).

A mutation must give the parsers something they have not run yet (:class:`SeenInputs`, the
digests of what the target read of every input it ran): an operation with nothing to act on
(no marker to drop, no call to rename), a libFuzzer mutation of the cut list when no delivery
mode replays it, a crossover that rebuilds one of its parents, or an edit another edit undid,
gave back an input run before (the same flags, text and, where read, cuts).  Such a result
is mutated again, up to :data:`ATTEMPTS` times; an operation that changes only what the
target does not read (the cut list without ``reads_cuts``, the spelled marker without
``reads_tokens``) is not drawn at all.  Measured on 3 Dec 2026 (the differential target, ``whole`` +
``stream-token``, 120 s from the seed corpus): before this, 24 % of the executions after the
seed replay repeated an input already run, after it 6 % (docs/fuzzing.md).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import replace
from typing import Callable

from k2conform import formats
from k2conform.fuzzing.envelope import FLAG_BITS, SPELLED, FuzzInput, decode, sample_cuts
from k2conform.fuzzing.syntax import DEFAULT as DEFAULT_SYNTAX
from k2conform.fuzzing.syntax import Syntax


def _occurrences(text: str, syntax: Syntax) -> list[re.Match[str]]:
    return list(syntax.occurrence.finditer(text))


def insert_marker(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    marker = rng.choice(syntax.units if rng.random() < 0.85 else syntax.extra_units)
    at = rng.randint(0, len(text))
    return text[:at] + marker + text[at:]


def drop_marker(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    found = _occurrences(text, syntax)
    if not found:
        return text
    m = rng.choice(found)
    return text[: m.start()] + text[m.end() :]


def duplicate_marker(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    found = _occurrences(text, syntax)
    if not found:
        return insert_marker(text, rng, syntax)
    m = rng.choice(found)
    return text[: m.end()] + m.group() + text[m.end() :]


def reorder_markers(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Swap two different marker occurrences."""
    found = _occurrences(text, syntax)
    pairs = [(a, b) for i, a in enumerate(found) for b in found[i + 1 :] if a.group() != b.group()]
    if not pairs:
        return text
    a, b = rng.choice(pairs)
    return text[: a.start()] + b.group() + text[a.end() : b.start()] + a.group() + text[b.end() :]


def truncate_marker(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Cut a marker short (keep a proper prefix): a partial marker in the text."""
    found = _occurrences(text, syntax)
    if not found:
        return text
    m = rng.choice(found)
    keep = rng.randint(1, len(m.group()) - 1)
    return text[: m.start() + keep] + text[m.end() :]


def break_marker(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Put text inside a marker (a space, a newline, another marker's prefix)."""
    found = _occurrences(text, syntax)
    if not found:
        return text
    m = rng.choice(found)
    at = m.start() + rng.randint(1, len(m.group()) - 1)
    broken = text[:at] + rng.choice(("\n", "<", "<|", "x")) + text[at:]
    if len(_occurrences(broken, syntax)) >= len(found):  # the insertion formed the marker again
        broken = text[:at] + " " + text[at:]
    return broken


def change_index(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Give a call another index: a different number, a huge one, leading zeros, none."""
    found = list(syntax.call_index.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    new = rng.choice(
        ("0", "1", "7", "00", " 1", "99999999999999999999", "", "-1", "x", str(rng.randint(0, 20)))
    )
    return text[: m.start(1)] + new + text[m.end(1) :]


def change_name(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Give a call another function name (dotted, hyphenated, non-ASCII, foreign ids; K3:
    attribute escapes)."""
    found = list(syntax.call_name.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    return text[: m.start(1)] + syntax.spell_name(rng.choice(syntax.name_pool)) + text[m.end(1) :]


def splice_arguments(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """Replace one call's argument body (K3: one argument's attributes and value) by another's
    or one from the pool."""
    found = list(syntax.arguments.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    others = [o.group(1) for o in found if o is not m]
    pool = syntax.argument_pool
    body = rng.choice(others) if others and rng.random() < 0.5 else rng.choice(pool)
    return text[: m.start(1)] + body + text[m.end(1) :]


def split_marker(fuzz: FuzzInput, rng: random.Random) -> FuzzInput:
    """Add a chunk boundary inside a marker (text-level streams cut markers anywhere)."""
    found = _occurrences(fuzz.text, fuzz.syntax)
    cuts = set(fuzz.split_points())
    if found:
        m = rng.choice(found)
        cuts.add(m.start() + rng.randint(1, len(m.group()) - 1))
    elif len(fuzz.text) > 1:
        cuts.add(rng.randint(1, len(fuzz.text) - 1))
    return replace(fuzz, cuts=tuple(sorted(cuts)))


def move_cuts(fuzz: FuzzInput, rng: random.Random) -> FuzzInput:
    """Drop some chunk boundaries or draw a few new ones (not one per character: a stream's
    cost grows with its deltas; every split point is the test suite's to check)."""
    cuts = list(fuzz.split_points())
    if rng.random() < 0.2 or not cuts:
        cuts = list(sample_cuts(len(fuzz.text), rng.getrandbits(32)))
    else:
        cuts = [c for c in cuts if rng.random() < 0.7]
    return replace(fuzz, cuts=tuple(cuts))


def flip_flags(fuzz: FuzzInput, rng: random.Random) -> FuzzInput:
    return replace(fuzz, flags=fuzz.flags ^ (1 << rng.randint(0, FLAG_BITS - 1)))


def spell_marker(fuzz: FuzzInput, rng: random.Random) -> FuzzInput:
    """Spell a marker from ordinary token pieces (the token axis, sgl-project/sglang PR
    #32677), or take the spelling back: the envelope's :data:`SPELLED` flag."""
    return replace(fuzz, flags=fuzz.flags ^ SPELLED)


def space_added_tokens(text: str, rng: random.Random, syntax: Syntax = DEFAULT_SYNTAX) -> str:
    """The output as a detokenizer with ``spaces_between_special_tokens`` (vLLM's default)
    hands it to the parser: every added token and every run of text between them joined by one
    space (vllm-project/vllm#33457; the spacing that defeats hold-back, PR #50367)."""
    return " ".join(part for part in syntax.added_split.split(text) if part)


#: Mutations of the text; each keeps the text a valid string.
TEXT_OPERATIONS: dict[str, Callable[[str, random.Random, Syntax], str]] = {
    "insert": insert_marker,
    "drop": drop_marker,
    "duplicate": duplicate_marker,
    "reorder": reorder_markers,
    "truncate": truncate_marker,
    "break": break_marker,
    "index": change_index,
    "name": change_name,
    "splice": splice_arguments,
    "spaces": space_added_tokens,
}
#: Mutations of the whole input (flags, chunk boundaries).
INPUT_OPERATIONS: dict[str, Callable[[FuzzInput, random.Random], FuzzInput]] = {
    "split": split_marker,
    "cuts": move_cuts,
    "flags": flip_flags,
    "spell": spell_marker,
}
OPERATIONS = tuple(TEXT_OPERATIONS) + tuple(INPUT_OPERATIONS)
#: The operations that only move chunk boundaries: drawn only where a target replays them.
CUT_OPERATIONS = ("split", "cuts")
#: The operations only a target that delivers token ids reads.
TOKEN_OPERATIONS = ("spell",)
#: Tries at a mutation the target has not run before the last one is given back anyway.
ATTEMPTS = 8
#: Inputs :class:`SeenInputs` remembers; past it the memory starts afresh, so a days-long run's
#: memory stays bounded (8-byte digests: about 100 MB).
SEEN_LIMIT = 1 << 20


def observable(fuzz: FuzzInput, reads_cuts: bool = True, reads_tokens: bool = True) -> bytes:
    """What a target's parsers see of an input, as bytes: the flags that make the request, the
    text and, where a delivery replays them (``reads_cuts``), the cut list; where a delivery
    sends token ids (``reads_tokens``), the flag that spells a marker."""
    flags = fuzz.flags if reads_tokens else fuzz.flags & ~SPELLED
    return FuzzInput(fuzz.text, flags, fuzz.cuts if reads_cuts else None).encode()


class SeenInputs:
    """What the target read of every input it ran (:func:`observable`, as 8-byte digests):
    the mutators look for an input outside it, the findings table counts repeats by it."""

    def __init__(
        self, reads_cuts: bool = True, reads_tokens: bool = True, limit: int = SEEN_LIMIT
    ) -> None:
        self.reads_cuts = reads_cuts
        self.reads_tokens = reads_tokens
        self.limit = limit
        self._digests: set[bytes] = set()

    @property
    def operations(self) -> tuple[str, ...]:
        """The operations that can change what the target reads."""
        unread = (CUT_OPERATIONS if not self.reads_cuts else ()) + (
            TOKEN_OPERATIONS if not self.reads_tokens else ()
        )
        return tuple(o for o in OPERATIONS if o not in unread)

    def digest(self, fuzz: FuzzInput) -> bytes:
        observed = observable(fuzz, self.reads_cuts, self.reads_tokens)
        return hashlib.blake2b(observed, digest_size=8).digest()

    def fresh(self, data: bytes) -> bool:
        """A mutator's candidate (encoded) is one the target has not run."""
        return self.digest(decode(data)) not in self._digests

    def add(self, fuzz: FuzzInput) -> bool:
        """Remember an input the target runs (decoded, as the target reads it); True when it
        had run the same before."""
        digest = self.digest(fuzz)
        if digest in self._digests:
            return True
        if len(self._digests) >= self.limit:
            self._digests.clear()
        self._digests.add(digest)
        return False


def apply(operation: str, fuzz: FuzzInput, rng: random.Random) -> FuzzInput:
    """One named structural mutation.  Cut points follow the text only approximately
    (a text mutation keeps the cut list as it is, and offsets past the end are dropped)."""
    if operation in TEXT_OPERATIONS:
        return replace(fuzz, text=TEXT_OPERATIONS[operation](fuzz.text, rng, fuzz.syntax))
    return INPUT_OPERATIONS[operation](fuzz, rng)


def fit(fuzz: FuzzInput, max_size: int) -> bytes:
    """The encoded input, shortened (by whole characters) until it fits ``max_size``."""
    data = fuzz.encode()
    if len(data) <= max_size:
        return data
    data = FuzzInput(fuzz.text, fuzz.flags, None).encode()
    if len(data) <= max_size:
        return data
    text = data[1 : max(1, max_size)].decode("utf-8", "ignore")  # drops a cut-off character
    return FuzzInput(text, fuzz.flags, None).encode()[:max_size]


def _first_fresh(
    make: Callable[[random.Random], bytes], fresh: Callable[[bytes], bool], seed: int
) -> bytes:
    """The first of up to :data:`ATTEMPTS` results of ``make`` that ``fresh`` accepts, else the
    last (an input too small to change)."""
    rng = random.Random(seed)
    for _ in range(ATTEMPTS):
        out = make(rng)
        if fresh(out):
            break
    return out


def mutate(
    data: bytes,
    max_size: int,
    seed: int,
    libfuzzer_mutate: Callable[[bytes, int], bytes] | None = None,
    seen: SeenInputs | None = None,
    format: str = formats.DEFAULT,
) -> bytes:
    """The custom mutator: ``atheris.Setup(..., custom_mutator=...)`` calls it through
    :func:`mutators` with ``libfuzzer_mutate=atheris.Mutate``.  The result is one ``seen``
    does not hold (without ``seen``: one that differs from ``data`` in what a target reads),
    unless :data:`ATTEMPTS` tries in a row gave none."""
    parent = decode(data, format)
    operations = OPERATIONS if seen is None else seen.operations

    def make(rng: random.Random) -> bytes:
        if libfuzzer_mutate is not None and rng.random() < 0.2:
            # normalised: the text is valid UTF-8 again
            return fit(decode(libfuzzer_mutate(data, max_size)), max_size)
        fuzz = parent
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            fuzz = apply(rng.choice(operations), fuzz, rng)
        return fit(fuzz, max_size)

    return _first_fresh(make, _fresh(seen, parent), seed)


def crossover(
    data1: bytes,
    data2: bytes,
    max_out_size: int,
    seed: int,
    seen: SeenInputs | None = None,
    format: str = formats.DEFAULT,
) -> bytes:
    """Splice: the head of one output up to a marker, the tail of the other from a marker; one
    ``seen`` does not hold (without it: neither parent), as :func:`mutate`."""
    a, b = decode(data1, format), decode(data2, format)
    heads = [m.start() for m in _occurrences(a.text, a.syntax)]
    tails = [m.start() for m in _occurrences(b.text, b.syntax)]

    def make(rng: random.Random) -> bytes:
        head = rng.choice(heads) if heads else rng.randint(0, len(a.text))
        tail = rng.choice(tails) if tails else rng.randint(0, len(b.text))
        return fit(FuzzInput(a.text[:head] + b.text[tail:], a.flags, None), max_out_size)

    return _first_fresh(make, _fresh(seen, a, b), seed)


def _fresh(seen: SeenInputs | None, *parents: FuzzInput) -> Callable[[bytes], bool]:
    """``seen``'s test, or without it: the candidate is none of ``parents``."""
    if seen is not None:
        return seen.fresh
    known = [observable(p) for p in parents]
    return lambda out: observable(decode(out)) not in known


def mutators(seen: SeenInputs, format: str = formats.DEFAULT) -> dict[str, Callable[..., bytes]]:
    """``atheris.Setup``'s ``custom_mutator`` and ``custom_crossover`` keywords for inputs of
    ``format``, looking for inputs ``seen`` does not hold."""
    import atheris

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        return mutate(data, max_size, seed, atheris.Mutate, seen, format)

    def custom_crossover(data1: bytes, data2: bytes, max_out_size: int, seed: int) -> bytes:
        return crossover(data1, data2, max_out_size, seed, seen, format)

    return {"custom_mutator": custom_mutator, "custom_crossover": custom_crossover}
