"""The OpenAPI schemas of the event streams (docs/api.md §4): their events and `?tokens=`."""

from __future__ import annotations

from typing import Any

JSON = "application/json"
SSE = "text/event-stream"

SSE_DESCRIPTION = """\
Server-sent events. Step events carry `id` = the step's `seq`:

```
id: 7
event: observe
data: {"agent_id": "…", "seq": 7, "step": 2, "type": "observe", "tool": "calculate", "content": "1113177"}
```

`event` is one of `think`, `act`, `observe`, `final`, `error`, `waiting`, `token`,
`cancelled`, then always a last `done` whose data is `{"agent_id", "status", "stop_reason"}`,
after which the stream closes. `waiting` (data `{"agent_id", "call_id", "tool", "input"}`) is
sent when the agent starts to wait for an approval, and to a client that joins while it
waits; the stream stays open across the wait. With `?tokens=1`, `token` events (data
`{"agent_id", "step", "delta"}`) carry the reply being written, before that iteration's step
events; never persisted nor replayed. `waiting`, `token`, `cancelled` and `done` carry no
`id`. A comment line `: keepalive` is sent while nothing happens."""


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def sse_event(events: list[str], data: dict[str, Any], *, with_id: bool) -> dict[str, Any]:
    """One event of a stream, as SSE parsers see it: `event`, `data` (JSON text), `id`."""
    properties: dict[str, Any] = {
        "event": {"type": "string", "enum": events},
        "data": {"type": "string", "contentMediaType": JSON, "contentSchema": data},
    }
    if with_id:
        properties["id"] = {"type": "string", "pattern": "^[0-9]+$",
                            "description": "The step's `seq`, on step events."}
    return {"type": "object", "required": ["event", "data"], "properties": properties}


TOKEN_EVENT = {"type": "object", "required": ["agent_id", "step", "delta"], "properties": {
    "agent_id": {"type": "string", "format": "uuid"}, "step": {"type": "integer", "minimum": 0},
    "delta": {"type": "string", "description": "The next piece of the reply's text."}}}
AGENT_EVENT = sse_event(
    ["think", "act", "observe", "final", "error", "waiting", "token", "cancelled", "done"],
    {"anyOf": [ref("StepEvent"), ref("WaitingEvent"), ref("EndEvent"), TOKEN_EVENT]},
    with_id=True,
)
TOKENS = {"name": "tokens", "in": "query", "required": False,
          "description": "1: add live `token` events, the replies as the model writes them.",
          "schema": {"type": "string", "enum": ["0", "1", "true", "false"]}}
STATUS_EVENT = sse_event(["status"], ref("StatusEvent"), with_id=False)


def sse_response(description: str, event: dict[str, Any], **extra: Any) -> dict[str, Any]:
    schema = {**event, "description": SSE_DESCRIPTION}
    return {"description": description, "content": {SSE: {"schema": schema}}, **extra}
