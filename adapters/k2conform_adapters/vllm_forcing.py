"""A vLLM V1 logits processor that forces each request's scripted token ids.

Loaded by the real vLLM OpenAI server that the ``vllm-server`` adapter starts
(``--logits-processors k2conform_adapters.vllm_forcing:ScriptedTokens``); it runs in the
server's own environment (``.venvs/vllm-server``), where k2conform is installed
``--no-deps``.  A request carries its script in the body as
``"vllm_xargs": {"k2conform_script": "[163595, 163597, ...]"}`` (a JSON list in a string:
``vllm_xargs`` values must be scalars); vLLM hands it over as ``SamplingParams.extra_args``.
Output token *n* is forced to ``script[n]``; after the script, to the end-of-turn token
(``k2conform_eos``, default ``<|im_end|>`` 163586) until generation stops.  A request
without a script is left alone, so the server still serves its random model to anyone else.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

SCRIPT_KEY = "k2conform_script"
EOS_KEY = "k2conform_eos"
IM_END_ID = 163586


def script_of(extra_args: dict[str, Any] | None) -> tuple[list[int], int] | None:
    """The scripted ids and the id forced after them, or None for an unscripted request."""
    if not extra_args or SCRIPT_KEY not in extra_args:
        return None
    raw = extra_args[SCRIPT_KEY]
    ids = json.loads(raw) if isinstance(raw, str) else raw
    return [int(i) for i in ids], int(extra_args.get(EOS_KEY, IM_END_ID))


class ScriptedTokens(AdapterLogitsProcessor):
    """Every logit -inf except the next scripted id (greedy or sampled, the id is the same)."""

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params: Any):
        scripted = script_of(getattr(params, "extra_args", None))
        if scripted is None:
            return None
        ids, eos = scripted

        def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            step = len(output_ids)
            target = ids[step] if step < len(ids) else eos
            forced = torch.full_like(logits, float("-inf"))
            forced[..., target] = 0.0
            return forced

        return force
