"""The HTTP request bodies, validated strictly: the create's and the approval's (the
fork's is in api/fork_schema.py). The responses' shapes are in api/responses.py."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jarvis_agents.answers import check_schema
from jarvis_agents.config import PROVIDERS
from jarvis_agents.errors import RequestError
from jarvis_agents.service import CreateRequest
from jarvis_agents.webhooks.addresses import parse_webhook_url

GOAL_MAX_CHARS = 4000
MODEL_MAX_CHARS = 200
MAX_TOOLS = 20
WEBHOOK_URL_MAX_CHARS = 2000
IDEMPOTENCY_KEY_MAX_CHARS = 255
# Printable ASCII, no surrounding spaces (HTTP would strip them anyway).
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$"

# JSON Schema patterns, understood alike by Python's `re` (what the property-based tests
# run) and by ECMAScript: no NUL, at least one non-space. They are for the document
# only (`json_schema_extra`): the validators below check the same, and refuse in a
# sentence rather than by quoting a regular expression.
NOT_BLANK = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
NO_BLANKS = r"^[^\s\u0000]+$"
# Only the scheme, for the document: the URL itself is checked by a URL parser
# (webhooks/addresses.py), which takes any valid port and IPv6 literals.
HTTP_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://"
# An assistant's id (a UUID) or name (a-z, 0-9, _ and -): what `assistant` names.
ASSISTANT_REF = r"^[A-Za-z0-9_-]{1,64}$"


# Each create field as a refusal names it, and what it must be (api.params).
CREATE_FIELDS = {
    "goal": ("the goal", f"text of 1 to {GOAL_MAX_CHARS} characters"),
    "max_steps": ("`max_steps`", "a whole number from 1 to 50"),
    "model": ("`model`", "a model's name without spaces, such as llama3.2 or openai/gpt-4o-mini"),
    "tools": ("`tools`", 'a list of tool names, such as ["calculate"] (GET /api/v1/tools lists them)'),
    "webhook_url": ("`webhook_url`", "an http(s) URL"),
    "approve_tools": ("`approve_tools`",
                      'a list of tool names, or ["*"] for all, whose calls wait for an approval'),
    "mode": ("`mode`", "`auto`, `native` or `react`"),
    "output_schema": ("`output_schema`", 'a JSON Schema object, such as {"type": "object"}'),
    "thread_id": ("`thread_id`", "the id of a thread (its first agent's id), a UUID"),
    "assistant": ("`assistant`", "the id or name of one of your assistants (GET /api/v1/assistants)"),
}
APPROVAL_INPUT_MAX_CHARS = 16000
APPROVAL_REASON_MAX_CHARS = 1000
CALL_ID_MAX_CHARS = 64


def _storable(value: str) -> str:
    # PostgreSQL refuses NUL in text and UTF-8 has no lone surrogates: both would
    # otherwise surface as a 500 from the database driver.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


class CreateAgent(BaseModel):
    """The body of `POST /api/v1/agents` and `POST /api/v1/agents/stream`."""

    # Python's `re` for patterns: the same dialect the property-based tests generate from.
    model_config = ConfigDict(
        extra="forbid", strict=True, title="CreateAgent", regex_engine="python-re"
    )

    goal: Annotated[
        str,
        Field(min_length=1, max_length=GOAL_MAX_CHARS, json_schema_extra={"pattern": NOT_BLANK},
              description="What the agent should achieve; 1–4000 characters, not blank."),
    ]
    max_steps: Annotated[
        int | None,
        Field(ge=1, le=50, description="ReACT iterations allowed (default: JARVIS_MAX_STEPS)."),
    ] = None
    model: Annotated[
        Annotated[str, Field(json_schema_extra={"pattern": NO_BLANKS})] | None,
        Field(min_length=1, max_length=MODEL_MAX_CHARS,
              description="The model: NAME (the JARVIS_PROVIDER's), ollama/NAME or openai/NAME "
                          "(default: JARVIS_MODEL)."),
    ] = None
    tools: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
        Field(max_length=MAX_TOOLS,
              description="Names of the tools the agent may use (default: all of them)."),
    ] = None
    webhook_url: Annotated[
        Annotated[str, Field(json_schema_extra={"pattern": HTTP_URL})] | None,
        Field(min_length=1, max_length=WEBHOOK_URL_MAX_CHARS, json_schema_extra={"format": "uri"},
              description="An http(s) URL that receives the agent JSON when it ends (headers "
                          "X-Jarvis-Event, X-Jarvis-Signature and Standard Webhooks' webhook-id, "
                          "webhook-timestamp, webhook-signature); needs JARVIS_WEBHOOK_SECRET on "
                          "the server. Its host must resolve to public addresses only, unless "
                          "the operator allows private ones."),
    ] = None
    mode: Annotated[
        Literal["auto", "native", "react"] | None,
        Field(description="How the agent speaks to its model: `native` tool calling, the `react` "
                          "text protocol, or `auto` (the default): native where the model "
                          "supports tool calling."),
    ] = None
    output_schema: Annotated[
        dict[str, Any] | None,
        Field(description="A JSON Schema (Draft 2020-12, at most 16 KiB) the final answer must "
                          "be JSON valid against; the parsed answer is the agent's `output`."),
    ] = None

    approve_tools: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
        Field(max_length=MAX_TOOLS,
              description='Tools whose calls wait for a person\'s approval (POST '
                          '/api/v1/agents/{id}/approval) before they run; "*" for all. '
                          'JARVIS_APPROVE_TOOLS adds to it.'),
    ] = None

    thread_id: Annotated[
        Annotated[str, Field(json_schema_extra={"format": "uuid"})] | None,
        Field(description="Continue this thread (its first agent's id): the model sees every "
                          "earlier goal and answer of the thread first. Without it, the agent "
                          "starts a thread of its own."),
    ] = None

    assistant: Annotated[
        Annotated[str, Field(json_schema_extra={"pattern": ASSISTANT_REF})] | None,
        Field(min_length=1, max_length=64,
              description="The id or name of one of your assistants: the agent takes its current "
                          "version's configuration, the fields given here winning. Default: "
                          "`agent`, the settings' defaults."),
    ] = None

    @field_validator("assistant")
    @classmethod
    def _assistant_is_a_ref(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(ASSISTANT_REF, value):
            raise ValueError("must be an assistant's id or name (letters, digits, _ and -), "
                             "such as researcher")
        return value

    @field_validator("thread_id")
    @classmethod
    def _thread_is_uuid(cls, value: str | None) -> str | None:
        return value if value is None else str(_uuid(value))

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, value: str) -> str:
        if not re.search(r"\S", value):
            raise ValueError("must not be blank")
        return _storable(value)

    @field_validator("model")
    @classmethod
    def _model_has_no_blanks(cls, value: str | None) -> str | None:
        if value is not None and re.search(r"\s", value):
            raise ValueError("must not contain spaces")
        if value is not None and value.endswith("/") and value[:-1] in PROVIDERS:
            example = "gpt-4o-mini" if value == "openai/" else "llama3.2"
            raise ValueError(f"names no model after '{value}', such as {value}{example}")
        return value if value is None else _storable(value)

    @field_validator("tools", "approve_tools")
    @classmethod
    def _tools_storable(cls, value: list[str] | None) -> list[str] | None:
        return value if value is None else [_storable(name) for name in value]

    @field_validator("webhook_url")
    @classmethod
    def _webhook_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _storable(value)
        try:
            parse_webhook_url(value)
        except RequestError as exc:
            raise ValueError(str(exc).removeprefix("webhook_url ")) from None
        return value

    @field_validator("output_schema")
    @classmethod
    def _output_schema_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return check_schema(value)
        except RequestError as exc:
            raise ValueError(str(exc).removeprefix("`output_schema` ")) from None

    def to_request(self) -> CreateRequest:
        return CreateRequest(
            goal=self.goal,
            max_steps=self.max_steps,
            model=self.model,
            tools=tuple(self.tools) if self.tools is not None else None,
            webhook_url=self.webhook_url,
            approve_tools=tuple(self.approve_tools) if self.approve_tools is not None else None,
            mode=self.mode,
            output_schema=self.output_schema,
            thread_id=UUID(self.thread_id) if self.thread_id is not None else None,
            assistant=self.assistant,
        )


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ValueError(f"must be a UUID such as 3f2c8a4e-…, not {value[:40]!r}") from None


class ApprovalBody(BaseModel):
    """The body of `POST /api/v1/agents/{id}/approval` (docs/api.md §7)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Approval",
                              regex_engine="python-re")

    call_id: Annotated[str, Field(min_length=1, max_length=CALL_ID_MAX_CHARS,
                                  description="The call waited on: the agent's `waiting_for.call_id`.")]
    approve: Annotated[bool, Field(description="true runs the call; false denies it.")]
    input: Annotated[
        str | None,
        Field(max_length=APPROVAL_INPUT_MAX_CHARS,
              description="With approve: the input to run the tool on instead of the model's."),
    ] = None
    reason: Annotated[
        str | None,
        Field(max_length=APPROVAL_REASON_MAX_CHARS,
              description="Why; a denial's observation is `denied: <reason>`."),
    ] = None

    @field_validator("call_id", "input", "reason")
    @classmethod
    def _text_storable(cls, value: str | None) -> str | None:
        return value if value is None else _storable(value)
