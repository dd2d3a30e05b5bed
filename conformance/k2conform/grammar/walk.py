"""One engine's structural tag compiled with xgrammar on CPU: does it accept a string, and
seeded random strings it admits.

Acceptance is what ``xgrammar.testing._is_grammar_accept_string`` does (a matcher over an empty
vocabulary, ``terminate_without_stop_token=True``, ``accept_string`` then ``is_terminated``).  A
tag that names special tokens as tokens (Kimi K3's ``<|close|>``) is accepted over tokens
instead: a vocabulary of those tokens and single characters, each token as the output's.
Walks run a second matcher over a small vocabulary (printable ASCII, a few multi-byte
characters, each tool-call marker as one token, as the Kimi tokenizer has it, and ``<|im_end|>``
as the stop token): each step asks the matcher for the allowed next tokens (its bitmask) and
draws one.  xgrammar is imported on use: this module runs in an engine's own environment.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from k2conform import markers

#: The walk's stop token: Kimi K2 ends its turn with ``<|im_end|>``.
STOP = markers.IM_END
VOCABULARY: tuple[str, ...] = (
    *(chr(code) for code in range(32, 127)),
    "\n",
    "\t",
    "é",
    "日",
    "😀",
    *markers.TOOL_MARKERS,
    STOP,
)
#: Tokens that close what is open: in free text (inside a JSON string) the quote, in structure
#: an object, an array or the section.  A walk draws among them more and more often as it
#: makes choices, so every walk ends.
CLOSING_TEXT = frozenset({'"'})
CLOSING_STRUCTURE = frozenset({"}", "]", markers.SECTION_END})
#: After this many choices a walk always draws a closing token where one is allowed; one still
#: running after HARD_LENGTH tokens is a grammar without an end (WalkError).
SOFT_LENGTH = 80
HARD_LENGTH = 4000
#: A position allowing more tokens than this is free text (inside a JSON string), anything
#: else structure.  Draw weights (other tokens 1): a marker in free text is rare but occurs;
#: in structure markers end runs (of index digits) quickly and whitespace stays sparse.
FREE_TEXT_TOKENS = 40
MARKER_IN_FREE_TEXT = 0.3
MARKER_IN_STRUCTURE = 10.0
WHITESPACE_IN_STRUCTURE = 0.25
_MARKER_IDS = frozenset(VOCABULARY.index(m) for m in markers.TOOL_MARKERS)
_WHITESPACE_IDS = frozenset(VOCABULARY.index(w) for w in " \n\t")
_STOP_ID = VOCABULARY.index(STOP)


class WalkError(RuntimeError):
    """A walk that did not end within HARD_LENGTH tokens (a grammar without an end)."""


class CompiledTag:
    """One structural tag (the JSON an engine hands its xgrammar backend), compiled twice:
    over an empty vocabulary for acceptance, over :data:`VOCABULARY` for walks; ``tokens``: the
    special tokens the tag names as tokens, accepted over a vocabulary holding them."""

    def __init__(self, spec: str, tokens: tuple[str, ...] = ()) -> None:
        import xgrammar

        self._xgr = xgrammar
        self.spec, self.tokens = spec, tokens
        self._accepting = _compiler(_token_vocabulary(tokens, "")).compile_structural_tag(spec)

    @cached_property
    def _walkable(self) -> Any:
        return _compiler(VOCABULARY).compile_structural_tag(self.spec)

    def rejection(self, text: str) -> str | None:
        """None when the grammar accepts ``text`` whole; else where and how it rejects it."""
        return self.rejection_of([(n, c) for n, c in enumerate(text)], text, must_end=True)

    def rejection_of(
        self, pieces: Sequence[tuple[int, str]], text: str, *, must_end: bool
    ) -> str | None:
        """None when the grammar accepts ``pieces`` (``(offset in text, piece)``: characters,
        or with :attr:`tokens` the output's tokens) one after the other, and, ``must_end``, can
        end there; else where and how it rejects them."""
        compiled = self._accepting
        vocabulary: tuple[str, ...] = ()
        if self.tokens:
            vocabulary = _token_vocabulary(self.tokens, text)
            compiled = _compiler(vocabulary).compile_structural_tag(self.spec)
        matcher = self._xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        for offset, piece in pieces:
            accepted = (
                matcher.accept_token(vocabulary.index(piece))
                if vocabulary
                else matcher.accept_string(piece)
            )
            if not accepted:
                shown = markers.visible(text[max(0, offset - 24) : offset])
                return f"rejected at character {offset} ({piece!r}, after {shown!r})"
        if must_end and not matcher.is_terminated():
            return "rejected: the grammar needs more after the end"
        return None

    def sample(self, rng: random.Random) -> str:
        """One string the grammar admits, drawn token by token until the stop token."""
        matcher = self._xgr.GrammarMatcher(self._walkable)
        bitmask = self._xgr.allocate_token_bitmask(1, len(VOCABULARY))
        pieces: list[str] = []
        choices = 0
        for _ in range(HARD_LENGTH):
            matcher.fill_next_token_bitmask(bitmask)
            words = bitmask[0].tolist()
            allowed = [t for t in range(len(VOCABULARY)) if (words[t >> 5] >> (t & 31)) & 1]
            if not allowed:
                raise WalkError(
                    "no token of the walks' vocabulary goes on after "
                    f"{markers.visible(''.join(pieces)[-200:])!r}"
                )
            choices += len(allowed) > 1
            token = _draw(allowed, rng, choices / SOFT_LENGTH)
            if token == _STOP_ID:
                return "".join(pieces)
            if not matcher.accept_token(token):
                raise RuntimeError(f"xgrammar refused token {VOCABULARY[token]!r} it allowed")
            pieces.append(VOCABULARY[token])
        raise WalkError(
            f"no end within {HARD_LENGTH} tokens: {markers.visible(''.join(pieces)[:200])}"
        )


def _draw(allowed: list[int], rng: random.Random, pressure: float) -> int:
    free_text = len(allowed) > FREE_TEXT_TOKENS
    closers = CLOSING_TEXT if free_text else CLOSING_STRUCTURE
    closing = [t for t in allowed if VOCABULARY[t] in closers]
    if closing and rng.random() < pressure:
        return rng.choice(closing)
    return rng.choices(allowed, _weights(allowed, free_text))[0]


def _weights(allowed: list[int], free_text: bool) -> list[float]:
    if free_text:
        return [MARKER_IN_FREE_TEXT if t in _MARKER_IDS else 1.0 for t in allowed]
    return [
        MARKER_IN_STRUCTURE
        if t in _MARKER_IDS
        else WHITESPACE_IN_STRUCTURE
        if t in _WHITESPACE_IDS
        else 1.0
        for t in allowed
    ]


def _token_vocabulary(tokens: tuple[str, ...], text: str) -> tuple[str, ...]:
    """The tokens, then single characters: printable ASCII, newline, tab and ``text``'s own
    (empty without tokens: acceptance over text needs no vocabulary)."""
    if not tokens:
        return ()
    characters = {chr(code) for code in range(32, 127)} | {"\n", "\t"} | set(text)
    return (*tokens, *sorted(characters))


_COMPILERS: dict[tuple[str, ...], Any] = {}


def _compiler(vocabulary: tuple[str, ...]) -> Any:
    """One compiler per vocabulary for the process (compilers cache their grammars)."""
    if vocabulary not in _COMPILERS:
        import xgrammar

        stop = [vocabulary.index(STOP)] if STOP in vocabulary else None
        info = xgrammar.TokenizerInfo(list(vocabulary), xgrammar.VocabType.RAW, stop_token_ids=stop)
        _COMPILERS[vocabulary] = xgrammar.GrammarCompiler(info)
    return _COMPILERS[vocabulary]


def xgrammar_version() -> str:
    from importlib.metadata import version

    return version("xgrammar")
