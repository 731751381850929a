"""The OpenAPI document's deletions (README, Deleting and retention): the purge of an
ended agent, as a parameter of the agent's DELETE, and the deletion of a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PURGE = {
    "name": "purge", "in": "query", "required": False,
    "description": "`true`: delete the ended agent with its steps, webhook deliveries and "
                   "events (204) instead of cancelling it; every read of it is then a 404.",
    "schema": {"type": "string", "enum": ["0", "1", "true", "false"]},
}
PURGED = {"description": "With `purge=true`: the ended agent is deleted (no body)."}
AGENT_CONFLICT = ("Without `purge`: the agent had already ended (COMPLETED, FAILED or "
                  "CANCELLED). With `purge=true`: it has not ended (`agent_active`); cancel "
                  "it first.")


def operations(error: Callable[..., dict[str, Any]], common: dict[str, Any]) -> dict[str, Any]:
    return {
        "/api/v1/threads/{thread_id}": {
            "parameters": [{
                "name": "thread_id", "in": "path", "required": True,
                "description": "The thread's id (its first agent's); anything that is not a "
                               "UUID is a 404.",
                "schema": {"type": "string", "format": "uuid"},
            }],
            "delete": {
                "operationId": "deleteThread", "tags": ["agents"],
                "summary": "Delete every agent of a thread, with their steps, webhook "
                           "deliveries and events.",
                "responses": {
                    "204": {"description": "Deleted (no body)."},
                    "404": error("No such thread, or it belongs to another user "
                                 "(`thread_not_found`)."),
                    "409": error("An agent of the thread is PENDING, RUNNING or WAITING "
                                 "(`thread_busy`); cancel it first. Nothing is deleted."),
                    **common,
                },
            },
        },
    }
