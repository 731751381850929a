"""A tool call's arguments: read from the text contract's INPUT, checked against the schema.

docs/api.md §7: an INPUT that is a JSON object is the tool's arguments; any other INPUT is
the value of the tool's one required string parameter. Native tool calling hands the
registry a dict directly; both then pass through `check_arguments`, so a mismatch reads
the same to the model in either mode. Every message here is written for the model: it
says what was wrong and shows the JSON the tool expects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match

from jarvis_agents.json_schema import SchemaRefused, validator_for

MAX_SHOWN_ENUM = 8


class ArgumentsError(ValueError):
    """Raised when a call's arguments do not fit the tool; its message is the observation."""


def arguments_from_text(tool: str, schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The arguments an INPUT stands for; ArgumentsError when a plain string cannot be one."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    parameter = text_parameter(schema)
    if parameter is not None:
        return {parameter: text.strip()}
    if not stripped and not schema.get("required"):
        return {}  # a tool of no required arguments, called with an empty INPUT
    raise ArgumentsError(
        f"Tool '{tool}' takes a JSON object as INPUT, not plain text. "
        f"Write INPUT: {example(schema)}"
    )


def text_parameter(schema: Mapping[str, Any]) -> str | None:
    """The one string parameter a plain INPUT fills: the only required one, or the only
    one at all when none is required; None when a string cannot stand for the call."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    required = [name for name in schema.get("required") or () if isinstance(name, str)]
    candidates = required if required else list(properties)
    if len(candidates) != 1:
        return None
    kind = (properties.get(candidates[0]) or {}).get("type", "string")
    return candidates[0] if kind == "string" or (isinstance(kind, list) and "string" in kind) else None


def check_arguments(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any], *,
    retry: str = "Write INPUT as JSON like",
) -> None:
    """ArgumentsError, saying what is wrong and what is expected, unless they validate.

    `retry` introduces the example of the arguments expected, in the words of the
    caller's mode (the text contract's INPUT by default).
    """
    try:
        error = best_match(validator_for(schema).iter_errors(dict(arguments)))
    except SchemaRefused:
        # Not valid itself, or not checkable in linear time (a lookahead, …): the tool
        # checks its input. The model's arguments never meet a backtracking matcher.
        return
    if error is None:
        return
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    at = f" at {where.lstrip('.')}" if where else ""
    raise ArgumentsError(
        f"Invalid arguments for tool '{tool}'{at}: {error.message}. {retry} {example(schema)}"
    )


def schema_problem(schema: object) -> str | None:
    """Why `schema` cannot be a tool's input schema, or None when it can."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "its input_schema is not a JSON Schema object ({\"type\": \"object\", …})"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"its input_schema is not valid JSON Schema: {exc.message}"
    return None


def example(schema: Mapping[str, Any]) -> str:
    """A compact picture of the JSON a schema expects: {"a": integer, "note"?: string}."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "{}"
    required = set(schema.get("required") or ())
    fields = []
    for name, spec in properties.items():
        mark = "" if name in required else "?"
        fields.append(f"{json.dumps(name)}{mark}: {_kind(spec if isinstance(spec, Mapping) else {})}")
    return "{" + ", ".join(fields) + "}"


def _kind(spec: Mapping[str, Any]) -> str:
    if "enum" in spec and isinstance(spec["enum"], list):
        shown = " | ".join(json.dumps(v) for v in spec["enum"][:MAX_SHOWN_ENUM])
        return shown + (" | …" if len(spec["enum"]) > MAX_SHOWN_ENUM else "")
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        return f"[{_kind(items) if isinstance(items, Mapping) else 'any'}, …]"
    if kind == "object" and isinstance(spec.get("properties"), Mapping):
        return example(spec)
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    for union in ("anyOf", "oneOf"):
        if isinstance(spec.get(union), list):
            return " | ".join(_kind(s) for s in spec[union] if isinstance(s, Mapping))
    return str(kind) if kind else "any"
