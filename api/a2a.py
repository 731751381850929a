"""A2A 1.0 over JSON-RPC (README, A2A): the agent cards and the `/a2a` endpoint.

A thin door: the envelope is checked as the SDK's own server checks it, the params parsed
into the SDK's request types, and each method handed to `jarvis_agents.a2a.service`.
Answers are JSON-RPC responses (HTTP 200, errors as A2A's codes); a missing or bad API key
is the API's 401, as everywhere. The two streaming methods are in api/a2a_stream.py.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from a2a.server.jsonrpc_models import JSONParseError as JsonParseError
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.constants import VERSION_HEADER
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
)
from flask import Blueprint, Response, jsonify, request
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import Message as ProtoMessage
from jsonrpc.jsonrpc2 import JSONRPC20Request

from api import a2a_push, a2a_stream
from api.a2a_rpc import VERSION, answer, result, tasks
from api.auth import current_api_key, current_user, public
from api.context import ctx
from api.streaming import Hangup
from jarvis_agents.a2a.card import RPC_PATH, agent_card, skill_of
from jarvis_agents.a2a.service import settle
from jarvis_agents.errors import RateLimited

log = logging.getLogger(__name__)

bp = Blueprint("a2a", __name__)

CARD_PATHS = ("/.well-known/agent-card.json", f"{RPC_PATH}/.well-known/agent-card.json")


def _card_json(card: ProtoMessage) -> dict[str, Any]:
    # The SDK's own rendering: the 1.0 card with the fields 0.3 clients read besides.
    return agent_card_to_dict(card)


@bp.get(CARD_PATHS[0])
@bp.get(CARD_PATHS[1])
@public
def public_card() -> Response:
    return jsonify(_card_json(agent_card(request.host_url)))


@bp.post(RPC_PATH)
def rpc() -> Response:
    request_id: str | int | None = None
    try:
        body = _body()
        request_id = _request_id(body)
        method, params = _envelope(body)
        _check_version()
        model, handler = METHODS.get(method, (None, None))
        if model is None or handler is None:
            raise MethodNotFoundError(f"there is no method {method!r}; the agent card lists them")
        return handler(request_id, _parsed(params, model))
    except JSONParseError as exc:  # the SDK's model of it: its A2AError has no JSON-RPC class
        return answer(build_error_response(None, JsonParseError(message=str(exc))))
    except A2AError as exc:
        return answer(build_error_response(request_id, exc))
    except RateLimited as exc:  # more agents, or streams, at once than the user may have
        return answer(build_error_response(request_id, InvalidRequestError(
            str(exc), data={"code": exc.code, "retry_after_s": exc.retry_after_s})))
    # Anything else is the API's: a 401, a 503 while the database is away, a logged 500.


def _body() -> Any:
    try:
        return json.loads(request.get_data(cache=False) or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise JSONParseError(f"the body is not JSON: {exc}") from None


def _request_id(body: Any) -> str | int | None:
    request_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        return None
    return request_id


def _envelope(body: Any) -> tuple[str, dict[str, Any]]:
    """The method and params of a JSON-RPC 2.0 request (one, not a batch)."""
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be one JSON-RPC 2.0 request object "
                                  "(batches are not supported)")
    try:
        JSONRPC20Request.from_data(body)
    except Exception as exc:  # noqa: BLE001 - the library's own validation errors
        raise InvalidRequestError(f"not a JSON-RPC 2.0 request: {exc}") from None
    if body.get("jsonrpc") != "2.0":
        raise InvalidRequestError("`jsonrpc` must be exactly \"2.0\"")
    if "id" in body and (isinstance(body["id"], bool) or not isinstance(body["id"], str | int | None)):
        raise InvalidRequestError("`id` must be a string, an integer or null")
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequestError("`method` is required")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise InvalidParamsError("`params` must be an object")
    return method, params


def _parsed(params: dict[str, Any], model: type[ProtoMessage]) -> Any:
    """The params as the method's request type. Unknown fields are left out (forward
    compatibility, as the SDK's server does), but not an unknown enum value, which
    protobuf would read as the enum's zero (a status filter of "any")."""
    try:
        return ParseDict(params, model())
    except ParseError as exc:
        if "enum" in str(exc):
            raise InvalidParamsError(f"the params are not a {model.__name__}: {exc}") from None
    try:
        return ParseDict(params, model(), ignore_unknown_fields=True)
    except (ParseError, TypeError, ValueError) as exc:
        raise InvalidParamsError(f"the params are not a {model.__name__}: {exc}") from None


def _check_version() -> None:
    """`A2A-Version` (header or query parameter), when given, must be 1.x; a request
    without one is served as 1.0 (README, A2A)."""
    asked = request.headers.get(VERSION_HEADER) or request.args.get(VERSION_HEADER)
    if asked is not None and asked.strip().split(".")[0] != VERSION.split(".")[0]:
        raise VersionNotSupportedError(
            f"A2A version {asked[:20]!r} is not supported; this server speaks {VERSION}")


# --- the methods ------------------------------------------------------------------------


def send_message(request_id: str | int | None, params: SendMessageRequest) -> Response:
    """SendMessage: answers once the task ends or needs input, or at once with
    `configuration.returnImmediately`."""
    user_id = current_user().id
    agent = tasks().send(user_id, params)
    history = (params.configuration.history_length
               if params.configuration.HasField("history_length") else None)
    if params.configuration.return_immediately or agent.is_terminal:
        task = tasks().task(agent, history_length=history)
    else:
        task = _settled(user_id, agent, history_length=history)
    return result(request_id, SendMessageResponse(task=task))


def _settled(user_id: uuid.UUID, agent: Any, *, history_length: int | None) -> Task:
    """The task once it has ended or needs input; held like a long-poll (one of the user's
    stream slots, and watched for its key being revoked and for the caller hanging up).
    Made of what its follower read and told, from the first step: nothing is read again."""
    context = ctx()
    hangup = Hangup(request.environ)
    with context.stream_slots.take(user_id), context.keys.watch(current_api_key()) as key:
        follower = tasks().follow(user_id, agent, subscriber=context.hub,
                                  tick_s=context.timing.tick_s)
        steps = settle(follower, still_wanted=lambda: key.valid() and not hangup())
    if steps is None:  # given up: the task as it is now
        return tasks().task(tasks().agent(user_id, str(agent.id)), history_length=history_length)
    return tasks().task(follower.agent, history_length=history_length, steps=steps)


def get_task(request_id: str | int | None, params: GetTaskRequest) -> Response:
    history = params.history_length if params.HasField("history_length") else None
    return result(request_id, tasks().get(current_user().id, params.id, history_length=history))


def list_tasks(request_id: str | int | None, params: ListTasksRequest) -> Response:
    page = MessageToDict(tasks().list(current_user().id, params),
                         always_print_fields_with_no_presence=True)
    if not params.include_artifacts:
        for task in page["tasks"]:
            task.pop("artifacts", None)
    return result(request_id, page)


def cancel_task(request_id: str | int | None, params: CancelTaskRequest) -> Response:
    return result(request_id, tasks().cancel(current_user().id, params.id))


def extended_card(request_id: str | int | None, params: GetExtendedAgentCardRequest) -> Response:
    assistants = ctx().service.assistants.list(current_user().id)
    card = agent_card(request.host_url, [skill_of(a) for a in assistants])
    return result(request_id, _card_json(card))


Handler = Callable[[Any, Any], Response]

METHODS: dict[str, tuple[type[ProtoMessage], Handler]] = {
    "SendMessage": (SendMessageRequest, send_message),
    "SendStreamingMessage": (SendMessageRequest, a2a_stream.send_streaming_message),
    "SubscribeToTask": (SubscribeToTaskRequest, a2a_stream.subscribe_to_task),
    "GetTask": (GetTaskRequest, get_task),
    "ListTasks": (ListTasksRequest, list_tasks),
    "CancelTask": (CancelTaskRequest, cancel_task),
    "GetExtendedAgentCard": (GetExtendedAgentCardRequest, extended_card),
    **a2a_push.METHODS,
}
