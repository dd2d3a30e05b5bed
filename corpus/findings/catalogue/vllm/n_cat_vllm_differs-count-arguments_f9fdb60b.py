#!/usr/bin/env python3
"""Reproduction: vLLM kimi_k2 tool parser: n_cat_vllm_differs-count-arguments_f9fdb60b [stream-char]

Drives vLLM's composed kimi_k2 parser as the OpenAI server does (ParserManager,
ChatStreamProcessor).

Run it with python where vllm is installed (nothing else is needed).
Exit status 1: the parser's result differs from the expected one (the bug reproduces).
The last line printed is the parser's result as JSON.
"""
from __future__ import annotations

import json
import math
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vllm.entrypoints.openai.chat_completion import message_assembly, protocol, stream_processor
from vllm.parser.parser_manager import ParserManager


# The case as the parser gets it: the request's tools, tool_choice and thinking; mode
# "whole" (the complete output in one call) or the streaming mode (the deltas in order);
# each delta [text, token ids] (no ids in text-level deliveries); what each token id
# decodes to, and Kimi K2's special tokens, for parsers that read the tokenizer.
CASE = {'tools': [{'type': 'function',
                   'function': {'name': 'get_weather',
                                'description': 'Get weather information. Call this tool when the '
                                               'user needs to get weather information',
                                'parameters': {'type': 'object',
                                               'required': ['city'],
                                               'properties': {'city': {'type': 'string',
                                                                       'description': 'City '
                                                                                      'name'}}}}}],
        'tool_choice': 'auto',
        'thinking': False,
        'mode': 'stream-char',
        'deltas': [['<', []],
                   ['|', []],
                   ['t', []],
                   ['o', []],
                   ['o', []],
                   ['l', []],
                   ['_', []],
                   ['c', []],
                   ['a', []],
                   ['l', []],
                   ['l', []],
                   ['s', []],
                   ['_', []],
                   ['s', []],
                   ['e', []],
                   ['c', []],
                   ['t', []],
                   ['i', []],
                   ['o', []],
                   ['n', []],
                   ['_', []],
                   ['b', []],
                   ['e', []],
                   ['g', []],
                   ['i', []],
                   ['n', []],
                   ['|', []],
                   ['>', []],
                   ['<', []],
                   ['|', []],
                   ['t', []],
                   ['o', []],
                   ['o', []],
                   ['l', []],
                   ['_', []],
                   ['c', []],
                   ['a', []],
                   ['l', []],
                   ['l', []],
                   ['_', []],
                   ['b', []],
                   ['e', []],
                   ['g', []],
                   ['i', []],
                   ['n', []],
                   ['|', []],
                   ['>', []],
                   ['f', []],
                   ['u', []],
                   ['n', []],
                   ['c', []],
                   ['t', []],
                   ['i', []],
                   ['o', []],
                   ['n', []],
                   ['s', []],
                   ['.', []],
                   ['g', []],
                   ['e', []],
                   ['t', []],
                   ['_', []],
                   ['w', []],
                   ['e', []],
                   ['a', []],
                   ['t', []],
                   ['h', []],
                   ['e', []],
                   ['r', []],
                   [':', []],
                   ['0', []],
                   ['<', []],
                   ['|', []],
                   ['t', []],
                   ['o', []],
                   ['o', []],
                   ['l', []],
                   ['_', []],
                   ['c', []],
                   ['a', []],
                   ['l', []],
                   ['l', []],
                   ['_', []],
                   ['a', []],
                   ['r', []],
                   ['g', []],
                   ['u', []],
                   ['m', []],
                   ['e', []],
                   ['n', []],
                   ['t', []],
                   ['_', []],
                   ['b', []],
                   ['e', []],
                   ['g', []],
                   ['i', []],
                   ['n', []],
                   ['|', []],
                   ['>', []],
                   ['<', []],
                   ['|', []],
                   ['t', []],
                   ['o', []],
                   ['o', []],
                   ['l', []],
                   ['_', []],
                   ['c', []],
                   ['a', []],
                   ['l', []],
                   ['l', []],
                   ['_', []],
                   ['b', []],
                   ['e', []],
                   ['g', []],
                   ['i', []],
                   ['n', []],
                   ['|', []],
                   ['>', []],
                   ['f', []],
                   ['u', []],
                   ['n', []],
                   ['c', []],
                   ['t', []],
                   ['i', []],
                   ['o', []],
                   ['n', []],
                   ['s', []],
                   ['.', []],
                   ['g', []],
                   ['e', []],
                   ['t', []],
                   ['_', []],
                   ['w', []],
                   ['e', []],
                   ['a', []],
                   ['t', []],
                   ['h', []],
                   ['e', []],
                   ['r', []],
                   [':', []],
                   ['1', []],
                   ['<', []],
                   ['|', []],
                   ['t', []],
                   ['o', []],
                   ['o', []],
                   ['l', []],
                   ['_', []],
                   ['c', []],
                   ['a', []],
                   ['l', []],
                   ['l', []],
                   ['_', []],
                   ['a', []],
                   ['r', []],
                   ['g', []],
                   ['u', []],
                   ['m', []],
                   ['e', []],
                   ['n', []],
                   ['t', []],
                   ['_', []],
                   ['b', []],
                   ['e', []],
                   ['g', []],
                   ['i', []],
                   ['n', []],
                   ['|', []],
                   ['>', []]],
        'token_text': {},
        'special_tokens': {'[BOS]': 163584,
                           '[EOS]': 163585,
                           '<|im_end|>': 163586,
                           '<|im_user|>': 163587,
                           '<|im_assistant|>': 163588,
                           '<|im_system|>': 163594,
                           '<|tool_calls_section_begin|>': 163595,
                           '<|tool_calls_section_end|>': 163596,
                           '<|tool_call_begin|>': 163597,
                           '<|tool_call_argument_begin|>': 163598,
                           '<|tool_call_end|>': 163599,
                           '<|im_middle|>': 163601,
                           '<think>': 163606,
                           '</think>': 163607}}
# The message the spec expects.
EXPECTED = {'content': None,
            'reasoning': None,
            'tool_calls': [{'id': 'functions.get_weather:0',
                            'name': 'get_weather',
                            'arguments': ''},
                           {'id': 'functions.get_weather:1',
                            'name': 'get_weather',
                            'arguments': ''}]}


@dataclass(frozen=True)
class FieldDiff:
    """One field in which an observed result differs, and how it was compared."""
    field: str
    expected: Any
    observed: Any
    how: str
    call: int | None = None

    def to_json(self):
        data = {'field': self.field, 'expected': self.expected, 'observed': self.observed, 'how': self.how}
        if self.call is not None:
            data['call'] = self.call
        return data

    @classmethod
    def from_json(cls, data):
        return cls(data['field'], data.get('expected'), data.get('observed'), data['how'], data.get('call'))


def json_equal(a, b):
    """JSON value equality that keeps booleans apart from numbers (iterative: any depth)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if type(x) is not type(y) or x != y:
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y or (isinstance(x, float) and math.isnan(x)):
                return False
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend(((x[k], y[k]) for k in x))
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif type(x) is not type(y) or x != y:
            return False
    return True


class _Duplicate(ValueError):
    pass


def strict_json(text):
    """Parse as strict JSON: no NaN/Infinity, no duplicate keys. Returns (ok, value)."""

    def no_constants(name):
        raise ValueError(f'{name} is not JSON')

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise _Duplicate('duplicate key')
        return dict(pairs)
    try:
        return (True, json.loads(text, parse_constant=no_constants, object_pairs_hook=no_duplicates))
    except (ValueError, RecursionError):
        return (False, None)


def compare_arguments(expected, observed):
    """None when equal; otherwise how they were compared ("json" or "bytes")."""
    ok_e, value_e = strict_json(expected)
    ok_o, value_o = strict_json(observed)
    if ok_e and ok_o:
        return None if json_equal(value_e, value_o) else 'json'
    return None if expected == observed else 'bytes'


def _call_diffs(i, e, o, check_ids):
    diffs = []
    if e.name != o.name:
        diffs.append(FieldDiff('name', e.name, o.name, 'bytes', i))
    how = compare_arguments(e.arguments, o.arguments)
    if how:
        diffs.append(FieldDiff('arguments', e.arguments, o.arguments, how, i))
    if check_ids and e.id is not None and (e.id != o.id):
        diffs.append(FieldDiff('id', e.id, o.id, 'bytes', i))
    return diffs


def _text_diff(name, expected, observed):
    e, o = (expected or '', observed or '')
    if e == o:
        return None
    how = 'whitespace' if e.split() == o.split() else 'text'
    return FieldDiff(name, expected, observed, how)


def compare_results(expected, observed, check_ids=True):
    """Every field in which ``observed`` differs from ``expected`` (empty: they agree)."""
    diffs = []
    for name in ('content', 'reasoning'):
        diff = _text_diff(name, getattr(expected, name), getattr(observed, name))
        if diff:
            diffs.append(diff)
    e_calls, o_calls = (expected.tool_calls, observed.tool_calls)
    if len(e_calls) != len(o_calls):
        diffs.append(FieldDiff('count', len(e_calls), len(o_calls), 'count'))
    for i, (e, o) in enumerate(zip(e_calls, o_calls)):
        diffs.extend(_call_diffs(i, e, o, check_ids))
    return diffs


def join_text(parts):
    """Concatenate optional text pieces; ``None`` when nothing was sent."""
    pieces = [p for p in parts if p is not None]
    return ''.join(pieces) if pieces else None


@dataclass(frozen=True)
class Case:
    """The case as the parser gets it: the request's settings and the output as delivered."""

    tools: list[dict[str, Any]]
    tool_choice: Any
    thinking: bool
    mode: str  #: "whole" (the complete output in one call) or the streaming mode's name
    deltas: list[list[Any]]  #: [text, token ids] per delta, in order
    token_text: dict[int, str] = field(default_factory=dict)  #: what each token id decodes to
    special_tokens: dict[str, int] = field(default_factory=dict)  #: Kimi K2's markers' ids

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.deltas)

    @property
    def token_ids(self) -> list[int]:
        return [i for _, token_ids in self.deltas for i in token_ids]


class KimiVocabulary:
    """The part of the Kimi K2 tokenizer parsers read: the special tokens' ids, and the
    text of the token ids this case delivers."""

    def __init__(self, case: Case) -> None:
        self._vocab = dict(case.special_tokens)
        self._token_text = dict(case.token_text)

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


PACKAGE = "vllm"
MODEL = "moonshotai/Kimi-K2-Instruct"
# get_tool_call_id_type() reads hf_config.model_type: "kimi_k2" makes ids functions.NAME:IDX.
MODEL_CONFIG = types.SimpleNamespace(
    model=MODEL,
    hf_config=types.SimpleNamespace(model_type="kimi_k2"),
    hf_text_config=types.SimpleNamespace(model_type="kimi_k2"),
    hf_overrides={},
)


def run(case: Case) -> dict[str, Any]:
    """vLLM's message for the case, one-shot or streamed."""
    tokenizer = KimiVocabulary(case)
    # As `vllm serve --tool-call-parser kimi_k2 [--reasoning-parser kimi_k2]` composes it.
    cls = ParserManager.get_parser(
        tool_parser_name="kimi_k2",
        reasoning_parser_name="kimi_k2" if case.thinking else None,
        enable_auto_tools=True,
        model_name=MODEL,
        is_harmony=False,
        tokenizer=tokenizer,
    )
    request = protocol.ChatCompletionRequest(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=case.tools or None,
        tool_choice=case.tool_choice if case.tools else None,
        chat_template_kwargs={"thinking": case.thinking},
    )
    # The renderer adjusts the request on a parser of its own, as the server does.
    request = new_parser(cls, tokenizer, request).adjust_request(request)
    # The generation prompt's tail: <|im_assistant|>, <|im_middle|>.
    prompt_ids = [case.special_tokens["<|im_assistant|>"], case.special_tokens["<|im_middle|>"]]
    if case.mode == "whole":
        return parse_whole(case, cls, new_parser(cls, tokenizer, request), request, prompt_ids)
    return parse_stream(case, cls, new_parser(cls, tokenizer, request), request, prompt_ids)


def new_parser(cls: Any, tokenizer: KimiVocabulary, request: Any) -> Any:
    """A fresh parser per choice, with the request's tools and template kwargs."""
    return cls(
        tokenizer,
        request.tools,
        chat_template_kwargs=request.chat_template_kwargs,
        model_config=MODEL_CONFIG,
    )


def parse_whole(
    case: Case, cls: Any, parser: Any, request: Any, prompt_ids: list[int]
) -> dict[str, Any]:
    """The one-shot path: parse, then assemble the chat message fields."""
    parser.set_prompt_token_ids(prompt_ids)
    reasoning, content, calls = parser.parse(
        case.text, request, enable_auto_tools=True, model_output_token_ids=case.token_ids
    )
    fields = message_assembly.assemble_chat_message_fields(
        request, reasoning, content, calls, enable_auto_tools=True, parser_cls=cls
    )
    return {
        "content": fields.content,
        "reasoning": fields.reasoning,
        "tool_calls": openai_calls(fields.tool_calls),
    }


def parse_stream(
    case: Case, cls: Any, parser: Any, request: Any, prompt_ids: list[int]
) -> dict[str, Any]:
    """The streaming path: one step per delta, the last one carrying the finish reason."""
    processor = stream_processor.ChatStreamProcessor(
        request, parser, enable_auto_tools=True, parser_cls=cls
    )
    events = []
    for n, (text, token_ids) in enumerate(case.deltas):
        finish_reason = "stop" if n == len(case.deltas) - 1 else None
        message = processor.step(text, list(token_ids), finish_reason, prompt_ids).delta
        if message is None:
            continue
        events.append(
            {
                "content": message.content,
                "reasoning": message.reasoning,
                "tool_calls": openai_call_deltas(message.tool_calls),
            }
        )
    return assemble(events)


if __name__ == "__main__":
    main(run, CASE, EXPECTED)
