"""A Kimi-shaped slow (Python) tokenizer for transformers, written for k2conform.

The model directory that the ``vllm-server`` adapter builds copies this file next to
``tiktoken.model`` as ``tokenization_k2conform_kimi.py`` and names the class in
``tokenizer_config.json`` (``auto_map``), so vLLM loads it with ``--trust-remote-code``,
the way the real Kimi K2 tokenizer is loaded.  It has the shape that matters to a server:

* ordinary ids are tiktoken byte-level BPE ranks (``tiktoken.model``), pre-tokenised with
  the pattern given in the config (``pat_str``: Kimi's);
* the 256 + 2 ids after the ordinary ranks are added tokens, named by the config's
  ``added_tokens_decoder`` or ``<|reserved_token_N|>``, and registered as added tokens of
  the Python tokenizer, so a server's slow-tokenizer detokenizer treats them as such;
* token strings spell bytes with GPT-2's byte-to-unicode alphabet.

Self-contained (transformers, tiktoken); it does not import k2conform.
"""

from __future__ import annotations

import base64
import os
import shutil
from typing import Any

import tiktoken
from transformers import AddedToken, PreTrainedTokenizer

RESERVED_AFTER_RANKS = 256 + 2


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable character for each byte value."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for value in range(256):
        if value in printable:
            table[value] = chr(value)
        else:
            table[value] = chr(256 + extra)
            extra += 1
    return table


def _read_ranks(path: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _content(token: Any) -> str:
    if isinstance(token, AddedToken):
        return token.content
    if isinstance(token, dict):
        return token["content"]
    return str(token)


class KimiStandinTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str,
        pat_str: str,
        bos_token: str = "[BOS]",
        eos_token: str = "[EOS]",
        unk_token: str | None = None,
        pad_token: str | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_file = vocab_file
        self.pat_str = pat_str
        ranks = _read_ranks(vocab_file)
        first = len(ranks)
        named = {int(i): _content(t) for i, t in (added_tokens_decoder or {}).items()}
        added = {
            named.get(i, f"<|reserved_token_{i}|>"): i
            for i in range(first, first + RESERVED_AFTER_RANKS)
        }
        self._encoding = tiktoken.Encoding(
            name="k2conform-kimi-standin",
            pat_str=pat_str,
            mergeable_ranks=ranks,
            special_tokens=added,
        )
        alphabet = _byte_alphabet()
        self._byte_of = {char: value for value, char in alphabet.items()}
        self._id_to_token: dict[int, str] = {
            rank: "".join(alphabet[b] for b in token) for token, rank in ranks.items()
        }
        self._id_to_token.update({i: text for text, i in added.items()})
        self._token_to_id = {token: i for i, token in self._id_to_token.items()}
        # Every added id is an added token of the Python tokenizer (the config's entries keep
        # their ``special`` flags; unnamed reserved slots are special).
        decoder: dict[int, AddedToken] = {}
        for text, i in added.items():
            given = (added_tokens_decoder or {}).get(i, (added_tokens_decoder or {}).get(str(i)))
            if isinstance(given, AddedToken):
                decoder[i] = given
            else:
                special = given.get("special", True) if isinstance(given, dict) else True
                decoder[i] = AddedToken(
                    text, lstrip=False, rstrip=False, normalized=False, special=special
                )
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            added_tokens_decoder=decoder,
            **kwargs,
        )

    @property
    def vocab_size(self) -> int:
        return self._encoding.n_vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self._token_to_id)

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self._id_to_token[i] for i in self._encoding.encode(text, allowed_special="all")]

    def _convert_token_to_id(self, token: str) -> int | None:
        return self._token_to_id.get(token)

    def _convert_id_to_token(self, index: int) -> str:
        return self._id_to_token[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        data = bytearray()
        for token in tokens:
            if all(char in self._byte_of for char in token):
                data.extend(self._byte_of[char] for char in token)
            else:
                data.extend(token.encode("utf-8"))
        return data.decode("utf-8", errors="replace")

    def save_vocabulary(
        self, save_directory: str, filename_prefix: str | None = None
    ) -> tuple[str, ...]:
        name = (filename_prefix + "-" if filename_prefix else "") + "tiktoken.model"
        target = os.path.join(save_directory, name)
        if os.path.abspath(target) != os.path.abspath(self.vocab_file):
            shutil.copyfile(self.vocab_file, target)
        return (target,)
