"""A2A 1.0 (README, A2A), driven by the official `a2a-sdk` client against a real API and
worker: the cards, every method, the error codes, approvals as INPUT_REQUIRED, and a
stream resumed after its client went away."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import TaskState
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from tests.support.a2a_client import A2A, message
from tests.support.api_server import wait_until
from tests.support.live_stack import LiveStack

pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]
pytestmark = pytest.mark.integration

GOAL = "What is 1234 * 902?"
ANSWER = "1113068"
S = TaskState


@pytest.fixture
def a2a(live_stack: LiveStack):
    with A2A(live_stack.url, live_stack.api_key) as client:
        yield client


def _text(parts) -> str:
    return "".join(p.text for p in parts)


def test_the_public_card_needs_no_key_and_names_the_host_it_was_asked_on(live_stack: LiveStack):
    port = live_stack.url.rsplit(":", 1)[1]
    for host in ("127.0.0.1", "localhost"):
        for path in ("/.well-known/agent-card.json", "/a2a/.well-known/agent-card.json"):
            card = httpx.get(f"http://{host}:{port}{path}", timeout=10).json()
            assert card["supportedInterfaces"][0]["url"] == f"http://{host}:{port}/a2a"
            assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
            assert card["capabilities"]["streaming"] is True
            assert card["capabilities"]["pushNotifications"] is True
            scheme = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
            assert scheme["scheme"].lower() == "bearer"


def test_the_extended_card_lists_the_users_assistants_as_skills(live_stack: LiveStack, a2a: A2A):
    with live_stack.api.client(live_stack.api_key) as rest:
        assert rest.post("/api/v1/assistants", json={
            "name": "researcher", "description": "digs things up"}).status_code == 201
    card = a2a.extended_card()
    skills = {skill.id: skill.description for skill in card.skills}
    assert skills["researcher"] == "digs things up"
    assert "agent" in skills
    with A2A(live_stack.url, live_stack.api.user()) as other:
        assert "researcher" not in {skill.id for skill in other.extended_card().skills}


def test_a_blocking_send_answers_with_the_completed_task_and_its_artifact(a2a: A2A):
    task = a2a.send(GOAL)
    assert task.status.state == S.TASK_STATE_COMPLETED
    assert _text(task.artifacts[0].parts) == ANSWER
    assert task.context_id == task.id  # a new thread: its id is its first agent's
    assert _text(task.history[0].parts) == GOAL
    assert [MessageToDict(m.metadata)["type"] for m in task.history[1:]] == [
        "THINK", "ACT", "OBSERVE", "THINK", "FINAL"]


def test_return_immediately_answers_at_once_and_get_task_follows_it(a2a: A2A):
    task = a2a.send("slow: " + GOAL, return_immediately=True)
    assert task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)
    wait_until(lambda: a2a.get(task.id).status.state == S.TASK_STATE_COMPLETED)
    got = a2a.get(task.id, history_length=2)
    assert len(got.history) == 2
    assert a2a.get(task.id, history_length=0).history == []


def test_a_message_in_a_context_follows_the_thread_up(a2a: A2A):
    first = a2a.send(GOAL)
    second = a2a.send(message("and again?", context_id=first.context_id))
    assert second.context_id == first.context_id and second.id != first.id
    listed = a2a.list(context_id=first.context_id)
    assert [t.id for t in listed.tasks] == [second.id, first.id]
    assert listed.total_size == 2
    with pytest.raises(InvalidParamsError):
        a2a.send(message(GOAL, context_id="not-one-of-ours"))


def test_list_tasks_filters_by_status_and_pages(a2a: A2A, live_stack: LiveStack):
    with A2A(live_stack.url, live_stack.api.user()) as fresh:
        done = [fresh.send(GOAL).id for _ in range(3)]
        first = fresh.list(page_size=2)
        assert [t.id for t in first.tasks] == done[::-1][:2]
        assert first.total_size == 3 and first.next_page_token
        rest = fresh.list(page_size=2, page_token=first.next_page_token)
        assert [t.id for t in rest.tasks] == done[:1] and rest.next_page_token == ""
        assert fresh.list(status=S.TASK_STATE_WORKING).tasks == []
        assert len(fresh.list(status=S.TASK_STATE_COMPLETED).tasks) == 3
        assert not fresh.list().tasks[0].artifacts  # left out unless asked for
        assert fresh.list(include_artifacts=True).tasks[0].artifacts
        with pytest.raises(InvalidParamsError):
            fresh.list(page_token="not-a-token")


def test_the_stream_tells_each_iteration_then_the_artifact_and_the_final_status(a2a: A2A):
    events = a2a.stream(GOAL)
    assert events[0].HasField("task")
    updates = [e.status_update for e in events if e.HasField("status_update")]
    working = [MessageToDict(u.status.message.metadata) for u in updates
               if u.status.state == S.TASK_STATE_WORKING]
    assert {w["step"] for w in working} == {0, 1}  # at least one per ReACT iteration
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert _text(artifacts[0].artifact.parts) == ANSWER
    assert events[-1].status_update.status.state == S.TASK_STATE_COMPLETED


def test_a_stream_dropped_midway_is_resumed_by_subscribing(a2a: A2A):
    def first_step(event) -> bool:
        return event.HasField("status_update") and event.status_update.status.state == (
            S.TASK_STATE_WORKING)

    seen = a2a.stream("slow: " + GOAL, until=first_step)
    task_id = seen[0].task.id
    resumed = a2a.subscribe(task_id)
    assert resumed[0].task.id == task_id  # the task as it is, first
    assert resumed[-1].status_update.status.state == S.TASK_STATE_COMPLETED
    assert any(e.HasField("artifact_update") for e in resumed)
    with pytest.raises(UnsupportedOperationError):
        a2a.subscribe(task_id)  # it has ended: GetTask reads it


def test_cancel_a_running_task_and_not_an_ended_one(a2a: A2A):
    task = a2a.send("slow: " + GOAL, return_immediately=True)
    assert a2a.cancel(task.id).status.state == S.TASK_STATE_CANCELED
    assert a2a.get(task.id).status.state == S.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        a2a.cancel(task.id)


def test_an_unknown_or_another_users_task_is_not_found(a2a: A2A, live_stack: LiveStack):
    mine = a2a.send(GOAL, return_immediately=True)
    with A2A(live_stack.url, live_stack.api.user()) as other:
        for call in (other.get, other.cancel, other.subscribe):
            with pytest.raises(TaskNotFoundError):
                call(mine.id)
        with pytest.raises(TaskNotFoundError):
            other.send(message("approve", task_id=mine.id))
        assert mine.id not in [t.id for t in other.list().tasks]
    with pytest.raises(TaskNotFoundError):
        a2a.get("00000000-0000-0000-0000-000000000000")
    with pytest.raises(TaskNotFoundError):
        a2a.get("not-a-task")


def test_without_a_key_every_method_is_refused(live_stack: LiveStack):
    with A2A(live_stack.url, None) as anonymous:
        with pytest.raises(A2AClientError, match="401"):
            anonymous.send(GOAL)
        with pytest.raises(A2AClientError, match="401"):
            anonymous.extended_card()
    with A2A(live_stack.url, "not-a-key") as wrong, pytest.raises(A2AClientError, match="401"):
        wrong.get("00000000-0000-0000-0000-000000000000")


def test_an_approval_is_input_required_and_a_message_on_the_task_answers_it(
    live_stack: LiveStack, a2a: A2A,
):
    with live_stack.api.client(live_stack.api_key) as rest:
        rest.post("/api/v1/assistants", json={"name": "careful", "approve_tools": ["calculate"]})
    task = a2a.send(message(GOAL, assistant="careful"))
    assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
    asks = task.status.message
    assert "calculate" in _text(asks.parts)
    assert MessageToDict(asks.parts[1].data)["tool"] == "calculate"
    with pytest.raises(InvalidParamsError):
        a2a.send(message("maybe", task_id=task.id))
    done = a2a.send(message(data={"approve": True}, task_id=task.id))
    assert done.id == task.id and done.status.state == S.TASK_STATE_COMPLETED
    assert _text(done.artifacts[0].parts) == ANSWER

    denied = a2a.send(message(GOAL, assistant="careful"))
    finished = a2a.send(message("deny", task_id=denied.id))
    assert finished.status.state == S.TASK_STATE_COMPLETED
    observations = [_text(m.parts) for m in finished.history
                    if MessageToDict(m.metadata).get("type") == "OBSERVE"]
    assert observations[0].startswith("denied")
    with pytest.raises(UnsupportedOperationError):
        a2a.send(message("approve", task_id=finished.id))  # it has ended


def test_a_repeated_message_id_gives_the_same_task(a2a: A2A):
    again = message(GOAL)
    assert a2a.send(again).id == a2a.send(again).id
