"""Schedules: agents made on a clock (README, Schedules).

A schedule is a cron expression (5 fields) read in an IANA time zone, and a template of
the agent each due time makes: a goal, an assistant and any agent create field. Due
times are computed on the zone's wall clock and kept in UTC (`next_run_at`), so a
schedule follows daylight-saving changes: a fixed time of day that a spring-forward
skips fires when the clock jumps past it, and one that a fall-back repeats fires once
(cron's own rule); a schedule with every hour in its hour field follows real time.

Which process fires a due time is decided in the database (store/schedules.py): a
compare-and-set on the due time, so however many workers run, each fires once. The use
cases are `Schedules`' (schedule_service.py); the loop that fires is scheduler.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import Agent, isoformat

THREADS = ("new", "same")
OVERLAPS = ("skip", "allow")
CRON_FIELDS = 5


@dataclass(frozen=True)
class Template:
    """The agent each due time makes, as its create would say it (None: not said)."""

    assistant: str | None = None
    model: str | None = None
    max_steps: int | None = None
    mode: str | None = None
    tools: tuple[str, ...] | None = None
    approve_tools: tuple[str, ...] | None = None
    output_schema: dict[str, Any] | None = field(default=None, hash=False)
    webhook_url: str | None = None

    def stored(self) -> dict[str, Any]:
        """As the database keeps it: what was said, lists as lists."""
        said = {name: getattr(self, name) for name in TEMPLATE_FIELDS}
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in said.items() if value is not None}

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Template:
        values = {name: data.get(name) for name in TEMPLATE_FIELDS}
        for name in ("tools", "approve_tools"):
            if values[name] is not None:
                values[name] = tuple(values[name])
        return cls(**values)


TEMPLATE_FIELDS = tuple(Template.__dataclass_fields__)


@dataclass(frozen=True)
class Schedule:
    """A user's schedule as stored; `next_run_at` is the next due time (UTC)."""

    id: uuid.UUID
    user_id: uuid.UUID
    goal: str
    cron: str
    timezone: str
    template: Template
    next_run_at: datetime
    thread: str = "new"
    overlap: str = "skip"
    enabled: bool = True
    # The thread every run follows up in (thread "same"): its first run's id, once made.
    thread_id: uuid.UUID | None = None
    last_agent_id: uuid.UUID | None = None
    skipped: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def check_cron(cron: str, timezone: str, *, now: datetime) -> datetime:
    """The first due time after `now`; a RequestError saying what is wrong with a cron
    expression (5 fields, at most once a minute) or a time zone (an IANA name)."""
    zone = time_zone(timezone)
    fields_given = cron.split()
    if len(fields_given) != CRON_FIELDS:
        raise RequestError(
            f"`cron` must have 5 fields (minute hour day-of-month month day-of-week, such as "
            f"'0 3 * * *'), not {len(fields_given)}: {cron[:80]!r}; a schedule fires at most "
            "once a minute", code="invalid_cron")
    if not croniter.is_valid(cron):
        raise RequestError(f"`cron` {cron[:80]!r} is not a valid cron expression; for example "
                           "'0 3 * * *' is every day at 03:00", code="invalid_cron")
    try:
        return next_due(cron, zone, after=now)
    except CroniterError:
        raise RequestError(f"`cron` {cron[:80]!r} never fires (no such date)",
                           code="invalid_cron") from None


def time_zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; a RequestError for anything else."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise RequestError(f"`timezone` must be an IANA time zone name such as UTC or "
                           f"Europe/Paris, not {name[:80]!r}", code="invalid_timezone") from None


@lru_cache(maxsize=4096)
def plan(cron: str, timezone: str, first: datetime, now: datetime) -> tuple[datetime, datetime]:
    """(the due time firing at `now`, the next one) of a schedule next due at `first`:
    the same for every schedule of one cron and zone, so worked out once per tick."""
    zone = ZoneInfo(timezone)
    return latest_due(cron, zone, first=first, now=now), next_due(cron, zone, after=now)


def next_due(cron: str, zone: ZoneInfo | str, *, after: datetime) -> datetime:
    """The first due time strictly after `after`, in UTC."""
    return next(_due_times(cron, _zone(zone), after, forward=True))


def latest_due(cron: str, zone: ZoneInfo | str, *, first: datetime, now: datetime) -> datetime:
    """The latest due time from `first` (a due time) up to `now`: the one firing that
    every due time missed since `first` collapses into."""
    zone = _zone(zone)
    latest = max(first, next(_due_times(cron, zone, now, forward=False)))
    following = next_due(cron, zone, after=latest)
    return following if following <= now else latest


def _zone(zone: ZoneInfo | str) -> ZoneInfo:
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo(zone)


def _due_times(cron: str, zone: ZoneInfo, start: datetime, *, forward: bool) -> Iterator[datetime]:
    """Due times from `start` (excluded) on, in UTC. A fixed time of day that a fall-back
    repeats is due only at its first occurrence."""
    times = croniter(cron, start.astimezone(zone))
    step = times.get_next if forward else times.get_prev
    while True:
        local: datetime = step(datetime)
        if _fixed_hours(cron) and local.fold == 1 and _ambiguous(local):
            continue  # the second pass of a repeated hour
        yield local.astimezone(UTC)


@lru_cache(maxsize=4096)
def _fixed_hours(cron: str) -> bool:
    """Whether the cron names its hours (a time of day), not every hour."""
    return bool(croniter(cron).expanded[1] != ["*"])


def _ambiguous(local: datetime) -> bool:
    return local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset()


def local_time(moment: datetime, timezone: str) -> datetime:
    """`moment` on the schedule's wall clock."""
    return moment.astimezone(_zone(timezone))


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """The schedule JSON (README, Schedules)."""
    template = schedule.template
    return {
        "id": str(schedule.id), "goal": schedule.goal, "cron": schedule.cron,
        "timezone": schedule.timezone, "assistant": template.assistant,
        "model": template.model, "max_steps": template.max_steps, "mode": template.mode,
        "tools": list(template.tools) if template.tools is not None else None,
        "approve_tools": (list(template.approve_tools)
                          if template.approve_tools is not None else None),
        "output_schema": template.output_schema, "webhook_url": template.webhook_url,
        "thread": schedule.thread, "thread_id": _id(schedule.thread_id),
        "overlap": schedule.overlap, "enabled": schedule.enabled,
        "next_run_at": isoformat(schedule.next_run_at) if schedule.enabled else None,
        "last_agent_id": _id(schedule.last_agent_id), "skipped": schedule.skipped,
        "created_at": isoformat(schedule.created_at), "updated_at": isoformat(schedule.updated_at),
    }


def _id(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None


@dataclass(frozen=True)
class Firing:
    """What one due time of a schedule does: `agent` made (None: skipped), the next due
    time, and the thread the schedule keeps from now on."""

    schedule: Schedule
    due: datetime
    next_run_at: datetime
    agent: Agent | None
    thread_id: uuid.UUID | None


# Given a due schedule and whether its last agent has ended (True when it has none),
# what its due time does.
Decide = Callable[[Schedule, bool, datetime], Firing]


class ScheduleStore(Protocol):
    """The rows of schedules (store/schedules.py; in memory, store/memory_schedules.py).
    Every read and write a user asks for is scoped to that user."""

    def insert(self, schedule: Schedule, *, max_per_user: int) -> None:
        """Store a new schedule; RateLimited when the user already has `max_per_user`."""
        ...

    def find(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> Schedule | None: ...

    def of_user(self, user_id: uuid.UUID) -> list[Schedule]:
        """The user's schedules, oldest first."""
        ...

    def change(self, user_id: uuid.UUID, schedule_id: uuid.UUID, **values: Any) -> Schedule | None:
        """Set these columns of the user's schedule; None if they have no such one."""
        ...

    def delete(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> bool: ...

    def fire_due(self, now: datetime, *, limit: int, decide: Decide) -> Sequence[Firing]:
        """Fire up to `limit` enabled schedules due at `now`, each under a compare-and-set
        on its due time, with the agents made in the same transaction; the firings won."""
        ...
