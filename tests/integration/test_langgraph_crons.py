"""LangGraph's crons as our schedules (README, LangGraph SDK), driven by `langgraph_sdk`
itself against a real API and worker: create, create_for_thread, search and delete, the
shapes checked against `langgraph_sdk.schema.Cron`, and a due time that makes a run the
SDK then sees."""

from __future__ import annotations

import typing
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import BadRequestError, NotFoundError
from langgraph_sdk.schema import Cron
from sqlalchemy import create_engine, update

from jarvis_agents.store.schedules import ScheduleRow
from tests.support.api_server import wait_until
from tests.support.live_stack import LiveStack

pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]
pytestmark = pytest.mark.integration

GOAL = "What is 1234 * 902?"
ANSWER = "1113068"
NIGHTLY = "0 3 * * *"
schedules = ScheduleRow.__table__


def human(text: str) -> dict:
    return {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": text}]}


def assert_cron(value: dict) -> None:
    """Every key of the SDK's `Cron` is there, none we do not know of."""
    assert set(value) == set(typing.get_type_hints(Cron)), value


def due_now(live_stack: LiveStack, cron_id: str) -> None:
    """Move the cron's due time to just past, as if its clock had come round."""
    engine = create_engine(live_stack.api.env["DATABASE_URL"])
    with engine.begin() as conn:
        conn.execute(update(schedules).where(schedules.c.id == uuid.UUID(cron_id))
                     .values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))
    engine.dispose()


@pytest.fixture
def fresh(live_stack: LiveStack):
    """A client of a user of its own (listings start empty)."""
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=live_stack.api.user()) as sdk:
        yield sdk


@pytest.fixture
def other(live_stack: LiveStack):
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=live_stack.api.user()) as sdk:
        yield sdk


def test_crons_are_schedules_created_searched_and_deleted(live_stack: LiveStack):
    key = live_stack.api.user()
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=key) as fresh:
        crons_are_schedules(live_stack, key, fresh)


def crons_are_schedules(live_stack: LiveStack, key: str, fresh) -> None:
    agent_id = fresh.assistants.get("agent")["assistant_id"]
    stateless = fresh.crons.create("agent", schedule=NIGHTLY, input=human(GOAL),
                                   timezone="Europe/Paris")
    assert_cron(stateless)
    assert (stateless["assistant_id"], stateless["schedule"], stateless["timezone"],
            stateless["thread_id"], stateless["enabled"]) == (
        agent_id, NIGHTLY, "Europe/Paris", None, True)
    assert stateless["payload"]["input"]["messages"][-1]["content"] == GOAL
    next_run = datetime.fromisoformat(stateless["next_run_date"])
    # 03:00 in Paris is 01:00 or 02:00 UTC, whatever the season.
    assert next_run > datetime.now(UTC) and next_run.astimezone(UTC).hour in (1, 2)

    thread = fresh.threads.create()["thread_id"]
    on_thread = fresh.crons.create_for_thread(thread, "agent", schedule="*/5 * * * *",
                                              input=human(GOAL), enabled=False)
    assert_cron(on_thread)
    assert (on_thread["thread_id"], on_thread["enabled"], on_thread["next_run_date"]) == (
        thread, False, None)

    found = fresh.crons.search()
    assert [c["cron_id"] for c in found] == [on_thread["cron_id"], stateless["cron_id"]]
    for cron in found:
        assert_cron(cron)
    assert [c["cron_id"] for c in fresh.crons.search(thread_id=thread)] == [on_thread["cron_id"]]
    assert [c["cron_id"] for c in fresh.crons.search(enabled=True)] == [stateless["cron_id"]]
    assert len(fresh.crons.search(assistant_id="agent")) == 2
    assert fresh.crons.search(assistant_id="nobody") == []
    assert [c["cron_id"] for c in fresh.crons.search(limit=1, offset=1)] == [stateless["cron_id"]]
    assert fresh.crons.search(select=["cron_id"], limit=1) == [{"cron_id": on_thread["cron_id"]}]
    with live_stack.api.client(key) as rest:
        listed = rest.get("/api/v1/schedules").json()["schedules"]
        assert {s["id"] for s in listed} == {stateless["cron_id"], on_thread["cron_id"]}
        assert {s["thread"] for s in listed} == {"new", "same"}

    fresh.crons.delete(stateless["cron_id"])
    assert [c["cron_id"] for c in fresh.crons.search()] == [on_thread["cron_id"]]
    with pytest.raises(NotFoundError):
        fresh.crons.delete(stateless["cron_id"])


def test_another_users_cron_and_thread_are_not_found(fresh, other):
    thread = fresh.threads.create()["thread_id"]
    cron = fresh.crons.create_for_thread(thread, "agent", schedule=NIGHTLY, input=human(GOAL))
    assert other.crons.search() == []
    with pytest.raises(NotFoundError):
        other.crons.delete(cron["cron_id"])
    with pytest.raises(NotFoundError):
        other.crons.create_for_thread(thread, "agent", schedule=NIGHTLY, input=human(GOAL))
    with pytest.raises(NotFoundError):
        other.crons.delete("not-a-cron")
    with pytest.raises(NotFoundError):
        other.crons.create("ghost", schedule=NIGHTLY, input=human(GOAL))
    assert [c["cron_id"] for c in fresh.crons.search()] == [cron["cron_id"]]


@pytest.mark.parametrize(("change", "says"), [
    ({"schedule": "* * * * * *"}, "5 fields"),
    ({"schedule": "0 25 * * *"}, "not a valid cron"),
    ({"timezone": "Mars/Olympus"}, "IANA"),
    ({"input": {"messages": [{"role": "ai", "content": "hi"}]}}, "human"),
    ({"end_time": datetime(2030, 1, 1, tzinfo=UTC)}, "end_time"),
    ({"metadata": {"team": "red"}}, "metadata"),
    ({"multitask_strategy": "enqueue"}, "reject"),
    ({"schedule": "1,2,3,4,5,6,7,8,9,10 " * 20 + "* * * *"}, "5 fields"),
    ({"webhook": "ftp://example.com/hook"}, "http(s)"),
])
def test_a_bad_cron_is_a_400_saying_what_to_fix(fresh, change, says):
    with pytest.raises(BadRequestError) as refused:
        fresh.crons.create("agent", **{"schedule": NIGHTLY, "input": human(GOAL), **change})
    assert says in refused.value.response.json()["error"]["message"]
    assert fresh.crons.search() == []


def test_a_search_with_odd_fields_is_a_400_or_ignores_them(fresh):
    fresh.crons.create("agent", schedule=NIGHTLY, input=human(GOAL))
    assert len(fresh.crons.search(select=["cron_id", ["x"]])) == 1
    for wrong in ({"sort_by": "goal"}, {"sort_order": "sideways"}, {"limit": 0}):
        with pytest.raises(BadRequestError):
            fresh.http.post("/runs/crons/search", json=wrong)


def test_a_due_cron_makes_a_run_on_its_thread_that_the_sdk_sees(live_stack: LiveStack, fresh):
    thread = fresh.threads.create()["thread_id"]
    cron = fresh.crons.create_for_thread(thread, "agent", schedule=NIGHTLY, input=human(GOAL))
    due_now(live_stack, cron["cron_id"])
    (run,) = wait_until(lambda: fresh.runs.list(thread), 15)
    values = fresh.runs.join(thread, run["run_id"])
    assert values["messages"][0]["content"] == GOAL and values["messages"][-1]["content"] == ANSWER
    assert fresh.runs.get(thread, run["run_id"])["status"] == "success"
    (after,) = fresh.crons.search()
    assert datetime.fromisoformat(after["next_run_date"]) > datetime.now(UTC)

    due_now(live_stack, cron["cron_id"])  # the next one follows up in the same thread
    runs = wait_until(lambda: len(fresh.runs.list(thread)) == 2 and fresh.runs.list(thread), 15)
    fresh.runs.join(thread, runs[0]["run_id"])
    told = [m["content"] for m in fresh.threads.get_state(thread)["values"]["messages"]
            if m["type"] == "human"]
    assert told == [GOAL, GOAL]


def test_a_due_stateless_cron_makes_a_run_on_a_thread_of_its_own(live_stack: LiveStack, fresh):
    cron = fresh.crons.create("agent", schedule=NIGHTLY, input=human(GOAL))
    due_now(live_stack, cron["cron_id"])
    (thread,) = wait_until(lambda: fresh.threads.search(), 15)
    (run,) = fresh.runs.list(thread["thread_id"])
    values = fresh.runs.join(thread["thread_id"], run["run_id"])
    assert values["messages"][-1]["content"] == ANSWER
