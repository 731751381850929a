"""Schemas checked in linear time: a pattern that makes a backtracking matcher run for ever
is matched at once, wherever the model's text meets it (an answer, a tool's arguments,
a property's name), and a pattern RE2 cannot match makes the schema refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from jarvis_agents.answers import check_schema, parse_answer
from jarvis_agents.errors import RequestError
from jarvis_agents.json_schema import SchemaRefused, check, validator_for
from jarvis_agents.tools.arguments import ArgumentsError, check_arguments

EVIL = "^(a+)+$"  # backtracking takes 2^n steps to refuse n a's and a "!"
TEXT = "a" * 40 + "!"
# Seconds a run of a few checks may take, whatever the machine's load; a backtracking
# matcher would need centuries.
DEADLINE_S = 60

# Each holds the pattern where the model's text meets it through a different keyword.
HOLDERS = {
    "pattern": {"type": "string", "pattern": EVIL},
    "patternProperties": {"type": "object", "patternProperties": {EVIL: {"type": "string"}}},
    "additionalProperties": {"type": "object", "patternProperties": {EVIL: {}},
                             "additionalProperties": False},
    "propertyNames": {"type": "object", "propertyNames": {"pattern": EVIL}},
    # `$schema` at the root: jsonschema would check what `$ref: #` points at with its own class.
    "ref to a root with $schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "anyOf": [{"type": "string", "pattern": EVIL},
                  {"type": "object", "properties": {"next": {"$ref": "#"}}}]},
}


def in_a_process_of_its_own(code: str) -> str:
    """What `code` prints, run in a fresh interpreter: a matcher that backtracks holds the
    GIL, so only another process can be stopped at the deadline."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=DEADLINE_S, check=True)
    return done.stdout


def test_an_answer_against_a_backtracking_pattern_is_checked_at_once() -> None:
    printed = in_a_process_of_its_own(f"""
        import json
        from jarvis_agents.answers import parse_answer
        holders = {HOLDERS!r}
        for name, schema in holders.items():
            value = {TEXT!r}
            if schema.get("type") == "object":
                value = {{{TEXT!r}: "x"}}
            elif "anyOf" in schema:
                value = {{"next": {{"next": {TEXT!r}}}}}
            output, problem = parse_answer(json.dumps(value), schema)
            print(name, "|", problem)
    """)
    problems = dict(line.split(" | ") for line in printed.splitlines())
    assert list(problems) == list(HOLDERS)
    assert problems.pop("patternProperties") == "None"  # a name it does not take is free
    assert all(p.startswith("the answer does not match the output schema") for p in problems.values())


def test_a_tools_arguments_against_a_backtracking_pattern_are_checked_at_once() -> None:
    printed = in_a_process_of_its_own(f"""
        from jarvis_agents.tools.arguments import ArgumentsError, check_arguments
        schema = {{"type": "object", "properties": {{"city": {{"type": "string", "pattern": {EVIL!r}}}}}}}
        try:
            check_arguments("getWeather", schema, {{"city": {TEXT!r}}})
        except ArgumentsError as exc:
            print(exc)
    """)
    assert printed.startswith("Invalid arguments for tool 'getWeather' at city: "), printed


@pytest.mark.parametrize("schema", list(HOLDERS.values()), ids=list(HOLDERS))
def test_the_patterns_still_say_what_matches(schema: dict) -> None:
    good = "aaa"
    if schema.get("type") == "object":
        good_value: object = {good: "x"}
    elif "anyOf" in schema:
        good_value = {"next": good}
    else:
        good_value = good
    assert list(validator_for(schema).iter_errors(good_value)) == []


def test_additional_properties_say_which_names_no_pattern_took() -> None:
    schema = {"patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False}
    errors = [e.message for e in validator_for(schema).iter_errors({"x_a": 1, "y": 2, "z": 3})]
    assert errors == ["'y', 'z' do not match any of the regexes: '^x_'"]
    plain = validator_for({"properties": {"a": {}}, "additionalProperties": False})
    assert [e.message for e in plain.iter_errors({"a": 1, "b": 2})] == [
        "Additional properties are not allowed ('b' was unexpected)"]


@pytest.mark.parametrize(("schema", "said"), [
    ({"properties": {"x": {"type": "string", "pattern": r"(a)\1"}}},
     (r"has a pattern at `properties/x/pattern` that cannot be matched in linear time: '(a)\\1' "
     r"(invalid escape sequence: \1); patterns are RE2's, without backreferences, lookahead or "
     "lookbehind")),
    ({"patternProperties": {"^(?=x)": {}}},
     ("has a pattern at `patternProperties` that cannot be matched in linear time: '^(?=x)' "
     "(invalid perl operator: (?=)")),
    ({"properties": {"x": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
     "declares `$schema` at `properties/x`; only its root may"),
    ({"allOf": [{"patternProperties": {"a": {}}}], "properties": {"o": {"unevaluatedProperties": False}}},
     ("has `unevaluatedProperties` at `properties/o` beside `patternProperties`, which cannot be "
     "checked in linear time together; use `additionalProperties`")),
    ({"type": "nope"}, "is not a valid JSON Schema (Draft 2020-12) at `type`: 'nope' is not"),
], ids=["backreference", "lookahead", "nested $schema", "unevaluatedProperties", "invalid"])
def test_what_cannot_be_checked_in_linear_time_is_refused_saying_where(schema: dict, said: str) -> None:
    with pytest.raises(SchemaRefused) as refused:
        check(schema)
    assert str(refused.value).startswith(said), refused.value
    with pytest.raises(RequestError) as at_create:
        check_schema(schema)
    assert str(at_create.value) == f"`output_schema` {refused.value}"
    assert at_create.value.code == "invalid_output_schema"


def test_a_schema_nested_too_deeply_is_refused_not_a_crash() -> None:
    schema: dict = {}
    for _ in range(2000):
        schema = {"not": schema}
    with pytest.raises(RequestError, match="is nested too deeply to be checked"):
        check_schema(schema)


def test_a_root_schema_keyword_and_rfc_patterns_are_accepted() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "properties": {"code": {"type": "string", "pattern": r"^\p{Lu}{2}-\d{3}$"}}}
    assert check_schema(schema) is schema
    assert parse_answer('{"code": "AB-123"}', schema) == ({"code": "AB-123"}, None)
    assert parse_answer('{"code": "ab-123"}', schema)[1] == (
        "the answer does not match the output schema at `code`: 'ab-123' does not match "
        r"'^\\p{Lu}{2}-\\d{3}$'")


def test_a_tool_schema_that_cannot_be_checked_in_linear_time_leaves_it_to_the_tool() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": r"(?<=a)b"}}}
    check_arguments("t", schema, {"x": "anything"})  # not refused here: the tool checks
    with pytest.raises(ArgumentsError, match="is not of type 'string'"):
        check_arguments("t", {"type": "object", "properties": {"x": {"type": "string"}}}, {"x": 1})


def test_one_validator_per_schema_is_made_and_kept() -> None:
    schema = {"type": "string", "pattern": "^a"}
    assert validator_for(schema) is validator_for(dict(schema))


def test_a_pattern_reached_only_through_a_ref_into_data_is_no_crash() -> None:
    # The metaschema does not look inside `enum`, so `check` lets the pattern by.
    schema = {"type": "object", "enum": [{"pattern": "(?=x)"}],
              "properties": {"x": {"$ref": "#/enum/0"}}}
    output, problem = parse_answer('{"x": "y"}', schema)
    assert output is None and problem is not None
    assert problem.startswith("the answer could not be checked against the output schema: has a "
                              "pattern that cannot be matched in linear time: '(?=x)'"), problem
    check_arguments("t", schema, {"x": "y"})  # left to the tool
