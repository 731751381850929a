"""Conversations and forks (docs/api.md §8) on real SQLite and PostgreSQL: the service, the
store and the executor, with a scripted model."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from jarvis_agents.config import Settings
from jarvis_agents.errors import Conflict, NotFound, RequestError
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, utcnow
from jarvis_agents.llm.base import ChatMessage
from jarvis_agents.llm.scripted import Reply, ScriptedChatModel
from jarvis_agents.service import AgentService, CreateRequest, ForkRequest
from jarvis_agents.store.repository import Repository
from jarvis_agents.store.threads import is_thread_taken
from jarvis_agents.tools.registry import ToolRegistry
from tests.support.dispatchers import NoQueue

ADD = "THOUGHT: add them\nACTION: calculate\nINPUT: {}"


def answer(text: str) -> str:
    return f"THOUGHT: done\nFINAL_ANSWER: {text}"


@dataclass
class World:
    repository: Repository
    service: AgentService
    tools: ToolRegistry
    user: uuid.UUID

    def create(self, goal: str, **kw: Any) -> Agent:
        agent, created = self.service.create(self.user, CreateRequest(goal=goal, **kw))
        assert created
        return agent

    def run(self, agent: Agent, replies: Sequence[Reply]) -> tuple[Agent | None, list[list[ChatMessage]]]:
        """Claim the agent and run it against `replies`; it as ended, and what the model saw."""
        claimed = self.repository.claim(agent.id)
        assert claimed is not None
        model = ScriptedChatModel(list(replies))
        return self.executor(model).run(claimed), model.calls

    def executor(self, model: ScriptedChatModel) -> Executor:
        return Executor(store=self.repository, model=model, tools=self.tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=60))


@pytest.fixture
def world(repository: Repository, tmp_path: Path) -> Iterator[World]:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_CONTEXT_CHARS": "2000"})
    service = AgentService(repository=repository, settings=settings, dispatcher=NoQueue(),  # type: ignore[arg-type]
                           events=MemoryEventBus(), tool_names=["calculate"])
    tools = ToolRegistry.default(settings)
    user, _ = repository.users.create("threader")
    yield World(repository, service, tools, user.id)
    tools.close()


def test_a_follow_up_sees_the_threads_goals_and_answers_oldest_first(world: World) -> None:
    first = world.create("What is 20 °C in Kelvin?")
    done, _ = world.run(first, [answer("293.15 K")])
    assert done is not None and done.status is AgentStatus.COMPLETED
    assert first.thread_id == first.id and first.to_json()["parent_id"] is None
    second = world.create("And in Fahrenheit?", thread_id=first.id)
    assert (second.thread_id, second.parent_id) == (first.id, first.id)
    done, calls = world.run(second, [answer("68 °F")])
    assert done is not None and done.final_answer == "68 °F"
    said = [(m.role, m.content) for m in calls[0] if m.role != "system"]
    assert said == [("user", "What is 20 °C in Kelvin?"), ("assistant", "293.15 K"),
                    ("user", "And in Fahrenheit?")]
    third = world.create("And in Rankine?", thread_id=first.id)
    assert third.parent_id == second.id
    _, calls = world.run(third, [answer("527.67 °R")])
    contents = [m.content for m in calls[0] if m.role != "system"]
    assert contents == ["What is 20 °C in Kelvin?", "293.15 K", "And in Fahrenheit?", "68 °F",
                        "And in Rankine?"]
    body = third.to_json()
    assert body["thread_id"] == str(first.id) and body["context"] == {"turns": 2, "left_out": 0}
    listed, _ = world.service.list(world.user, status=None, limit=10, cursor=None, thread_id=first.id)
    assert [a.id for a in listed] == [third.id, second.id, first.id]
    alone, _ = world.service.list(world.user, status=None, limit=10, cursor=None, thread_id=third.id)
    assert alone == []


def test_a_thread_is_the_users_own_and_one_agent_at_a_time(world: World) -> None:
    first = world.create("first")
    with pytest.raises(Conflict, match="still PENDING") as busy:
        world.create("too soon", thread_id=first.id)
    assert busy.value.code == "thread_busy"
    with pytest.raises(NotFound, match="no thread"):
        world.create("nowhere", thread_id=uuid.uuid4())
    other, _ = world.repository.users.create("someone-else")
    with pytest.raises(NotFound, match="no thread"):
        world.service.create(other.id, CreateRequest(goal="theirs", thread_id=first.id))


def test_the_database_refuses_a_second_active_agent_in_a_thread(world: World) -> None:
    """The guard is the partial unique index, not the service's look before it."""
    first = world.create("first")
    intruder = Agent.new(user_id=world.user, goal="racing", model="m", max_steps=3)
    with pytest.raises(IntegrityError) as refused:
        world.repository.create_agent(
            Agent(**{**intruder.__dict__, "thread_id": first.thread_id}))
    assert is_thread_taken(refused.value)


def test_racing_follow_ups_leave_one_winner_and_a_409(world: World) -> None:
    first = world.create("first")
    world.run(first, [answer("one")])
    outcomes: list[object] = []
    start = threading.Barrier(4)

    def follow_up(n: int) -> None:
        start.wait()
        try:
            outcomes.append(world.create(f"follow-up {n}", thread_id=first.id))
        except Conflict as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=follow_up, args=(n,)) for n in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(10)
    winners = [o for o in outcomes if isinstance(o, Agent)]
    assert len(outcomes) == 4 and len(winners) == 1
    assert all(o.code == "thread_busy" for o in outcomes if isinstance(o, Conflict))


def test_a_failed_or_cancelled_turn_gives_its_goal_and_what_it_had_found(world: World) -> None:
    first = world.create("Add 2 and 2, then 3 and 3", max_steps=1)
    done, _ = world.run(first, [ADD.format("2 + 2")])
    assert done is not None and done.status is AgentStatus.FAILED
    second = world.create("Cancel me", thread_id=first.id)
    world.service.cancel(world.user, second.id)
    third = world.create("Try again", thread_id=first.id)
    _, calls = world.run(third, [answer("6")])
    turns = [m.content for m in calls[0] if m.role != "system"]
    assert turns[0] == "Add 2 and 2, then 3 and 3"
    assert "did not finish" in turns[1] and "step limit" in turns[1] and "- 4" in turns[1]
    assert turns[2] == "Cancel me" and "cancelled" in turns[3] and "found nothing" in turns[3]
    assert turns[4] == "Try again"


def test_a_thread_of_50_turns_keeps_the_latest_within_the_budget(world: World) -> None:
    """JARVIS_CONTEXT_CHARS=2000 here: the latest turns that fit, the rest named in a note."""
    thread: uuid.UUID | None = None
    for n in range(50):
        agent = world.create(f"question {n}", thread_id=thread)
        thread = thread or agent.id
        claimed = world.repository.claim(agent.id)
        assert claimed is not None
        assert world.repository.transition(
            agent.id, AgentStatus.RUNNING, AgentStatus.COMPLETED, attempt=claimed.attempt,
            final_answer=f"answer {n} " + "x" * 180, stop_reason=StopReason.FINAL_ANSWER)
    last = world.create("question 50", thread_id=thread)
    context = last.to_json()["context"]
    assert isinstance(context, dict) and context["turns"] + context["left_out"] == 50
    assert 0 < context["turns"] < 50
    _, calls = world.run(last, [answer("done")])
    given = [m.content for m in calls[0] if m.role != "system"]
    assert "left out" in given[0] and '"question 0"' not in given[0]  # it names the last 10
    assert f'"question {context["left_out"] - 1}"' in given[0]
    turns = given[2:-1]
    assert sum(map(len, turns)) <= 2000
    assert turns[-2:] == ["question 49", "answer 49 " + "x" * 180] and given[-1] == "question 50"
    stored = world.repository.get(last.id)
    assert stored is not None and stored.context == last.context


def completed_with_two_sums(world: World) -> Agent:
    agent = world.create("Add 1 and 1, then 2 and 2")
    done, _ = world.run(agent, [ADD.format("1 + 1"), ADD.format("2 + 2"), answer("2 and 4")])
    assert done is not None and done.status is AgentStatus.COMPLETED
    return done


def shape(steps: Sequence[Step]) -> list[tuple[int, int, StepType, str | None, str]]:
    return [(s.seq, s.step, s.type, s.tool, s.content) for s in steps]


def test_a_fork_copies_the_steps_and_goes_on_from_there(world: World) -> None:
    original = completed_with_two_sums(world)
    before = world.repository.steps_after(original.id)
    assert [s.seq for s in before] == list(range(1, 9))
    fork = world.service.fork(world.user, original.id,
                              ForkRequest(after_seq=3, goal="Add 1 and 1, then 5 and 5", model="other"))
    body = fork.to_json()
    assert body["forked_from"] == {"agent_id": str(original.id), "seq": 3}
    assert (body["thread_id"], body["parent_id"]) == (str(fork.id), str(original.id))
    assert fork.model == "other" and fork.max_steps == original.max_steps
    copied = world.repository.steps_after(fork.id)
    assert shape(copied) == shape(before[:3])
    assert [(s.created_at, s.duration_ms) for s in copied] == [
        (s.created_at, s.duration_ms) for s in before[:3]]
    done, calls = world.run(fork, [ADD.format("5 + 5"), answer("2 and 10")])
    assert done is not None and done.final_answer == "2 and 10" and done.step_count == 3
    # The first call after the fork point saw the copied iteration as its own history.
    first = [m.content for m in calls[0] if m.role != "system"]
    assert first == ["Add 1 and 1, then 5 and 5", "THOUGHT: add them\nACTION: calculate\nINPUT: 1 + 1",
                     "OBSERVATION: 2"]
    after = world.repository.steps_after(fork.id)
    assert [s.seq for s in after] == list(range(1, len(after) + 1))
    assert shape(after[:3]) == shape(before[:3]) and after[3].step == 1
    # The original is untouched.
    assert shape(world.repository.steps_after(original.id)) == shape(before)


def test_a_fork_from_zero_starts_over_and_a_thread_fork_keeps_its_context(world: World) -> None:
    first = world.create("Say hi")
    world.run(first, [answer("hi")])
    second = world.create("Add 1 and 1, then 2 and 2", thread_id=first.id)
    world.run(second, [ADD.format("1 + 1"), ADD.format("2 + 2"), answer("2 and 4")])
    fork = world.service.fork(world.user, second.id, ForkRequest(after_seq=0))
    assert world.repository.steps_after(fork.id) == [] and fork.goal == second.goal
    _, calls = world.run(fork, [answer("2 and 4")])
    assert [m.content for m in calls[0] if m.role != "system"] == ["Say hi", "hi", second.goal]


def test_a_fork_must_start_at_an_iterations_end_of_an_ended_agent_of_ones_own(world: World) -> None:
    original = completed_with_two_sums(world)
    for after_seq, near in ((2, "0 or 3"), (4, "3 or 6"), (8, "6"), (99, "6")):
        with pytest.raises(RequestError, match=f"nearest valid values are {near} ") as bad:
            world.service.fork(world.user, original.id, ForkRequest(after_seq=after_seq))
        assert bad.value.code == "invalid_after_seq"
    with pytest.raises(RequestError, match="more than the 2 iterations"):
        world.service.fork(world.user, original.id, ForkRequest(after_seq=6, max_steps=2))
    other, _ = world.repository.users.create("not-the-owner")
    with pytest.raises(NotFound):
        world.service.fork(other.id, original.id, ForkRequest(after_seq=3))
    running = world.create("still going")
    world.repository.claim(running.id)
    with pytest.raises(Conflict, match="still RUNNING") as busy:
        world.service.fork(world.user, running.id, ForkRequest(after_seq=0))
    assert busy.value.code == "agent_not_ended"


def test_a_worker_lost_in_the_first_iteration_after_the_fork_point_resumes_once(world: World) -> None:
    """Forks resume as crashed agents do: the copies are the history, never written again."""
    original = completed_with_two_sums(world)
    fork = world.service.fork(world.user, original.id, ForkRequest(after_seq=3))
    claimed = world.repository.claim(fork.id)
    assert claimed is not None

    class WorkerKilled(BaseException):
        """Stands for the process dying mid-call: nothing of the attempt goes on."""

    with pytest.raises(WorkerKilled):
        world.executor(ScriptedChatModel([WorkerKilled()])).run(claimed)
    assert [s.seq for s in world.repository.steps_after(fork.id)] == [1, 2, 3]
    resumed = world.repository.take_over(
        fork.id, attempt=claimed.attempt, stale_before=utcnow() + timedelta(seconds=1))
    assert resumed is not None and resumed.attempt == 2
    model = ScriptedChatModel([ADD.format("3 + 3"), answer("2 and 6")])
    done = world.executor(model).run(resumed)
    assert done is not None and done.status is AgentStatus.COMPLETED
    steps = world.repository.steps_after(fork.id)
    assert [s.seq for s in steps] == list(range(1, 9))
    assert [s.content for s in steps if s.type is StepType.OBSERVE] == ["2", "6"]
