"""The HTTP responses' shapes, for the OpenAPI document (api/openapi.py): what the
domain objects' `to_json` and the SSE frames give, described for clients. They are
not used to build responses; tests check the two agree (docs/api.md §2, §4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from jarvis_agents.lifecycle import AgentStatus, StepType, StopReason


class WaitingFor(BaseModel):
    """The tool call a WAITING agent waits on (docs/api.md §7)."""

    model_config = ConfigDict(title="WaitingFor")

    call_id: str
    tool: str
    input: str
    since: datetime


class WaitingForAgents(BaseModel):
    """The agents a WAITING caller waits on: its children (README, Agents that call agents)."""

    model_config = ConfigDict(title="WaitingForAgents")

    kind: Literal["agents"]
    agent_ids: list[UUID] = Field(description="Its children it waits on, until all have ended.")
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
    """An agent (docs/api.md §2)."""

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
    waiting_for: WaitingFor | WaitingForAgents | None = Field(
        description="While WAITING: the call a person must approve, or the agents it waits "
                    "on; else null.")
    mode: Literal["auto", "native", "react"] = Field(
        description="The mode asked for until the agent starts, then the one in use.")
    usage: Usage = Field(description="Summed over the agent's model calls so far.")
    usage_total: Usage = Field(description="Its usage plus that of every descendant that has "
                                           "ended (the agents it called, and theirs).")
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
    assistant_id: UUID | None = Field(description="The assistant whose configuration it took.")
    assistant_version: int | None = Field(description="The version of that assistant it ran.")
    caller_id: UUID | None = Field(description="The agent whose call made it, or null.")
    caller_call_id: str | None = Field(None, description="The call of its caller that made it "
                                                         "(an ACT step's `call_id`), or null.")
    root_id: UUID = Field(description="The first caller of its chain (its own id when no agent "
                                      "called it).")
    depth: int = Field(ge=0, description="0 for an agent a client made; a child one more than "
                                         "its caller.")
    schedule_id: UUID | None = Field(description="The schedule that made it, or null.")
    scheduled_for: datetime | None = Field(description="The due time it was made for, or null.")
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
    """One persisted step of an agent (docs/api.md §2)."""

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
        description="What works but will fail or strand agents, e.g. a default model that is "
                    "not pulled, or a model with PENDING agents that no live worker takes "
                    "(routing by model); never a 503.")
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
    """The data of a `waiting` event: the agent waits for an approval of this call, or
    (with `agent_ids`) on its children."""

    model_config = ConfigDict(title="WaitingEvent")

    agent_id: UUID
    call_id: str | None = Field(description="The call to approve; null while it waits on "
                                            "its children.")
    tool: str | None
    input: str | None
    agent_ids: list[UUID] | None = Field(None, description="The children it waits on, until "
                                                           "all have ended; else absent.")


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
