"""The Kimi K2 tokenizer: the stand-in's behaviour, the real-format loader, the pattern."""

from __future__ import annotations

import base64
import copy
import json

import pytest
import tiktoken
from tiktoken.load import load_tiktoken_bpe

from k2conform import markers
from k2conform.delivery import tokenizer as tk


@pytest.fixture(scope="module")
def tok() -> tk.KimiTokenizer:
    return tk.load_tokenizer()


VARIED = [
    "",
    "Hello, world!",
    'The weather in Paris: {"city": "Paris", "unit": "celsius", "temp": 24.5}',
    "今天北京的天气很好，适合散步。",
    "こんにちは世界 안녕하세요 Привет",
    "emoji 😀🦄 flags 🇫🇷 family 👨‍👩‍👧 ✨",
    "tabs\tand\r\nCRLF\rlone CR\n\n  trailing spaces   ",
    "I'm sure they'LL say it's 1234567 — 3.14159 ≈ π",
    "龘𠀀\x00\x7f\u200b\ufeff",
    "<|tool_call_section_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}",
]


# --- markers and added tokens ---------------------------------------------------------


@pytest.mark.parametrize("marker", sorted(markers.SPECIAL_TOKEN_IDS))
def test_marker_is_one_token_at_its_real_id(tok: tk.KimiTokenizer, marker: str) -> None:
    token_id = markers.SPECIAL_TOKEN_IDS[marker]
    assert tok.encode(marker) == [token_id]
    assert tok.decode([token_id]) == marker
    assert tok.special_tokens[marker] == token_id
    assert tok.get_vocab()[marker] == token_id  # vLLM: self.vocab.get("<|...|>")
    assert tok.convert_tokens_to_ids(marker) == token_id
    assert tok.convert_ids_to_tokens(token_id) == marker
    ids = tok.encode(f"text{marker}more")
    assert token_id in ids and tok.decode(ids) == f"text{marker}more"


def test_ordinary_ids_do_not_collide_with_added_ids(tok: tk.KimiTokenizer) -> None:
    assert tok.num_ordinary_tokens < tk.FIRST_SPECIAL_ID
    assert min(tok.special_tokens.values()) == tk.FIRST_SPECIAL_ID
    assert len(tok.special_tokens) == tk.NUM_RESERVED_SPECIAL_TOKENS + 2
    assert tok.special_tokens["<|reserved_token_163589|>"] == 163589
    assert tok.vocab_size == tk.FIRST_SPECIAL_ID + tk.NUM_RESERVED_SPECIAL_TOKENS + 2


@pytest.mark.parametrize(
    "look_alike", [markers.SECTION_BEGIN_SINGULAR, markers.SECTION_END_SINGULAR]
)
def test_singular_section_marker_is_ordinary_text(tok: tk.KimiTokenizer, look_alike: str) -> None:
    ids = tok.encode(look_alike)
    assert len(ids) > 3
    assert not any(tok.is_added(i) for i in ids)
    assert look_alike not in tok.special_tokens and look_alike not in tok.get_vocab()
    assert tok.decode(ids) == look_alike


def test_special_flags_eos_and_stop(tok: tk.KimiTokenizer) -> None:
    assert tok.eos_token_id == 163585 == markers.SPECIAL_TOKEN_IDS[markers.EOS]
    assert tok.bos_token_id == 163584
    assert tok.im_end_token_id == 163586 == markers.SPECIAL_TOKEN_IDS[markers.IM_END]
    # As in the real config: im_* tokens are special, the tool markers and think tags not.
    assert markers.IM_END in tok.all_special_tokens
    assert 163586 in tok.all_special_ids
    for marker in markers.TOOL_MARKERS + (markers.THINK_BEGIN, markers.THINK_END):
        assert marker not in tok.all_special_tokens
    assert not any(t.startswith("<|reserved_token_") for t in tok.all_special_tokens)


# --- encoding, decoding, streaming ----------------------------------------------------


@pytest.mark.parametrize("text", VARIED)
def test_round_trip(tok: tk.KimiTokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")
    pieces = tok.stream_detokenize(ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    spans = tok.tokenize_spans(text)
    assert [i for i, _ in spans] == ids and "".join(p for _, p in spans) == text


def test_common_words_and_json_punctuation_are_multibyte_tokens(tok: tk.KimiTokenizer) -> None:
    assert tok.convert_ids_to_tokens(tok.encode(" the weather")) == ["Ġthe", "Ġweather"]
    pieces = [p for _, p in tok.tokenize_spans('{"city": "Paris"}')]
    assert pieces == ['{"', "city", '":', ' "', "Paris", '"}']


def test_multibyte_character_splits_across_tokens(tok: tk.KimiTokenizer) -> None:
    # The point of the stand-in: some characters take several tokens, and the
    # incremental detokenizer emits nothing until the character is complete.
    for text in ["😀", "龘", "🦄"]:
        ids = tok.encode(text)
        assert len(ids) > 1, text
        pieces = tok.stream_detokenize(ids)
        assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == text
        with pytest.raises(UnicodeDecodeError):
            tok.token_bytes(ids[0]).decode("utf-8")
    spans = tok.tokenize_spans("a 龘 b")
    assert ("" in [p for _, p in spans]) and "".join(p for _, p in spans) == "a 龘 b"


def test_stream_detokenize_matches_decode_on_cut_off_text(tok: tk.KimiTokenizer) -> None:
    ids = tok.encode("ok 😀")
    cut = ids[:-1]  # the emoji's last byte is missing
    pieces = tok.stream_detokenize(cut)
    assert "".join(pieces) == tok.decode(cut) and tok.decode(cut).endswith("\ufffd")
    # an incomplete character followed by a marker: replaced where decode replaces it
    ids2 = cut + [markers.SPECIAL_TOKEN_IDS[markers.IM_END]]
    assert "".join(tok.stream_detokenize(ids2)) == tok.decode(ids2)
    assert tok.stream_detokenize([]) == []


def test_get_vocab_spells_every_token_printably(tok: tk.KimiTokenizer) -> None:
    vocab = tok.get_vocab()
    assert len(vocab) == tok.num_ordinary_tokens + len(tok.special_tokens)
    assert len(set(vocab.values())) == len(vocab)
    assert all(s.isprintable() and s for s in vocab)
    assert vocab["Ġ"] == 32 and vocab["Ċ"] == 10 and vocab["A"] == 65
    ordinary = range(256, tok.num_ordinary_tokens)
    undecodable = [i for i in ordinary if not _is_utf8(tok.token_bytes(i))]
    assert undecodable, "expected merged tokens holding part of a character"
    for i in undecodable[:20]:
        assert tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(i)) == i
    assert tok.convert_tokens_to_ids(["<|im_end|>", "no-such-token"]) == [163586, None]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_len_and_the_extended_special_tokens_are_transformers(tok: tk.KimiTokenizer) -> None:
    """``len()`` is the vocabulary with the added tokens (transformers: ``len(get_vocab())``),
    not ``vocab_size`` (the highest id + 1); both are what vLLM's ``get_cached_tokenizer``
    reads."""
    assert len(tok) == len(tok.get_vocab()) == tok.num_ordinary_tokens + len(tok.special_tokens)
    assert len(tok) < tok.vocab_size
    assert tok.all_special_tokens_extended == tok.all_special_tokens
    # a copy made before the vocabulary was built (as vLLM's get_cached_tokenizer makes one,
    # overriding get_vocab) still spells and counts it
    fresh = tk.KimiTokenizer(tok._ranks, tok.special_tokens, special=tok.all_special_tokens)

    class Wrapped(tk.KimiTokenizer):
        def get_vocab(self) -> dict[str, int]:
            return {}

    twin = copy.copy(fresh)
    twin.__class__ = Wrapped
    assert twin.convert_tokens_to_ids("<|im_end|>") == 163586 and len(twin) == len(tok)


def test_long_runs_are_split_like_tokenization_kimi(tok: tk.KimiTokenizer) -> None:
    assert list(tk._split_long_runs("ab  cd", limit=1)) == ["a", "b ", " c", "d"]
    # A run is cut every `limit` characters from its own start, whitespace runs too
    # (U+3000 and U+001C are whitespace to str.isspace, as to the tokenizer's guard).
    assert list(tk._split_long_runs("aaaaa  \u3000\x1c b", limit=2)) == [
        "aa",
        "aa",
        "a  ",
        "\u3000\x1c",
        " b",
    ]
    assert list(tk._split_long_runs("abc", limit=3)) == ["abc"]
    text = "x" * 30_000 + " " + "y" * 10
    assert tok.decode(tok.encode(text)) == text


# --- the pre-tokenisation pattern -----------------------------------------------------


def tiktoken_pieces(text: str) -> list[str]:
    """How tiktoken itself splits ``text`` with PAT_STR: with every substring of the text
    in the vocabulary, BPE merges each pre-tokenised piece into exactly one token."""
    data = text.encode("utf-8")
    ranks = {bytes([b]): b for b in range(256)}
    for length in range(2, len(data) + 1):
        for start in range(len(data) - length + 1):
            ranks.setdefault(data[start : start + length], len(ranks))
    enc = tiktoken.Encoding("probe", pat_str=tk.PAT_STR, mergeable_ranks=ranks, special_tokens={})
    return [enc.decode_single_token_bytes(t).decode("utf-8") for t in enc.encode(text)]


@pytest.mark.parametrize(
    "text, pieces",
    [
        ("1234567", ["123", "456", "7"]),  # digits in groups of three
        ("x=12345;", ["x", "=", "123", "45", ";"]),
        ("Hello世界abc", ["Hello", "世界", "abc"]),  # a Han run is its own piece
        ("こんにちは世界", ["こんにちは", "世界"]),  # kana are letters, not Han
        ("I'm here, they'LL go", ["I'm", " here", ",", " they'LL", " go"]),  # contractions
        ("HelloWorld", ["Hello", "World"]),
        ("a\r\n\tb  c", ["a", "\r\n", "\tb", " ", " c"]),
        ('{"k": [1, 2]}', ['{"', "k", '":', " [", "1", ",", " ", "2", "]}"]),
    ],
)
def test_pattern_pieces(text: str, pieces: list[str]) -> None:
    assert tk.pretokenize(text) == pieces
    assert tiktoken_pieces(text) == pieces


@pytest.mark.parametrize("text", VARIED[1:])
def test_python_pattern_agrees_with_tiktoken(text: str) -> None:
    assert tk.pretokenize(text) == tiktoken_pieces(text)


def test_pattern_is_moonshots_verbatim() -> None:
    # tokenization_kimi.py joins these with "|" and hands them to tiktoken unchanged.
    assert tk.PAT_STR.startswith(
        r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
    )
    assert tk.PAT_STR.endswith(r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    assert tk.PAT_STR.count("&&[^\\p{Han}]") == 4


# --- shipped data and the builder -----------------------------------------------------


def test_shipped_ranks_equal_the_builder_output() -> None:
    built = tk.build_standin_ranks()
    shipped = tk.STANDIN_RANKS_FILE.read_bytes()
    assert tk.dump_ranks(built) == shipped
    assert len(shipped) < 200_000
    assert sorted(built.values()) == list(range(len(built)))
    assert all(built[bytes([b])] == b for b in range(256))
    assert len(built) == 256 + tk.STANDIN_MERGES


def test_shipped_ranks_load_with_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # no cache written anywhere
    assert load_tiktoken_bpe(str(tk.STANDIN_RANKS_FILE)) == tk.parse_ranks(
        tk.STANDIN_RANKS_FILE.read_bytes()
    )


def test_train_bpe_is_deterministic_and_merges_frequent_pairs() -> None:
    ranks = tk.train_bpe("low lower lowest low low", 5)
    assert ranks == tk.train_bpe("low lower lowest low low", 5)
    assert b"low" in ranks and b" low" in ranks
    assert len(ranks) <= 256 + 5


# --- loading a real-format directory --------------------------------------------------


def write_model_dir(path, ranks: dict[bytes, int], decoder: dict[int, dict], **config) -> None:
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in ranks.items()]
    (path / "tiktoken.model").write_text("\n".join(lines) + "\n")
    config["added_tokens_decoder"] = {str(i): entry for i, entry in decoder.items()}
    (path / "tokenizer_config.json").write_text(json.dumps(config))


def test_load_real_format_directory(tmp_path) -> None:
    ranks = {bytes([b]): b for b in range(256)}
    for token in [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b" world"]:
        ranks[token] = len(ranks)
    n = len(ranks)  # added tokens start right after the ordinary ranks, as in K2
    decoder = {
        n: {"content": "[BOS]", "special": True},
        n + 1: {"content": "[EOS]", "special": True},
        n + 2: {"content": "<|im_end|>", "special": True},
        n + 11: {"content": "<|tool_calls_section_begin|>", "special": False},
    }
    write_model_dir(tmp_path, ranks, decoder, bos_token="[BOS]", eos_token="[EOS]")
    real = tk.load_tokenizer(tmp_path)
    assert real.encode("hello world") == [ranks[b"hello"], ranks[b" world"]]
    ids = real.encode("<|tool_calls_section_begin|>hello<|im_end|>")
    assert ids == [n + 11, ranks[b"hello"], n + 2]
    assert real.special_tokens[f"<|reserved_token_{n + 3}|>"] == n + 3
    assert real.vocab_size == n + tk.NUM_RESERVED_SPECIAL_TOKENS + 2
    assert real.eos_token_id == n + 1 and real.bos_token_id == n
    assert real.all_special_tokens == ["[BOS]", "[EOS]", "<|im_end|>"]
    assert real.get_vocab()["<|tool_calls_section_begin|>"] == n + 11
    assert real.get_vocab()["Ġworld"] == ranks[b" world"]
    # the singular look-alike is not an added token here either
    assert not any(real.is_added(i) for i in real.encode(markers.SECTION_BEGIN_SINGULAR))
    text = "hello 😀 world"
    assert "".join(real.stream_detokenize(real.encode(text))) == text


def test_load_rejects_colliding_ids_and_bad_lines(tmp_path) -> None:
    ranks = {bytes([b]): b for b in range(256)}
    write_model_dir(tmp_path, ranks, {5: {"content": "<|im_end|>", "special": True}})
    with pytest.raises(ValueError, match="collide"):
        tk.load_tokenizer(tmp_path)
    (tmp_path / "tiktoken.model").write_text("not-base64!! x\n")
    with pytest.raises(ValueError, match="line 1"):
        tk.load_tokenizer(tmp_path)
