import pytest

from tandem.parsers.schema_values import certain_string, convert, param_kind

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
    "o": {"type": "object"}, "a": {"type": "array"}, "opt": {"type": ["integer", "null"]},
    "e": {"enum": ["x", "y"]}, "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "alias": {"type": "int64"}}}}},
    {"name": "flat", "parameters": {"properties": {"q": {"type": "string"}}}}]


@pytest.mark.parametrize("param, kind", [
    ("s", "string"), ("i", "integer"), ("n", "number"), ("b", "boolean"), ("o", "object"), ("a", "array"),
    ("opt", "integer"), ("e", "string"), ("any", None), ("alias", "integer"), ("missing", None),
])
def test_param_kind_reads_the_schema(param, kind):
    assert param_kind(TOOLS, "f", param) == kind


def test_param_kind_for_flat_tools_and_unknown_tools():
    assert param_kind(TOOLS, "flat", "q") == "string"
    assert param_kind(TOOLS, "nope", "q") is None
    assert param_kind([], "f", "s") is None


@pytest.mark.parametrize("text, kind, value", [
    ("hello", "string", "hello"), ("007", "string", "007"), ("NULL", "string", None), ("12", "integer", 12),
    ("1.5", "integer", "1.5"), ("-3", "number", -3), ("2.0", "number", 2), ("2.25", "number", 2.25),
    ("nan", "number", "nan"), ("True", "boolean", True), ("no", "boolean", "no"),
    ('{"a": 1}', "object", {"a": 1}), ("{'a': 1}", "object", {"a": 1}), ("[1, 2", "array", "[1, 2"),
    ("{'a': {1, 2}}", "object", "{'a': {1, 2}}"), ("42", None, 42), ("[1]", None, [1]),
    ("true", None, True), ('"quoted"', None, '"quoted"'), ("words", None, "words"), (" 5", None, " 5"),
])
def test_convert(text, kind, value):
    assert convert(text, kind) == value and type(convert(text, kind)) is type(value)


@pytest.mark.parametrize("prefix, kind, certain", [
    ("Paris", "string", True), ("nu", "string", False), ("null", "string", False), ("nullx", "string", True),
    ("", "string", False), ("abc", None, True), ("4", None, False), ("t", None, False), ("abc", "integer", False),
])
def test_certain_string_agrees_with_convert(prefix, kind, certain):
    assert certain_string(prefix, kind) == certain
    if certain:
        for rest in ("", "ll", "x", " 1"):
            assert convert(prefix + rest, kind) == prefix + rest
