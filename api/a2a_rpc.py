"""What the A2A door's methods share (README, A2A): the use cases, and JSON-RPC answers."""

from __future__ import annotations

from typing import Any

from a2a.utils.constants import VERSION_HEADER
from flask import Response, current_app, jsonify
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as ProtoMessage
from jsonrpc.jsonrpc2 import JSONRPC20Response

from api.context import ctx
from jarvis_agents.a2a.service import A2ATasks

VERSION = "1.0"

RequestId = str | int | None


def tasks() -> A2ATasks:
    """The app's A2A use cases, made on first use."""
    extensions = current_app.extensions
    if "a2a" not in extensions:
        extensions["a2a"] = A2ATasks.of(ctx().service)
    return extensions["a2a"]


def answer(data: dict[str, Any]) -> Response:
    response = jsonify(data)
    response.headers[VERSION_HEADER] = VERSION
    return response


def result(request_id: str | int | None, value: ProtoMessage | dict[str, Any] | None) -> Response:
    if isinstance(value, ProtoMessage):
        value = MessageToDict(value)
    return answer(JSONRPC20Response(result=value, _id=request_id).data)


