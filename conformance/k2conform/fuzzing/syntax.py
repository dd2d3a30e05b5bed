"""What the fuzzers know of a Kimi format's text, one record per format
(:data:`SYNTAXES`, keyed as :data:`k2conform.formats.FORMATS`): the marker units the mutator
moves, where a call's index, name and arguments are, the material it splices in, how the
envelope finds the tools an output names, which markers a spelled delivery may spell, and the
libFuzzer dictionary.  Envelope, mutator, seeds and the differential read it; none of them asks
which format an input is.  Which marker bytes are a leak is the format's own fact
(:attr:`k2conform.formats.Format.leak_markers`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from k2conform import formats, markers
from k2conform.k3 import markers as k3


@dataclass(frozen=True)
class Syntax:
    format: str
    #: The marker units the mutator inserts, drops, duplicates, reorders, truncates and breaks.
    units: tuple[str, ...]
    #: Rarer units it also inserts.
    extra_units: tuple[str, ...]
    #: Finds the units in a text (with attributes, where a format's tags carry them).
    occurrence: re.Pattern[str]
    #: Splits a text at its added tokens, keeping them (``spaces``).
    added_split: re.Pattern[str]
    #: Group 1: a call's index as written.
    call_index: re.Pattern[str]
    #: Group 1: a call's name as written; :attr:`spell_name` writes a pool name there.
    call_name: re.Pattern[str]
    spell_name: Callable[[str], str]
    #: Group 1: a call's arguments as written (K3: an argument's attributes and value).
    arguments: re.Pattern[str]
    argument_pool: tuple[str, ...]
    name_pool: tuple[str, ...]
    #: Group 1: the name of a tool the output calls (the envelope declares it), decoded by
    #: :attr:`read_name`.
    tool_name: re.Pattern[str]
    read_name: Callable[[str], str]
    #: The markers a spelled delivery may write from ordinary pieces.
    spellable: re.Pattern[str]
    #: libFuzzer's dictionary: name -> text.
    dictionary: Mapping[str, str]


def _alternatives(texts: tuple[str, ...]) -> str:
    return "|".join(re.escape(t) for t in sorted(set(texts), key=len, reverse=True))


#: Names any format's calls may carry: dotted, hyphenated, non-ASCII, foreign ids.
_NAMES = (
    "get_weather",
    "search.web",
    "a.b.c",
    "get-weather",
    "天气查询",
    "x",
    "functions.get_weather",
    "name:with:colons",
    "call_abc123",
    "toolu_01",
    "0",
)

_K2_UNITS = markers.TOOL_MARKERS + (markers.THINK_BEGIN, markers.THINK_END)
_K2_EXTRA = (markers.SECTION_BEGIN_SINGULAR, markers.SECTION_END_SINGULAR, markers.IM_END)

K2 = Syntax(
    format=markers.FORMAT,
    units=_K2_UNITS,
    extra_units=_K2_EXTRA,
    occurrence=re.compile("|".join(re.escape(m) for m in _K2_UNITS + _K2_EXTRA)),
    added_split=re.compile(f"({_alternatives(tuple(markers.SPECIAL_TOKEN_IDS))})"),
    call_index=re.compile(
        re.escape(markers.CALL_BEGIN)
        + r"[^<]*?:(\s*\d*)(?=\s*"
        + re.escape(markers.ARGUMENT_BEGIN)
        + ")"
    ),
    call_name=re.compile(
        re.escape(markers.CALL_BEGIN)
        + r"([^<]*?):\s*\d*(?=\s*"
        + re.escape(markers.ARGUMENT_BEGIN)
        + ")"
    ),
    spell_name=lambda name: "functions." + name,
    arguments=re.compile(
        re.escape(markers.ARGUMENT_BEGIN) + r"(.*?)(?=" + re.escape(markers.CALL_END) + ")", re.S
    ),
    argument_pool=(
        "{}",
        "",
        '{"a": 1}',
        '{"city": "Paris", "days": 3}',
        '{"q": "see <|tool_call_end|> here"}',
        '{"s": "\\u00e9\\"\\\\"}',
        '{"a": [1, 2, {"b": null}]}',
        '{"a": 1,}',
        "{'a': 1}",
        '{"a": NaN}',
        '{"x": "unterminated',
        "[1, 2]",
        '"just a string"',
        '{"a": 1}{"b": 2}',
        '{\n  "a": 1\n}',
        '{"k": "天气", "e": "😀"}',
        '{"a": 1e400}',
        '{"a": "\\ud800"}',
        '{"a": {"b": {"c": {"d": []}}}}',
    ),
    name_pool=_NAMES,
    tool_name=re.compile(
        re.escape(markers.CALL_BEGIN)
        + r"\s*(?:functions\.)?([^\s<]{1,64}?)(?::\s*\d+)?\s*"
        + re.escape(markers.ARGUMENT_BEGIN)
    ),
    read_name=lambda name: name,
    spellable=re.compile("|".join(re.escape(m) for m in _K2_UNITS)),
    dictionary={
        "section_begin": markers.SECTION_BEGIN,
        "section_end": markers.SECTION_END,
        "call_begin": markers.CALL_BEGIN,
        "argument_begin": markers.ARGUMENT_BEGIN,
        "call_end": markers.CALL_END,
        "section_begin_singular": markers.SECTION_BEGIN_SINGULAR,
        "section_end_singular": markers.SECTION_END_SINGULAR,
        "think_begin": markers.THINK_BEGIN,
        "think_end": markers.THINK_END,
        "im_end": markers.IM_END,
        "im_assistant": markers.IM_ASSISTANT,
        "im_middle": markers.IM_MIDDLE,
        "functions_prefix": "functions.",
        "index_0": ":0",
        "index_1": ":1",
        "marker_head": "<|",
        "marker_tail": "|>",
        "json_open": '{"',
        "json_string_end": '"}',
        "escaped_quote": '\\"',
    },
)

_K3_CALL = k3.opener("call", {"tool": "get_weather", "index": "0"})
_K3_ARGUMENT = k3.opener("argument", {"key": "city", "type": "string"})
#: K3's tags: every channel and element closer, the channels a turn opens, a call and an
#: argument as the engines' structural tags write them, and the end of the message.
_K3_UNITS = (
    k3.closer("think"),
    k3.opener("response"),
    k3.closer("response"),
    k3.opener("tools"),
    k3.closer("tools"),
    _K3_CALL,
    _K3_ARGUMENT,
    k3.closer("argument"),
    k3.closer("call"),
    k3.closer("message"),
    k3.END_OF_MSG,
)
_K3_EXTRA = (k3.OPEN, k3.CLOSE, k3.SEP, k3.opener("think"), k3.opener("message"))
_O, _C, _S = (re.escape(m) for m in (k3.OPEN, k3.CLOSE, k3.SEP))

K3 = Syntax(
    format=k3.FORMAT,
    units=_K3_UNITS,
    extra_units=_K3_EXTRA,
    # a tag whole (name and attributes up to its <|sep|>), else one special token alone
    occurrence=re.compile(
        f"{_O}[^<]{{0,256}}?{_S}|{_C}[^<]{{0,32}}?{_S}|{_alternatives(k3.MARKERS)}"
    ),
    added_split=re.compile(f"({_alternatives(k3.MARKERS)})"),
    call_index=re.compile(f'{_O}call\\b[^<]*? index="([^"]*)"'),
    call_name=re.compile(f'{_O}call\\b[^<]*? tool="([^"]*)"'),
    spell_name=k3.escape,
    arguments=re.compile(f"{_O}argument((?:[^<]*?){_S}.*?)(?={_C}argument{_S})", re.S),
    # an argument's attributes and value: each type, values no type decodes, a literal closer
    # inside a string, escaped and unescaped attributes, no type at all
    argument_pool=(
        ' key="city" type="string"' + k3.SEP + "Paris",
        ' key="city" type="string"' + k3.SEP,
        ' key="days" type="number"' + k3.SEP + "3",
        ' key="days" type="number"' + k3.SEP + "three",
        ' key="big" type="number"' + k3.SEP + "1e400",
        ' key="metric" type="boolean"' + k3.SEP + "True",
        ' key="note" type="null"' + k3.SEP,
        ' key="where" type="object"' + k3.SEP + '{"a": 1,}',
        ' key="where" type="object"' + k3.SEP + '{"a": {"b": [null, true]}}',
        ' key="tags" type="array"' + k3.SEP + "[1, 2",
        ' key="q" type="string"' + k3.SEP + "see " + k3.closer("argument") + " here",
        ' key="q" type="string"' + k3.SEP + 'say "hi" \\u00e9 & <b>',
        ' key="a&amp;b" type="string"' + k3.SEP + "x",
        ' key="a"b" type="string"' + k3.SEP + "x",
        ' key="k" type="bogus"' + k3.SEP + "1",
        ' key="k"' + k3.SEP + "no type",
        ' key="city" type="string"' + k3.SEP + "天气 😀\nline two",
    ),
    name_pool=_NAMES + ('a"b', "a&b", "x<y", "get weather"),
    tool_name=re.compile(f'{_O}call\\b[^<]*? tool="([^"]{{1,64}})"'),
    read_name=k3.unescape,
    spellable=re.compile(_alternatives(formats.FORMATS[k3.FORMAT].special_tokens)),
    dictionary={
        "open": k3.OPEN,
        "close": k3.CLOSE,
        "sep": k3.SEP,
        "end_of_msg": k3.END_OF_MSG,
        **{
            f"tag_{name}": name
            for name in ("think", "response", "tools", "call", "argument", "message")
        },
        "tool_attribute": ' tool="',
        "index_attribute": ' index="',
        "key_attribute": ' key="',
        **{f"type_{t}": f' type="{t}"' for t in ("string", "number", "object", "boolean")},
        "escaped_quote": "&quot;",
        "escaped_amp": "&amp;",
    },
)

#: One per format of :data:`k2conform.formats.FORMATS` (tests/test_fuzzing.py holds it).
SYNTAXES: dict[str, Syntax] = {s.format: s for s in (K2, K3)}
#: The syntax of a text whose format is not named: the default format's.
DEFAULT = SYNTAXES[formats.DEFAULT]
