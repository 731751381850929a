"""LangGraph's Agent Server API at `/langgraph` (README, LangGraph SDK): a thin door.

`langgraph_sdk.get_client(url=<base>/langgraph, api_key=<key>)` works against it: the
key comes in `x-api-key` (or as everywhere, `Authorization: Bearer`). Each view reads
the body and hands it to `jarvis_agents.langgraph`; the streams are in
api/langgraph_stream.py. Errors are the API's JSON errors with LangGraph's status codes
(404 unknown or another user's, 409 a busy thread, 400 a bad body).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from api import params
from api.auth import current_api_key, current_user
from api.context import ctx
from api.streaming import Hangup
from jarvis_agents.errors import RequestError
from jarvis_agents.langgraph import LangGraph, RunView
from jarvis_agents.langgraph.requests import run_request
from jarvis_agents.lifecycle import Agent

PREFIX = "/langgraph"
bp = Blueprint("langgraph", __name__, url_prefix=PREFIX)
KEY_HEADER = "x-api-key"


def lg() -> LangGraph:
    """The app's LangGraph use cases, made on first use."""
    extensions = current_app.extensions
    if "langgraph" not in extensions:
        extensions["langgraph"] = LangGraph.of(ctx().service)
    return extensions["langgraph"]


def body() -> dict[str, Any]:
    """The JSON object sent, {} for none (the SDK posts some calls without a body)."""
    raw = request.get_data(cache=False)
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise RequestError("the request body is not valid JSON", code="invalid_json") from None
    if not isinstance(value, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    return value


def run_uuid(raw: str) -> uuid.UUID:
    return params.path_uuid(raw, what="run", code="run_not_found")


def cron_uuid(raw: str) -> uuid.UUID:
    return params.path_uuid(raw, what="cron", code="cron_not_found")


def run_path(view: RunView) -> str:
    return f"{request.host_url.rstrip('/')}{PREFIX}/threads/{view.thread_id}/runs/{view.run_id}"


# --- assistants -------------------------------------------------------------------------


@bp.post("/assistants/search")
def search_assistants() -> Response:
    return jsonify(lg().search_assistants(current_user().id, body()))


@bp.get("/assistants/<ref>")
def get_assistant(ref: str) -> Response:
    return jsonify(lg().assistant(current_user().id, ref))


# --- threads ----------------------------------------------------------------------------


@bp.post("/threads")
def create_thread() -> Response:
    return jsonify(lg().threads.create(current_user().id, body()))


@bp.post("/threads/search")
def search_threads() -> Response:
    return jsonify(lg().threads.search(current_user().id, body()))


@bp.get("/threads/<raw_id>")
def get_thread(raw_id: str) -> Response:
    return jsonify(lg().threads.get(current_user().id, params.thread_id(raw_id)))


@bp.get("/threads/<raw_id>/state")
def thread_state(raw_id: str) -> Response:
    return jsonify(lg().threads.state(current_user().id, params.thread_id(raw_id)))


@bp.post("/threads/<raw_id>/history")
def thread_history(raw_id: str) -> Response:
    return jsonify(lg().threads.history(current_user().id, params.thread_id(raw_id), body()))


# --- runs -------------------------------------------------------------------------------


def _created(view: RunView) -> Response:
    response = jsonify(view.to_json())
    response.headers["Content-Location"] = f"{PREFIX}/threads/{view.thread_id}/runs/{view.run_id}"
    return response


@bp.post("/threads/<raw_id>/runs")
def create_run(raw_id: str) -> Response:
    view = lg().runs.create(current_user().id, params.thread_id(raw_id), run_request(body()))
    return _created(view)


@bp.post("/runs")
def create_stateless_run() -> Response:
    return _created(lg().runs.create(current_user().id, None, run_request(body())))


@bp.get("/threads/<raw_id>/runs")
def list_runs(raw_id: str) -> Response:
    thread_id = params.thread_id(raw_id)
    user_id = current_user().id
    lg().threads.row(user_id, thread_id)
    limit = request.args.get("limit", default=10, type=int)
    offset = request.args.get("offset", default=0, type=int)
    if limit is None or offset is None or not 1 <= limit <= 100 or offset < 0:
        raise RequestError("`limit` must be 1 to 100 and `offset` 0 or more")
    views = lg().runs.list(user_id, thread_id, limit=limit, offset=offset,
                           status=request.args.get("status"))
    return jsonify([v.to_json() for v in views])


@bp.get("/threads/<raw_id>/runs/<run_id>")
def get_run(raw_id: str, run_id: str) -> Response:
    view = lg().runs.get(current_user().id, params.thread_id(raw_id), run_uuid(run_id))
    return jsonify(view.to_json())


@bp.post("/threads/<raw_id>/runs/<run_id>/cancel")
def cancel_run(raw_id: str, run_id: str) -> Response:
    user_id = current_user().id
    view = lg().runs.cancel(user_id, params.thread_id(raw_id), run_uuid(run_id))
    if request.args.get("wait") in ("1", "true", "True") and view.agent is not None:
        _settled(view)
    return Response(status=202)


@bp.post("/threads/<raw_id>/runs/wait")
def wait_run(raw_id: str) -> Response:
    view = lg().runs.create(current_user().id, params.thread_id(raw_id), run_request(body()))
    return _values(view)


@bp.post("/runs/wait")
def wait_stateless_run() -> Response:
    return _values(lg().runs.create(current_user().id, None, run_request(body())))


@bp.get("/threads/<raw_id>/runs/<run_id>/join")
def join_run(raw_id: str, run_id: str) -> Response:
    return _values(lg().runs.get(current_user().id, params.thread_id(raw_id), run_uuid(run_id)))


# --- crons (our schedules) --------------------------------------------------------------


@bp.post("/runs/crons")
def create_cron() -> Response:
    return jsonify(lg().crons.create(current_user().id, None, body()))


@bp.post("/threads/<raw_id>/runs/crons")
def create_thread_cron(raw_id: str) -> Response:
    return jsonify(lg().crons.create(current_user().id, params.thread_id(raw_id), body()))


@bp.post("/runs/crons/search")
def search_crons() -> Response:
    return jsonify(lg().crons.search(current_user().id, body()))


@bp.delete("/runs/crons/<raw_id>")
def delete_cron(raw_id: str) -> Response:
    lg().crons.delete(current_user().id, cron_uuid(raw_id))
    return Response(status=204)


def _values(view: RunView) -> Response:
    """The thread's values once the run has ended or is interrupted; `Location` is where
    a client whose connection dropped reads them again (the SDK does)."""
    user_id = current_user().id
    agent = _settled(view)
    if agent is not None:
        values = lg().values(user_id, agent)
    elif lg().runs.get(user_id, None, view.run_id).ended:  # cancelled before its turn
        values = lg().threads.state(user_id, view.thread_id)["values"]
    else:  # the caller has gone, or the server is stopping
        raise RequestError("the run has not ended: join it again", code="not_ended")
    response = jsonify(values)
    response.headers["Location"] = f"{run_path(view)}/join"
    response.headers["Content-Location"] = f"{PREFIX}/threads/{view.thread_id}/runs/{view.run_id}"
    return response


def _settled(view: RunView) -> Agent | None:
    """The run's agent once it has ended or is interrupted. Held like a long-poll: one
    of the user's stream slots, and watched for its key being revoked and for the
    caller hanging up (None then)."""
    if view.ended and view.agent is not None:
        return view.agent
    context = ctx()
    user_id = current_user().id
    hangup = Hangup(request.environ)
    with context.stream_slots.take(user_id), context.keys.watch(current_api_key()) as key:
        def wanted() -> bool:
            return key.valid() and not hangup() and not context.shutting_down

        timing = context.timing
        started = lg().agent_of(user_id, view, still_wanted=wanted, tick_s=timing.tick_s)
        if started is None or started.agent is None:
            return None
        return lg().settled(user_id, started, subscriber=context.hub, still_wanted=wanted,
                            tick_s=timing.tick_s, recheck_s=timing.recheck_s)
