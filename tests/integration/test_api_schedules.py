"""Schedules over HTTP (README, Schedules): a real API process on PostgreSQL, and the
agents a due time makes, fired and run by a real worker against an Ollama look-alike."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, update

from jarvis_agents.store.schedules import ScheduleRow
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api, stack

NIGHTLY = {"goal": "Summarise yesterday's tickets", "cron": "0 3 * * *",
           "timezone": "Europe/Paris", "max_steps": 4, "tools": ["CALCULATE"]}
schedules = ScheduleRow.__table__


def test_create_list_get_patch_and_delete(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        created = http.post("/api/v1/schedules", json=NIGHTLY)
        assert created.status_code == 201, created.text
        made = created.json()
        assert created.headers["Location"] == f"/api/v1/schedules/{made['id']}"
        assert (made["goal"], made["cron"], made["timezone"], made["tools"]) == (
            NIGHTLY["goal"], "0 3 * * *", "Europe/Paris", ["calculate"])
        assert (made["thread"], made["overlap"], made["enabled"], made["skipped"]) == (
            "new", "skip", True, 0)
        next_run = datetime.fromisoformat(made["next_run_at"])
        # 03:00 in Paris is 01:00 or 02:00 UTC, whatever the season.
        assert next_run > datetime.now(UTC) and next_run.astimezone(UTC).hour in (1, 2)
        assert http.get("/api/v1/schedules").json() == {"schedules": [made]}
        assert http.get(f"/api/v1/schedules/{made['id']}").json() == made

        paused = http.patch(f"/api/v1/schedules/{made['id']}",
                            json={"enabled": False, "tools": None, "cron": "30 6 * * 1-5"})
        assert paused.status_code == 200, paused.text
        changed = paused.json()
        assert (changed["enabled"], changed["tools"], changed["cron"], changed["next_run_at"]) == (
            False, None, "30 6 * * 1-5", None)
        assert changed["max_steps"] == 4  # what the PATCH did not name stays
        resumed = http.patch(f"/api/v1/schedules/{made['id']}", json={"enabled": True}).json()
        assert datetime.fromisoformat(resumed["next_run_at"]) > datetime.now(UTC)

        assert http.delete(f"/api/v1/schedules/{made['id']}").status_code == 204
        assert http.get(f"/api/v1/schedules/{made['id']}").status_code == 404
        assert http.get("/api/v1/schedules").json() == {"schedules": []}


@pytest.mark.parametrize(("body", "code", "says"), [
    ({"cron": "* * * * * *"}, "invalid_cron", "5 fields"),
    ({"cron": "0 25 * * *"}, "invalid_cron", "not a valid cron"),
    ({"cron": "0 0 30 2 *"}, "invalid_cron", "never fires"),
    ({"timezone": "Mars/Olympus"}, "invalid_timezone", "IANA"),
    ({"overlap": "queue"}, "invalid_request", "`overlap`"),
    ({"thread_id": str(uuid.uuid4())}, "invalid_request", "thread"),
    ({"tools": ["no_such_tool"]}, "unknown_tool", "no_such_tool"),
    ({"goal": "  "}, "invalid_request", "blank"),
    ({"every": "day"}, "invalid_request", "unknown field `every`"),
])
def test_a_bad_schedule_is_a_400_saying_what_to_fix(shared_api, body, code, says):
    api = shared_api()
    with api.client(api.user()) as http:
        refused = http.post("/api/v1/schedules", json={**NIGHTLY, **body})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == code and says in error["message"], error
        made = http.post("/api/v1/schedules", json=NIGHTLY).json()
        patched = http.patch(f"/api/v1/schedules/{made['id']}", json=body)
        assert patched.status_code == 400 and patched.json()["error"]["code"] == code


def test_another_users_schedule_is_a_404_and_the_limit_a_429(shared_api):
    api = shared_api(JARVIS_MAX_SCHEDULES_PER_USER="2")
    with api.client(api.user()) as mine, api.client(api.user()) as theirs:
        made = mine.post("/api/v1/schedules", json=NIGHTLY).json()
        for method in ("get", "patch", "delete"):
            answer = theirs.request(method, f"/api/v1/schedules/{made['id']}",
                                    **({"json": {"enabled": False}} if method == "patch" else {}))
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == "schedule_not_found"
        assert theirs.get("/api/v1/schedules/not-a-uuid").status_code == 404
        assert theirs.get("/api/v1/schedules").json() == {"schedules": []}
        assert mine.post("/api/v1/schedules", json=NIGHTLY).status_code == 201
        over = mine.post("/api/v1/schedules", json=NIGHTLY)
        assert over.status_code == 429 and over.json()["error"]["code"] == "too_many_schedules"
        assert theirs.post("/api/v1/schedules", json={**NIGHTLY, "assistant": "ghost"}
                           ).status_code == 404  # an assistant not theirs


def due_now(env: dict[str, str], schedule_id: str, *, ago_s: float = 1) -> None:
    """Move the schedule's due time to just past, as if its clock had come round."""
    engine = create_engine(env["DATABASE_URL"])
    with engine.begin() as conn:
        conn.execute(update(schedules).where(schedules.c.id == uuid.UUID(schedule_id))
                     .values(next_run_at=datetime.now(UTC) - timedelta(seconds=ago_s)))
    engine.dispose()


def test_a_due_time_makes_one_agent_that_a_worker_runs(stack):
    stack.fake.responder = lambda request: "THOUGHT: done\nFINAL_ANSWER: 3 tickets"
    with stack.api.client(stack.api.user()) as http:
        made = http.post("/api/v1/schedules", json={**NIGHTLY, "thread": "same"}).json()
        due_now(stack.env, made["id"])

        def listed() -> list[dict]:
            return http.get("/api/v1/agents", params={"schedule_id": made["id"]}).json()["agents"]

        (first,) = wait_until(listed, 15)
        assert first["schedule_id"] == made["id"] and first["goal"] == NIGHTLY["goal"]
        assert first["max_steps"] == 4
        done = http.get(f"/api/v1/agents/{first['id']}", params={"wait": 30}).json()
        assert done["status"] == "COMPLETED" and done["final_answer"] == "3 tickets", done
        schedule = http.get(f"/api/v1/schedules/{made['id']}").json()
        assert schedule["last_agent_id"] == first["id"] and schedule["thread_id"] == first["id"]
        assert datetime.fromisoformat(schedule["next_run_at"]) > datetime.now(UTC)

        due_now(stack.env, made["id"])
        second = wait_until(lambda: len(listed()) == 2 and listed()[0], 15)
        assert second["thread_id"] == first["id"] and second["parent_id"] == first["id"]
        assert http.get("/api/v1/agents", params={"schedule_id": "nope"}).status_code == 400
        other = stack.api.client(stack.api.user())
        with other:
            assert other.get("/api/v1/agents", params={"schedule_id": made["id"]}).json()[
                "agents"] == []

    def counted() -> bool:
        text = stack.api.client(stack.api.user()).get("/metrics").text
        return 'jarvis_schedule_firings_total{outcome="fired"}' in text and (
            "jarvis_schedule_lag_seconds_count" in text)

    wait_until(counted, 20)
