"""The OpenAPI 3.1 document of the API, built with apispec from the pydantic models.

Operations are written out here, next to one another, so the document reads like
docs/api.md §2; the schemas come from `api.schemas`, the same models that validate
requests. The tools enum is filled in from the tools this server actually has, when
they are fixed: with MCP servers configured, tools come and go, and it is left out.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from apispec import APISpec
from flask import Blueprint, Response, jsonify

from api import (
    assistant_schema,
    deletion_schema,
    langgraph_schema,
    responses,
    schedule_schema,
    schemas,
)
from api.auth import public
from api.context import ctx
from api.fork_schema import ForkAgent
from api.params import MAX_SEQ
from api.sse_schema import AGENT_EVENT, STATUS_EVENT, TOKENS, sse_response
from jarvis_agents.lifecycle import AgentStatus

bp = Blueprint("openapi", __name__)

JSON = "application/json"

@bp.get("/api/v1/openapi.json")
@public
def openapi_document() -> Response:
    return jsonify(ctx().openapi)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}, **extra}


def _error(description: str, **extra: Any) -> dict[str, Any]:
    return _json("Error", description, **extra)


LOCATION = {"Location": {"description": "The agent's URL, /api/v1/agents/{id}.", "required": True,
                         "schema": {"type": "string"}}}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again.",
                               "required": True, "schema": {"type": "integer", "minimum": 1}}}
WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "`Bearer`.", "required": True,
                                          "schema": {"type": "string"}}}

COMMON_ERRORS = {
    "401": _error("No API key, or one that is not valid.", headers=WWW_AUTHENTICATE),
    "503": _error("The database or Redis is unreachable; retry later.", headers=RETRY_AFTER),
    "default": _error("Any other error, in the same shape."),
}
NOT_FOUND = {"404": _error("No such agent, or it belongs to another user.")}
BAD_REQUEST = {"400": _error("A malformed parameter, header or body; the message says which.")}

AGENT_ID = {
    "name": "agent_id", "in": "path", "required": True,
    "description": "The agent's id; anything that is not a UUID is a 404.",
    "schema": {"type": "string", "format": "uuid"},
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "description": "A repeat with the same key and body replays the first answer (202, the same agent) and "
                   "creates nothing; the same key with a different body is a 409.",
    "schema": {"type": "string", "minLength": 1, "maxLength": schemas.IDEMPOTENCY_KEY_MAX_CHARS,
               "pattern": schemas.IDEMPOTENCY_KEY_PATTERN},
}
TRACEPARENT = {
    "name": "traceparent", "in": "header", "required": False,
    "description": "A W3C trace context: the agent joins that trace (its `trace_id`), and with "
                   "tracing on its spans are children of the caller's. One that is not valid is "
                   "ignored, as W3C says, and the agent starts a trace of its own.",
    "schema": {"type": "string"},
}
CREATE_BODY = {"required": True, "content": {JSON: {"schema": _ref("CreateAgent")}}}
CREATE_ERRORS = {
    **BAD_REQUEST,
    "404": _error("`thread_id` names no thread of the caller (`thread_not_found`), or "
                  "`assistant` no assistant of theirs (`assistant_not_found`)."),
    "409": _error("The Idempotency-Key was used before with a different body; or an agent of "
                  "the `thread_id` has not ended yet (`thread_busy`)."),
    "413": _error("The body is larger than 64 KiB."),
    "429": _error("Too many agents PENDING or RUNNING at once (JARVIS_MAX_ACTIVE_PER_USER; "
                  "`too_many_active_agents`).", headers=RETRY_AFTER),
}
TOO_MANY_STREAMS = ("too many event streams and long-polls open at once "
                    "(JARVIS_MAX_STREAMS_PER_USER; `too_many_streams`)")
STREAM_ERRORS = {"429": _error(f"The caller has {TOO_MANY_STREAMS}.", headers=RETRY_AFTER)}


def _operations() -> dict[str, dict[str, Any]]:
    public_ = {"security": []}
    return {
        "/api/v1/agents": {
            "post": {
                "operationId": "createAgent", "tags": ["agents"],
                "summary": "Create a PENDING agent and enqueue it.",
                "parameters": [IDEMPOTENCY_KEY, TRACEPARENT], "requestBody": CREATE_BODY,
                "responses": {
                    "202": _json("Agent", "Created and enqueued; or, for a repeat of an "
                                          "Idempotency-Key, the agent it created earlier "
                                          "(nothing new is created).", headers=LOCATION),
                    **CREATE_ERRORS, **COMMON_ERRORS,
                },
            },
            "get": {
                "operationId": "listAgents", "tags": ["agents"],
                "summary": "The caller's agents, newest first, a page at a time.",
                "parameters": [
                    {"name": "status", "in": "query", "required": False,
                     "description": "Only agents in this status (case-insensitive).",
                     "schema": {"type": "string", "enum": [s.value for s in AgentStatus]}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
                    {"name": "cursor", "in": "query", "required": False,
                     "description": "`next_cursor` of the previous page, unchanged.",
                     "schema": {"type": "string", "minLength": 1}},
                    {"name": "thread_id", "in": "query", "required": False,
                     "description": "Only the agents of this thread.",
                     "schema": {"type": "string", "format": "uuid"}},
                    {"name": "caller_id", "in": "query", "required": False,
                     "description": "Only the children of this agent (the agents it called).",
                     "schema": {"type": "string", "format": "uuid"}},
                    {"name": "schedule_id", "in": "query", "required": False,
                     "description": "Only the agents this schedule made.",
                     "schema": {"type": "string", "format": "uuid"}},
                ],
                "responses": {"200": _json("AgentList", "A page of agents."),
                              **BAD_REQUEST, **COMMON_ERRORS},
            },
        },
        "/api/v1/agents/stream": {
            "post": {
                "operationId": "createAgentStream", "tags": ["events"],
                "summary": "Create and enqueue an agent, then stream its events; closing the "
                           "connection cancels the agent within 5 s.",
                "parameters": [IDEMPOTENCY_KEY, TRACEPARENT, TOKENS], "requestBody": CREATE_BODY,
                "responses": {
                    "200": sse_response("The agent's events, from its first step to `done`.",
                                         AGENT_EVENT, headers=LOCATION),
                    **CREATE_ERRORS,
                    "429": _error("Too many agents PENDING or RUNNING at once "
                                  "(JARVIS_MAX_ACTIVE_PER_USER; `too_many_active_agents`), or "
                                  f"{TOO_MANY_STREAMS}: nothing is created.", headers=RETRY_AFTER),
                    **COMMON_ERRORS,
                },
            },
        },
        "/api/v1/agents/{agent_id}": {
            "parameters": [AGENT_ID],
            "get": {
                "operationId": "getAgent", "tags": ["agents"], "summary": "One agent.",
                "parameters": [
                    {"name": "wait", "in": "query", "required": False,
                     "description": "Hold the answer until the agent is terminal or this many "
                                    "seconds pass.",
                     "schema": {"type": "number", "minimum": 0, "maximum": 60}},
                ],
                "responses": {"200": _json("Agent", "The agent."),
                              **BAD_REQUEST, **NOT_FOUND,
                              "429": _error(f"With `wait`: the caller has {TOO_MANY_STREAMS}.",
                                            headers=RETRY_AFTER),
                              **COMMON_ERRORS},
            },
            "delete": {
                "operationId": "cancelAgent", "tags": ["agents"],
                "summary": "Cancel a PENDING, RUNNING or WAITING agent; with `purge=true`, "
                           "delete an ended one.",
                "parameters": [deletion_schema.PURGE],
                "responses": {
                    "200": _json("Agent", "The agent, now CANCELLED."),
                    "204": deletion_schema.PURGED, **BAD_REQUEST, **NOT_FOUND,
                    "409": _error(deletion_schema.AGENT_CONFLICT),
                    **COMMON_ERRORS,
                },
            },
        },
        "/api/v1/agents/{agent_id}/approval": {
            "parameters": [AGENT_ID],
            "post": {
                "operationId": "answerApproval", "tags": ["agents"],
                "summary": "Answer a WAITING agent: approve its tool call (on `input` instead, "
                           "if given) or deny it; it goes on PENDING, under a new attempt.",
                "requestBody": {"required": True,
                                "content": {JSON: {"schema": _ref("Approval")}}},
                "responses": {
                    "202": _json("Agent", "Answered: the agent, PENDING again and queued."),
                    **BAD_REQUEST, **NOT_FOUND,
                    "409": _error("The agent is not WAITING (`not_waiting`: never, no longer, "
                                  "or answered already), or waits for another call "
                                  "(`wrong_call_id`); it is unchanged."),
                    "413": _error("The body is larger than 64 KiB."),
                    "429": _error("Resuming the agent would put the caller over "
                                  "JARVIS_MAX_ACTIVE_PER_USER (`too_many_active_agents`); it "
                                  "goes on waiting.", headers=RETRY_AFTER),
                    **COMMON_ERRORS,
                },
            },
        },
        "/api/v1/agents/{agent_id}/steps": {
            "parameters": [AGENT_ID],
            "get": {
                "operationId": "listSteps", "tags": ["agents"],
                "summary": "The agent's steps in order.",
                "parameters": [
                    {"name": "after", "in": "query", "required": False,
                     "description": "Only steps with a greater `seq`.",
                     "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQ, "default": 0}},
                ],
                "responses": {"200": _json("StepList", "The steps."),
                              **BAD_REQUEST, **NOT_FOUND, **COMMON_ERRORS},
            },
        },
        "/api/v1/agents/{agent_id}/fork": {
            "parameters": [AGENT_ID],
            "post": {
                "operationId": "forkAgent", "tags": ["agents"],
                "summary": "A new agent whose steps 1..after_seq are copies of this ended "
                           "agent's, going on from there (a new thread).",
                "requestBody": {"required": True,
                                "content": {JSON: {"schema": _ref("ForkAgent")}}},
                "responses": {
                    "202": _json("Agent", "The new agent, PENDING, with `forked_from`.",
                                 headers=LOCATION),
                    "400": _error("A malformed body, or `after_seq` not at an iteration's end "
                                  "(`invalid_after_seq`: the message names the nearest valid "
                                  "values)."),
                    **NOT_FOUND,
                    "409": _error("The agent has not ended yet (`agent_not_ended`)."),
                    "429": CREATE_ERRORS["429"],
                    **COMMON_ERRORS,
                },
            },
        },
        "/api/v1/agents/{agent_id}/events": {
            "parameters": [AGENT_ID],
            "get": {
                "operationId": "agentEvents", "tags": ["events"],
                "summary": "Join the agent's event stream: replay, then live. Disconnecting "
                           "does not cancel.",
                "parameters": [
                    {"name": "Last-Event-ID", "in": "header", "required": False,
                     "description": "Resume after this seq (sent by browsers on reconnect); "
                                    "wins over `after`.",
                     "schema": {"type": "string", "pattern": r"^[0-9]{1,19}$"}},
                    {"name": "after", "in": "query", "required": False,
                     "description": "Replay only steps with a greater `seq`.",
                     "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQ}},
                    TOKENS,
                ],
                "responses": {"200": sse_response("The agent's events.", AGENT_EVENT),
                              **BAD_REQUEST, **NOT_FOUND, **STREAM_ERRORS, **COMMON_ERRORS},
            },
        },
        "/api/v1/events": {
            "get": {
                "operationId": "userEvents", "tags": ["events"],
                "summary": "Status changes of all the caller's agents, live only.",
                "responses": {
                    "200": sse_response(
                        "`event: status` with data `{\"agent_id\", \"status\", \"stop_reason\", "
                        "\"step_count\", \"updated_at\"}` for every change, PENDING included.",
                        STATUS_EVENT,
                    ),
                    **STREAM_ERRORS, **COMMON_ERRORS,
                },
            },
        },
        "/api/v1/tools": {
            "get": {
                "operationId": "listTools", "tags": ["agents"],
                "summary": "The tools an agent may use, MCP tools included.",
                "description": "Built-ins and plug-ins, then the tools of each MCP server "
                               "(`JARVIS_MCP_CONFIG`) that a running worker has reached, named "
                               "`<server>__<tool>` with `source` `mcp:<server>`. `input_schema` "
                               "is what a call passes: a react INPUT as that JSON object, or a "
                               "plain string for a tool of one required string parameter.",
                "responses": {"200": _json("ToolList", "The tools."), **COMMON_ERRORS},
            },
        },
        "/api/v1/openapi.json": {
            "get": {
                "operationId": "openapi", "tags": ["meta"], "summary": "This document.",
                **public_,
                "responses": {"200": {"description": "The OpenAPI 3.1 document.",
                                      "content": {JSON: {"schema": {"type": "object"}}}}},
            },
        },
        "/healthz": {
            "get": {
                "operationId": "healthz", "tags": ["meta"], "summary": "Liveness.", **public_,
                "responses": {"200": _json("Health", "The process is up.")},
            },
        },
        "/readyz": {
            "get": {
                "operationId": "readyz", "tags": ["meta"],
                "summary": "Readiness: the database, Redis and the default model's server "
                           "answer (whether it has the model, and models with PENDING agents "
                           "that no live worker takes, are warnings, not required).",
                **public_,
                "responses": {"200": _json("Readiness", "Ready."),
                              "503": _json("Readiness", "Something is down; `checks` says what.")},
            },
        },
        "/metrics": {
            "get": {
                "operationId": "metrics", "tags": ["meta"],
                "summary": "Prometheus metrics of the whole system (docs/api.md §10).",
                **public_,
                "responses": {"200": {"description": "Prometheus text format.",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}}},
            },
        },
    }


def _add_model(spec: APISpec, model: type[Any], *, mode: str) -> dict[str, Any]:
    """Register a pydantic model (and the models it uses) as component schemas."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode=mode)
    for name, definition in schema.pop("$defs", {}).items():
        if name not in spec.components.schemas:
            spec.components.schema(name, definition)
    return schema


def build_openapi(tool_names: list[str]) -> dict[str, Any]:
    spec = APISpec(
        title="jarvis-agents",
        version=_version(),
        openapi_version="3.1.0",
        info={"description": "ReACT agents on a task queue: create them, follow their steps "
                             "live, cancel them. Every error is "
                             "`{\"error\": {\"code\", \"message\"}}`."},
        servers=[{"url": "/"}],
        security=[{"bearerAuth": []}],
        tags=[{"name": "agents"}, {"name": "assistants"}, {"name": "schedules"}, {"name": "events"},
              {"name": "meta"}, {"name": "langgraph"}],
    )
    spec.components.security_scheme(
        "bearerAuth",
        {"type": "http", "scheme": "bearer",
         "description": "An API key from `jarvis-agents users create NAME`."},
    )
    spec.components.security_scheme(*langgraph_schema.SECURITY_SCHEME)
    create = _add_model(spec, schemas.CreateAgent, mode="validation")
    if tool_names:
        items = create["properties"]["tools"]["anyOf"][0]["items"]
        items["enum"] = list(tool_names)
    if tool_names:
        gated = create["properties"]["approve_tools"]["anyOf"][0]["items"]
        gated["enum"] = [*tool_names, "*"]
    spec.components.schema("CreateAgent", create)
    spec.components.schema("Approval", _add_model(spec, schemas.ApprovalBody, mode="validation"))
    spec.components.schema("ForkAgent", _add_model(spec, ForkAgent, mode="validation"))
    for model in responses.RESPONSE_MODELS:
        spec.components.schema(model.__name__, _add_model(spec, model, mode="serialization"))
    for model in assistant_schema.BODIES:
        body = _add_model(spec, model, mode="validation")
        if tool_names:
            body["properties"]["tools"]["anyOf"][0]["items"]["enum"] = list(tool_names)
            body["properties"]["approve_tools"]["anyOf"][0]["items"]["enum"] = [*tool_names, "*"]
        spec.components.schema(model.__name__, body)
    for model in assistant_schema.ANSWERS:
        spec.components.schema(model.__name__, _add_model(spec, model, mode="serialization"))
    schedule = _add_model(spec, schedule_schema.CreateSchedule, mode="validation")
    del schedule["properties"]["thread_id"]  # a schedule keeps its runs' thread with `thread`
    spec.components.schema("CreateSchedule", schedule)
    for model in schedule_schema.ANSWERS:
        spec.components.schema(str(model.model_config["title"]),
                               _add_model(spec, model, mode="serialization"))
    paths = {**_operations(), **assistant_schema.operations(_json, _error, COMMON_ERRORS),
             **schedule_schema.operations(_json, _error, COMMON_ERRORS),
             **deletion_schema.operations(_error, COMMON_ERRORS),
             **langgraph_schema.operations(_error, COMMON_ERRORS)}
    for path, operations in paths.items():
        shared = operations.pop("parameters", None)
        spec.path(path=path, operations=operations, parameters=shared)
    return spec.to_dict()


def _version() -> str:
    try:
        return version("jarvis-agents")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0.0.0"
