"""The generated Kimi K3 corpus: ``corpus/k3/``, written from the table below.

Each case names its class (a tag) and its source: the format as the pinned engines' K3 code
reads it, or the public thread that reported the shape.  ``expected`` is the K3 reference
parser's result (the oracle, :mod:`k2conform.k3.parser`).  ``y_`` outputs follow the format;
``n_`` ones break it where one outcome is right (nothing lost, no markup leaked); ``i_`` ones
are open points, recorded and not judged.

The live-engine plugin's K3 probes (``corpus/probes/k3``) are the K2 probes' conversations
with K3 replays (:func:`probes`).

    python -m k2conform.k3.cases [--check]   # rewrite both (or exit 1 if either differs)
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from k2conform.case.corpus import (
    CompletionCase,
    Expectation,
    ProbeCase,
    default_corpus_dir,
    load_corpus,
)
from k2conform.judge.compare import compare_results
from k2conform.k3.markers import CLOSE, END_OF_MSG, FORMAT, OPEN, SEP, closer, opener
from k2conform.k3.parser import parse
from k2conform.formats import FORMATS
from k2conform.model import Request, dumps_canonical

BASE_SEED = 20261205
FOLDER = "k3"
PROBE_FOLDER = "probes/k3"

FORMAT_SOURCE = (
    "the K3 format as the pinned engines read it (vllm/tool_parsers/kimi_k3_tool_parser.py, "
    "sglang/srt/function_call/kimik3_detector.py)"
)
THREADS = {
    "tools-in-think": "https://github.com/vllm-project/vllm/issues/53246; https://github.com/vllm-project/vllm/issues/54273",
    "message-leak": "https://github.com/vllm-project/vllm/issues/51399; https://github.com/vllm-project/vllm/issues/51412",
    "skipped-think": "https://github.com/sgl-project/sglang/pull/37743",
    "eos-in-think": "https://github.com/sgl-project/sglang/pull/34187",
    "no-tools": "https://github.com/sgl-project/sglang/issues/39583",
    "spaced-markers": "https://github.com/vllm-project/vllm/pull/50367",
    "typed-not-json": "https://github.com/sgl-project/sglang/issues/34604",
    "unstreamed-args": "https://github.com/vllm-project/vllm/issues/50604",
    "global-index": "https://github.com/sgl-project/sglang/issues/39897",
    "tool-attr-lt": "https://github.com/NVIDIA/TensorRT-LLM/pull/17845",
    "spelled": "https://github.com/sgl-project/sglang/pull/32677",
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "number"},
                "metric": {"type": "boolean"},
                "note": {"type": ["string", "null"]},
                "where": {"type": "object"},
                "tags": {"type": "array"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
TOOLS = (WEATHER, SEARCH)

THINK_END = closer("think")
RESPONSE = opener("response")
RESPONSE_END = closer("response")
TOOLS_OPEN = opener("tools")
TOOLS_END = closer("tools")
#: ``<|end_of_msg|>`` is the turn's stop token: the engine ends generation on it and does not
#: hand it to the parser, so outputs end at the message closer (but see the end_of_msg cases)
MESSAGE_END = closer("message")


def argument(key: str, value: str, kind: str | None = "string") -> str:
    attrs = {"key": key} if kind is None else {"key": key, "type": kind}
    return opener("argument", attrs) + value + closer("argument")


def call(tool: str, index: int, *arguments: str) -> str:
    return opener("call", {"tool": tool, "index": str(index)}) + "".join(arguments) + closer("call")


def tools(*calls: str) -> str:
    return TOOLS_OPEN + "".join(calls) + TOOLS_END


def answer(*calls: str) -> str:
    """A short think, the calls, the message's end."""
    return f"r{THINK_END}{tools(*calls)}{MESSAGE_END}"


PARIS = call("get_weather", 1, argument("city", "Paris"))
#: A conversation whose assistant turn made one call (id as SGLang mints it) and got its result.
SECOND_TURN = (
    {"role": "user", "content": "Weather in Paris, then in Tokyo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "get_weather:0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "get_weather:0", "content": '{"temp_c": 18}'},
)
OSLO = call("get_weather", 2, argument("city", "Oslo"))


def _table(rng: random.Random) -> Iterator[tuple[str, str, str, str, Mapping[str, Any], str]]:
    """(id, class, description, source, request fields, model output) per case."""
    think = {"thinking": True}
    off = {"thinking": False}
    long_value = "".join(rng.choice("abcdefghij klmnop,.\n") for _ in range(6000))
    unicode_value = "".join(rng.choice("天气東京😀é ß") for _ in range(40))
    yield (
        "y_k3_think_then_response",
        "K3.channels",
        "Reasoning, then an answer",
        FORMAT_SOURCE,
        think,
        f"Let me see.{THINK_END}{RESPONSE}It is sunny.{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "y_k3_think_then_call",
        "K3.channels",
        "Reasoning, then one call",
        FORMAT_SOURCE,
        think,
        f"Need weather.{THINK_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "y_k3_think_response_call",
        "K3.channels",
        "Reasoning, an answer and a call",
        FORMAT_SOURCE,
        think,
        f"Hm.{THINK_END}{RESPONSE}Checking.{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "y_k3_response_only_thinking_off",
        "K3.channels",
        "Thinking off: the output starts inside the response channel",
        FORMAT_SOURCE,
        off,
        f"Hello there.{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "y_k3_tools_only_thinking_off",
        "K3.channels",
        "Thinking off: an empty response, then a call",
        FORMAT_SOURCE,
        off,
        f"{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "y_k3_end_of_msg_in_output",
        "K3.channels",
        "The turn written out to <|end_of_msg|> (an engine that does not stop on it)",
        FORMAT_SOURCE,
        off,
        f"Hello there.{RESPONSE_END}{MESSAGE_END}{END_OF_MSG}",
    )
    yield (
        "y_k3_end_of_msg_after_think",
        "K3.channels",
        "Thinking on, the turn written out to <|end_of_msg|>",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}ok{RESPONSE_END}{MESSAGE_END}{END_OF_MSG}",
    )
    yield (
        "y_k3_parallel_calls",
        "K3.parallel",
        "Two calls in one tools channel",
        FORMAT_SOURCE,
        think,
        f"Two cities.{THINK_END}{tools(PARIS, OSLO)}{MESSAGE_END}",
    )
    yield (
        "y_k3_two_tools",
        "K3.parallel",
        "Calls to two different tools",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{tools(PARIS, call('search', 2, argument('query', 'news')))}{MESSAGE_END}",
    )
    yield (
        "y_k3_typed_values",
        "K3.values",
        "Number, boolean, null, object and array values",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}"
        + tools(
            call(
                "get_weather",
                1,
                argument("city", "Rome"),
                argument("days", "3", "number"),
                argument("metric", "true", "boolean"),
                argument("note", "null", "null"),
                argument("where", '{"lat": 41.9, "lon": 12.5}', "object"),
                argument("tags", '["a", 1, null]', "array"),
            )
        )
        + MESSAGE_END,
    )
    yield (
        "y_k3_string_raw_json_text",
        "K3.values",
        "A string value holding JSON text, quotes and newlines raw",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}"
        + tools(call("search", 1, argument("query", '{"q": "a \\"b\\""}\nline 2\t"x"')))
        + MESSAGE_END,
    )
    yield (
        "y_k3_string_with_special_tokens",
        "K3.values",
        "A string value holding <|open|> and <|sep|>: literal up to the argument's closer",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}"
        + tools(call("search", 1, argument("query", f"a{OPEN}b{SEP}c{CLOSE}d")))
        + MESSAGE_END,
    )
    yield (
        "y_k3_long_argument",
        "K3.long",
        "A 6,000-character string value (arguments arrive only when the call closes: "
        "a liveness concern on the wire)",
        THREADS["unstreamed-args"],
        think,
        f"r{THINK_END}" + tools(call("search", 1, argument("query", long_value))) + MESSAGE_END,
    )
    yield (
        "y_k3_unicode_values",
        "K3.utf8",
        "CJK and emoji in a value and in the answer",
        FORMAT_SOURCE,
        think,
        f"思考{THINK_END}{RESPONSE}答案 😀{RESPONSE_END}"
        + tools(call("search", 1, argument("query", unicode_value)))
        + MESSAGE_END,
    )
    yield (
        "y_k3_empty_arguments",
        "K3.values",
        "A call with no argument: {}",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{tools(call('search', 1))}{MESSAGE_END}",
    )
    yield (
        "y_k3_attribute_escapes",
        "K3.names",
        '&amp; and &quot; in attribute values decode to & and "',
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}"
        + tools(
            opener("call", {"tool": "search", "index": "1"})
            + f'{OPEN}argument key="say &quot;hi&quot; &amp; go" type="string"{SEP}'
            + f"v{closer('argument')}"
            + closer("call")
        )
        + MESSAGE_END,
    )
    for label, name in (
        ("dotted", "weather.get"),
        ("hyphenated", "get-weather"),
        ("non_ascii", "天气"),
        ("angle_bracket", "a<b"),
    ):
        yield (
            f"n_k3_{label}_tool_name",
            "K3.names",
            f"An undeclared {label.replace('_', ' ')} tool name is kept as written",
            THREADS["tool-attr-lt"] if label == "angle_bracket" else FORMAT_SOURCE,
            think,
            f"r{THINK_END}{tools(call(name, 1, argument('city', 'x')))}{MESSAGE_END}",
        )
    yield (
        "y_k3_global_index",
        "K3.index",
        "index is the conversation's call counter (5 here); the call is still OpenAI index 0",
        THREADS["global-index"],
        think,
        f"r{THINK_END}{tools(call('get_weather', 5, argument('city', 'Lima')))}{MESSAGE_END}",
    )
    yield (
        "y_k3_second_turn_global_index",
        "K3.index",
        "A second turn after one call and its result: the model writes index 1 (the "
        "conversation's counter), the call is OpenAI index 0; its id is the server's (SGLang "
        "mints NAME:<calls in the history + position>, vLLM a random one)",
        THREADS["global-index"],
        {"thinking": True, "server_options": {"messages": SECOND_TURN}},
        f"r{THINK_END}{tools(call('get_weather', 1, argument('city', 'Tokyo')))}{MESSAGE_END}",
    )
    yield (
        "y_k3_newlines_in_channels",
        "K3.whitespace",
        "Newlines inside the think and response channels are text",
        FORMAT_SOURCE,
        think,
        f"\nr\n{THINK_END}{RESPONSE}\nok\n{RESPONSE_END}{MESSAGE_END}",
    )
    # the shapes of public bug threads
    yield (
        "n_k3_tools_opened_inside_think",
        "K3.skipped-close",
        "The model leaves think by opening tools, without <|close|>think<|sep|>",
        THREADS["tools-in-think"],
        think,
        f"Need weather.{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "n_k3_response_opened_inside_think",
        "K3.skipped-close",
        "The model leaves think by opening response, without <|close|>think<|sep|>",
        THREADS["tools-in-think"],
        think,
        f"Hm.{RESPONSE}Sunny.{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_skipped_think_answer",
        "K3.skipped-close",
        "Thinking on, the model answers without think: text, then the response closer",
        THREADS["skipped-think"],
        think,
        f"Sunny today.{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "n_k3_message_close_without_response_close",
        "K3.leak",
        "<|close|>message<|sep|> right after the answer: never content",
        THREADS["message-leak"],
        think,
        f"r{THINK_END}{RESPONSE}Hi{closer('message')}",
    )
    yield (
        "n_k3_eos_inside_think",
        "K3.truncation",
        "The output ends inside think (EOS or max_tokens): reasoning only",
        THREADS["eos-in-think"],
        think,
        "Still thinking about",
    )
    yield (
        "n_k3_tools_without_declared_tools",
        "K3.request",
        "No tools declared, the model writes a tools channel: no call, no markup in content",
        THREADS["no-tools"],
        {"thinking": True, "tools": ()},
        f"r{THINK_END}{RESPONSE}Sure.{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "n_k3_tools_with_tool_choice_none",
        "K3.request",
        "tool_choice none, the model writes a tools channel: no call, no markup in content",
        THREADS["no-tools"],
        {"thinking": True, "tool_choice": "none"},
        f"r{THINK_END}{RESPONSE}Sure.{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "i_k3_spaced_markers",
        "K3.detokenizer",
        "Spaces around tag names, as a detokenizer with spaces between specials writes them",
        THREADS["spaced-markers"],
        think,
        f"r{CLOSE} think {SEP}{OPEN} response {SEP}Hi{CLOSE} response {SEP}{MESSAGE_END}",
    )
    yield (
        "i_k3_typed_value_not_json",
        "K3.values",
        "A number value that is not JSON (3,5)",
        THREADS["typed-not-json"],
        think,
        answer(call("get_weather", 1, argument("city", "x"), argument("days", "3,5", "number"))),
    )
    yield (
        "i_k3_argument_closer_inside_value",
        "K3.values",
        "A string value holding <|close|>argument<|sep|>: the first closer ends it",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}"
        + tools(call("search", 1, argument("query", f"a{closer('argument')}b")))
        + MESSAGE_END,
    )
    yield (
        "i_k3_missing_type",
        "K3.values",
        "An argument without type (a string)",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{tools(call('get_weather', 1, argument('city', '12', None)))}{MESSAGE_END}",
    )
    yield (
        "i_k3_unknown_type",
        "K3.values",
        'type="integer": JSON when it decodes',
        FORMAT_SOURCE,
        think,
        answer(call("get_weather", 1, argument("city", "x"), argument("days", "7", "integer"))),
    )
    yield (
        "i_k3_duplicate_key",
        "K3.values",
        "A key given twice",
        FORMAT_SOURCE,
        think,
        answer(call("get_weather", 1, argument("city", "a"), argument("city", "b"))),
    )
    yield (
        "n_k3_max_tokens_inside_call",
        "K3.truncation",
        "The output ends inside a call's string argument (max_tokens): the call is kept as "
        "far as it came, its value's text so far",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{TOOLS_OPEN}{opener('call', {'tool': 'get_weather', 'index': '1'})}"
        + f"{opener('argument', {'key': 'city', 'type': 'string'})}Par",
    )
    yield (
        "n_k3_max_tokens_inside_typed_value",
        "K3.truncation",
        "The output ends inside a call's number argument (max_tokens): the call is kept with "
        "the arguments before it (a typed value goes out only whole)",
        "https://github.com/vllm-project/vllm/pull/50628",
        think,
        f"r{THINK_END}{TOOLS_OPEN}{opener('call', {'tool': 'get_weather', 'index': '1'})}"
        + argument("city", "Paris")
        + f"{opener('argument', {'key': 'days', 'type': 'number'})}1",
    )
    yield (
        "n_k3_max_tokens_after_open",
        "K3.truncation",
        "The output ends right after <|open|>: the fragment is not content",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}Hi{RESPONSE_END}{OPEN}",
    )
    yield (
        "n_k3_max_tokens_after_close",
        "K3.truncation",
        "The output ends right after <|close|>: the fragment is not content",
        FORMAT_SOURCE,
        off,
        f"Hi{CLOSE}",
    )
    yield (
        "n_k3_max_tokens_before_sep",
        "K3.truncation",
        "The output ends in a tag name before its <|sep|>",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}Hi{RESPONSE_END}{OPEN}tools",
    )
    yield (
        "n_k3_unclosed_tools_channel",
        "K3.truncation",
        "A complete call, then the output ends without <|close|>tools<|sep|>",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{TOOLS_OPEN}{PARIS}",
    )
    # Outputs the coverage review of the K3 parser files found no case for (6 Dec 2026,
    # docs/k3.md): each reaches branches of the pinned parsers no other case does.
    yield (
        "n_k3_max_tokens_after_response_open",
        "K3.truncation",
        "The output ends right after the response channel's opener (max_tokens): no content, "
        "nothing leaked (vllm/reasoning/kimi_k3_reasoning_parser.py, an opener with nothing "
        "after it)",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}",
    )
    yield (
        "y_k3_whitespace_response_before_tools",
        "K3.whitespace",
        "A response of only whitespace before the tools is content "
        "(vllm/parser/kimi_k3.py and kimik3_detector.py test the text before the tools for "
        "whitespace)",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}  \n {RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "i_k3_think_opener_repeated",
        "K3.channels",
        "The output opens think again although the prompt already did",
        FORMAT_SOURCE,
        think,
        f"{opener('think')}r{THINK_END}{RESPONSE}ok{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_think_reopened_inside_think",
        "K3.channels",
        "A think opener in the middle of the reasoning",
        FORMAT_SOURCE,
        think,
        f"a{opener('think')}b{THINK_END}{RESPONSE}ok{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "n_k3_message_close_inside_skipped_think",
        "K3.leak",
        "Thinking on, the model answers without think and closes the message: the closer is "
        "never text, and the answer is kept (as reasoning: think never closed)",
        THREADS["message-leak"],
        think,
        f"Hello there.{MESSAGE_END}",
    )
    yield (
        "i_k3_number_beyond_int_digit_limit",
        "K3.values",
        "A number argument of 4,400 digits: valid JSON, beyond what Python's int conversion "
        "takes by default (4,300 digits; RFC 8259 lets an implementation limit numbers). vLLM "
        "0.33.0's K3 tool parser decodes a streamed typed value with no try "
        "(kimi_k3_tool_parser.py:234-237) where its one-shot path catches the error (352-356)",
        FORMAT_SOURCE,
        think,
        answer(
            call("get_weather", 1, argument("city", "Rome"), argument("days", "9" * 4400, "number"))
        ),
    )
    yield (
        "i_k3_call_without_tool",
        "K3.names",
        "A call without a tool attribute",
        FORMAT_SOURCE,
        think,
        f'r{THINK_END}{TOOLS_OPEN}{OPEN}call index="1"{SEP}{argument("city", "x")}'
        + f"{closer('call')}{TOOLS_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_single_quoted_tool",
        "K3.names",
        "tool='get_weather' in single quotes",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{TOOLS_OPEN}{OPEN}call tool='get_weather' index=\"1\"{SEP}"
        + f"{argument('city', 'x')}{closer('call')}{TOOLS_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_response_after_tools",
        "K3.order",
        "A response channel after the tools channel",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{tools(PARIS)}{RESPONSE}late{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_two_tools_channels",
        "K3.order",
        "Two tools channels, one call each",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{tools(PARIS)}{tools(OSLO)}{MESSAGE_END}",
    )
    yield (
        "i_k3_text_outside_channels",
        "K3.order",
        "Text between the think closer and the response",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}pre{RESPONSE}Hi{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "i_k3_text_after_response_close",
        "K3.order",
        "Thinking off: text after the response closer",
        FORMAT_SOURCE,
        off,
        f"Hi{RESPONSE_END}after{MESSAGE_END}",
    )
    yield (
        "i_k3_text_after_message_end",
        "K3.order",
        "Text after <|end_of_msg|>",
        FORMAT_SOURCE,
        think,
        f"r{THINK_END}{RESPONSE}Hi{RESPONSE_END}{MESSAGE_END}tail",
    )
    # the request decides which parsers run: no tools, tool_choice none, required, named
    no_tools = {"thinking": True, "tools": ()}
    yield (
        "y_k3_no_tools_answer",
        "K3.request",
        "No tools declared: reasoning and an answer",
        FORMAT_SOURCE,
        no_tools,
        f"r{THINK_END}{RESPONSE}Hi{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "y_k3_no_tools_thinking_off",
        "K3.request",
        "No tools declared, thinking off: an answer",
        FORMAT_SOURCE,
        {"thinking": False, "tools": ()},
        f"Hi{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "n_k3_no_tools_response_opened_inside_think",
        "K3.skipped-close",
        "No tools declared: the model leaves think by opening response",
        THREADS["tools-in-think"],
        no_tools,
        f"Hm.{RESPONSE}Sunny.{RESPONSE_END}{MESSAGE_END}",
    )
    yield (
        "n_k3_no_tools_max_tokens_in_closer",
        "K3.truncation",
        "No tools declared, thinking off: the output ends inside the response closer's name",
        FORMAT_SOURCE,
        {"thinking": False, "tools": ()},
        f"Hi{CLOSE}resp",
    )
    yield (
        "n_k3_no_tools_max_tokens_inside_response",
        "K3.truncation",
        "No tools declared: max_tokens cuts the answer inside the response channel (a server "
        "without a tool parser unwraps the channel itself: vllm/parser/kimi_k3.py's content "
        "strip)",
        THREADS["eos-in-think"],
        no_tools,
        f"Let me see.{THINK_END}{RESPONSE}It is sun",
    )
    yield (
        "y_k3_separate_reasoning_off_thinking_off",
        "K3.request",
        "Thinking off, the server asked not to separate reasoning (SGLang's separate_reasoning): "
        "no reasoning parser unwraps the response channel, so the tool parser's normal text "
        "carries its closer (sglang/srt/function_call/kimik3_detector.py strips it)",
        FORMAT_SOURCE,
        {"thinking": False, "server_options": {"separate_reasoning": False}},
        f"Checking.{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "i_k3_response_reopened_thinking_off",
        "K3.order",
        "Thinking off: the model opens the response channel the prompt already opened",
        FORMAT_SOURCE,
        off,
        f"{RESPONSE}Hi{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    yield (
        "n_k3_tool_choice_none_thinking_off",
        "K3.request",
        "tool_choice none, thinking off: the model writes a tools channel",
        THREADS["no-tools"],
        {"thinking": False, "tool_choice": "none"},
        f"Sure.{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
    )
    for label, choice in (
        ("required", "required"),
        ("named", {"type": "function", "function": {"name": "get_weather"}}),
    ):
        yield (
            f"y_k3_tool_choice_{label}",
            "K3.request",
            f"tool_choice {label}, thinking off: an empty response and the call",
            FORMAT_SOURCE,
            {"thinking": False, "tool_choice": choice},
            f"{RESPONSE_END}{tools(PARIS)}{MESSAGE_END}",
        )


def _spelled_table() -> Iterator[tuple[str, str, str, Mapping[str, Any], str, str]]:
    """(id, description, request fields, model output, marker, text before it) per case
    whose marker at the first ``marker`` after that text the model wrote from ordinary
    pieces, not its special token: the text is a well-formed output's, the token ids are not
    (sgl-project/sglang PR #32677).  Whether such a marker is structure is the engine's
    choice (``i_``); token-aligned deliveries only."""
    think = {"thinking": True}
    call_output = f"r{THINK_END}{tools(PARIS)}{MESSAGE_END}"
    yield (
        "i_k3_spelled_think_close",
        "The think closer's <|close|> written from ordinary pieces, then a call",
        think,
        call_output,
        CLOSE,
        "r",
    )
    yield (
        "i_k3_spelled_tools_open",
        "The tools channel's <|open|> written from ordinary pieces",
        think,
        call_output,
        OPEN,
        f"r{THINK_END}",
    )
    yield (
        "i_k3_spelled_call_sep",
        "The <|sep|> that ends the call's opener written from ordinary pieces",
        think,
        call_output,
        SEP,
        f"r{THINK_END}{TOOLS_OPEN}{OPEN}call",
    )
    yield (
        "i_k3_spelled_message_close",
        "Thinking off: the message closer's <|close|> written from ordinary pieces",
        {"thinking": False},
        f"Hi{RESPONSE_END}{MESSAGE_END}",
        CLOSE,
        f"Hi{RESPONSE_END}",
    )


def _rows(
    rng: random.Random,
) -> Iterator[tuple[str, str, str, str, Mapping[str, Any], str, tuple[int, ...]]]:
    """Every case's row: the table's, then the spelled markers' (with their offsets)."""
    for row in _table(rng):
        yield (*row, ())
    for case_id, description, fields, output, marker, before in _spelled_table():
        at = output.index(marker, len(before))
        yield (case_id, "K3.spelled", description, THREADS["spelled"], fields, output, (at,))


def generate(seed: int = BASE_SEED) -> list[CompletionCase]:
    rng = random.Random(seed)
    cases = []
    for case_id, klass, description, source, fields, output, spelled in _rows(rng):
        request = Request(
            tools=fields.get("tools", TOOLS),
            tool_choice=fields.get("tool_choice", "auto"),
            thinking=fields["thinking"],
            server_options=fields.get("server_options", {}),
        )
        prefix, reasons = FORMATS[FORMAT].verdict(request, output, bool(spelled))
        if prefix != case_id[0]:
            raise AssertionError(f"{case_id}: the verdict rule gives {prefix}_: {reasons}")
        result = parse(output, request)
        expected = Expectation(result.content, result.reasoning, result.tool_calls)
        cases.append(
            CompletionCase(
                case_id,
                description,
                (klass,),
                source,
                request,
                output,
                None,
                expected,
                {"class": klass, "seed": seed},
                format=FORMAT,
                spelled_markers=spelled,
            )
        )
    return cases


#: A JSON value's K3 argument type (``bool`` before ``int``: a bool is an int in Python).
_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (str, "string"),
    (bool, "boolean"),
    ((int, float), "number"),
    (type(None), "null"),
    (dict, "object"),
    (list, "array"),
)


def _k3_argument(key: str, value: Any) -> str:
    kind = next(name for types, name in _TYPES if isinstance(value, types))
    text = value if kind == "string" else json.dumps(value, ensure_ascii=False)
    return argument(key, text, kind)


#: A probe replay's thinking: a plugin's request does not turn thinking off, so a K3 engine's
#: generation prompt opens ``think`` (``formats.Format.thinking_default``).
PROBE_THOUGHT = "The user's request is clear; I answer it."


def _k3_replay(k2_output: str, request: Request, first_index: int) -> tuple[str, int]:
    """A K2 replay's content and calls written as K3 output that thinks first (the generation
    prompt opened ``think``), then answers in a ``response`` channel, empty before calls (the
    channel "always precedes the tools channel": vLLM's K3 structural tag,
    vllm/tool_parsers/structural_tag_registry.py, which constrains a required or named
    ``tool_choice`` so), its calls numbered from ``first_index``; and the next index.  The K3
    reference must read back what the K2 reference read."""
    from k2conform.reference.parser import parse as parse_k2

    k2 = parse_k2(k2_output, request)
    calls = [
        call(
            c.name,
            first_index + n,
            *(_k3_argument(k, v) for k, v in json.loads(c.arguments).items()),
        )
        for n, c in enumerate(k2.tool_calls)
    ]
    response = RESPONSE + (k2.content or "") + RESPONSE_END
    output = PROBE_THOUGHT + THINK_END + response + (tools(*calls) if calls else "") + MESSAGE_END
    k3 = parse(output, Request(request.tools, request.tool_choice, thinking=True))
    # the thought is K3's own; everything else must read back the same (ids: none in K3)
    differs = [d for d in compare_results(k2, k3, check_ids=False) if d.field != "reasoning"]
    if differs:
        raise AssertionError(f"the K3 replay of {k2_output!r} reads back as {k3}: {differs}")
    return output, first_index + len(calls)


def probes(k2_probes: list[ProbeCase]) -> list[ProbeCase]:
    """The K2 probes' conversations (tools, choice, messages, expectations, follow-up) with
    each turn's replay written in K3, its call indices counted across the conversation from 1,
    as the K3 cases count them (sgl-project/sglang#39897): a K3 server is asked what a K2
    server is."""
    out = []
    for probe in k2_probes:
        request = Request(tuple(probe.tools), probe.tool_choice)
        replay, index = [], 1
        for turn in probe.replay:
            text, index = _k3_replay(turn, request, index)
            replay.append(text)
        out.append(
            ProbeCase(
                probe.id.replace("y_probe_", "y_probe_k3_", 1),
                f"{probe.description} (Kimi K3)",
                probe.tags,
                f"{probe.source}; {probe.id}'s conversation, its replay written in the K3 format "
                f"({FORMAT_SOURCE})",
                probe.tools,
                probe.tool_choice,
                probe.messages,
                probe.expect,
                probe.follow_up,
                tuple(replay),
                format=FORMAT,
            )
        )
    return out


def write(root: Path, cases: list[CompletionCase]) -> dict[Path, str]:
    """The files of ``root/k3`` and ``root/probes/k3`` as they should be (path -> text)."""
    files = {root / FOLDER / f"{case.id}.json": dumps_canonical(case.to_json()) for case in cases}
    k2_probes = [p for p in load_corpus(root).probes if p.format != FORMAT]
    for probe in probes(k2_probes):
        files[root / PROBE_FOLDER / f"{probe.id}.json"] = dumps_canonical(probe.to_json())
    return files


def main(argv: list[str]) -> int:
    root = default_corpus_dir()
    files = write(root, generate())
    on_disk = {
        p: p.read_text(encoding="utf-8")
        for folder in (FOLDER, PROBE_FOLDER)
        for p in (root / folder).glob("*.json")
    }
    if argv == ["--check"]:
        stale = sorted(str(p) for p in set(files) | set(on_disk) if files.get(p) != on_disk.get(p))
        for path in stale:
            print(f"differs from the generator: {path}")
        return 1 if stale else 0
    for path in set(on_disk) - set(files):
        path.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"{len(files)} K3 cases and probes in {root / FOLDER} and {root / PROBE_FOLDER}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
