"""A blocking SendMessage's wait (`settle`) on the in-memory bus and store: it answers
with what the follower told and read, the same Task as one read afresh."""

from __future__ import annotations

import uuid

from jarvis_agents.a2a.service import settle
from jarvis_agents.a2a.tasks import task_of
from jarvis_agents.events import MemoryEventBus, follow
from jarvis_agents.lifecycle import Agent, Step, StepType
from jarvis_agents.store.memory import MemoryStore

USER = uuid.uuid4()


def running(store: MemoryStore) -> Agent:
    return store.add(Agent.new(user_id=USER, goal="What is 6 * 7?", model="m", max_steps=5)
                     .with_running(attempt=1))


def test_settle_gives_every_step_told_and_the_follower_the_agent_as_it_ended() -> None:
    store, bus = MemoryStore(), MemoryEventBus()
    agent = running(store)
    store.append_steps(agent.id, 1, [Step(1, 0, StepType.THINK, "multiply")], step_count=1)
    follower = follow(bus, store, agent.id, user_id=USER, tick_s=0.01)
    final = Step(2, 1, StepType.FINAL, "42")  # published after the follower joined: live
    store.append_steps(agent.id, 1, [final], step_count=2)
    bus.publish_steps(agent, [final])
    ended = store.add(store.agents[agent.id].with_completed("42"))
    bus.publish_status(ended)

    steps = settle(follower, still_wanted=lambda: True)

    assert steps is not None and [s["seq"] for s in steps] == [1, 2]
    assert follower.agent == ended
    assert task_of(follower.agent, steps) == task_of(ended, store.steps_after(agent.id))


def test_settle_gives_none_when_the_wait_is_given_up() -> None:
    store, bus = MemoryStore(), MemoryEventBus()
    follower = follow(bus, store, running(store).id, user_id=USER, tick_s=0.01)
    assert settle(follower, still_wanted=lambda: False) is None
