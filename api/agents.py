"""The agents resource: create, list, get (with long-poll), steps, cancel, approve; and the tools."""

from __future__ import annotations

import time
import uuid

from flask import Blueprint, Response, jsonify

from api import params
from api.auth import current_api_key, current_user, revoked_meanwhile
from api.context import ctx
from jarvis_agents.accounts import KeyWatch
from jarvis_agents.events import AGENT_CHANNEL, CLOSED, Message, is_terminal_status
from jarvis_agents.lifecycle import Agent

bp = Blueprint("agents", __name__, url_prefix="/api/v1")

MAX_WAIT_S = 60.0
DEFAULT_PAGE = 20
MAX_PAGE = 100


@bp.post("/agents")
def create_agent() -> Response:
    request_, key = params.create_request()
    agent, _created = ctx().service.create(
        current_user().id, request_, idempotency_key=key, traceparent=params.traceparent())
    # A repeat of an Idempotency-Key replays the first answer (202, the same agent),
    # as idempotent APIs do; `_created` only decides whether anything was enqueued.
    return agent_response(agent, 202)


@bp.get("/agents")
def list_agents() -> Response:
    status = params.query_status()
    limit = params.query_int("limit", default=DEFAULT_PAGE, low=1, high=MAX_PAGE)
    cursor = params.query_cursor()
    agents, next_cursor = ctx().service.list(
        current_user().id, status=status, limit=limit, cursor=cursor,
        thread_id=params.query_thread_id(),
        caller_id=params.query_uuid("caller_id", code="invalid_caller_id"),
        schedule_id=params.query_uuid("schedule_id", code="invalid_schedule_id"),
    )
    return jsonify({"agents": [a.to_json() for a in agents], "next_cursor": next_cursor})


@bp.get("/agents/<agent_id:raw_id>")
def get_agent(raw_id: str) -> Response:
    agent_id = params.agent_id(raw_id)
    wait_s = params.query_seconds("wait", high=MAX_WAIT_S)
    if wait_s:
        # A long-poll holds its connection like a stream, and counts as one.
        context = ctx()
        with context.stream_slots.take(current_user().id), \
                context.keys.watch(current_api_key()) as key:
            agent = wait_until_terminal(current_user().id, agent_id, wait_s, key)
    else:
        agent = ctx().service.get(current_user().id, agent_id)
    return jsonify(agent.to_json())


@bp.get("/agents/<agent_id:raw_id>/steps")
def list_steps(raw_id: str) -> Response:
    agent_id = params.agent_id(raw_id)
    after = params.query_int("after", default=0, low=0, high=params.MAX_SEQ)
    steps = ctx().service.steps(current_user().id, agent_id, after=after)
    return jsonify({"steps": [s.to_json() for s in steps]})


@bp.delete("/agents/<agent_id:raw_id>")
def cancel_agent(raw_id: str) -> Response:
    """Cancels an active agent; with `?purge=true`, deletes an ended one (README, Deleting)."""
    agent_id = params.agent_id(raw_id)
    if params.query_flag("purge", "true (delete the ended agent) or false (cancel it)"):
        ctx().service.deleting.purge(current_user().id, agent_id)
        return Response(status=204)
    agent = ctx().service.cancel(current_user().id, agent_id)
    return jsonify(agent.to_json())


@bp.delete("/threads/<raw_id>")
def delete_thread(raw_id: str) -> Response:
    """Deletes every agent of a thread, none of them active (README, Deleting)."""
    ctx().service.deleting.delete_thread(current_user().id, params.thread_id(raw_id))
    return Response(status=204)


@bp.post("/agents/<agent_id:raw_id>/approval")
def answer_approval(raw_id: str) -> Response:
    agent_id = params.agent_id(raw_id)
    body = params.approval_request()
    agent = ctx().service.approve(
        current_user().id, agent_id, call_id=body.call_id, approve=body.approve,
        tool_input=body.tool_input, reason=body.reason,
    )
    return agent_response(agent, 202)


@bp.post("/agents/<agent_id:raw_id>/fork")
def fork_agent(raw_id: str) -> Response:
    agent_id = params.agent_id(raw_id)
    agent = ctx().service.fork(current_user().id, agent_id, params.fork_request())
    return agent_response(agent, 202)


@bp.get("/tools")
def list_tools() -> Response:
    return jsonify({"tools": ctx().tools.describe()})


def agent_response(agent: Agent, status: int) -> Response:
    response = jsonify(agent.to_json())
    response.status_code = status
    response.headers["Location"] = agent_location(agent.id)
    return response


def agent_location(agent_id: uuid.UUID) -> str:
    return f"/api/v1/agents/{agent_id}"


def wait_until_terminal(
    user_id: uuid.UUID, agent_id: uuid.UUID, wait_s: float, key: KeyWatch
) -> Agent:
    """The agent once it is terminal, or as it is after `wait_s` seconds; a 401 once
    `key` is revoked or replaced meanwhile (README, HTTP API).

    Woken by the agent's status messages; the database is re-read after a terminal
    status and every few seconds, so a lost publish costs a little latency, never a
    hang. It wakes every tick to look at its key.
    """
    context = ctx()
    timing = context.timing
    deadline = time.monotonic() + wait_s
    with context.hub.subscribe(AGENT_CHANNEL.format(agent_id)) as subscription:
        agent = context.service.get(user_id, agent_id)
        next_read = time.monotonic() + timing.recheck_s
        while not agent.is_terminal:
            if not key.valid():
                raise revoked_meanwhile()
            now = time.monotonic()
            if now >= deadline:
                break
            item = subscription.get(min(deadline, next_read, now + timing.tick_s) - now)
            if item is CLOSED:
                break
            if isinstance(item, Message) and not is_terminal_status(item):
                continue  # a step, or RUNNING: nothing to answer yet
            if item is None and time.monotonic() < next_read:
                continue  # a tick: the key is looked at again
            agent = context.service.get(user_id, agent_id)
            next_read = time.monotonic() + timing.recheck_s
    return agent

