"""A Kimi K2 tokenizer: the real one when its files are at hand, a small stand-in otherwise.

The real Kimi K2 tokenizer is tiktoken-based: ``tiktoken.model`` (~160K byte-level BPE
ranks, one ``base64-token rank`` per line) plus ``tokenizer_config.json``, whose
``added_tokens_decoder`` names the special tokens from id 163584 on.  It cannot be
downloaded here, so :func:`load_tokenizer` with no path returns a *stand-in* that behaves
like the real one where a tool-call parser can tell the difference:

* the same pre-tokenisation regex (:data:`PAT_STR`, Moonshot's ``tokenization_kimi.py``);
* the Kimi markers are single tokens at their real ids (``markers.SPECIAL_TOKEN_IDS``), and
  the four Kimi K3 markers single special tokens at reserved slots (their real ids are not
  public: ``k3.markers.STANDIN_TOKEN_IDS``), so one stand-in serves both formats;
  while look-alikes such as the singular ``<|tool_call_section_begin|>`` are ordinary
  text of several tokens, exactly as in the real vocabulary;
* ordinary text is byte-level BPE, so common words and JSON punctuation are multi-byte
  tokens and a multi-byte character (CJK, emoji) can be split across tokens, which is
  what makes incremental detokenisation interesting.

Only the ids of ordinary text differ from the real tokenizer's (the stand-in has a few
thousand ranks trained on ``data/standin_corpus.txt``; see :func:`build_standin_ranks`).
Regenerate the shipped ranks with ``python -m k2conform.delivery.tokenizer --rebuild``.
"""

from __future__ import annotations

import base64
import codecs
import functools
import heapq
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import overload

import regex
import tiktoken

from k2conform import markers
from k2conform import formats

# Moonshot's tokenization_kimi.py, ``TikTokenTokenizer.pat_str``, verbatim (checked against
# two copies of the file; see tests).  ``&&`` is class *intersection*: tiktoken's engine
# (fancy-regex over Rust's regex crate) supports it natively, so this string is handed to
# tiktoken unchanged.  Python's ``regex`` module needs its V1 flag for the same meaning
# (:data:`PAT_STR_PY`); without it ``&&`` is two literal ampersands and words vanish.
PAT_STR: str = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

#: :data:`PAT_STR` for Python's ``regex`` module (V1 enables ``&&`` set intersection).
PAT_STR_PY: str = "(?V1)" + PAT_STR

#: tokenization_kimi.py reserves 256 + 2 ids after the ordinary ranks for added tokens;
#: an id in that range without a name in the config is called ``<|reserved_token_{id}|>``.
NUM_RESERVED_SPECIAL_TOKENS = 256
#: The first added-token id of Kimi K2 (= the number of ordinary ranks of the real model).
FIRST_SPECIAL_ID = 163584

# Added tokens of the real K2 config that the conformance suite does not otherwise use
# (tiny-random copies of the K2 tokenizer_config.json).  Harmless to have; realistic.
_EXTRA_ADDED_TOKENS: dict[str, int] = {
    "<|start_header_id|>": 163590,
    "<|end_header_id|>": 163591,
    "[EOT]": 163593,
}
# In the real config the tool-call markers and <think>/</think> are ``"special": false``
# (they survive ``skip_special_tokens=True``); the im_* tokens, [BOS], [EOS] etc. are true.
_NOT_SPECIAL: frozenset[str] = frozenset(
    markers.TOOL_MARKERS + (markers.THINK_BEGIN, markers.THINK_END)
)

_DATA = Path(__file__).resolve().parent.parent / "data"
STANDIN_RANKS_FILE = _DATA / "standin.tiktoken"
STANDIN_CORPUS_FILE = _DATA / "standin_corpus.txt"
#: Number of BPE merges trained for the stand-in (ranks = 256 bytes + merges).
STANDIN_MERGES = 3000

# tokenization_kimi.py splits long inputs so tiktoken does not overflow its stack.
_MAX_ENCODE_CHARS = 400_000
_MAX_NO_WHITESPACES_CHARS = 25_000

_PRETOKENIZER = regex.compile(PAT_STR_PY)


def pretokenize(text: str) -> list[str]:
    """Split text into the pieces BPE works on, as the real tokenizer does (no specials)."""
    return _PRETOKENIZER.findall(text)


# --------------------------------------------------------------------------------------
# The tokenizer


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (transformers' bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class KimiTokenizer:
    """Kimi K2 tokenizer over tiktoken: ordinary BPE ranks plus added tokens at fixed ids.

    Mirrors Moonshot's ``TikTokenTokenizer`` (``tokenization_kimi.py``): ``encode`` turns
    every added token found in the text into its single id (``allowed_special="all"``),
    ``get_vocab``/``convert_ids_to_tokens`` spell tokens in GPT-2's byte-level alphabet
    (a space is ``Ġ``, a newline ``Ċ``), and ``vocab_size`` is tiktoken's ``n_vocab``
    (highest id + 1).
    """

    def __init__(
        self,
        mergeable_ranks: Mapping[bytes, int],
        added_tokens: Mapping[str, int],
        *,
        special: Iterable[str] = (),
        name: str = "kimi-k2",
        bos_token: str = markers.BOS,
        eos_token: str = markers.EOS,
    ) -> None:
        """``added_tokens``: every added token (text -> id); ``special``: those flagged
        ``"special": true`` in the config (what ``skip_special_tokens`` would drop)."""
        ranks = dict(mergeable_ranks)
        clash = set(ranks.values()) & set(added_tokens.values())
        if clash:
            raise ValueError(f"added-token ids collide with ordinary ranks: {sorted(clash)[:5]}")
        self.name = name
        self._ranks = ranks
        self._added: dict[str, int] = dict(sorted(added_tokens.items(), key=lambda kv: kv[1]))
        self._special: frozenset[str] = frozenset(special) & set(self._added)
        self._enc = tiktoken.Encoding(
            name=name, pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=self._added
        )
        self._id_to_added = {i: t for t, i in self._added.items()}
        self.bos_token, self.eos_token = bos_token, eos_token
        self._vocab: dict[str, int] | None = None

    # --- identity --------------------------------------------------------------------

    @property
    def special_tokens(self) -> dict[str, int]:
        """Every added token (the Kimi markers, im_* tokens, reserved slots): text -> id."""
        return dict(self._added)

    @property
    def all_special_tokens(self) -> list[str]:
        """Added tokens flagged special in the config, reserved slots excluded.

        As in the real config, the tool-call markers and ``<think>``/``</think>`` are *not*
        special (``skip_special_tokens=True`` keeps them); they are still single tokens.
        """
        return [t for t in self._added if t in self._special]

    @property
    def all_special_tokens_extended(self) -> list[str]:
        """:attr:`all_special_tokens` (transformers' list may hold ``AddedToken`` objects; these
        are the same tokens, as strings): what older vLLM releases' ``get_cached_tokenizer``
        reads."""
        return self.all_special_tokens

    @property
    def all_special_ids(self) -> list[int]:
        return [self._added[t] for t in self.all_special_tokens]

    @property
    def bos_token_id(self) -> int:
        return self._added[self.bos_token]

    @property
    def eos_token_id(self) -> int:
        """``[EOS]`` (163585): the config's ``eos_token``.  The chat template never emits it;
        every turn ends with ``<|im_end|>`` (:attr:`im_end_token_id`), which is where
        generation of an assistant turn stops."""
        return self._added[self.eos_token]

    @property
    def im_end_token_id(self) -> int:
        """``<|im_end|>`` (163586): ends each turn; the practical stop token."""
        return self._added[markers.IM_END]

    @property
    def vocab_size(self) -> int:
        """tiktoken's ``n_vocab``: highest id + 1 (the stand-in's id space has a gap)."""
        return self._enc.n_vocab

    @property
    def num_ordinary_tokens(self) -> int:
        """How many ordinary BPE ranks there are (ids ``0 .. n-1`` in both tokenizers)."""
        return len(self._ranks)

    # --- encode / decode -------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; added tokens written in the text become their single id.
        ``add_special_tokens`` (transformers' flag, which vLLM's K3 reasoning parser passes)
        changes nothing: the Kimi tokenizer adds no BOS or EOS to encoded text."""
        ids: list[int] = []
        for i in range(0, len(text), _MAX_ENCODE_CHARS):
            for chunk in _split_long_runs(text[i : i + _MAX_ENCODE_CHARS]):
                ids.extend(self._enc.encode(chunk, allowed_special="all"))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; invalid UTF-8 (e.g. a cut-off character) becomes U+FFFD."""
        return self._enc.decode(list(ids), errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (an added token's bytes are its UTF-8 text)."""
        return self._enc.decode_single_token_bytes(token_id)

    def is_added(self, token_id: int) -> bool:
        """Whether ``token_id`` is an added token (marker, im_* token or reserved slot)."""
        return token_id in self._id_to_added

    def stream_detokenize(self, ids: Iterable[int]) -> list[str]:
        """The text each token adds in an engine's incremental detokenizer, one per id.

        Bytes of an incomplete UTF-8 character are held back until it completes, so the
        piece of a token holding only part of a character is ``""`` and the completing
        token's piece carries the whole character.  Bytes that can never complete become
        U+FFFD where a full decode would put it (still-pending bytes at the end are
        flushed into the last piece), so ``"".join(pieces) == decode(ids)`` always.
        """
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pieces = [decoder.decode(self.token_bytes(i)) for i in ids]
        tail = decoder.decode(b"", final=True)
        if tail:
            pieces[-1] += tail
        return pieces

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text`` with every added token written in it spelled from ordinary
        pieces, as a model writes a marker's text without its token."""
        ids: list[int] = []
        for i in range(0, len(text), _MAX_ENCODE_CHARS):
            for chunk in _split_long_runs(text[i : i + _MAX_ENCODE_CHARS]):
                ids.extend(self._enc.encode_ordinary(chunk))
        return ids

    def added_token_at(self, text: str, offset: int) -> str | None:
        """The added token whose text starts at ``offset`` of ``text`` (the longest), if any."""
        for name in self._added_by_length:
            if text.startswith(name, offset):
                return name
        return None

    @functools.cached_property
    def _added_by_length(self) -> tuple[str, ...]:
        return tuple(sorted(self._id_to_added.values(), key=len, reverse=True))

    def tokenize_spans(self, text: str, spelled: Sequence[int] = ()) -> list[tuple[int, str]]:
        """``(token id, text that token's delta adds)`` for each token of ``text``: the
        input of token-aligned streaming.  The texts concatenate back to ``text``.

        ``spelled``: offsets where an added token's text starts that the model wrote from
        ordinary pieces instead of the token (sgl-project/sglang PR #32677): same text,
        other ids (``CompletionCase.spelled_markers``)."""
        ids: list[int] = []
        position = 0
        for at in sorted(set(spelled)):
            token = self.added_token_at(text, at) if at >= position else None
            if token is None:
                raise ValueError(f"no added token starts at offset {at} to spell")
            ids += self.encode(text[position:at]) + self.encode_ordinary(token)
            position = at + len(token)
        ids += self.encode(text[position:])
        return list(zip(ids, self.stream_detokenize(ids)))

    # --- HF-style vocabulary ---------------------------------------------------------

    def get_vocab(self) -> dict[str, int]:
        """Token string -> id, as ``TikTokenTokenizer.get_vocab`` returns it.

        Every token's bytes are spelled with GPT-2's printable byte alphabet, so byte
        tokens that are not valid UTF-8 still get a stable string and ASCII tokens map to
        themselves except space/control bytes (``" the"`` is ``"Ġthe"``).  Added tokens
        are ASCII without spaces, so ``get_vocab()["<|tool_calls_section_begin|>"]`` is
        163595 (vLLM's KimiK2ToolParser looks marker ids up this way).
        """
        return dict(self._vocabulary())

    def _vocabulary(self) -> dict[str, int]:
        """:meth:`get_vocab`'s mapping, built once (not through ``get_vocab``, which a
        wrapper such as vLLM's ``get_cached_tokenizer`` overrides on a copy of this object)."""
        if self._vocab is None:
            vocab: dict[str, int] = {}
            for token, rank in sorted(self._ranks.items(), key=lambda kv: kv[1]):
                vocab[_spell(token)] = rank
            for text, token_id in self._added.items():
                vocab[_spell(text.encode("utf-8"))] = token_id
            self._vocab = vocab
        return self._vocab

    def __len__(self) -> int:
        """The size of the vocabulary with the added tokens, as transformers' ``len(tokenizer)``
        (``len(get_vocab())``): vLLM's ``get_cached_tokenizer`` reads it."""
        return len(self._vocabulary())

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str: ...
    @overload
    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]: ...

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """The :meth:`get_vocab` spelling of one id or of each id."""
        if isinstance(ids, int):
            return _spell(self.token_bytes(ids))
        return [_spell(self.token_bytes(i)) for i in ids]

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int | None: ...
    @overload
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int | None]: ...

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | None | list[int | None]:
        """Ids of :meth:`get_vocab` spellings; ``None`` for an unknown token (K2 has no
        ``unk_token``)."""
        vocab = self._vocabulary()
        if isinstance(tokens, str):
            return vocab.get(tokens)
        return [vocab.get(t) for t in tokens]

    def __repr__(self) -> str:
        return (
            f"KimiTokenizer(name={self.name!r}, ordinary={len(self._ranks)}, "
            f"added={len(self._added)}, vocab_size={self.vocab_size})"
        )


def _spell(token: bytes) -> str:
    table = _bytes_to_unicode()
    return "".join(table[b] for b in token)


def _split_long_runs(s: str, limit: int = _MAX_NO_WHITESPACES_CHARS) -> Iterator[str]:
    """tokenization_kimi.py's guard: no piece with more than ``limit`` consecutive
    whitespace or non-whitespace characters (tiktoken issue #195): a run is cut every
    ``limit`` characters from its start.  A regex finds the long runs (``\\s`` is
    ``str.isspace``), not a loop over characters: servers that re-tokenise the whole
    text on every delta call this once per delta."""
    start = 0
    for run in _long_runs(limit).finditer(s):
        for cut in range(run.start() + limit, run.end(), limit):
            yield s[start:cut]
            start = cut
    yield s[start:]


@functools.lru_cache(maxsize=8)
def _long_runs(limit: int) -> re.Pattern[str]:
    return re.compile(rf"\s{{{limit + 1},}}|\S{{{limit + 1},}}")


# --------------------------------------------------------------------------------------
# Loading


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str | os.PathLike[str] | None = None) -> KimiTokenizer:
    """The stand-in (no ``path``) or the real tokenizer from a model directory.

    A real directory holds ``tiktoken.model`` (``base64 rank`` per line) and
    ``tokenizer_config.json``; added tokens come from its ``added_tokens_decoder``
    (``{"163595": {"content": "<|tool_calls_section_begin|>", "special": false}, ...}``)
    and, as in tokenization_kimi.py, every unnamed id of the 258 slots after the ordinary
    ranks is ``<|reserved_token_{id}|>``.
    """
    if path is None:
        return _standin()
    root = Path(path)
    ranks = parse_ranks((root / "tiktoken.model").read_bytes())
    config = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
    decoder = config.get("added_tokens_decoder") or {}
    named = {int(i): entry["content"] for i, entry in decoder.items()}
    special = {entry["content"] for entry in decoder.values() if entry.get("special", False)}
    added = _with_reserved(named, first=len(ranks))

    def token_name(key: str, default: str) -> str:
        value = config.get(key, default)
        return value["content"] if isinstance(value, dict) else (value or default)

    return KimiTokenizer(
        ranks,
        added,
        special=special,
        name=root.name or "kimi-k2",
        bos_token=token_name("bos_token", markers.BOS),
        eos_token=token_name("eos_token", markers.EOS),
    )


def _with_reserved(named: Mapping[int, str], first: int) -> dict[str, int]:
    added = {text: i for i, text in named.items()}
    for i in range(first, first + NUM_RESERVED_SPECIAL_TOKENS + 2):
        if i not in named:
            added[f"<|reserved_token_{i}|>"] = i
    return added


def standin_added_tokens() -> tuple[dict[str, int], frozenset[str]]:
    """The stand-in's added tokens (text -> id) and which of them are flagged special."""
    named = {
        i: t
        for t, i in {
            **markers.SPECIAL_TOKEN_IDS,
            **_EXTRA_ADDED_TOKENS,
            **{t: i for f in formats.FORMATS.values() for t, i in f.standin_token_ids.items()},
        }.items()
    }
    added = _with_reserved(named, first=FIRST_SPECIAL_ID)
    return added, frozenset(t for t in named.values() if t not in _NOT_SPECIAL)


@functools.lru_cache(maxsize=1)
def _standin() -> KimiTokenizer:
    ranks = parse_ranks(STANDIN_RANKS_FILE.read_bytes())
    added, special = standin_added_tokens()
    return KimiTokenizer(ranks, added, special=special, name="kimi-k2-standin")


# --------------------------------------------------------------------------------------
# The tiktoken rank-file format


def parse_ranks(data: bytes) -> dict[bytes, int]:
    """Parse tiktoken's ``base64-token rank`` lines (what ``load_tiktoken_bpe`` reads,
    without its download cache keyed by path)."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except Exception as exc:  # noqa: BLE001 - report the line, whatever went wrong
            raise ValueError(f"tiktoken.model line {n}: cannot parse {line[:80]!r}") from exc
    return ranks


def dump_ranks(ranks: Mapping[bytes, int]) -> bytes:
    """Serialise ranks in tiktoken's format, sorted by rank (byte-stable)."""
    lines = [
        base64.b64encode(token) + b" " + str(rank).encode()
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    return b"\n".join(lines) + b"\n"


# --------------------------------------------------------------------------------------
# The stand-in's BPE training (deterministic)


def train_bpe(text: str, num_merges: int) -> dict[bytes, int]:
    """Byte-level BPE over :func:`pretokenize` pieces; deterministic.

    Ranks 0..255 are the single bytes (rank = byte value); each merge of the most
    frequent adjacent pair (ties: lowest pair of ids) gets the next rank.  Stops early
    when no pair occurs twice.  Merges never cross piece boundaries, as in tiktoken.
    """
    counts = Counter(piece.encode("utf-8") for piece in pretokenize(text))
    words: list[list[int]] = [list(w) for w in counts]
    freq: list[int] = list(counts.values())
    vocab: list[bytes] = [bytes([b]) for b in range(256)]
    ids: dict[bytes, int] = {t: i for i, t in enumerate(vocab)}

    pair_count: Counter[tuple[int, int]] = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for w, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_count[pair] += freq[w]
            where.setdefault(pair, set()).add(w)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = 0
    while merges < num_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg:
            continue  # stale entry
        if -neg < 2:
            break
        merged = vocab[pair[0]] + vocab[pair[1]]
        new = ids.get(merged)
        if new is None:
            new = len(vocab)
            vocab.append(merged)
            ids[merged] = new
            merges += 1
        touched: set[tuple[int, int]] = set()
        for w in sorted(where.pop(pair, ())):
            word, f = words[w], freq[w]
            for p in zip(word, word[1:]):
                pair_count[p] -= f
                touched.add(p)
            out: list[int] = []
            k = 0
            while k < len(word):
                if k + 1 < len(word) and (word[k], word[k + 1]) == pair:
                    out.append(new)
                    k += 2
                else:
                    out.append(word[k])
                    k += 1
            words[w] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                where.setdefault(p, set()).add(w)
                touched.add(p)
        for p in touched:
            c = pair_count.get(p, 0)
            if c <= 0:
                pair_count.pop(p, None)
            else:
                heapq.heappush(heap, (-c, p))
    return {token: rank for rank, token in enumerate(vocab)}


def standin_training_text() -> str:
    """The stand-in's training text: the hand-written corpus plus generated tool calls."""
    parts = [STANDIN_CORPUS_FILE.read_text(encoding="utf-8")]
    names = [
        "get_weather",
        "search",
        "read_file",
        "write_file",
        "run_command",
        "get_time",
        "send_email",
        "calculate",
        "translate",
        "list_files",
        "create_event",
        "lookup_user",
    ]
    cities = [
        "Paris",
        "London",
        "Tokyo",
        "New York",
        "Beijing",
        "Berlin",
        "Madrid",
        "Rome",
        "Sydney",
        "北京",
        "上海",
        "東京",
        "서울",
        "São Paulo",
    ]
    units = ["celsius", "fahrenheit"]
    for i, name in enumerate(names):
        for j, city in enumerate(cities):
            args = {"city": city, "unit": units[(i + j) % 2], "limit": (7 * i + 3 * j) % 50}
            call = {"id": f"functions.{name}:{i + j}", "name": name, "arguments": args}
            parts.append(json.dumps(call, ensure_ascii=False))
            parts.append(json.dumps(args, ensure_ascii=False, separators=(",", ":")))
            parts.append(f"I'll call {name} for {city} now; the result is {i * 17 + j}.")
    # Every English word of the corpus again in lower and capitalised form, twice, so the
    # stand-in learns whole-word tokens (" weather", "Weather") as a real vocabulary has.
    words = sorted({w.lower() for w in regex.findall(r"[A-Za-z]{2,}", parts[0])})
    for _ in range(2):
        parts.append(" ".join(words))
        parts.append(" ".join(w.capitalize() for w in words))
    return "\n".join(parts) + "\n"


def build_standin_ranks() -> dict[bytes, int]:
    """Train the stand-in's ordinary ranks (what ``data/standin.tiktoken`` holds)."""
    return train_bpe(standin_training_text(), STANDIN_MERGES)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m k2conform.delivery.tokenizer --rebuild`` rewrites ``data/standin.tiktoken``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m k2conform.delivery.tokenizer", description=main.__doc__
    )
    parser.add_argument("--rebuild", action="store_true", help="retrain and rewrite the ranks file")
    args = parser.parse_args(argv)
    if args.rebuild:
        STANDIN_RANKS_FILE.write_bytes(dump_ranks(build_standin_ranks()))
        _standin.cache_clear()
    print(load_tokenizer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
