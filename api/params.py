"""Reading a request: the JSON body, path ids, query parameters and headers.

Each reader raises RequestError (a 400 with a sentence naming the parameter) on a
value it cannot use; unknown query parameters are ignored.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from flask import request
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from werkzeug.routing import BaseConverter

from api.fork_schema import FORK_FIELDS, ForkAgent
from api.schemas import (
    CREATE_FIELDS,
    IDEMPOTENCY_KEY_MAX_CHARS,
    IDEMPOTENCY_KEY_PATTERN,
    ApprovalBody,
    CreateAgent,
)
from jarvis_agents import tracing
from jarvis_agents.errors import NotFound, RequestError
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.service import CreateRequest, ForkRequest

_DIGITS = re.compile(r"[0-9]{1,19}")
# A JSON-style number: what any client library writes for a float (1, 2.5, 1e-05).
_NUMBER = re.compile(r"[0-9]{1,20}(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,3})?")
MAX_SEQ = 2**31 - 1
IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def create_request() -> tuple[CreateRequest, str | None]:
    """The validated create body and the Idempotency-Key, if any."""
    body = json_object()
    try:
        parsed = CreateAgent.model_validate(body, strict=True)
    except ValidationError as exc:
        raise RequestError(describe(exc), code="invalid_request") from None
    return parsed.to_request(), idempotency_key()


@dataclass(frozen=True)
class ApprovalRequest:
    """A validated approval body (docs/api.md §7)."""

    call_id: str
    approve: bool
    tool_input: str | None
    reason: str | None


def approval_request() -> ApprovalRequest:
    try:
        parsed = ApprovalBody.model_validate(json_object(), strict=True)
    except ValidationError as exc:
        raise RequestError(_describe_approval(exc), code="invalid_request") from None
    return ApprovalRequest(parsed.call_id, parsed.approve, parsed.input, parsed.reason)


def _describe_approval(exc: ValidationError) -> str:
    sentences = []
    for error in exc.errors(include_url=False)[:5]:
        field = str(error["loc"][0]) if error["loc"] else "body"
        if error["type"] == "extra_forbidden":
            sentences.append(f"unknown field `{field}` (an approval takes "
                             f"{', '.join(ApprovalBody.model_fields)})")
        elif error["type"] == "missing":
            sentences.append(f"`{field}` is missing: send a JSON object such as "
                             '{"call_id": "call_…", "approve": true}')
        else:
            rule = "true or false" if field == "approve" else "text"
            msg = error["msg"].removeprefix("Value error, ")
            sentences.append(f"`{field}` must be {rule} ({msg[:1].lower()}{msg[1:]}), "
                             f"not {_shown(error.get('input'))}")
    return "; ".join(sentences)
def fork_request() -> ForkRequest:
    """The validated body of a fork (docs/api.md §8)."""
    try:
        parsed = ForkAgent.model_validate(json_object(), strict=True)
    except ValidationError as exc:
        raise RequestError(describe(exc, ForkAgent.model_fields, what="a fork"), code="invalid_request") from None
    return parsed.to_request()


def query_thread_id() -> uuid.UUID | None:
    return query_uuid("thread_id", code="invalid_thread_id")


def query_uuid(name: str, *, code: str) -> uuid.UUID | None:
    """The query parameter `name` as a UUID, None if absent; a 400 (`code`) if not a UUID."""
    raw = request.args.get(name)
    if raw is None:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise RequestError(f"`{name}` must be a UUID, not {raw[:40]!r}", code=code) from None


def traceparent() -> str | None:
    """The trace a create joins (docs/api.md §10): the request's own span when the API
    traces (it has honoured a `traceparent` header), else the header's; None: a new one."""
    return tracing.create_traceparent(request.headers.get("traceparent"))


def json_object() -> dict[str, object]:
    mimetype = request.mimetype
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise RequestError(
            f"the body must be JSON sent as Content-Type: application/json, not {mimetype}",
            code="unsupported_content_type",
        )
    raw = request.get_data(cache=False)  # over MAX_CONTENT_LENGTH: a 413
    if not raw.strip():
        raise RequestError("the request body is empty; send a JSON object", code="invalid_json")
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not valid JSON text"
        raise RequestError(f"the request body is not valid JSON: {reason}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError(
            f"the request body must be a JSON object, not {_json_type(body)}", code="invalid_json"
        )
    return body


class AgentIdConverter(BaseConverter):
    """`<agent_id:…>`: any path segment but `stream`, which belongs to POST /agents/stream.

    Not a UUID pattern: a malformed id must reach the view and be "no agent with id …".
    """

    regex = r"(?!stream$)[^/]+"


def path_uuid(raw: str, *, what: str, code: str | None = None) -> uuid.UUID:
    """An id from the path; anything that is not a UUID names no `what` (404, `code`)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound(f"no {what} with id {raw[:80]!r}", code=code) from None


def thread_id(raw: str) -> uuid.UUID:
    return path_uuid(raw, what="thread", code="thread_not_found")


def agent_id(raw: str) -> uuid.UUID:
    return path_uuid(raw, what="agent")


def query_int(name: str, *, default: int, low: int, high: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
    value = int(raw) if _DIGITS.fullmatch(raw) else None
    if value is None or value < low or (high is not None and value > high):
        raise RequestError(
            f"`{name}` must be a whole number {bounds}, not {raw[:40]!r}", code=f"invalid_{name}"
        )
    return value


def query_seconds(name: str, *, high: float) -> float | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    try:
        value = float(raw) if _NUMBER.fullmatch(raw.strip()) else math.nan
    except ValueError:
        value = math.nan
    if not 0 <= value <= high:  # NaN fails every comparison
        raise RequestError(
            f"`{name}` must be a number of seconds between 0 and {high:g}, not {raw[:40]!r}",
            code=f"invalid_{name}",
        )
    return value


def query_status() -> AgentStatus | None:
    raw = request.args.get("status")
    if raw is None:
        return None
    try:
        return AgentStatus(raw.strip().upper())
    except ValueError:
        names = ", ".join(s.value for s in AgentStatus)
        raise RequestError(
            f"`status` must be one of {names}, not {raw[:40]!r}", code="invalid_status"
        ) from None


def query_cursor() -> str | None:
    raw = request.args.get("cursor")
    if raw is not None and not raw:
        raise RequestError("`cursor` is empty; pass back `next_cursor` unchanged",
                           code="invalid_cursor")
    return raw


def query_tokens() -> bool:
    """`?tokens=1` on an agent's event stream: live `token` events too (docs/api.md §6)."""
    return query_flag("tokens", "1 (live tokens) or 0")


def query_flag(name: str, meaning: str) -> bool:
    """A yes-or-no query parameter (`1`/`true` or `0`/`false`), False when absent."""
    raw = request.args.get(name)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in {"0", "1", "true", "false"}:
        raise RequestError(f"`{name}` must be {meaning}, not {raw[:40]!r}",
                           code=f"invalid_{name}")
    return value in {"1", "true"}


def resume_after() -> int:
    """Where an event stream resumes: `Last-Event-ID` (a reconnect), else `?after=`."""
    after = query_int("after", default=0, low=0, high=MAX_SEQ)
    header = request.headers.get("Last-Event-ID")
    if header is not None:
        if not _DIGITS.fullmatch(header.strip()):
            raise RequestError(
                f"Last-Event-ID must be a step's seq (a whole number), not {header[:40]!r}",
                code="invalid_last_event_id",
            )
        return min(int(header.strip()), MAX_SEQ)  # past the last step: nothing to replay
    return after


def idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS or not IDEMPOTENCY_KEY.fullmatch(key):
        raise RequestError(
            f"Idempotency-Key must be 1–{IDEMPOTENCY_KEY_MAX_CHARS} printable ASCII characters "
            "(a UUID is a good choice)",
            code="invalid_idempotency_key",
        )
    return key


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def describe(exc: ValidationError, fields: Iterable[str] = (), *, what: str = "a create") -> str:
    """Pydantic's errors as sentences a person can act on: `the goal must not be blank`."""
    takes = f"{what} takes {', '.join(fields or CreateAgent.model_fields)}"
    return "; ".join(_sentence(error, takes) for error in exc.errors(include_url=False)[:5])


def _sentence(error: ErrorDetails, takes: str) -> str:
    loc, kind, value = error["loc"], error["type"], error.get("input")
    field = str(loc[0]) if loc else "body"
    if kind == "extra_forbidden":
        return f"unknown field `{field}` ({takes})"
    words = {**CREATE_FIELDS, **FORK_FIELDS}
    if field not in words:
        return f"`{field}`: {error['msg'][:1].lower()}{error['msg'][1:]}"
    name, rule = words[field]
    if len(loc) > 1:  # an item of `tools` or `approve_tools`
        name, rule = f"tool name #{int(loc[1]) + 1} in `{field}`", "the name of a tool (GET /api/v1/tools)"
    if kind == "missing":
        example = '{"goal": "What is 2 + 2?"}' if field == "goal" else f'{{"{field}": 0}}'
        return f"{name} is missing: send a JSON object such as {example}"
    if kind == "value_error":  # our own validators, which say what is wrong
        return f"{name} {error['msg'].removeprefix('Value error, ')}"
    if kind == "string_too_short" and field == "goal":
        return f"{name} must not be blank"
    if kind == "string_too_long":
        return f"{name} must be at most {error['ctx']['max_length']} characters, not {len(str(value))}"
    if kind == "too_long":
        return f"{name} may name at most {error['ctx']['max_length']} tools, not {len(value)}"
    if kind == "string_unicode":
        return f"{name} must be valid Unicode text (no lone surrogates)"
    return f"{name} must be {rule}, not {_shown(value)}"


def _shown(value: object) -> str:
    """A refused value as JSON, cut short: `"5"`, `5.0`, `true`, `[[[…`."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = _json_type(value)
    return text if len(text) <= 40 else text[:39] + "…"
