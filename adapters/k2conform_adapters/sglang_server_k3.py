"""SGLang 0.5.23's real ``OpenAIServingChat`` with its Kimi K3 parsers (``--tool-call-parser
kimi_k3 --reasoning-parser kimi_k3``) and the scripted TokenizerManager of ``sglang-server``.

The serving path is ``sglang-server``'s, the parsers ``sglang-k3``'s in-process ones, now
composed by SGLang's own code: the reasoning parser is on for every request (K3's detector
thinks unless ``chat_template_kwargs.thinking`` is False), the ids are minted by
``_process_tool_call_id``, the SSE chunks and finish_reason are the server's.  As for
``vllm-server-k3``, the served stand-in's chat template renders a K2 prompt (no K3 template can
be downloaded here) and the script ends with the stand-in's end-of-turn token, ``<|im_end|>``.
"""

from __future__ import annotations

from k2conform.k3 import markers as k3

from k2conform_adapters.sglang_parser import SERVING_CHAT_OPTIONS
from k2conform_adapters.sglang_server import SglangServerAdapter


class SglangServerK3Adapter(SglangServerAdapter):
    name = "sglang-server-k3"
    formats = (k3.FORMAT,)
    description = (
        "SGLang OpenAIServingChat with --tool-call-parser kimi_k3 --reasoning-parser kimi_k3 "
        "(real serving code; scripted TokenizerManager)"
    )
    parser = "kimi_k3"
    #: serving_chat's options, and ``separate_reasoning`` (a K3 case turns it off)
    request_options = SERVING_CHAT_OPTIONS | {"separate_reasoning"}

    def reasoning_parser(self, thinking: bool) -> str | None:
        """One server for every request: K3's reasoning detector reads thinking from the
        request."""
        return self.parser
