"""LangGraph's crons over our schedules (README, LangGraph SDK): a cron is a schedule.

`crons.create` makes a schedule whose every run starts a thread of its own, as a
stateless cron's does; `crons.create_for_thread` one whose runs are follow-ups in that
thread (thread "same"), a due time at which the thread is busy making no run (LangGraph's
`multitask_strategy` "reject"). The goal is the last human message of `input`, as a
run's. What a schedule cannot keep is a 400 that says so (an `end_time`, `metadata`,
threads deleted after their run), never dropped in silence; the fields a run accepts
and leaves aside (config, interrupt nodes, stream modes …) are left aside here too.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from jarvis_agents.assistants import default_id
from jarvis_agents.errors import NotFound, RequestError
from jarvis_agents.langgraph.requests import goal_of
from jarvis_agents.langgraph.threads import LangGraphThreads
from jarvis_agents.lifecycle import isoformat
from jarvis_agents.schedule_service import ScheduleRequest
from jarvis_agents.schedules import Schedule, Template
from jarvis_agents.service import AgentService
from jarvis_agents.webhooks.addresses import parse_webhook_url

# As the schedules' columns and a REST create allow.
CRON_MAX_CHARS, TIMEZONE_MAX_CHARS, WEBHOOK_MAX_CHARS = 200, 64, 2000
SORT_FIELDS = ("cron_id", "assistant_id", "thread_id", "created_at", "updated_at",
               "next_run_date", "end_time")


class LangGraphCrons:
    def __init__(self, agents: AgentService, threads: LangGraphThreads) -> None:
        self.agents = agents
        self.threads = threads

    def create(self, user_id: uuid.UUID, thread_id: uuid.UUID | None,
               body: dict[str, Any]) -> dict[str, Any]:
        """A schedule of the body's runs: on the thread (its runs follow up there), or
        each on a new thread."""
        if thread_id is not None:
            self.threads.row(user_id, thread_id)  # a 404 for an unknown or another's thread
        request = cron_request(body, thread_id=thread_id)
        # Kept by id: the cron answers with the assistant's id, as LangGraph's server does.
        assistant = self.agents.assistants.resolve(user_id, _assistant_ref(body))
        template = replace(request.template, assistant=str(assistant.id))
        return cron_json(self.agents.schedules.create(user_id, replace(request, template=template)))

    def search(self, user_id: uuid.UUID, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The user's crons (every schedule of theirs, those made by REST too)."""
        limit, offset = body.get("limit", 10), body.get("offset", 0)
        if (not isinstance(limit, int) or not isinstance(offset, int) or isinstance(limit, bool)
                or limit < 1 or offset < 0):
            raise RequestError("`limit` must be 1 or more and `offset` 0 or more")
        crons = [cron_json(s) for s in self.agents.schedules.list(user_id)]
        assistant, thread, enabled = (body.get(k) for k in ("assistant_id", "thread_id", "enabled"))
        if isinstance(assistant, str) and assistant:
            wanted = {assistant}
            try:
                wanted.add(str(self.agents.assistants.resolve(user_id, assistant).id))
            except NotFound:
                pass
            crons = [c for c in crons if c["assistant_id"] in wanted]
        if isinstance(thread, str) and thread:
            crons = [c for c in crons if c["thread_id"] == thread]
        if isinstance(enabled, bool):
            crons = [c for c in crons if c["enabled"] is enabled]
        if body.get("metadata"):  # a cron keeps no metadata: none matches
            crons = []
        crons = _sorted(crons, body.get("sort_by"), body.get("sort_order"))[offset:offset + limit]
        select = body.get("select")
        if isinstance(select, list) and select:
            crons = [{k: c[k] for k in select if isinstance(k, str) and k in c} for c in crons]
        return crons

    def delete(self, user_id: uuid.UUID, cron_id: uuid.UUID) -> None:
        try:
            self.agents.schedules.delete(user_id, cron_id)
        except NotFound:
            raise NotFound(f"no cron with id {cron_id}", code="cron_not_found") from None


def cron_request(body: dict[str, Any], *, thread_id: uuid.UUID | None) -> ScheduleRequest:
    """The schedule a cron create's body asks for (its assistant resolved by the caller)."""
    _assistant_ref(body)
    schedule, timezone, enabled = body.get("schedule"), body.get("timezone"), body.get("enabled")
    if not isinstance(schedule, str) or not schedule.strip() or len(schedule) > CRON_MAX_CHARS:
        raise RequestError("`schedule` is required: a cron expression of 5 fields, such as "
                           "'0 3 * * *'", code="invalid_cron")
    if timezone is not None and (not isinstance(timezone, str)
                                 or len(timezone) > TIMEZONE_MAX_CHARS):
        raise RequestError("`timezone` must be an IANA time zone name", code="invalid_timezone")
    if enabled is not None and not isinstance(enabled, bool):
        raise RequestError("`enabled` must be true or false")
    if body.get("end_time") is not None:
        raise RequestError("`end_time` is not served: delete the cron when it should stop")
    if body.get("metadata"):
        raise RequestError("a cron's `metadata` is not kept here: create it without")
    if body.get("on_run_completed") not in (None, "keep"):
        raise RequestError('`on_run_completed` "delete" is not served: a run\'s thread is '
                           'kept ("keep")')
    if body.get("multitask_strategy") not in (None, "reject"):
        raise RequestError('a cron\'s `multitask_strategy` is "reject": a due time at which '
                           "its thread is busy makes no run")
    webhook = body.get("webhook")
    if webhook is not None and (not isinstance(webhook, str) or len(webhook) > WEBHOOK_MAX_CHARS):
        raise RequestError(f"`webhook` must be an http(s) URL of at most {WEBHOOK_MAX_CHARS} "
                           "characters", code="invalid_webhook_url")
    if webhook is not None:
        parse_webhook_url(webhook)
    run_input = body.get("input")
    goal = goal_of(run_input if isinstance(run_input, dict) else {})
    # A stateless cron's runs each have a thread of their own: none waits for another.
    return ScheduleRequest(
        goal=goal, cron=schedule, timezone=timezone or "UTC",
        thread="same" if thread_id is not None else "new",
        overlap="skip" if thread_id is not None else "allow",
        enabled=True if enabled is None else enabled, thread_id=thread_id,
        template=Template(webhook_url=webhook))


def _assistant_ref(body: dict[str, Any]) -> str:
    assistant = body.get("assistant_id")
    if not isinstance(assistant, str) or not assistant.strip():
        raise RequestError("`assistant_id` is required: an assistant's id or name, or \"agent\"")
    return assistant.strip()


def cron_json(schedule: Schedule) -> dict[str, Any]:
    """The schedule as LangGraph's `Cron`."""
    assistant = schedule.template.assistant or str(default_id(schedule.user_id))
    thread_id = str(schedule.thread_id) if schedule.thread_id and schedule.thread == "same" else None
    payload: dict[str, Any] = {
        "assistant_id": assistant, "schedule": schedule.cron, "timezone": schedule.timezone,
        "input": {"messages": [{"role": "user", "content": schedule.goal}]},
    }
    if schedule.template.webhook_url:
        payload["webhook"] = schedule.template.webhook_url
    return {
        "cron_id": str(schedule.id), "assistant_id": assistant, "thread_id": thread_id,
        "on_run_completed": None if schedule.thread == "same" else "keep",
        "end_time": None, "schedule": schedule.cron, "timezone": schedule.timezone,
        "created_at": isoformat(schedule.created_at), "updated_at": isoformat(schedule.updated_at),
        "payload": payload, "user_id": str(schedule.user_id),
        "next_run_date": isoformat(schedule.next_run_at) if schedule.enabled else None,
        "metadata": {}, "enabled": schedule.enabled,
    }


def _sorted(crons: list[dict[str, Any]], sort_by: Any, sort_order: Any) -> list[dict[str, Any]]:
    """LangGraph's order: `created_at`, the newest first, unless said otherwise."""
    if sort_by is not None and sort_by not in SORT_FIELDS:
        raise RequestError(f"`sort_by` must be one of {', '.join(SORT_FIELDS)}")
    if sort_order not in (None, "asc", "desc"):
        raise RequestError("`sort_order` must be asc or desc")
    key = sort_by or "created_at"
    return sorted(crons, key=lambda c: (c[key] is not None, c[key] or ""),
                  reverse=(sort_order or "desc") == "desc")

