"""Stage 2, delivery: how a case's model output reaches an adapter (modes, tokenizer)."""
