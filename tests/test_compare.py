"""The comparison: semantic for JSON arguments, bytes otherwise, and it says which."""

from __future__ import annotations

from k2conform.judge.compare import compare_arguments, compare_results, strict_json
from k2conform.model import Result, ToolCall


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
    expected = Result(content="Hi", tool_calls=(ToolCall("f", "{}", "functions.f:0"), ToolCall("g", "{}", "functions.g:1")))
    observed = Result(content="Hi ", tool_calls=(ToolCall("f", '{"x": 1}', "call_1"),))
    diffs = {(d.field, d.call, d.how) for d in compare_results(expected, observed)}
    assert diffs == {("content", None, "whitespace"), ("count", None, "count"), ("arguments", 0, "json"), ("id", 0, "bytes")}


def test_null_and_empty_content_are_the_same_and_unknown_ids_are_not_compared():
    assert compare_results(Result(content=None), Result(content="")) == []
    assert compare_results(Result(tool_calls=(ToolCall("f", "{}"),)), Result(tool_calls=(ToolCall("f", "{}", "x"),))) == []


def test_deeply_nested_arguments_compare_without_recursion_limits():
    deep = "[" * 800 + "]" * 800  # parses (the json module recurses), too deep for a recursive compare
    assert compare_arguments(deep, deep) is None
    assert compare_arguments(deep, "[" * 799 + "1" + "]" * 799) == "json"
    assert compare_arguments("[" * 100000, "[" * 100000) is None  # too deep to parse: bytes
