"""Callers and children in the database, on SQLite and PostgreSQL (store/delegation.py):
the children and the caller's wait in one transaction, a call's child once, the sweeper's
queries, and the wake as a compare-and-set."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, StopReason, Usage, utcnow
from jarvis_agents.store.repository import Repository
from tests.support.store import new_agent, running, running_of

pytestmark = pytest.mark.integration


def child_of(caller: Agent, call_id: str) -> Agent:
    child = new_agent(caller.user_id, f"part of {caller.goal}")
    return replace(child, caller_id=caller.id, caller_call_id=call_id, root_id=caller.id, depth=1)


def parked(repository: Repository) -> tuple[Agent, list[Agent]]:
    """A caller that called two children, WAITING on them."""
    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    caller = running(repository, user.id)
    kids = [child_of(caller, "call_a"), child_of(caller, "call_b")]
    told = [Step(1, 0, StepType.ACT, '{"goal": "a"}', tool="ask_x", call_id="call_a")]
    waiting_for = {"kind": "agents", "agent_ids": [str(k.id) for k in kids]}
    assert repository.delegation.start(caller, children=kids, waiting_for=waiting_for,
                                       steps=told, now=utcnow())
    return caller, kids


def test_the_children_and_the_wait_are_one_change(repository: Repository) -> None:
    caller, kids = parked(repository)
    stored = repository.get(caller.id)
    assert stored.status is AgentStatus.WAITING and stored.waiting_for["kind"] == "agents"  # type: ignore[union-attr,index]
    assert [c.id for c in repository.delegation.children(caller.id)] == [k.id for k in kids]
    assert [s.call_id for s in repository.steps_after(caller.id)] == ["call_a"]
    listed, _ = repository.list_agents(caller.user_id, caller_id=caller.id)
    assert {a.id for a in listed} == {k.id for k in kids}
    # Another run of the same attempt, or a call's child again: refused, nothing written.
    assert not repository.delegation.start(caller, children=[child_of(caller, "call_c")],
                                           waiting_for={}, steps=[], now=utcnow())
    assert len(repository.delegation.children(caller.id)) == 2


def test_a_calls_child_is_made_once(repository: Repository) -> None:
    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    caller = running(repository, user.id)
    first = child_of(caller, "call_a")
    assert repository.delegation.start(caller, children=[first], waiting_for={}, steps=[],
                                       now=utcnow())
    assert repository.transition(caller.id, AgentStatus.WAITING, AgentStatus.PENDING)
    again = repository.claim(caller.id)
    assert again is not None
    assert not repository.delegation.start(again, children=[child_of(caller, "call_a")],
                                           waiting_for={}, steps=[], now=utcnow())
    assert repository.get(caller.id).status is AgentStatus.RUNNING  # type: ignore[union-attr]
    assert [c.id for c in repository.delegation.children(caller.id)] == [first.id]


def test_the_sweeper_finds_ended_waits_and_orphans(repository: Repository) -> None:
    caller, kids = parked(repository)
    assert caller.id not in {a.id for a in repository.delegation.ended_waits()}
    for kid in kids:
        assert repository.transition(kid.id, AgentStatus.PENDING, AgentStatus.CANCELLED,
                                     stop_reason=StopReason.CANCELLED)
    assert caller.id in {a.id for a in repository.delegation.ended_waits()}

    # A caller that called earlier and now waits for a person is not one.
    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    approving = running(repository, user.id)
    assert repository.delegation.start(approving, children=[child_of(approving, "call_z")],
                                       waiting_for={"call_id": "call_y", "tool": "calculate",
                                                    "input": "1"}, steps=[], now=utcnow())
    [done] = repository.delegation.children(approving.id)
    assert repository.transition(done.id, AgentStatus.PENDING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    assert approving.id not in {a.id for a in repository.delegation.ended_waits()}

    other, others = parked(repository)
    assert repository.transition(other.id, AgentStatus.WAITING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    orphans = {a.id for a in repository.delegation.orphans()}
    assert {k.id for k in others} <= orphans and not {k.id for k in kids} & orphans


def test_an_open_remote_call_is_asked_after_once_per_period(repository: Repository) -> None:
    from datetime import timedelta

    caller, _ = parked(repository)
    child = replace(child_of(caller, "call_r"), waiting_for={"kind": "remote", "agent": "far"})
    claimed = running_of(repository, child)
    sent = {"kind": "remote", "agent": "far", "task_id": "t-1"}
    assert repository.transition(child.id, AgentStatus.RUNNING, AgentStatus.WAITING,
                                 attempt=claimed.attempt, waiting_for=sent, heartbeat_at=None)
    now = utcnow()
    [due] = repository.delegation.remote_due(polled_before=now, now=now)
    assert due.id == child.id and due.waiting_for == sent
    # Asked now: another sweep within the period finds nothing; one after it, the call.
    assert repository.delegation.remote_due(polled_before=now, now=now + timedelta(seconds=1)) == []
    later = now + timedelta(seconds=5)
    assert [a.id for a in repository.delegation.remote_due(polled_before=later, now=later)] == [child.id]


def test_a_cancelled_callers_usage_counts_its_childrens(repository: Repository) -> None:
    caller, _ = parked(repository)
    used = Usage(30, 20, 2)
    assert not repository.delegation.roll_up(caller.id, used)  # WAITING: its wake counts them
    assert repository.transition(caller.id, AgentStatus.WAITING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    assert repository.delegation.roll_up(caller.id, used)
    assert repository.get(caller.id).descendants_usage == used  # type: ignore[union-attr]


def test_a_cancelled_callers_webhook_counts_what_its_children_used(repository: Repository,
                                                                   tmp_path) -> None:
    """The `agent.cancelled` body is owed by the cancel's own commit, before the cascade
    reaches the children: it already counts what they used by then."""
    import json

    from jarvis_agents.config import Settings
    from jarvis_agents.delegation import Delegation
    from jarvis_agents.dispatch import MemoryDispatcher
    from jarvis_agents.events import MemoryEventBus

    user, _ = repository.users.create(f"u{uuid.uuid4().hex[:8]}")
    caller = running_of(repository, new_agent(user.id, webhook_url="https://hooks.example/x"))
    done, going = child_of(caller, "call_a"), child_of(caller, "call_b")
    waiting_for = {"kind": "agents", "agent_ids": [str(done.id), str(going.id)]}
    assert repository.delegation.start(caller, children=[done, going], waiting_for=waiting_for,
                                       steps=[], now=utcnow())
    assert repository.claim(done.id) is not None and repository.claim(going.id) is not None
    assert repository.transition(done.id, AgentStatus.RUNNING, AgentStatus.COMPLETED,
                                 stop_reason=StopReason.FINAL_ANSWER, final_answer="a",
                                 input_tokens=30, output_tokens=20, model_calls=2)
    delegation = Delegation(repository=repository, dispatcher=MemoryDispatcher(),
                            settings=Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}),
                            events=MemoryEventBus())

    assert delegation.cancel(repository.get(caller.id)) == 2  # type: ignore[arg-type]
    owed = [d for d in repository.outbox.of_agent(caller.id) if d["event"] == "agent.cancelled"]
    body = json.loads(str(owed[0]["payload"]))
    assert len(owed) == 1 and body["status"] == "CANCELLED"
    assert body["usage_total"] == {"input_tokens": 30, "output_tokens": 20, "model_calls": 2}
    assert repository.get(going.id).status is AgentStatus.CANCELLED  # type: ignore[union-attr]


def test_a_lost_cancel_is_owed_until_settled_and_only_lately(repository: Repository) -> None:
    from datetime import timedelta

    caller, _ = parked(repository)
    call = {"kind": "remote", "agent": "far", "task_id": "t-2"}
    child = replace(child_of(caller, "call_c"), waiting_for=call)
    running_of(repository, child)
    assert not repository.delegation.owe_cancel(child.id, {**call, "cancel_owed": True})  # RUNNING
    assert repository.transition(child.id, AgentStatus.RUNNING, AgentStatus.CANCELLED,
                                 stop_reason=StopReason.CANCELLED)
    assert repository.delegation.owe_cancel(child.id, {**call, "cancel_owed": True})
    now = utcnow() + timedelta(seconds=1)
    hour_ago = now - timedelta(hours=1)
    [due] = repository.delegation.cancels_due(cancelled_after=hour_ago, polled_before=now, now=now)
    assert due.id == child.id and due.waiting_for == {**call, "cancel_owed": True}
    assert repository.delegation.cancels_due(cancelled_after=hour_ago, polled_before=now,
                                             now=now) == []  # claimed for this period
    later = now + timedelta(seconds=5)
    assert repository.delegation.cancels_due(cancelled_after=now, polled_before=later,
                                             now=later) == []  # cancelled too long ago
    assert repository.delegation.owe_cancel(child.id, call)  # settled
    assert repository.delegation.cancels_due(cancelled_after=hour_ago, polled_before=later,
                                             now=later) == []
