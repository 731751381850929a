"""Schedules on the in-memory store: due times across daylight-saving changes, what a
create refuses, and what the scheduler makes of due, missed and overlapping due times
(README, Schedules)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jarvis_agents.assistants import AssistantConfig
from jarvis_agents.config import Settings
from jarvis_agents.dispatch import MemoryDispatcher
from jarvis_agents.errors import NotFound, RateLimited, RequestError
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.schedule_service import ScheduleRequest
from jarvis_agents.scheduler import Scheduler
from jarvis_agents.schedules import Template, check_cron, latest_due, next_due
from jarvis_agents.service import AgentService
from jarvis_agents.store.memory import MemoryStore

SETTINGS = Settings.from_env({"JARVIS_MODEL": "llama3.2", "JARVIS_MAX_SCHEDULES_PER_USER": "3"})
ME, THEM = uuid.uuid4(), uuid.uuid4()
NY = "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def service() -> AgentService:
    return AgentService(repository=MemoryStore(), settings=SETTINGS, dispatcher=MemoryDispatcher(),
                        events=MemoryEventBus(), tool_names=["calculate", "get_time"])


@pytest.fixture
def scheduler(service: AgentService) -> Scheduler:
    return Scheduler(service)


def nightly(**fields: object) -> ScheduleRequest:
    return ScheduleRequest(**{"goal": "Summarise the day", "cron": "0 3 * * *", **fields})  # type: ignore[arg-type]


# --- due times ---------------------------------------------------------------------


def test_a_time_of_day_follows_the_zones_clock_across_daylight_saving() -> None:
    # 09:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer.
    assert next_due("0 9 * * *", NY, after=utc(2026, 3, 7, 15)) == utc(2026, 3, 8, 13)
    assert next_due("0 9 * * *", NY, after=utc(2026, 10, 31, 14)) == utc(2026, 11, 1, 14)


def test_a_time_the_spring_forward_skips_fires_once_when_the_clock_jumps_past_it() -> None:
    # 02:30 does not exist in New York on 8 March 2026: it fires at 03:00 EDT (07:00 UTC).
    first = next_due("30 2 * * *", NY, after=utc(2026, 3, 7, 12))
    assert first == utc(2026, 3, 8, 7)
    assert next_due("30 2 * * *", NY, after=first) == utc(2026, 3, 9, 6, 30)


def test_a_time_the_fall_back_repeats_fires_once() -> None:
    # 01:00 happens twice in New York on 1 November 2026 (05:00 and 06:00 UTC).
    first = next_due("0 1 * * *", NY, after=utc(2026, 10, 31, 12))
    assert first == utc(2026, 11, 1, 5)
    assert next_due("0 1 * * *", NY, after=first) == utc(2026, 11, 2, 6)


def test_an_every_hour_schedule_follows_real_time_through_the_repeated_hour() -> None:
    first = next_due("30 * * * *", NY, after=utc(2026, 11, 1, 5, 0))
    assert first == utc(2026, 11, 1, 5, 30)  # 01:30 EDT
    assert next_due("30 * * * *", NY, after=first) == utc(2026, 11, 1, 6, 30)  # 01:30 EST


def test_missed_due_times_collapse_into_the_latest() -> None:
    first = utc(2026, 1, 1, 3)
    assert latest_due("0 3 * * *", "UTC", first=first, now=utc(2026, 1, 5, 12)) == utc(2026, 1, 5, 3)
    assert latest_due("0 3 * * *", "UTC", first=first, now=utc(2026, 1, 1, 3)) == first
    assert latest_due("0 3 * * *", "UTC", first=first, now=utc(2026, 1, 2, 3)) == utc(2026, 1, 2, 3)


@pytest.mark.parametrize("cron", ["* * * * * *", "0 3 * *", "@daily", "61 * * * *", "0 0 31 2 *", ""])
def test_a_cron_that_is_not_five_valid_fields_or_never_fires_is_refused(cron: str) -> None:
    with pytest.raises(RequestError, match="`cron`"):
        check_cron(cron, "UTC", now=utc(2026, 1, 1))


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", "EST5EDT-nope"])
def test_a_time_zone_that_is_not_an_iana_name_is_refused(zone: str) -> None:
    with pytest.raises(RequestError, match="`timezone`"):
        check_cron("0 3 * * *", zone, now=utc(2026, 1, 1))


# --- the use cases -------------------------------------------------------------------


def test_a_create_checks_its_template_as_an_agent_create_does(service: AgentService) -> None:
    with pytest.raises(RequestError, match="unknown tool"):
        service.schedules.create(ME, nightly(template=Template(tools=("nope",))))
    with pytest.raises(NotFound, match="assistant"):
        service.schedules.create(ME, nightly(template=Template(assistant="ghost")))
    with pytest.raises(RequestError, match="overlap"):
        service.schedules.create(ME, nightly(overlap="queue"))


def test_a_user_has_at_most_the_limit_of_schedules(service: AgentService) -> None:
    for _ in range(3):
        service.schedules.create(ME, nightly())
    with pytest.raises(RateLimited):
        service.schedules.create(ME, nightly())
    service.schedules.create(THEM, nightly())  # another user's room is their own


def test_another_users_schedule_is_not_found(service: AgentService) -> None:
    schedule = service.schedules.create(ME, nightly())
    for call in (service.schedules.get, service.schedules.delete):
        with pytest.raises(NotFound):
            call(THEM, schedule.id)
    with pytest.raises(NotFound):
        service.schedules.patch(THEM, schedule.id, {"enabled": False})
    assert service.schedules.get(ME, schedule.id) == schedule


# --- firing --------------------------------------------------------------------------


def due_now(service: AgentService, schedule_id: uuid.UUID, due: datetime) -> None:
    store = service.repository.schedules
    store.schedules[schedule_id] = replace(store.schedules[schedule_id], next_run_at=due)


def test_a_due_time_makes_one_agent_of_the_template(service, scheduler) -> None:
    service.assistants.create(ME, "reporter", AssistantConfig(model="qwen3", tools=("calculate",)))
    schedule = service.schedules.create(ME, nightly(template=Template(assistant="reporter",
                                                                      max_steps=4)))
    due = utc(2026, 1, 1, 3)
    due_now(service, schedule.id, due)
    fired = scheduler.fire(due + timedelta(seconds=2))
    assert len(fired) == 1 and scheduler.fire(due + timedelta(seconds=3)) == []
    agent = fired[0].agent
    assert (agent.goal, agent.model, agent.max_steps, agent.tools) == (
        "Summarise the day", "qwen3", 4, ("calculate",))
    assert (agent.schedule_id, agent.scheduled_for, agent.status) == (
        schedule.id, due, AgentStatus.PENDING)
    after = service.schedules.get(ME, schedule.id)
    assert after.last_agent_id == agent.id and after.next_run_at == utc(2026, 1, 2, 3)


def test_missed_due_times_fire_once_for_the_latest(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly(overlap="allow"))
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    fired = scheduler.fire(utc(2026, 1, 4, 12))
    assert [f.agent.scheduled_for for f in fired] == [utc(2026, 1, 4, 3)]
    assert service.schedules.get(ME, schedule.id).next_run_at == utc(2026, 1, 5, 3)


def test_overlap_skip_counts_a_due_time_while_the_last_agent_runs(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly())
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    first = scheduler.fire(utc(2026, 1, 1, 3))[0].agent
    assert scheduler.fire(utc(2026, 1, 2, 3))[0].agent is None
    assert service.schedules.get(ME, schedule.id).skipped == 1
    service.cancel(ME, first.id)
    assert scheduler.fire(utc(2026, 1, 3, 3))[0].agent is not None
    assert service.schedules.get(ME, schedule.id).skipped == 1


def test_overlap_allow_makes_an_agent_while_the_last_runs(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly(overlap="allow"))
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    scheduler.fire(utc(2026, 1, 1, 3))
    assert scheduler.fire(utc(2026, 1, 2, 3))[0].agent is not None


def test_thread_same_makes_each_run_a_follow_up_of_the_last(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly(thread="same"))
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    first = scheduler.fire(utc(2026, 1, 1, 3))[0].agent
    store = service.repository
    store.agents[first.id] = replace(first, status=AgentStatus.COMPLETED,
                                     final_answer="All quiet.", completed_at=utc(2026, 1, 1, 4))
    second = scheduler.fire(utc(2026, 1, 2, 3))[0].agent
    assert second.thread_id == first.id and second.parent_id == first.id
    assert "All quiet." in str(second.context)


def test_a_paused_schedule_does_not_fire_and_resumes_from_now(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly())
    service.schedules.patch(ME, schedule.id, {"enabled": False})
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    assert scheduler.fire(utc(2026, 1, 2, 3)) == []
    resumed = service.schedules.patch(ME, schedule.id, {"enabled": True})
    assert resumed.next_run_at > datetime.now(UTC)


def test_a_same_thread_runs_one_agent_at_a_time_even_with_overlap_allow(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly(thread="same", overlap="allow"))
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    assert scheduler.fire(utc(2026, 1, 1, 3))[0].agent is not None
    assert scheduler.fire(utc(2026, 1, 2, 3))[0].agent is None  # the thread's agent runs
    assert service.schedules.get(ME, schedule.id).skipped == 1


def test_a_due_time_whose_assistant_is_gone_is_skipped(service, scheduler) -> None:
    service.assistants.create(ME, "reporter", AssistantConfig())
    schedule = service.schedules.create(ME, nightly(template=Template(assistant="reporter")))
    service.assistants.delete(ME, "reporter")
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    assert [f.agent for f in scheduler.fire(utc(2026, 1, 1, 3))] == [None]
    assert service.schedules.get(ME, schedule.id).skipped == 1


def test_each_due_time_is_reported_fired_or_skipped_with_its_lag(service) -> None:
    seen: list[tuple[str, float]] = []
    scheduler = Scheduler(service, outcome=lambda outcome, lag_s: seen.append((outcome, lag_s)))
    schedule = service.schedules.create(ME, nightly())
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    scheduler.fire(utc(2026, 1, 1, 3, 0, 2))
    scheduler.fire(utc(2026, 1, 2, 3, 0, 5))  # the first agent has not ended: skipped
    assert seen == [("fired", 2.0), ("skipped", 5.0)]


def test_a_patch_that_changes_no_time_keeps_the_due_time(service, scheduler) -> None:
    schedule = service.schedules.create(ME, nightly())
    due_now(service, schedule.id, utc(2026, 1, 1, 3))
    kept = service.schedules.patch(ME, schedule.id, {"enabled": True, "cron": "0 3 * * *",
                                                     "goal": "Summarise the week"})
    assert kept.next_run_at == utc(2026, 1, 1, 3)  # still due: it fires as it would have
    assert scheduler.fire(utc(2026, 1, 1, 3))[0].agent.goal == "Summarise the week"
