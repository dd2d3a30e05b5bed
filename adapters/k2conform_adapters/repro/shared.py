"""What every reproduction script shares: the case, the Kimi vocabulary stand-in, stream
reassembly, the comparison with the expected message, and the main that prints and exits.

Standard library only, apart from k2conform's own comparison (``compare_results`` and what
it calls) and ``join_text``: the builder inlines their source into the script, so a script
judges by exactly k2conform's rules without importing k2conform.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from k2conform.judge.compare import compare_results
from k2conform.model import join_text


@dataclass(frozen=True)
class Case:
    """The case as the parser gets it: the request's settings and the output as delivered."""

    tools: list[dict[str, Any]]
    tool_choice: Any
    thinking: bool
    mode: str  #: "whole" (the complete output in one call) or the streaming mode's name
    deltas: list[list[Any]]  #: [text, token ids] per delta, in order
    token_text: dict[int, str] = field(default_factory=dict)  #: what each token id decodes to
    #: the special tokens' ids: Kimi K2's markers, and K3's four for a K3 output
    special_tokens: dict[str, int] = field(default_factory=dict)
    format: str = "k2"  #: the Kimi format of the output: "k2" or "k3"
    #: the ids of the texts a parser encodes itself (vLLM's K3 reasoning parser: its tags)
    encoded: dict[str, list[int]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.deltas)

    @property
    def token_ids(self) -> list[int]:
        return [i for _, token_ids in self.deltas for i in token_ids]


class KimiVocabulary:
    """The part of the Kimi tokenizer parsers read: the special tokens' ids, the text of the
    token ids this case delivers, and the ids of the texts a parser encodes."""

    def __init__(self, case: Case) -> None:
        self._vocab = dict(case.special_tokens)
        self._token_text = dict(case.token_text)
        self._encoded = {text: list(ids) for text, ids in case.encoded.items()}

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if text not in self._encoded:
            raise KeyError(f"the script holds no token ids for {text!r}")
        return list(self._encoded[text])

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            return self._vocab.get(tokens)
        return [self._vocab.get(t) for t in tokens]

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(self._token_text[i] for i in ids)


def openai_calls(calls: Any) -> list[dict[str, Any]]:
    """OpenAI-protocol tool calls (``.id``, ``.function.name``, ``.function.arguments``) as
    the message's ``tool_calls``."""
    return [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in calls or ()
    ]


def openai_call_deltas(calls: Any) -> list[dict[str, Any]]:
    """OpenAI-protocol tool-call deltas (``.index``, ``.id``, ``.function`` or None) as an
    event's ``tool_calls``."""
    return [
        {
            "index": tc.index,
            "id": tc.id,
            "name": tc.function.name if tc.function else None,
            "arguments": tc.function.arguments if tc.function else None,
        }
        for tc in calls or ()
    ]


def assemble(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Streamed delta messages reassembled as an OpenAI client does: content and reasoning
    concatenated, per call index the first id and name and the arguments concatenated."""
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        for delta in event.get("tool_calls") or ():
            call = calls.setdefault(delta["index"], {"id": None, "name": None, "arguments": ""})
            if delta.get("id") and call["id"] is None:
                call["id"] = delta["id"]
            if delta.get("name") and call["name"] is None:
                call["name"] = delta["name"]
            call["arguments"] += delta.get("arguments") or ""
    return {
        "content": join_text([e.get("content") for e in events]),
        "reasoning": join_text([e.get("reasoning") for e in events]),
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def _message(data: dict[str, Any]) -> SimpleNamespace:
    """A message dict with a result's attributes, as ``compare_results`` reads them."""
    calls = [
        SimpleNamespace(
            name=c.get("name") or "", arguments=c.get("arguments") or "", id=c.get("id")
        )
        for c in data.get("tool_calls") or ()
    ]
    return SimpleNamespace(
        content=data.get("content"), reasoning=data.get("reasoning"), tool_calls=calls
    )


def differences(expected: dict[str, Any], observed: dict[str, Any]) -> list[Any]:
    """Every field in which the observed message differs from the expected one (arguments
    compare as strict JSON when both parse, ``true`` is not ``1``; else byte for byte)."""
    return compare_results(_message(expected), _message(observed))


def main(
    run: Callable[[Case], dict[str, Any]], case: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Run the parser on the case, print its result against the expectation, and exit 1
    when the bug reproduces (a difference, or the parser raised), 0 when it does not.
    The last line printed is the observed message as JSON (``{"crash": ...}`` on a raise)."""
    try:
        observed = run(Case(**case))
    except Exception as exc:  # noqa: BLE001 - the parser raised: that is the finding
        traceback.print_exc()
        print("REPRODUCED: the parser raised")
        print(json.dumps({"crash": f"{type(exc).__name__}: {exc}"}, ensure_ascii=False))
        sys.exit(1)
    found = differences(expected, observed)
    print("expected:", json.dumps(expected, ensure_ascii=False))
    print("observed:", json.dumps(observed, ensure_ascii=False))
    for diff in found:
        where = f"tool_calls[{diff.call}]." if diff.call is not None else ""
        print(
            f"  {where}{diff.field}: expected {diff.expected!r}, got {diff.observed!r}"
            f" (compared as {diff.how})"
        )
    print("REPRODUCED" if found else "NOT REPRODUCED: the result is the expected one")
    print(json.dumps(observed, ensure_ascii=False))
    sys.exit(1 if found else 0)
