"""response_format, structured_outputs and vLLM's guided_* fields -> one GrammarSpec, or a 400
naming the parameter."""

from __future__ import annotations

import json

import pytest

from tandem.errors import InvalidRequest
from tandem.turn.fields import Fields
from tandem.turn.structured_output import read_structured_output
from tandem.types import GrammarSpec

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TEXT = json.dumps(SCHEMA)


def read(lenient: bool = False, **body):
    return read_structured_output(Fields(body), lenient_schema=lenient)


@pytest.mark.parametrize("body,spec,param", [
    ({}, None, None),
    ({"response_format": {"type": "text"}}, None, None),
    ({"response_format": {"type": "json_object"}}, GrammarSpec("json_object"), "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA,
                                                                 "strict": True}}},
     GrammarSpec("json_schema", TEXT), "response_format"),
    ({"structured_outputs": {"json": SCHEMA}}, GrammarSpec("json_schema", TEXT), "structured_outputs"),
    ({"structured_outputs": {"json": TEXT}}, GrammarSpec("json_schema", TEXT), "structured_outputs"),
    ({"structured_outputs": {"regex": "a+", "disable_any_whitespace": True}},
     GrammarSpec("regex", "a+"), "structured_outputs"),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, GrammarSpec("choice", '["yes", "no"]'),
     "structured_outputs"),
    ({"structured_outputs": {"grammar": 'root ::= "x"'}}, GrammarSpec("ebnf", 'root ::= "x"'),
     "structured_outputs"),
    ({"structured_outputs": {"json_object": True}}, GrammarSpec("json_object"), "structured_outputs"),
    ({"guided_json": SCHEMA}, GrammarSpec("json_schema", TEXT), "guided_json"),
    ({"guided_regex": "[0-9]+"}, GrammarSpec("regex", "[0-9]+"), "guided_regex"),
    ({"guided_choice": ["a"]}, GrammarSpec("choice", '["a"]'), "guided_choice"),
    ({"guided_grammar": 'root ::= "y"'}, GrammarSpec("ebnf", 'root ::= "y"'), "guided_grammar"),
    ({"guided_json": None, "structured_outputs": {}}, None, None),
    ({"guided_json": {}}, GrammarSpec("json_schema", "{}"), "guided_json"),   # any JSON value
    ({"structured_outputs": {"json_object": False, "regex": "a"}}, GrammarSpec("regex", "a"),
     "structured_outputs"),
])
def test_each_field_becomes_its_grammar(body, spec, param):
    assert read(**body) == (spec, param)


def test_structural_tags_new_and_legacy_forms():
    fmt = {"type": "const_string", "value": "hi"}
    spec, _ = read(response_format={"type": "structural_tag", "format": fmt})
    assert json.loads(spec.text) == {"type": "structural_tag", "format": fmt}
    spec, _ = read(response_format={"type": "structural_tag", "triggers": ["<f="],
                                    "structures": [{"begin": "<f=a>", "schema": SCHEMA, "end": "</f>"}]})
    tag = json.loads(spec.text)["format"]
    assert tag["type"] == "triggered_tags" and tag["triggers"] == ["<f="]
    assert tag["tags"] == [{"type": "tag", "begin": "<f=a>", "end": "</f>",
                            "content": {"type": "json_schema", "json_schema": SCHEMA}}]
    spec, _ = read(structured_outputs={"structural_tag": json.dumps({"format": fmt})})
    assert json.loads(spec.text)["format"] == fmt


def test_workers_ai_gives_the_schema_itself():
    assert read(True, response_format={"type": "json_schema", "json_schema": SCHEMA}) == \
        (GrammarSpec("json_schema", TEXT), "response_format")
    assert read(True, response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}})[0] == \
        GrammarSpec("json_schema", TEXT)


@pytest.mark.parametrize("body,param", [
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": SCHEMA}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "structural_tag"}}, "response_format"),
    ({"structured_outputs": "a+"}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"pattern": "a"}}, "structured_outputs"),
    ({"structured_outputs": {"json": "{not json"}}, "structured_outputs.json"),
    ({"structured_outputs": {"choice": [1, 2]}}, "structured_outputs.choice"),
    ({"guided_regex": 5}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    # empty constraints are refused, not dropped (issue #30: guided_choice [] was accepted)
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": ""}, "guided_regex"),
    ({"guided_grammar": ""}, "guided_grammar"),
    ({"guided_json": []}, "guided_json"),
    ({"guided_json": ""}, "guided_json"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"structured_outputs": {"regex": ""}}, "structured_outputs.regex"),
    ({"structured_outputs": {"regex": "a", "choice": []}}, "structured_outputs"),
])
def test_malformed_values_name_the_parameter(body, param):
    with pytest.raises(InvalidRequest) as info:
        read(**body)
    assert info.value.status == 400 and info.value.param == param, info.value.message
