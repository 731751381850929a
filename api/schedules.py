"""The schedules resource (README, Schedules): create, list, get, PATCH, delete. Another
user's schedule is a 404, as if it did not exist."""

from __future__ import annotations

import uuid

from flask import Blueprint, Response, jsonify

from api import params
from api.auth import current_user
from api.context import ctx
from api.schedule_schema import create_body, patch_changes
from jarvis_agents.errors import NotFound
from jarvis_agents.schedule_service import Schedules
from jarvis_agents.schedules import schedule_json

bp = Blueprint("schedules", __name__, url_prefix="/api/v1")


def schedules() -> Schedules:
    return ctx().service.schedules


def schedule_id(raw: str) -> uuid.UUID:
    """The path's id; anything but a UUID names no schedule of the caller's."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound(f"you have no schedule {raw[:80]!r}", code="schedule_not_found") from None


@bp.post("/schedules")
def create_schedule() -> Response:
    schedule = schedules().create(current_user().id, create_body(params.json_object()))
    response = jsonify(schedule_json(schedule))
    response.status_code = 201
    response.headers["Location"] = f"/api/v1/schedules/{schedule.id}"
    return response


@bp.get("/schedules")
def list_schedules() -> Response:
    return jsonify({"schedules": [schedule_json(s) for s in schedules().list(current_user().id)]})


@bp.get("/schedules/<raw_id>")
def get_schedule(raw_id: str) -> Response:
    return jsonify(schedule_json(schedules().get(current_user().id, schedule_id(raw_id))))


@bp.patch("/schedules/<raw_id>")
def patch_schedule(raw_id: str) -> Response:
    user_id, found = current_user().id, schedule_id(raw_id)
    changes = patch_changes(schedules().get(user_id, found), params.json_object())
    return jsonify(schedule_json(schedules().patch(user_id, found, changes)))


@bp.delete("/schedules/<raw_id>")
def delete_schedule(raw_id: str) -> Response:
    schedules().delete(current_user().id, schedule_id(raw_id))
    return Response(status=204)
