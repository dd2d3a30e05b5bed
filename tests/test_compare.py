"""The comparison: semantic for JSON arguments, bytes otherwise, and it says which."""

from __future__ import annotations

import pytest

from k2conform.judge.compare import (
    compare_arguments,
    compare_results,
    json_equal,
    same_reply,
    strict_json,
)
from k2conform.model import FieldDiff, Result, ToolCall


def test_arguments_compare_semantically_when_both_parse():
    assert compare_arguments('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}') is None
    assert compare_arguments('{"a": 1}', '{"a": 2}') == "json"
    assert compare_arguments('{"a": true}', '{"a": 1}') == "json"
    assert compare_arguments('{"a": 1}', '{"a": 1.0}') is None


def test_arguments_fall_back_to_bytes_when_either_side_is_not_strict_json():
    assert compare_arguments('{"a": fasle', '{"a": fasle') is None
    assert compare_arguments('{"a": fasle', '{"a": fasle}') == "bytes"
    assert compare_arguments('{"a": NaN}', '{"a": NaN}') is None
    assert compare_arguments('{"a": NaN}', '{"a":NaN}') == "bytes"
    assert compare_arguments('{"a": 1, "a": 2}', '{"a": 2}') == "bytes"
    assert strict_json('{"a": 1, "a": 2}') == (False, None)


def test_result_diffs_name_the_field_and_the_call():
    expected = Result(
        content="Hi",
        tool_calls=(ToolCall("f", "{}", "functions.f:0"), ToolCall("g", "{}", "functions.g:1")),
    )
    observed = Result(content="Hi ", tool_calls=(ToolCall("f", '{"x": 1}', "call_1"),))
    diffs = {(d.field, d.call, d.how) for d in compare_results(expected, observed)}
    assert diffs == {
        ("content", None, "whitespace"),
        ("count", None, "count"),
        ("arguments", 0, "json"),
        ("id", 0, "bytes"),
    }


def test_null_and_empty_content_are_the_same_and_unknown_ids_are_not_compared():
    assert compare_results(Result(content=None), Result(content="")) == []
    unknown_id = Result(tool_calls=(ToolCall("f", "{}"),))
    assert compare_results(unknown_id, Result(tool_calls=(ToolCall("f", "{}", "x"),))) == []


def test_deeply_nested_arguments_compare_without_recursion_limits():
    deep = "[" * 800 + "]" * 800  # parses (json recurses), too deep for a recursive compare
    assert compare_arguments(deep, deep) is None
    assert compare_arguments(deep, "[" * 799 + "1" + "]" * 799) == "json"
    assert compare_arguments("[" * 100000, "[" * 100000) is None  # too deep to parse: bytes


# -- what a wrong comparison would let through (each kills mutants of judge/compare.py) --------


@pytest.mark.parametrize(
    ("expected", "observed"),
    [
        ('{"a": true}', '{"a": 1}'),
        ('{"a": 1}', '{"a": true}'),
        ("[false]", "[0]"),
        ("true", "false"),
        ('{"a": 1.5}', '{"a": 2.5}'),
        ('"ab"', '["a", "b"]'),
        ('{"a": 1}', '["a"]'),
        ('["a"]', '{"a": 1}'),
        ('"1"', "1"),
        ("[1, 2]", "[1]"),
        ("[1]", "[1, 2]"),
        ('{"a": 1}', '{"b": 1}'),
        ('"a"', '"b"'),
        ("null", "0"),
        ("[[1, 2]]", "[[1, 3]]"),
    ],
)
def test_json_values_that_differ_are_not_equal_whichever_side_they_are_on(expected, observed):
    """Booleans against numbers, lengths, keys, a dict or a string against an array: no crash,
    no truncating zip, no side taken for granted."""
    assert compare_arguments(expected, observed) == "json"
    assert json_equal(strict_json(expected)[1], strict_json(observed)[1]) is False


@pytest.mark.parametrize(
    "text", ['{"a": 1.5}', '"x"', "[true, null]", '{"a": {"b": [1, "2"]}}', "false"]
)
def test_equal_json_values_are_equal(text):
    assert json_equal(strict_json(text)[1], strict_json(text)[1]) is True
    assert compare_arguments(text, " " + text) is None


def test_valid_json_against_broken_json_compares_bytes_on_either_side():
    assert compare_arguments('{"a": 1}', '{"a": 1') == "bytes"
    assert compare_arguments('{"a": 1', '{"a": 1}') == "bytes"


def test_calls_whose_names_differ_do_not_agree():
    expected = Result(tool_calls=(ToolCall("get_weather", "{}", "functions.get_weather:0"),))
    observed = Result(tool_calls=(ToolCall("get.weather", "{}", "functions.get_weather:0"),))
    assert compare_results(expected, observed) == [
        FieldDiff("name", "get_weather", "get.weather", "bytes", 0)
    ]


def test_ids_are_compared_only_when_asked_and_known_and_different():
    expected = Result(
        tool_calls=(ToolCall("f", "{}", "functions.f:0"), ToolCall("f", "{}", "functions.f:1"))
    )
    observed = Result(
        tool_calls=(ToolCall("f", "{}", "functions.f:0"), ToolCall("f", "{}", "call_1"))
    )
    assert compare_results(expected, observed) == [
        FieldDiff("id", "functions.f:1", "call_1", "bytes", 1)
    ]
    assert compare_results(expected, observed, check_ids=False) == []
    assert compare_results(expected, expected) == []


def test_text_differences_say_whether_only_whitespace_differs():
    diffs = compare_results(
        Result(content="Hi there", reasoning="plan"), Result(content="Bye", reasoning="plan ")
    )
    assert diffs == [
        FieldDiff("content", "Hi there", "Bye", "text"),
        FieldDiff("reasoning", "plan", "plan ", "whitespace"),
    ]


def test_the_oracles_own_check_takes_empty_text_as_null_and_nothing_else_as_equal():
    """The fuzz targets' check of the reference against itself: "" and null are one reply (a
    stream assembles "" where one-shot says null), a whitespace, an id or an argument byte
    is another."""
    call = ToolCall("f", '{"a": 1}', "functions.f:0")
    reply = Result(content="Hi", reasoning=None, tool_calls=(call,))
    assert same_reply(reply, Result(content="Hi", reasoning="", tool_calls=(call,)))
    assert not same_reply(reply, Result(content="Hi ", tool_calls=(call,)))
    assert not same_reply(
        reply, Result(content="Hi", tool_calls=(ToolCall("f", '{"a":1}', call.id),))
    )
    assert not same_reply(
        reply, Result(content="Hi", tool_calls=(ToolCall("f", call.arguments, "x"),))
    )
    assert not same_reply(reply, Result(content="Hi"))
    thought = Result(content=None, reasoning="plan", tool_calls=(call,))
    for empty in (Result(content="", reasoning="plan", tool_calls=(call,)), thought):
        assert same_reply(thought, empty) and same_reply(empty, thought)
    assert same_reply(Result(content="Hi", reasoning="", tool_calls=(call,)), reply)
    for other in (Result(reasoning="plan ", tool_calls=(call,)), Result(tool_calls=(call,))):
        assert not same_reply(thought, other) and not same_reply(other, thought)
