"""Tool arguments: INPUT read as JSON or as the one string parameter, checked against the
schema, mismatches told to the model; plug-ins with and without schemas, and their source."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.tools import plugins as plugins_module
from jarvis_agents.tools.arguments import (
    ArgumentsError,
    arguments_from_text,
    check_arguments,
    example,
)
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.registry import ToolRegistry

ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
READ = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "lines": {"type": "integer", "minimum": 1}},
    "required": ["path"],
}


@dataclass
class SchemaTool:
    """A tool of the new shape: a dict of arguments."""

    name: str = "add"
    description: str = "Add two numbers."
    input_schema: dict[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.input_schema = self.input_schema or ADD

    def run(self, arguments: Mapping[str, Any], *, context: ToolContext) -> str:
        return str(arguments["a"] + arguments["b"])


@dataclass
class OldTextTool:
    """A plug-in written before schemas: one string."""

    name: str = "shout"
    description: str = "Shout the text."
    input_hint: str = "the text to shout"

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        return tool_input.upper()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[ToolRegistry]:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    with ToolRegistry([SchemaTool(), OldTextTool(),
                       SchemaTool("read", "Read a file.", READ)], settings=settings) as made:
        yield made


def test_a_json_object_input_is_the_arguments() -> None:
    assert arguments_from_text("add", ADD, ' {"a": 1, "b": 2} ') == {"a": 1, "b": 2}


def test_any_other_input_is_the_one_required_string() -> None:
    assert arguments_from_text("read", READ, " /etc/hosts\n") == {"path": "/etc/hosts"}
    # Text that only looks like JSON is still text.
    assert arguments_from_text("read", READ, "{not json") == {"path": "{not json"}


def test_a_tool_of_several_required_arguments_shows_the_json_it_expects() -> None:
    with pytest.raises(ArgumentsError) as caught:
        arguments_from_text("srv__add", ADD, "2 and 3")
    assert str(caught.value) == (
        "Tool 'srv__add' takes a JSON object as INPUT, not plain text. "
        'Write INPUT: {"a": integer, "b": integer}'
    )


def test_an_empty_input_calls_a_tool_without_required_arguments() -> None:
    assert arguments_from_text("noop", {"type": "object", "properties": {}}, "  ") == {}


def test_a_mismatch_says_where_and_what_was_expected() -> None:
    with pytest.raises(ArgumentsError) as caught:
        check_arguments("read", READ, {"path": "/x", "lines": 0})
    assert str(caught.value) == (
        "Invalid arguments for tool 'read' at lines: 0 is less than the minimum of 1. "
        'Write INPUT as JSON like {"path": string, "lines"?: integer}'
    )
    with pytest.raises(ArgumentsError, match="'b' is a required property"):
        check_arguments("add", ADD, {"a": 1})
    check_arguments("add", ADD, {"a": 1, "b": 2})  # fits: no error


def test_a_schema_that_is_not_valid_leaves_the_checking_to_the_tool() -> None:
    check_arguments("odd", {"type": "object", "properties": {"x": {"type": 12}}}, {"x": 1})


def test_example_shows_enums_arrays_and_nested_objects() -> None:
    schema = {"type": "object", "properties": {
        "unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items": {"type": "string"}},
        "at": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
    }, "required": ["unit"]}
    assert example(schema) == '{"unit": "c" | "f", "tags"?: [string, …], "at"?: {"lat": number}}'


def test_the_registry_turns_each_mismatch_into_an_observation(registry: ToolRegistry) -> None:
    assert registry.call_text("add", '{"a": 2, "b": 40}').content == "42"
    assert registry.call("add", {"a": 2, "b": 40}).content == "42"  # native: a dict, one path
    wrong = registry.call("add", {"a": "2", "b": 40})
    assert not wrong.ok and wrong.tool == "add"
    assert wrong.content.startswith("Invalid arguments for tool 'add' at a: '2' is not of type 'integer'")
    plain = registry.call_text("add", "2 + 40")
    assert not plain.ok and 'Write INPUT: {"a": integer, "b": integer}' in plain.content
    too_few = registry.call_text("read", '{"path": "notes.txt", "lines": 0}')
    assert too_few.content.startswith("Invalid arguments for tool 'read' at lines: 0 is less than")


def test_an_old_text_plug_in_takes_text_or_its_one_parameter(registry: ToolRegistry) -> None:
    assert registry.call_text("shout", "hello").content == "HELLO"
    assert registry.call_text("shout", '{"input": "json"}').content == "JSON"
    assert registry.call("shout", {"input": "dict"}).content == "DICT"
    assert registry.call("shout", {"text": "x"}).content == (
        "Invalid arguments for tool 'shout': Additional properties are not allowed ('text' was "
        'unexpected). Write INPUT as JSON like {"input": string}')


def test_plug_ins_list_with_source_plugin_and_their_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class EntryPoint:
        def __init__(self, name: str, value: object) -> None:
            self.name, self.value = name, value

        def load(self) -> object:
            return self.value

    plugins = [EntryPoint("add", SchemaTool), EntryPoint("shout", OldTextTool()),
               EntryPoint("broken", SchemaTool("bad", "A bad schema.", {"type": "string"}))]
    monkeypatch.setattr(plugins_module.metadata, "entry_points", lambda **_: plugins)
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    with ToolRegistry.default(settings) as registry:
        listed = {tool["name"]: tool for tool in registry.describe()}
    assert list(listed) == ["calculate", "getTime", "getWeather", "search", "add", "shout"]
    assert listed["calculate"]["source"] == "builtin"
    assert listed["add"] == {"name": "add", "description": "Add two numbers.", "source": "plugin",
                             "input_schema": ADD}
    assert listed["shout"]["source"] == "plugin"
    assert listed["shout"]["input_schema"] == {
        "type": "object", "properties": {"input": {"type": "string", "description": "the text to shout"}},
        "required": ["input"], "additionalProperties": False,
    }
