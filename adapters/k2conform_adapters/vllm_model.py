"""Build the model directory the ``vllm-server`` adapter serves: nothing is downloaded.

Run inside the server's environment (it needs torch, transformers and safetensors):

    .venvs/vllm-server/bin/python -m k2conform_adapters.vllm_model OUT_DIR

The directory holds

* a tiny random-weight ``LlamaForCausalLM`` (hidden 128, 2 layers, 2 heads, intermediate
  256, tied embeddings, float32, seed 0) whose ``vocab_size`` 163840 covers every Kimi
  special id, with ``eos_token_id`` 163586 (``<|im_end|>``);
* the tokenizer in the form the real Kimi K2 tokenizer has: ``tiktoken.model`` (the
  project's stand-in ranks, padded with filler ranks to exactly 163584 ordinary ids so
  the added tokens land on their real ids) and a Kimi-shaped slow tokenizer class written
  for this project (:mod:`k2conform_adapters.vllm_hf_tokenizer`), loaded with
  ``trust_remote_code``; its token ids are the stand-in tokenizer's
  (``k2conform.delivery.tokenizer.load_tokenizer()``) for every text;
* the project's chat template (``reference_chat_template.jinja``).

A ``k2conform-model.stamp`` file holds a hash of everything the directory is made from;
a directory whose stamp matches is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from k2conform import markers
from k2conform.delivery import tokenizer as standin

HIDDEN, LAYERS, HEADS, INTERMEDIATE = 128, 2, 2, 256
VOCAB = 163840
ORDINARY_IDS = standin.FIRST_SPECIAL_ID  # 163584
MAX_POSITIONS = 65536
SEED = 0
STAMP = "k2conform-model.stamp"
TOKENIZER_MODULE = "tokenization_k2conform_kimi"
TOKENIZER_CLASS = "KimiStandinTokenizer"
FILLER_LEAD = 0xF8  # never in valid UTF-8: a filler rank can never be produced from text

_HERE = Path(__file__).parent
_CLASS_SOURCE = _HERE / "vllm_hf_tokenizer.py"
_TEMPLATE = (
    Path(standin.__file__).resolve().parent.parent / "data" / "reference_chat_template.jinja"
)


def padded_ranks() -> dict[bytes, int]:
    """The stand-in's ordinary ranks, then filler tokens up to exactly 163584 ranks."""
    ranks = standin.parse_ranks(standin.STANDIN_RANKS_FILE.read_bytes())
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("the stand-in ranks are not 0..n-1")
    for rank in range(len(ranks), ORDINARY_IDS):
        ranks[bytes([FILLER_LEAD]) + rank.to_bytes(3, "big")] = rank
    return ranks


def source_hash() -> str:
    """A hash of every input of the directory (ranks, tokenizer class, template, shape)."""
    digest = hashlib.sha256()
    for path in (standin.STANDIN_RANKS_FILE, _CLASS_SOURCE, _TEMPLATE, Path(__file__)):
        digest.update(path.read_bytes())
    digest.update(
        json.dumps([HIDDEN, LAYERS, HEADS, INTERMEDIATE, VOCAB, SEED, MAX_POSITIONS]).encode()
    )
    return digest.hexdigest()


def is_current(out: Path) -> bool:
    stamp = out / STAMP
    return stamp.is_file() and stamp.read_text().strip() == source_hash()


def tokenizer_config() -> dict:
    added, special = standin.standin_added_tokens()
    named = {i: t for t, i in added.items()}
    decoder = {
        str(i): {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": text in special or text.startswith("<|reserved_token_"),
        }
        for i, text in sorted(named.items())
    }
    return {
        "tokenizer_class": TOKENIZER_CLASS,
        "auto_map": {"AutoTokenizer": [f"{TOKENIZER_MODULE}.{TOKENIZER_CLASS}", None]},
        "pat_str": standin.PAT_STR,
        "added_tokens_decoder": decoder,
        "bos_token": markers.BOS,
        "eos_token": markers.IM_END,
        "pad_token": "[PAD]" if "[PAD]" in added else markers.EOS,
        "unk_token": None,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
    }


def build(out: Path) -> Path:
    """Build ``out`` unless its stamp is current; returns ``out``."""
    out = Path(out)
    if is_current(out):
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=markers.SPECIAL_TOKEN_IDS[markers.BOS],
        eos_token_id=markers.SPECIAL_TOKEN_IDS[markers.IM_END],
        pad_token_id=markers.SPECIAL_TOKEN_IDS[markers.EOS],
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = markers.SPECIAL_TOKEN_IDS[markers.IM_END]
    model.generation_config.bos_token_id = markers.SPECIAL_TOKEN_IDS[markers.BOS]
    model.save_pretrained(tmp, safe_serialization=True)
    (tmp / "tiktoken.model").write_bytes(standin.dump_ranks(padded_ranks()))
    shutil.copyfile(_CLASS_SOURCE, tmp / f"{TOKENIZER_MODULE}.py")
    (tmp / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(), indent=1, ensure_ascii=False)
    )
    shutil.copyfile(_TEMPLATE, tmp / "chat_template.jinja")
    (tmp / STAMP).write_text(source_hash() + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m k2conform_adapters.vllm_model OUT_DIR", file=sys.stderr)
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
