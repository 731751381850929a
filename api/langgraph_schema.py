"""The `/langgraph` paths in the OpenAPI document (README, LangGraph SDK).

Their bodies and answers are LangGraph's Agent Server's (the shapes of
`langgraph_sdk.schema`), so they are described here by what they do, not re-specified
field by field; the key comes in `x-api-key` (or `Authorization: Bearer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SECURITY_SCHEME = ("langgraphApiKey", {
    "type": "apiKey", "in": "header", "name": "x-api-key",
    "description": "The API key, as LangGraph's SDK sends it (`get_client(api_key=…)`).",
})
SECURITY = [{SECURITY_SCHEME[0]: []}, {"bearerAuth": []}]
OBJECT = {"type": "object"}
ARRAY = {"type": "array", "items": OBJECT}
SSE = {"text/event-stream": {"schema": {"type": "string"}}}


def operations(error: Callable[..., dict[str, Any]],
               common: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`error` and `common` are api/openapi.py's helper and common answers."""
    thread = {"name": "thread_id", "in": "path", "required": True,
              "description": "A thread's id; one that is not yours is a 404.",
              "schema": {"type": "string"}}
    run = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
    body = {"required": False, "content": {"application/json": {"schema": OBJECT}}}
    missing = {"404": error("No such thread, run or assistant of yours.")}
    bad = {"400": error("A body LangGraph's server would refuse, or a field not served here "
                        "(the message says which).")}
    busy = {"409": error("The thread has a run in progress (`multitask_strategy` \"reject\"), "
                         "or nothing to resume or cancel.")}

    def op(name: str, summary: str, answer: dict[str, Any], *extra: dict[str, Any],
           params: tuple[dict[str, Any], ...] = (), with_body: bool = False,
           status: str = "200") -> dict[str, Any]:
        responses: dict[str, Any] = {status: answer}
        for more in extra:
            responses.update(more)
        operation = {"operationId": name, "tags": ["langgraph"], "summary": summary,
                     "security": SECURITY, "parameters": list(params),
                     "responses": {**responses, **common}}
        if with_body:
            operation["requestBody"] = body
        return operation

    def json_(description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    stream = {"description": "SSE: `metadata`, the modes' events, `end`.", "content": SSE}
    values = json_("The thread's values after the run.", OBJECT)
    one_run = json_("The run.", OBJECT)
    runs = "/langgraph/threads/{thread_id}/runs"
    return {
        "/langgraph/assistants/search": {"post": op(
            "langgraphSearchAssistants", "Your assistants (graph_id \"agent\").",
            json_("Assistants.", ARRAY), bad, with_body=True)},
        "/langgraph/assistants/{assistant_id}": {"get": op(
            "langgraphGetAssistant", "One of your assistants, by id or name.",
            json_("The assistant.", OBJECT), missing,
            params=({"name": "assistant_id", "in": "path", "required": True,
                     "schema": {"type": "string"}},))},
        "/langgraph/threads": {"post": op(
            "langgraphCreateThread", "A thread, before its first run.",
            json_("The thread.", OBJECT), bad, busy, with_body=True)},
        "/langgraph/threads/search": {"post": op(
            "langgraphSearchThreads", "Your threads, the one changed last first.",
            json_("Threads.", ARRAY), bad, with_body=True)},
        "/langgraph/threads/{thread_id}": {"get": op(
            "langgraphGetThread", "A thread, with its messages.", json_("The thread.", OBJECT),
            missing, params=(thread,))},
        "/langgraph/threads/{thread_id}/state": {"get": op(
            "langgraphGetThreadState", "A thread's state.", json_("The state.", OBJECT),
            missing, params=(thread,))},
        "/langgraph/threads/{thread_id}/history": {"post": op(
            "langgraphGetThreadHistory", "A state after each of the thread's agents.",
            json_("States, the newest first.", ARRAY), missing, bad, params=(thread,),
            with_body=True)},
        runs: {
            "post": op("langgraphCreateRun", "Start (or enqueue, or resume) a run.", one_run,
                       missing, bad, busy, params=(thread,), with_body=True),
            "get": op("langgraphListRuns", "The thread's runs, the newest first.",
                      json_("Runs.", ARRAY), missing, bad, params=(thread,)),
        },
        "/langgraph/runs": {"post": op(
            "langgraphCreateStatelessRun", "A run on a new thread.", one_run, missing, bad,
            with_body=True)},
        f"{runs}/wait": {"post": op(
            "langgraphWaitRun", "Start a run and answer once it has ended or is interrupted.",
            values, missing, bad, busy, params=(thread,), with_body=True)},
        "/langgraph/runs/wait": {"post": op(
            "langgraphWaitStatelessRun", "A run on a new thread, answered once it has ended.",
            values, missing, bad, with_body=True)},
        f"{runs}/stream": {"post": op(
            "langgraphStreamRun", "Start a run and stream it.", stream, missing, bad, busy,
            params=(thread,), with_body=True)},
        "/langgraph/runs/stream": {"post": op(
            "langgraphStreamStatelessRun", "A run on a new thread, streamed.", stream, missing,
            bad, with_body=True)},
        f"{runs}/{{run_id}}": {"get": op(
            "langgraphGetRun", "A run.", one_run, missing, params=(thread, run))},
        f"{runs}/{{run_id}}/join": {"get": op(
            "langgraphJoinRun", "The thread's values once the run has ended or is interrupted.",
            values, missing, params=(thread, run))},
        f"{runs}/{{run_id}}/stream": {"get": op(
            "langgraphJoinRunStream", "Join a run's stream (`Last-Event-ID` resumes).", stream,
            missing, bad, params=(thread, run, {
                "name": "stream_mode", "in": "query", "required": False, "schema": {
                    "type": "string", "enum": ["values", "updates", "messages-tuple"]}}))},
        f"{runs}/{{run_id}}/cancel": {"post": op(
            "langgraphCancelRun", "Cancel a run.",
            {"description": "Cancelled (202, no body)."}, missing, busy, params=(thread, run, {
                "name": "wait", "in": "query", "required": False,
                "schema": {"type": "string", "enum": ["0", "1", "true", "false"]}}),
            status="202")},
    }
