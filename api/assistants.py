"""The assistants resource (README, Assistants): create, list, get, PATCH (a new
version), delete, versions. Another user's assistant is a 404, as if it did not exist."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from api import params
from api.assistant_schema import CreateAssistant, PatchAssistant, parse
from api.auth import current_user
from api.context import ctx
from jarvis_agents.assistant_service import Assistants
from jarvis_agents.assistants import assistant_json, version_json

bp = Blueprint("assistants", __name__, url_prefix="/api/v1")


def assistants() -> Assistants:
    return ctx().service.assistants


@bp.post("/assistants")
def create_assistant() -> Response:
    body = parse(CreateAssistant, params.json_object())
    assistant = assistants().create(current_user().id, body.name, body.config())
    response = jsonify(assistant_json(assistant, ctx().settings))
    response.status_code = 201
    response.headers["Location"] = f"/api/v1/assistants/{assistant.id}"
    return response


@bp.get("/assistants")
def list_assistants() -> Response:
    user = current_user()
    found = assistants().list(user.id, since=user.created_at)
    return jsonify({"assistants": [assistant_json(a, ctx().settings) for a in found]})


@bp.get("/assistants/<ref>")
def get_assistant(ref: str) -> Response:
    user = current_user()
    return jsonify(assistant_json(assistants().resolve(user.id, ref, since=user.created_at),
                                  ctx().settings))


@bp.patch("/assistants/<ref>")
def patch_assistant(ref: str) -> Response:
    body = parse(PatchAssistant, params.json_object())
    assistant = assistants().patch(current_user().id, ref, body.given())
    return jsonify(assistant_json(assistant, ctx().settings))


@bp.delete("/assistants/<ref>")
def delete_assistant(ref: str) -> Response:
    assistants().delete(current_user().id, ref)
    return Response(status=204)


@bp.get("/assistants/<ref>/versions")
def list_versions(ref: str) -> Response:
    user = current_user()
    found = assistants().versions(user.id, ref, since=user.created_at)
    return jsonify({"versions": [version_json(v, ctx().settings) for v in found]})
