"""Structured answers (docs/api.md §6): an `output_schema` checked on create, the final
answer checked against it, and what the model is told when it does not match.

An answer that does not validate is recorded as its FINAL row followed by an ERROR
row saying why; the next iteration shows the model both, so that a resumed attempt
rebuilds the same conversation from the rows alone. After `MAX_RETRIES` such answers
sent back, the next one that does not validate fails the agent (`invalid_output`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema.exceptions import best_match

from jarvis_agents.errors import RequestError
from jarvis_agents.json_schema import SchemaRefused, check, validator_for
from jarvis_agents.lifecycle import Step, StepType

MAX_SCHEMA_BYTES = 16 * 1024
# How many times an answer that does not validate is sent back before the agent FAILS.
MAX_RETRIES = 2

# A model often wraps JSON in a markdown fence even when asked not to.
_FENCED = re.compile(r"^\s*```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


def check_schema(schema: object) -> dict[str, Any]:
    """The `output_schema` of a create, or a RequestError saying what is wrong with it."""
    if not isinstance(schema, dict):
        raise RequestError("`output_schema` must be a JSON Schema object, such as "
                           '{"type": "object", "properties": {"answer": {"type": "string"}}}',
                           code="invalid_output_schema")
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode())
    except UnicodeEncodeError:
        raise RequestError("`output_schema` must be valid Unicode text (no lone surrogates)",
                           code="invalid_output_schema") from None
    except RecursionError:
        raise RequestError("`output_schema` is nested too deeply to be checked",
                           code="invalid_output_schema") from None
    if _has_nul(schema):  # PostgreSQL stores no NUL character in JSON
        raise RequestError("`output_schema` must not contain NUL characters",
                           code="invalid_output_schema")
    if size > MAX_SCHEMA_BYTES:
        raise RequestError(f"`output_schema` is {size} bytes; at most {MAX_SCHEMA_BYTES} "
                           "(16 KiB) are accepted", code="invalid_output_schema")
    try:
        check(schema)  # its patterns too: an answer is matched against them in linear time
    except SchemaRefused as exc:
        raise RequestError(f"`output_schema` {exc}", code="invalid_output_schema") from None
    return schema


def _has_nul(value: object) -> bool:
    """Whether a NUL character is in any key or string of a decoded JSON value."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def parse_answer(answer: str, schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(the answer's value, None) when it is JSON valid against `schema`, else (None, why)."""
    text = answer.strip()
    if (fenced := _FENCED.match(text)) is not None:
        text = fenced["body"].strip()
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"the answer is not JSON ({exc})"
    try:
        error = best_match(validator_for(schema).iter_errors(value))
    except Exception as exc:  # noqa: BLE001 - a `$ref` that resolves nowhere, …
        return None, f"the answer could not be checked against the output schema: {exc}"
    if error is None:
        return value, None
    where = "/".join(str(p) for p in error.absolute_path)
    at = f" at `{where}`" if where else ""
    return None, f"the answer does not match the output schema{at}: {error.message}"


def rejected_answers(history: Sequence[Step]) -> int:
    """How many final answers were sent back so far (each is a FINAL row of a running agent)."""
    return sum(1 for step in history if step.type is StepType.FINAL)


def goal_with_schema(goal: str, schema: Mapping[str, Any] | None) -> str:
    """The goal as the model reads it: with the schema its answer must match, if any."""
    if schema is None:
        return goal
    shown = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return (f"{goal}\n\nGive your final answer as JSON only (no other text) that is valid "
            f"against this JSON Schema:\n{shown}")


def feedback(error: str) -> str:
    """What the model is told of an answer that was sent back; `error` is its ERROR row."""
    return (f"Your final answer was not accepted: {error}. Answer again with JSON only, "
            "valid against the schema.")
