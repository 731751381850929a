"""The schedules' use cases (README, Schedules): create, list, get, PATCH, delete, each
checked and scoped to its user. What a schedule is and how its due times are computed
is in jarvis_agents/schedules.py; the rows behind `ScheduleStore` in store/schedules.py;
the loop that fires them in scheduler.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.errors import NotFound, RequestError
from jarvis_agents.lifecycle import Agent, utcnow
from jarvis_agents.schedules import (
    OVERLAPS,
    TEMPLATE_FIELDS,
    THREADS,
    Schedule,
    ScheduleStore,
    Template,
    check_cron,
)

# The create's own fields; the rest of a body is the template (an agent create's fields).
SCHEDULE_FIELDS = ("goal", "cron", "timezone", "thread", "overlap", "enabled")


@dataclass(frozen=True)
class ScheduleRequest:
    """A validated create body: the schedule's own fields and its agents' template."""

    goal: str
    cron: str
    timezone: str = "UTC"
    thread: str = "new"
    overlap: str = "skip"
    enabled: bool = True
    template: Template = field(default_factory=Template)


class Schedules:
    """The use cases; `prepare` is the agent create's check and build (AgentService.prepare)
    of a goal and a template, run at a schedule's create and at each of its due times."""

    def __init__(self, store: ScheduleStore, *, settings: Settings,
                 prepare: Callable[[uuid.UUID, str, Template], Agent]) -> None:
        self.store = store
        self.settings = settings
        self.prepare = prepare

    def create(self, user_id: uuid.UUID, request: ScheduleRequest) -> Schedule:
        now = utcnow()
        _check_policies(request.thread, request.overlap)
        next_run_at = check_cron(request.cron, request.timezone, now=now)
        template = self._checked(user_id, request.goal, request.template)
        schedule = Schedule(
            id=uuid.uuid4(), user_id=user_id, goal=request.goal, cron=request.cron.strip(),
            timezone=request.timezone, template=template, next_run_at=next_run_at,
            thread=request.thread, overlap=request.overlap, enabled=request.enabled,
            created_at=now, updated_at=now)
        self.store.insert(schedule, max_per_user=self.settings.max_schedules_per_user)
        return schedule

    def list(self, user_id: uuid.UUID) -> list[Schedule]:
        return self.store.of_user(user_id)

    def get(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> Schedule:
        found = self.store.find(user_id, schedule_id)
        if found is None:
            raise NotFound(f"you have no schedule {schedule_id}; `GET /api/v1/schedules` "
                           "lists yours", code="schedule_not_found")
        return found

    def patch(self, user_id: uuid.UUID, schedule_id: uuid.UUID,
              changes: Mapping[str, Any]) -> Schedule:
        """The schedule with `changes` (any create field; a template field given null goes
        back to its default). A new cron, time zone, or a resume counts from now: due
        times missed while paused do not fire."""
        current = self.get(user_id, schedule_id)
        own = {name: value for name, value in changes.items() if name in SCHEDULE_FIELDS}
        if isinstance(own.get("cron"), str):
            own["cron"] = own["cron"].strip()
        template = replace(current.template, **{name: changes[name] for name in changes
                                                if name in TEMPLATE_FIELDS})
        merged = ScheduleRequest(**{**_request_fields(current), **own}, template=template)
        _check_policies(merged.thread, merged.overlap)
        values: dict[str, Any] = {**own, "template": template, "updated_at": utcnow()}
        resumed = merged.enabled and not current.enabled
        if resumed or (merged.cron, merged.timezone) != (current.cron, current.timezone):
            values["next_run_at"] = check_cron(merged.cron, merged.timezone, now=utcnow())
        if "goal" in own or template != current.template:
            values["template"] = self._checked(user_id, merged.goal, template)
        if merged.thread != current.thread:
            values["thread_id"] = None  # a new policy starts its own thread
        changed = self.store.change(user_id, schedule_id, **values)
        if changed is None:  # deleted meanwhile
            raise NotFound(f"you have no schedule {schedule_id}", code="schedule_not_found")
        return changed

    def delete(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> None:
        """Delete the schedule; the agents it made keep its id."""
        if not self.store.delete(user_id, schedule_id):
            raise NotFound(f"you have no schedule {schedule_id}", code="schedule_not_found")

    def _checked(self, user_id: uuid.UUID, goal: str, template: Template) -> Template:
        """The template with tool names as the tools list them; refused (RequestError,
        NotFound) as an agent create of it would be."""
        agent = self.agent_of(user_id, goal, template)
        return replace(
            template, tools=agent.tools if template.tools is not None else None,
            approve_tools=agent.approve_tools if template.approve_tools is not None else None)

    def agent_of(self, user_id: uuid.UUID, goal: str, template: Template) -> Agent:
        """The agent a due time of this template makes, checked as a create checks it."""
        return self.prepare(user_id, goal, template)


def _request_fields(schedule: Schedule) -> dict[str, Any]:
    return {name: getattr(schedule, name) for name in SCHEDULE_FIELDS}


def _check_policies(thread: str, overlap: str) -> None:
    if thread not in THREADS:
        raise RequestError(f"`thread` must be `new` or `same`, not {thread!r}",
                           code="invalid_request")
    if overlap not in OVERLAPS:
        raise RequestError(f"`overlap` must be `skip` or `allow`, not {overlap!r}",
                           code="invalid_request")
