"""JSON Schemas (Draft 2020-12) checked with every regular expression matched in linear time.

An `output_schema` is a user's and a tool's `input_schema` an MCP server's, and what they
are matched against is a model's. Python's `re` backtracks: `^(a+)+$` against thirty
characters holds the GIL for seconds, and every agent of the worker with it. So the
validators made here match `pattern`, `patternProperties` and `additionalProperties`
(which consults `patternProperties`) with RE2, whose time is linear in the text, and a
schema is refused (`SchemaRefused`) when one of its patterns is not RE2's (a
backreference, lookaround) or when jsonschema would still match it with `re`:
`unevaluatedProperties` beside `patternProperties`, or a `$schema` below the root (the
subschema would be checked by jsonschema's own classes). README, Structured answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, Protocol

import re2
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

__all__ = ["SchemaRefused", "check", "validator_for"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to whoever gave it, not logged
# What one compiled pattern may hold (RE2's default is 8 MiB): the kept ones are bounded
# by it, and a pattern that needs more is refused as too large.
_OPTIONS.max_mem = 1 << 20

# Key words whose presence anywhere would let jsonschema match with `re` (see the module).
_UNEVALUATED, _PATTERNS = "unevaluatedProperties", "patternProperties"


class SchemaRefused(ValueError):
    """Raised when a schema is not valid Draft 2020-12 or cannot be checked in linear time.

    Its message says what is wrong and where, worded to follow the schema's name:
    "is not a valid JSON Schema (Draft 2020-12) at `type`: …".
    """


class _Regex(Protocol):
    def search(self, text: str) -> object | None: ...


@lru_cache(maxsize=256)
def _regex(pattern: str) -> _Regex:
    return re2.compile(pattern, _OPTIONS)


def _matches(pattern: str, text: str) -> bool:
    try:
        regex = _regex(pattern)
    except re2.error as exc:  # only where a `$ref` led into what `check` took for data
        raise SchemaRefused(f"has a pattern that cannot be matched in linear time: {pattern!r} "
                            f"({_said(exc)})") from None
    return regex.search(text) is not None


def _compiles(pattern: object) -> bool:
    """The `regex` format, as RE2 reads it: what the metaschema checks `pattern` and the
    `patternProperties` keys with."""
    if isinstance(pattern, str):
        _regex(pattern)
    return True


def _format_checker() -> FormatChecker:
    """Draft 2020-12's format checks, with `regex` RE2's."""
    checker = FormatChecker(formats=())
    for name, (check_format, raises) in Draft202012Validator.FORMAT_CHECKER.checkers.items():
        checker.checks(name, raises=raises)(check_format)
    checker.checks("regex", raises=re2.error)(_compiles)
    return checker


_FORMATS = _format_checker()


# --- the keywords that match patterns, with RE2 (as jsonschema's own, which use `re`) ------

def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get(_PATTERNS, {}))
    extras = [key for key in instance
              if key not in properties and not any(_matches(p, key) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


LinearValidator = validators.extend(Draft202012Validator, validators={
    "pattern": _pattern,
    _PATTERNS: _pattern_properties,
    "additionalProperties": _additional_properties,
})


# --- checking a schema, and the validators of the schemas that pass --------------------

def check(schema: Mapping[str, Any]) -> None:
    """SchemaRefused, saying what and where, unless `schema` is Draft 2020-12 whose every
    pattern RE2 can match."""
    try:
        LinearValidator.check_schema(schema, format_checker=_FORMATS)
    except SchemaError as exc:
        at = _at(exc.absolute_path)
        if exc.validator == "format" and exc.validator_value == "regex":
            raise SchemaRefused(
                f"has a pattern{at} that cannot be matched in linear time: {exc.instance!r} "
                f"({_said(exc.cause)}); patterns are RE2's, without backreferences, lookahead "
                "or lookbehind") from None
        raise SchemaRefused(f"is not a valid JSON Schema (Draft 2020-12){at}: {exc.message}") from None
    except RecursionError:
        raise SchemaRefused("is nested too deeply to be checked") from None
    _check_re_free(schema)


# Where a value is in a document: (the parent's trail, its key or index); None is the root.
_Trail = tuple[Any, str | int] | None


def _check_re_free(schema: Mapping[str, Any]) -> None:
    """SchemaRefused where jsonschema would match a pattern with `re` whatever the keywords.

    The whole document is looked at, data included: a `$ref` may point anywhere in it.
    """
    unevaluated: list[str | int] | None = None  # where the first is
    patterned = False
    stack: list[tuple[object, _Trail]] = [(schema, None)]
    while stack:
        value, trail = stack.pop()
        if isinstance(value, dict):
            if trail is not None and isinstance(value.get("$schema"), str):
                raise SchemaRefused(
                    f"declares `$schema`{_at(_path(trail))}; only its root may: every part of "
                    "the schema is read as Draft 2020-12")
            if unevaluated is None and _UNEVALUATED in value:
                unevaluated = _path(trail)
            patterned = patterned or _PATTERNS in value
            stack.extend((item, (trail, key)) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (trail, index)) for index, item in enumerate(value))
    if unevaluated is not None and patterned:
        raise SchemaRefused(
            f"has `unevaluatedProperties`{_at(unevaluated)} beside `patternProperties`, "
            "which cannot be checked in linear time together; use `additionalProperties`")


def _path(trail: _Trail) -> list[str | int]:
    path: list[str | int] = []
    while trail is not None:
        trail, key = trail
        path.append(key)
    return path[::-1]


def validator_for(schema: Mapping[str, Any]) -> Validator:
    """A validator of `schema` whose patterns match in linear time; SchemaRefused when
    `check` refuses it. Made once per schema and kept (the 256 most recently used).

    Its `iter_errors` raises SchemaRefused for a pattern RE2 cannot compile that `check`
    did not see: one a `$ref` reaches inside what is data to the metaschema (an `enum`).
    """
    made = _made(json.dumps(schema, sort_keys=True))
    if isinstance(made, str):
        raise SchemaRefused(made)
    return made


@lru_cache(maxsize=256)
def _made(schema_json: str) -> Validator | str:
    """The validator, or why `check` refused the schema (a refusal is kept too)."""
    schema = json.loads(schema_json)
    try:
        check(schema)
    except SchemaRefused as exc:
        return str(exc)
    # A `$schema` would make jsonschema check the parts that point at the root with its
    # own class; every part is Draft 2020-12 anyway.
    schema.pop("$schema", None)
    return LinearValidator(schema)


def _at(path: Iterable[str | int]) -> str:
    """" at `properties/x/pattern`", or "" for the root."""
    where = "/".join(str(part) for part in path)
    return f" at `{where}`" if where else ""


def _said(cause: BaseException | None) -> str:
    """RE2's reason, as text (its errors carry bytes)."""
    said = cause.args[0] if cause is not None and cause.args else cause
    return said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
