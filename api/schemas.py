"""The HTTP shapes: the create body, validated strictly, and the response models.

The response models are not used to build responses (the domain objects' `to_json`
does that); they describe them for the OpenAPI document, so the two are kept in
step by the tests that validate live responses against the document.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jarvis_agents.answers import check_schema
from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import AgentStatus, StepType, StopReason
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
              description="Ollama model name (default: JARVIS_MODEL)."),
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
        )


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ValueError(f"must be a UUID such as 3f2c8a4e-…, not {value[:40]!r}") from None


class ApprovalBody(BaseModel):
    """The body of `POST /api/v1/agents/{id}/approval` (CONTRACT §7)."""

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


# --- responses (documentation) ---------------------------------------------------------


class WaitingFor(BaseModel):
    """The tool call a WAITING agent waits on (CONTRACT §7)."""

    model_config = ConfigDict(title="WaitingFor")

    call_id: str
    tool: str
    input: str
    since: datetime


class ForkedFrom(BaseModel):
    model_config = ConfigDict(title="ForkedFrom")

    agent_id: UUID
    seq: int = Field(ge=0, description="Its steps 1..seq are copies of that agent's.")


class Context(BaseModel):
    """The earlier turns of its thread the model saw (JARVIS_CONTEXT_CHARS)."""

    model_config = ConfigDict(title="Context")

    turns: int = Field(ge=0, description="Earlier goals and answers given to the model.")
    left_out: int = Field(ge=0, description="The oldest ones left out to fit the budget; the "
                                            "model is told their goals in one short note.")


class Agent(BaseModel):
    """An agent (CONTRACT §2)."""

    model_config = ConfigDict(title="Agent")

    id: UUID
    goal: str
    status: AgentStatus
    model: str
    max_steps: int
    step_count: int
    tools: list[str] | None = Field(description="The tools it may use; null means all.")
    webhook_url: str | None
    final_answer: str | None = Field(None, description="Present only when COMPLETED.")
    error: str | None = Field(None, description="Present only when FAILED.")
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    updated_at: datetime | None
    duration_ms: int | None
    stop_reason: StopReason | None = Field(description="null while PENDING, RUNNING or WAITING.")
    approve_tools: list[str] | None = Field(
        description="The tools whose calls wait for an approval (\"*\": all); null: none "
                    "beyond JARVIS_APPROVE_TOOLS.")
    waiting_for: WaitingFor | None = Field(description="The call it waits on while WAITING, else null.")
    mode: Literal["auto", "native", "react"] = Field(
        description="The mode asked for until the agent starts, then the one in use.")
    usage: Usage = Field(description="Summed over the agent's model calls so far.")
    output_schema: dict[str, Any] | None = Field(description="As given at create, or null.")
    output: Any = Field(None, description="The parsed final answer when COMPLETED with an "
                                          "output_schema; else null.")
    thread_id: UUID = Field(description="Its thread: its first agent's id (its own when it "
                                        "starts one).")
    parent_id: UUID | None = Field(description="The previous agent of its thread, or the agent "
                                               "it was forked from.")
    forked_from: ForkedFrom | None
    context: Context | None = Field(description="What its thread gave its model; null when "
                                                "nothing.")
    trace_id: str = Field(
        pattern="^[0-9a-f]{32}$",
        description="The agent's trace (W3C trace id, 32 hex digits): the create's, or the "
                    "one its `traceparent` header named; every span of the agent is in it "
                    "when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT), and it is given "
                    "whether or not traces are exported.",
    )


class Usage(BaseModel):
    """Tokens read and written and model calls made, as the model servers counted them."""

    model_config = ConfigDict(title="Usage")

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    model_calls: int = Field(ge=0)


class StepUsage(BaseModel):
    """The tokens of the model call that produced the step's iteration."""

    model_config = ConfigDict(title="StepUsage")

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class AgentList(BaseModel):
    model_config = ConfigDict(title="AgentList")

    agents: list[Agent]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


class Step(BaseModel):
    """One persisted step of an agent (CONTRACT §2)."""

    model_config = ConfigDict(title="Step")

    seq: int = Field(ge=1, description="1, 2, 3 … per agent, no gaps.")
    step: int = Field(ge=0, description="The ReACT iteration, from 0.")
    type: StepType
    tool: str | None
    content: str
    created_at: datetime
    duration_ms: int | None
    call_id: str | None = Field(
        description="On ACT and OBSERVE: pairs a tool call with its result (the model's own id "
                    "in native mode, else one the system makes); null on other steps.")
    usage: StepUsage | None = Field(
        description="On the first step of an iteration: its model call's tokens; else null.")


class StepList(BaseModel):
    model_config = ConfigDict(title="StepList")

    steps: list[Step]


class Tool(BaseModel):
    model_config = ConfigDict(title="Tool")

    name: str = Field(description="What ACTION names; an MCP tool's is `<server>__<tool>`.")
    description: str
    source: str = Field(
        description="`builtin`, `plugin`, or `mcp:<server>` for a tool of that MCP server.",
        pattern=r"^(builtin|plugin|mcp:[A-Za-z0-9_-]+)$",
    )
    input_schema: dict[str, Any] = Field(
        description="The tool's arguments as a JSON Schema object: what a call passes, as the "
                    "JSON object of a react INPUT or a native call's arguments.",
    )


class ToolList(BaseModel):
    model_config = ConfigDict(title="ToolList")

    tools: list[Tool]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(title="ErrorDetail")

    code: str = Field(description="A stable snake_case identifier, e.g. `not_found`.")
    message: str = Field(description="A sentence a person can act on.")


class Error(BaseModel):
    """Every error response: `{"error": {"code", "message"}}`."""

    model_config = ConfigDict(title="Error")

    error: ErrorDetail


class Health(BaseModel):
    model_config = ConfigDict(title="Health")

    status: Literal["ok"]


class Check(BaseModel):
    model_config = ConfigDict(title="Check")

    ok: bool
    error: str | None


class ModelCheck(Check):
    model_config = ConfigDict(title="ModelCheck")

    model: str = Field(description="The default model (JARVIS_MODEL).")
    model_pulled: bool = Field(
        description="Whether its server has it (pulled on Ollama, listed by an OpenAI-compatible "
                    "server); reported, and a warning when not, never a 503.")


class Checks(BaseModel):
    """The database, Redis, and the server of the default model: `ollama`, or `openai` when
    the default model is an `openai/…` one (or `JARVIS_PROVIDER` is `openai`)."""

    model_config = ConfigDict(title="Checks")

    database: Check
    redis: Check
    ollama: ModelCheck | None = Field(None, description="When the default model is Ollama's.")
    openai: ModelCheck | None = Field(
        None, description="When the default model is the OpenAI-compatible server's.")


class McpServerStatus(BaseModel):
    model_config = ConfigDict(title="McpServerStatus")

    ok: bool
    error: str | None
    tools: int = Field(ge=0, description="How many tools it lists.")


class McpReadiness(BaseModel):
    """Only when JARVIS_MCP_CONFIG names servers; a server down is a warning, not a 503."""

    model_config = ConfigDict(title="McpReadiness")

    servers: dict[str, McpServerStatus]
    warnings: list[str]


class Readiness(BaseModel):
    model_config = ConfigDict(title="Readiness")

    status: Literal["ready", "unavailable"]
    checks: Checks
    warnings: list[str] = Field(
        description="What works but will fail agents, e.g. a default model that is not pulled; "
                    "never a 503.")
    mcp: McpReadiness | None = Field(
        default=None, description="The MCP servers, as the workers report them (when configured).")


# --- server-sent events (documentation) ----------------------------------------------


class StepEvent(BaseModel):
    """The data of a `think`, `act`, `observe`, `final` or `error` event."""

    model_config = ConfigDict(title="StepEvent")

    agent_id: UUID
    seq: int = Field(ge=1)
    step: int = Field(ge=0)
    type: Literal["think", "act", "observe", "final", "error"]
    tool: str | None
    content: str
    created_at: datetime | None = None
    duration_ms: int | None = None
    call_id: str | None = Field(None, description="On `act` and `observe`: pairs a tool call "
                                                  "with its result.")
    usage: StepUsage | None = Field(None, description="On the first step of an iteration: its "
                                                     "model call's tokens.")


class WaitingEvent(BaseModel):
    """The data of a `waiting` event: the agent waits for an approval of this call."""

    model_config = ConfigDict(title="WaitingEvent")

    agent_id: UUID
    call_id: str
    tool: str
    input: str


class EndEvent(BaseModel):
    """The data of `cancelled` and of the last event, `done`."""

    model_config = ConfigDict(title="EndEvent")

    agent_id: UUID
    status: AgentStatus
    stop_reason: StopReason | None


class StatusEvent(BaseModel):
    """The data of a `status` event on the user's stream."""

    model_config = ConfigDict(title="StatusEvent")

    agent_id: UUID
    status: AgentStatus
    stop_reason: StopReason | None
    step_count: int
    updated_at: datetime


RESPONSE_MODELS: tuple[type[BaseModel], ...] = (
    Agent, AgentList, Step, StepList, Tool, ToolList, Error, Health, Readiness,
    StepEvent, EndEvent, StatusEvent, WaitingEvent,
)
