"""LangGraph's SDK (README, LangGraph SDK), driven by `langgraph_sdk` itself against a real
API and worker: assistants, threads and their state, runs and their statuses, shapes
checked against `langgraph_sdk.schema`'s types and LangChain's own message parser."""

from __future__ import annotations

import typing
from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import AuthenticationError, ConflictError, NotFoundError
from langgraph_sdk.schema import Assistant, Run, Thread, ThreadState

from tests.support.api_server import wait_until
from tests.support.live_stack import LiveStack

pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]
pytestmark = pytest.mark.integration

GOAL = "What is 1234 * 902?"
ANSWER = "1113068"
RUN_STATUSES = typing.get_args(typing.get_type_hints(Run)["status"])


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def assert_shape(value: dict, shape: type) -> None:
    """Every key the SDK's TypedDict requires is there (its hints say which are not)."""
    hints = typing.get_type_hints(shape, include_extras=True)
    required = {k for k, hint in hints.items() if typing.get_origin(hint) is not typing.NotRequired}
    missing = required - set(value)
    assert not missing, f"{shape.__name__} lacks {missing}"


@pytest.fixture(scope="module")
def client(live_stack: LiveStack):
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=live_stack.api_key) as sdk:
        yield sdk


@pytest.fixture
def fresh(live_stack: LiveStack):
    """A client of a user of its own (listings start empty)."""
    key = live_stack.api.user()
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=key) as sdk:
        yield sdk


def test_assistants_search_and_get_are_ours_of_graph_agent(live_stack: LiveStack, fresh):
    found = fresh.assistants.search()
    assert [a["name"] for a in found] == ["agent"]
    for assistant in found:
        assert_shape(assistant, Assistant)
        assert assistant["graph_id"] == "agent"
    assert fresh.assistants.get("agent")["assistant_id"] == found[0]["assistant_id"]
    assert fresh.assistants.get(found[0]["assistant_id"])["name"] == "agent"
    assert fresh.assistants.search(graph_id="other") == []
    with pytest.raises(NotFoundError):
        fresh.assistants.get("nobody-has-this")


def test_a_key_in_x_api_key_is_needed(live_stack: LiveStack):
    for key in ("not-a-key", None):
        with (get_sync_client(url=f"{live_stack.url}/langgraph", api_key=key) as wrong,
              pytest.raises(AuthenticationError)):
            wrong.assistants.search()


def test_a_run_waited_for_gives_the_threads_messages(client):
    thread = client.threads.create(metadata={"purpose": "test"})
    assert_shape(thread, Thread)
    assert thread["status"] == "idle" and thread["metadata"] == {"purpose": "test"}
    values = client.runs.wait(thread["thread_id"], "agent", input=human(GOAL))
    messages = convert_to_messages(values["messages"])
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert messages[0].content == GOAL
    assert messages[1].tool_calls[0]["name"] == "calculate"
    assert messages[2].tool_call_id == messages[1].tool_calls[0]["id"]
    assert messages[3].content == ANSWER

    state = client.threads.get_state(thread["thread_id"])
    assert_shape(state, ThreadState)
    assert state["values"]["messages"] == values["messages"] and state["next"] == []
    got = client.threads.get(thread["thread_id"])
    assert got["status"] == "idle" and got["values"]["messages"] == values["messages"]

    again = client.runs.wait(thread["thread_id"], "agent", input=human("and again?"))
    assert again["messages"][:4] == values["messages"]  # the thread goes on
    assert again["messages"][4]["content"] == "and again?"
    history = client.threads.get_history(thread["thread_id"])
    assert [len(s["values"]["messages"]) for s in history] == [len(again["messages"]), 4]
    assert history[0]["parent_checkpoint"]["checkpoint_id"] == history[1]["checkpoint"]["checkpoint_id"]


def test_threads_search_lists_the_users_threads_and_filters(fresh):
    made = fresh.threads.create(metadata={"team": "red"})
    run = fresh.runs.wait(None, "agent", input=human(GOAL))
    assert run["messages"][-1]["content"] == ANSWER
    listed = fresh.threads.search()
    assert len(listed) == 2 and made["thread_id"] in {t["thread_id"] for t in listed}
    assert [t["thread_id"] for t in fresh.threads.search(metadata={"team": "red"})] == [
        made["thread_id"]]
    assert [t["thread_id"] for t in fresh.threads.search(status="idle", limit=1)]
    with pytest.raises(NotFoundError):
        fresh.threads.get("00000000-0000-0000-0000-000000000000")


def test_runs_create_get_list_join_and_statuses(client):
    thread = client.threads.create()
    run = client.runs.create(thread["thread_id"], "agent", input=human(GOAL))
    assert_shape(run, Run)
    assert run["status"] in ("pending", "running")
    assert set(RUN_STATUSES) >= {"pending", "running", "success", "error", "interrupted"}
    values = client.runs.join(thread["thread_id"], run["run_id"])
    assert values["messages"][-1]["content"] == ANSWER
    got = client.runs.get(thread["thread_id"], run["run_id"])
    assert got["status"] == "success" and got["thread_id"] == thread["thread_id"]
    assert [r["run_id"] for r in client.runs.list(thread["thread_id"])] == [run["run_id"]]


def test_reject_is_a_409_and_cancel_interrupts(client):
    thread = client.threads.create()
    slow = client.runs.create(thread["thread_id"], "agent", input=human("slow: " + GOAL))
    with pytest.raises(ConflictError):
        client.runs.create(thread["thread_id"], "agent", input=human(GOAL))
    client.runs.cancel(thread["thread_id"], slow["run_id"])
    wait_until(lambda: client.runs.get(thread["thread_id"], slow["run_id"])["status"]
               == "interrupted")
    with pytest.raises(ConflictError):
        client.runs.cancel(thread["thread_id"], slow["run_id"])


def test_another_users_runs_and_threads_are_not_found(client, fresh):
    thread = client.threads.create()
    run = client.runs.create(thread["thread_id"], "agent", input=human(GOAL))
    with pytest.raises(NotFoundError):
        fresh.threads.get(thread["thread_id"])
    with pytest.raises(NotFoundError):
        fresh.runs.get(thread["thread_id"], run["run_id"])
    with pytest.raises(NotFoundError):
        fresh.runs.create(thread["thread_id"], "agent", input=human(GOAL))


def test_enqueued_runs_take_their_turns_in_arrival_order(live_stack: LiveStack, client):
    thread = client.threads.create()
    tid = thread["thread_id"]
    active = client.runs.create(tid, "agent", input=human("slow: " + GOAL))
    goals = ["first?", "second?"]
    with ThreadPoolExecutor(2) as pool:  # two creates at once
        made = dict(zip(goals, pool.map(lambda goal: client.runs.create(
            tid, "agent", input=human(goal), multitask_strategy="enqueue"), goals), strict=True))
    assert [r["status"] for r in made.values()] == ["pending", "pending"]
    goal_of = {r["run_id"]: goal for goal, r in made.items()}
    listed = client.runs.list(tid)  # newest first
    assert listed[-1]["run_id"] == active["run_id"]
    arrived = [goal_of[r["run_id"]] for r in reversed(listed) if r["run_id"] in goal_of]
    with live_stack.api.client(live_stack.api_key) as rest:
        # Not an agent yet: nothing holds a worker while it waits its turn.
        assert rest.get(f"/api/v1/agents/{made[arrived[0]]['run_id']}").status_code == 404
    done = client.runs.join(tid, made[arrived[1]]["run_id"])
    told = [m["content"] for m in done["messages"] if m["type"] == "human"]
    assert told == ["slow: " + GOAL, *arrived]  # the thread took them in arrival order
    for run in (active, made[arrived[0]]):
        assert client.runs.get(tid, run["run_id"])["status"] == "success"


def test_an_interrupt_is_our_approval_and_command_resume_answers_it(live_stack: LiveStack, client):
    with live_stack.api.client(live_stack.api_key) as rest:
        rest.post("/api/v1/assistants", json={"name": "careful", "approve_tools": ["calculate"]})
    thread = client.threads.create()
    tid = thread["thread_id"]
    paused = client.runs.wait(tid, "careful", input=human(GOAL))
    (interrupt,) = paused["__interrupt__"]
    assert interrupt["value"]["tool"] == "calculate"
    assert client.threads.get(tid)["status"] == "interrupted"
    state = client.threads.get_state(tid)
    assert state["next"] == ["agent"] and state["interrupts"][0]["id"] == interrupt["id"]
    (run,) = client.runs.list(tid)
    assert run["status"] == "interrupted"
    with pytest.raises(ConflictError):  # the thread is not free while it waits
        client.runs.create(tid, "careful", input=human(GOAL))

    resumed = client.runs.wait(tid, "careful", command={"resume": {"approve": True}})
    assert resumed["messages"][-1]["content"] == ANSWER and "__interrupt__" not in resumed
    assert client.threads.get(tid)["status"] == "idle"
    # Two runs, as LangGraph's server shows them: the interrupted one stays so.
    assert [r["status"] for r in client.runs.list(tid)] == ["success", "interrupted"]
    assert client.runs.get(tid, run["run_id"])["status"] == "interrupted"

    denied_thread = client.threads.create()["thread_id"]
    client.runs.wait(denied_thread, "careful", input=human(GOAL))
    parts = list(client.runs.stream(denied_thread, "careful", stream_mode="updates",
                                    command={"resume": {"approve": False, "reason": "no"}}))
    assert parts[-1].event == "end" and parts[-1].data["status"] == "success"
    tools = [m for p in parts if p.event == "updates" for m in p.data.get("tools", {}).get(
        "messages", [])]
    assert tools[0]["content"].startswith("denied")
    with pytest.raises(ConflictError):  # nothing waits any more
        client.runs.create(denied_thread, "careful", command={"resume": {"approve": True}})


def test_a_queued_run_starts_at_a_workers_sweep_with_nobody_waiting_on_it(client):
    thread = client.threads.create()
    tid = thread["thread_id"]
    active = client.runs.create(tid, "agent", input=human("slow: " + GOAL))
    queued = client.runs.create(tid, "agent", input=human("next?"), multitask_strategy="enqueue")
    assert queued["status"] == "pending"
    # Nothing here waits on it or streams it (runs.get only reads): the worker starts it.
    wait_until(lambda: client.runs.get(tid, queued["run_id"])["status"] in ("success", "error"),
               timeout_s=60)
    assert client.runs.get(tid, active["run_id"])["status"] == "success"
    goals = [m["content"] for m in client.threads.get_state(tid)["values"]["messages"]
             if m["type"] == "human"]
    assert goals == ["slow: " + GOAL, "next?"]


def test_a_queued_run_cancelled_before_its_turn_never_runs(client):
    thread = client.threads.create()
    tid = thread["thread_id"]
    active = client.runs.create(tid, "agent", input=human("slow: " + GOAL))
    queued = client.runs.create(tid, "agent", input=human("never"), multitask_strategy="enqueue")
    client.runs.cancel(tid, queued["run_id"])
    assert client.runs.get(tid, queued["run_id"])["status"] == "interrupted"
    client.runs.join(tid, active["run_id"])
    assert "never" not in [m["content"] for m in client.threads.get_state(tid)["values"]["messages"]]
