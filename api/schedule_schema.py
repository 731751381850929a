"""The schedules' HTTP shapes (README, Schedules): the create body (an agent create's
fields and the schedule's own), a PATCH checked as the create it makes, the answers as
the OpenAPI document describes them, and the operations of `/api/v1/schedules` for that
document (api/openapi.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from api.params import describe
from api.schemas import CreateAgent
from jarvis_agents.errors import RequestError
from jarvis_agents.schedule_service import SCHEDULE_FIELDS, ScheduleRequest
from jarvis_agents.schedules import TEMPLATE_FIELDS, Schedule, Template, schedule_json

CRON_MAX_CHARS = 200
TIMEZONE_MAX_CHARS = 64


class CreateSchedule(CreateAgent):
    """The body of `POST /api/v1/schedules`: the agent each due time makes (any field of
    an agent create but `thread_id`), and when."""

    model_config = ConfigDict(title="CreateSchedule")

    cron: Annotated[str, Field(
        min_length=1, max_length=CRON_MAX_CHARS,
        description="5 fields: minute hour day-of-month month day-of-week, such as `0 3 * * *` "
                    "(every day at 03:00); at most once a minute.")]
    timezone: Annotated[str, Field(
        min_length=1, max_length=TIMEZONE_MAX_CHARS,
        description="The IANA time zone whose clock the cron follows, daylight saving "
                    "included (default: UTC).")] = "UTC"
    thread: Annotated[Literal["new", "same"], Field(
        description="`new` (the default): every run starts its own thread; `same`: each run "
                    "is a follow-up in the schedule's thread.")] = "new"
    overlap: Annotated[Literal["skip", "allow"], Field(
        description="`skip` (the default): a due time while the last run has not ended makes "
                    "no agent and adds 1 to `skipped`; `allow`: it makes one all the same.")] = "skip"
    enabled: Annotated[bool, Field(description="False: paused (default: true).")] = True

    @field_validator("thread_id")
    @classmethod
    def _no_thread_id(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("is not a schedule's: its runs keep a thread with "
                             '`"thread": "same"`')
        return value

    def to_schedule(self) -> ScheduleRequest:
        request = self.to_request()
        return ScheduleRequest(
            goal=self.goal, cron=self.cron, timezone=self.timezone, thread=self.thread,
            overlap=self.overlap, enabled=self.enabled,
            template=Template(**{name: getattr(request, name) for name in TEMPLATE_FIELDS}))


def create_body(body: Mapping[str, object]) -> ScheduleRequest:
    """The validated create body, or a RequestError naming what is wrong in sentences."""
    return _parsed(body).to_schedule()


def patch_changes(current: Schedule, body: Mapping[str, object]) -> dict[str, Any]:
    """The fields a PATCH gives, checked as the create of the schedule they would make
    (a template field given null goes back to its default)."""
    now = schedule_json(current)
    as_created = {name: now[name] for name in (*SCHEDULE_FIELDS, *TEMPLATE_FIELDS)
                  if now.get(name) is not None}
    as_created["enabled"] = current.enabled
    merged = _parsed({**as_created, **body}).to_schedule()
    return {name: getattr(merged, name) if name in SCHEDULE_FIELDS else getattr(merged.template, name)
            for name in body}


def _parsed(body: Mapping[str, object]) -> CreateSchedule:
    try:
        return CreateSchedule.model_validate(dict(body), strict=True)
    except ValidationError as exc:
        fields = [name for name in CreateSchedule.model_fields if name != "thread_id"]
        raise RequestError(describe(exc, fields, what="a schedule"), code="invalid_request") from None


# --- the answers, for the OpenAPI document (jarvis_agents.schedules builds them) --------


class ScheduleAnswer(BaseModel):
    """A schedule: when it fires, the agent it makes, and what it has done."""

    model_config = ConfigDict(title="Schedule")

    id: UUID
    goal: str
    cron: str
    timezone: str
    assistant: str | None
    model: str | None
    max_steps: int | None
    mode: Literal["auto", "native", "react"] | None
    tools: list[str] | None
    approve_tools: list[str] | None
    output_schema: dict[str, Any] | None
    webhook_url: str | None
    thread: Literal["new", "same"]
    thread_id: UUID | None = Field(description="The thread its runs follow up in (`same`), "
                                               "once its first run is made.")
    overlap: Literal["skip", "allow"]
    enabled: bool
    next_run_at: datetime | None = Field(description="The next due time (UTC); null while paused.")
    last_agent_id: UUID | None = Field(description="The agent its latest due time made.")
    skipped: int = Field(ge=0, description="Due times that made no agent (overlap `skip`).")
    created_at: datetime
    updated_at: datetime


class ScheduleList(BaseModel):
    model_config = ConfigDict(title="ScheduleList")

    schedules: list[ScheduleAnswer] = Field(description="Oldest first.")


BODIES = (CreateSchedule,)
ANSWERS = (ScheduleAnswer, ScheduleList)


def operations(json_: Callable[..., dict[str, Any]], error: Callable[..., dict[str, Any]],
               common: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The paths of the schedules for the OpenAPI document; `json_`, `error` and `common`
    are api/openapi.py's helpers and common answers."""
    ref = {"name": "schedule_id", "in": "path", "required": True,
           "description": "The schedule's id; one that is not yours is a 404.",
           "schema": {"type": "string", "format": "uuid"}}
    body = {"required": True, "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/CreateSchedule"}}}}
    patch_body = {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "description": "Any fields of CreateSchedule; null resets an "
        "agent field to its default. A new cron, time zone or a resume counts from now."}}}}
    bad = {"400": error("A malformed body (`invalid_request`), a cron that is not 5 fields or "
                        "never fires (`invalid_cron`), an unknown time zone (`invalid_timezone`) "
                        "or tool (`unknown_tool`); the message says which.")}
    missing = {"404": error("No schedule of yours has this id (`schedule_not_found`), or the "
                            "`assistant` is not one of yours (`assistant_not_found`).")}
    return {
        "/api/v1/schedules": {
            "post": {
                "operationId": "createSchedule", "tags": ["schedules"],
                "summary": "Make an agent on a clock: a cron expression in a time zone.",
                "requestBody": body,
                "responses": {
                    "201": json_("Schedule", "Created."), **bad, **missing,
                    "429": error("You have JARVIS_MAX_SCHEDULES_PER_USER schedules "
                                 "(`too_many_schedules`)."),
                    **common,
                },
            },
            "get": {
                "operationId": "listSchedules", "tags": ["schedules"],
                "summary": "Your schedules, oldest first.",
                "responses": {"200": json_("ScheduleList", "The schedules."), **common},
            },
        },
        "/api/v1/schedules/{schedule_id}": {
            "parameters": [ref],
            "get": {
                "operationId": "getSchedule", "tags": ["schedules"],
                "summary": "One schedule: next due time, last agent, skipped count.",
                "responses": {"200": json_("Schedule", "The schedule."), **missing, **common},
            },
            "patch": {
                "operationId": "patchSchedule", "tags": ["schedules"],
                "summary": "Change a schedule (`enabled: false` pauses it).",
                "requestBody": patch_body,
                "responses": {"200": json_("Schedule", "The schedule as changed."), **bad,
                              **missing, **common},
            },
            "delete": {
                "operationId": "deleteSchedule", "tags": ["schedules"],
                "summary": "Delete the schedule (the agents it made keep its id).",
                "responses": {"204": {"description": "Deleted."}, **missing, **common},
            },
        },
    }
