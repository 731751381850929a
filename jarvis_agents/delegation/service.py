"""Agents that call agents (README, Agents that call agents): start a caller's children
and park it, wake it once they have all ended, cancel down the tree.

The executor hands over the ACTs of `ask_<name>` calls that have no OBSERVE yet
(`settle`). A call's child is found by its caller and call id, so an attempt that
resumes after a crash, at any point, makes no child twice and loses none: children
that do not exist yet are inserted in the caller's RUNNING → WAITING transaction
(store/delegation.py), and queued after its commit (the sweeper queues a PENDING agent
whose message was lost). Calls whose children have all ended are answered at once.

A child's end wakes its caller (`child_ended`): the last of its children to end finds
them all ended and moves it WAITING → PENDING by compare-and-set, so two ending at
once on two workers wake it once. A worker that dies between a child's end and the
wake leaves the caller to the sweeper (`sweep`), which also finishes a cancellation's
cascade that a crash cut short.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from jarvis_agents.approvals import Answer, call_id_of
from jarvis_agents.assistants import find_assistant, new_agent
from jarvis_agents.config import Settings
from jarvis_agents.delegation.remote import RemoteCalls, cancel_fields
from jarvis_agents.delegation.tools import (
    child_ids,
    delegate_of,
    delegate_tools,
    goal_of,
    observation_of,
    waits_on,
)
from jarvis_agents.dispatch import Dispatcher
from jarvis_agents.errors import DependencyUnavailable, JarvisError
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType, Usage, storable, utcnow
from jarvis_agents.routing import queue_for
from jarvis_agents.store.interface import AgentStore
from jarvis_agents.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settled:
    """What became of an iteration's calls of delegates: OBSERVE rows to write now (every
    call answered), or the caller as it now waits on children (the attempt ends), or
    `lost`: the attempt no longer owns the caller."""

    observations: list[Step]
    waiting: Agent | None = None
    lost: bool = False


class Delegation:
    """The calls, the waits and the wakes between callers and their children."""

    def __init__(self, *, repository: AgentStore, settings: Settings, dispatcher: Dispatcher,
                 events: EventBus) -> None:
        self.repository = repository
        self.rows = repository.delegation
        self.settings = settings
        self.dispatcher = dispatcher
        self.events = events
        self.remote = RemoteCalls(repository=repository, settings=settings, events=events,
                                  enqueue=self._enqueue)

    # --- the caller's attempt ------------------------------------------------------

    def tools(self, agent: Agent, registry: ToolRegistry) -> ToolRegistry:
        """The agent's tools with its `ask_<name>` ones besides."""
        if not agent.delegates:
            return registry
        return registry.plus(delegate_tools(agent, self.repository.assistants,
                                            remote=self.remote.agents))

    def calls(self, agent: Agent, acts: Sequence[Step]) -> list[Step]:
        """The ACTs that call one of the agent's delegates."""
        if not agent.delegates:
            return []
        return [act for act in acts if delegate_of(agent, act) is not None]

    def settle(self, agent: Agent, acts: Sequence[Step], *, seq: int,
               answer_for: Callable[[Step], Answer | None], before: Sequence[Step] = ()) -> Settled:
        """Answer the calls `acts` from their children that have ended, or start those
        not started and park the caller until all have ended. Refused calls (a depth
        past the limit, no goal, an assistant gone, a person's denial) are answered at
        once. OBSERVE rows are numbered from `seq`; a wait writes the rows `before` them
        (the iteration's, when not written yet) with them."""
        existing = {child.caller_call_id: child for child in self.rows.children(agent.id)}
        told: dict[str, str] = {}
        started: list[Agent] = []
        awaited: list[uuid.UUID] = []
        for act in acts:
            call_id = call_id_of(act)
            child = existing.get(call_id)
            if child is None:
                child_or_refusal = self._child(agent, act, call_id, answer_for(act))
                if isinstance(child_or_refusal, str):
                    told[call_id] = child_or_refusal
                    continue
                child = child_or_refusal
                started.append(child)
            if child.is_terminal:
                told[call_id] = observation_of(child)
            else:
                awaited.append(child.id)
        answered = [act for act in acts if call_id_of(act) in told]
        rows = [Step(number, act.step, StepType.OBSERVE, storable(told[call_id_of(act)]),
                     tool=act.tool, created_at=utcnow(), duration_ms=0, call_id=act.call_id)
                for number, act in zip(range(seq, seq + len(answered)), answered, strict=True)]
        if not awaited:
            return Settled(rows)
        now = utcnow()
        waiting_for = waits_on(awaited)
        if not self.rows.start(agent, children=started, waiting_for=waiting_for,
                               steps=[*before, *rows], now=now):
            return Settled([], lost=True)
        for child in started:
            self._enqueue(child)
        waiting = replace(agent, status=AgentStatus.WAITING, waiting_for=waiting_for,
                          heartbeat_at=None, updated_at=now)
        return Settled(rows, waiting=waiting)

    def _child(self, caller: Agent, act: Step, call_id: str, answer: Answer | None) -> Agent | str:
        """The PENDING child of the call, or the observation saying why there is none."""
        if answer is not None and not answer.approve:
            return answer.observation
        goal, problem = goal_of(act if answer is None else replace(act, content=answer.tool_input))
        if goal is None:
            return problem or "the call has no goal"
        depth = caller.depth + 1
        limit = self.settings.max_delegation_depth
        if depth > limit:
            return (f"not started: the agent would be at depth {depth}, past the limit of "
                    f"{limit} (JARVIS_MAX_DELEGATION_DEPTH); do this part yourself")
        name = delegate_of(caller, act) or ""
        try:
            assistant = find_assistant(self.repository.assistants, caller.user_id, name)
            child = new_agent(user_id=caller.user_id, goal=goal, assistant=assistant,
                              settings=self.settings)
        except JarvisError:
            if name not in self.remote.agents:
                return f"not started: the assistant '{name}' no longer exists"
            child = self.remote.child(caller, name, goal)
        return replace(child, task_id=str(child.id), caller_id=caller.id, caller_call_id=call_id,
                       root_id=caller.root_id or caller.id, depth=depth)

    def _enqueue(self, agent: Agent) -> None:
        """Publish PENDING and queue, after the commit; the sweeper queues it if this fails."""
        self.events.publish_status(agent)
        try:
            self.dispatcher.enqueue(agent.id, task_id=agent.task_id or str(agent.id),
                                    queue=queue_for(agent.model))
        except DependencyUnavailable as exc:
            log.warning("agent %s stays queued for the sweeper: %s", agent.id, exc)
            self.repository.forget_task(agent.id)

    # --- ends --------------------------------------------------------------------------

    def child_ended(self, child: Agent) -> Agent | None:
        """Wake the child's caller if it waits on it and every child it waits on has ended;
        the caller as woken (PENDING, queued), else None."""
        if child.caller_id is None:
            return None
        caller = self.repository.get(child.caller_id)
        if caller is None or child.id not in child_ids(caller.waiting_for):
            return None
        return self.wake(caller)

    def wake(self, caller: Agent) -> Agent | None:
        """WAITING → PENDING by compare-and-set on its attempt, once all the children it
        waits on have ended, with its descendants' usage and the time it waited."""
        awaited = child_ids(caller.waiting_for)
        if caller.status is not AgentStatus.WAITING or not awaited:
            return None
        children = self.rows.children(caller.id)
        ended = {child.id for child in children if child.is_terminal}
        if not ended.issuperset(awaited):
            return None
        descendants = tree_usage(children)  # every child it ever had has ended: final
        now = utcnow()
        waited_ms = caller.waited_ms + max(0, int((now - (caller.updated_at or now))
                                                  .total_seconds() * 1000))
        task_id = f"{caller.id}:{caller.attempt + 1}"
        if not self.repository.transition(
            caller.id, AgentStatus.WAITING, AgentStatus.PENDING, attempt=caller.attempt,
            waiting_for=None, waited_ms=waited_ms, task_id=task_id, now=now,
            **descendants_values(descendants),
        ):
            return None  # woken by another child's end, or cancelled meanwhile
        woken = replace(caller, status=AgentStatus.PENDING, waiting_for=None, waited_ms=waited_ms,
                        task_id=task_id, updated_at=now, descendants_usage=descendants)
        self._enqueue(woken)
        return woken

    def cancel_values(self, agent: Agent, now: datetime | None) -> dict[str, Any]:
        """What the compare-and-set of a cancel of `agent` writes besides its status: a remote
        call's owed CancelTask (`cancel_fields`), and a caller's usage_total with what its
        children used so far, so that the webhook owed in the same commit counts it (the
        cascade then adds their last steps: `cancel_children`)."""
        values = cancel_fields(agent, now)
        if child_ids(agent.waiting_for):  # a caller waiting on its children
            values |= descendants_values(tree_usage(self.rows.children(agent.id)))
        return values

    def cancel_children(self, agent_id: uuid.UUID) -> int:
        """Cancel every child of the agent still going, and theirs; how many were. The
        agent, cancelled, then counts what they used in its usage_total (`roll_up`)."""
        children = self.rows.children(agent_id)
        cancelled = sum(self.cancel(child) for child in children)
        if children:
            self.rows.roll_up(agent_id, tree_usage(self.rows.children(agent_id)))
        return cancelled

    def cancel(self, agent: Agent) -> int:
        """Cancel the agent (if still going) and its descendants; how many were cancelled."""
        current: Agent | None = agent
        won = False
        while current is not None and not current.is_terminal:
            done = current.with_cancelled()
            if self.repository.transition(current.id, current.status, done.status,
                                          stop_reason=done.stop_reason,
                                          completed_at=done.completed_at, now=done.updated_at,
                                          **self.cancel_values(current, done.updated_at)):
                won = True
                self.remote.cancelled(current)
                self.events.publish_cancel(current.id)
                self.events.publish_status(done)
                self.dispatcher.revoke([t for t in {str(current.id), current.task_id} if t])
                break
            current = self.repository.get(current.id)  # it moved meanwhile: look again
        return int(won) + self.cancel_children(agent.id)

    def sweep(self) -> int:
        """Ask after open calls of remote delegates (and cancel again their tasks whose
        cancel failed), wake callers whose children all ended unnoticed, and cancel the
        children of cancelled callers that a cascade missed; how many agents it moved."""
        moved = self.remote.sweep()
        self.remote.retry_cancels()
        moved += sum(1 for caller in self.rows.ended_waits() if self.wake(caller) is not None)
        for orphan in self.rows.orphans():
            moved += self.cancel(orphan)
            self._roll_up_from(orphan.caller_id)
        return moved

    def _roll_up_from(self, agent_id: uuid.UUID | None) -> None:
        """Count again the usage of a cancelled agent's descendants, and so up its
        cancelled callers: their cascade, cut short, counted less than the tree used."""
        while agent_id is not None and self.rows.roll_up(
                agent_id, tree_usage(self.rows.children(agent_id))):
            agent = self.repository.get(agent_id)
            agent_id = agent.caller_id if agent is not None else None


def tree_usage(children: Sequence[Agent]) -> Usage:
    """What `children` and their descendants used: a caller's descendants' usage."""
    return sum((child.usage + child.descendants_usage for child in children), Usage())


def descendants_values(used: Usage) -> dict[str, int]:
    """A caller's descendants' usage as the columns the store writes."""
    return {"descendants_input_tokens": used.input_tokens,
            "descendants_output_tokens": used.output_tokens,
            "descendants_model_calls": used.model_calls}
