"""Calls of remote delegates (README, Agents that call agents): agents served elsewhere
over A2A, named in JARVIS_A2A_AGENTS.

A call's child is an agent row like a local one, keyed by its caller and call id, whose
`waiting_for` names the remote agent (`{"kind": "remote", "agent": ...}`) from its
create on. A worker that claims it does not run a model: it sends the goal
(`SendMessage`, returning at once) and parks the child WAITING with the remote task's
id; a crash before that commit sends it again on the next claim. No thread waits on
the remote task: the workers' sweeps ask (`GetTask`) after the open calls in batches,
each call once per period (claimed in SQL), and move
a call whose task has ended back to PENDING with the outcome; its next claim ends it
COMPLETED (the artifacts' text) or FAILED (saying why), and its end wakes the caller
as a local child's does. Cancelling it (its caller's cascade) cancels the remote task;
a CancelTask that fails (the remote down) is owed, and the sweeps try it again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from jarvis_agents.assistants import default_assistant, new_agent
from jarvis_agents.config import Settings
from jarvis_agents.delegation import a2a_calls
from jarvis_agents.delegation.a2a_calls import UNREACHABLE, Outcome
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import Agent, AgentStatus, StopReason, Usage, utcnow
from jarvis_agents.remote_agents import RemoteAgent
from jarvis_agents.store.interface import AgentStore

log = logging.getLogger(__name__)

KIND = "remote"
# How long after a call's cancel the sweeps try again a CancelTask that failed.
CANCEL_RETRY_S = 600
_STATES = {  # a2a TaskState → how the call ended, for the caller's model
    a2a_calls.TaskState.TASK_STATE_FAILED: "failed",
    a2a_calls.TaskState.TASK_STATE_REJECTED: "rejected the task",
    a2a_calls.TaskState.TASK_STATE_CANCELED: "cancelled the task",
    a2a_calls.TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authentication",
}


def remote_of(agent: Agent) -> Mapping[str, Any] | None:
    """The remote call the agent stands for, if it does."""
    waiting = agent.waiting_for or {}
    return waiting if waiting.get("kind") == KIND else None


def cancel_fields(agent: Agent, now: datetime | None) -> dict[str, Any]:
    """What a cancel of `agent` at `now` writes besides its status: for a call whose remote
    task is under way, that a CancelTask is owed, tried now (by the canceller), so that a
    process dying before it is sent leaves it to the sweeps (`RemoteCalls.retry_cancels`)."""
    call = remote_of(agent)
    if call is None or not call.get("task_id") or "outcome" in call:
        return {}
    return {"waiting_for": {**call, "cancel_owed": True}, "heartbeat_at": now}


class RemoteCalls:
    """The calls of remote delegates: their children, sends, polls and cancels."""

    def __init__(self, *, repository: AgentStore, settings: Settings, events: EventBus,
                 enqueue: Callable[[Agent], None]) -> None:
        self.repository = repository
        self.events = events
        self.enqueue = enqueue
        self.agents: dict[str, RemoteAgent] = {a.name: a for a in settings.a2a_agents}
        self.settings = settings

    def child(self, caller: Agent, name: str, goal: str) -> Agent:
        """The PENDING child standing for a call of the remote agent `name`."""
        child = new_agent(user_id=caller.user_id, goal=goal,
                          assistant=default_assistant(caller.user_id), settings=self.settings)
        return replace(child, waiting_for={"kind": KIND, "agent": name})

    # --- a worker's claim of a call's child ---------------------------------------------

    def run(self, agent: Agent) -> Agent | None:
        """Drive the claimed (RUNNING) child one move: send and WAIT, or end it with the
        outcome a sweep brought back; the agent as left, or None if it moved meanwhile."""
        call = remote_of(agent) or {}
        if "outcome" in call:
            return self._end(agent, Outcome(**call["outcome"]), call)
        remote = self.agents.get(str(call.get("agent")))
        if remote is None:
            return self._end(agent, None, call, f"the remote agent '{call.get('agent')}' is no "
                             "longer configured (JARVIS_A2A_AGENTS)")
        try:
            # The child's id: one per call (its row is made with the caller's wait), so
            # a send after a crash is the same message, and the remote (ours dedups on
            # a message id, a2a/service.py) starts no second task.
            sent = a2a_calls.send(remote, agent.goal, message_id=agent.id)
        except UNREACHABLE as exc:
            return self._end(agent, None, call, f"the remote agent '{remote.name}' could not be "
                             f"reached ({type(exc).__name__}: {exc})")
        if isinstance(sent, Outcome):
            return self._end(agent, sent, call)
        waiting_for = {**call, "task_id": sent}
        now = utcnow()
        if not self.repository.transition(agent.id, AgentStatus.RUNNING, AgentStatus.WAITING,
                                          attempt=agent.attempt, waiting_for=waiting_for,
                                          heartbeat_at=None, now=now):
            now_as = self.repository.get(agent.id)
            if now_as is not None and now_as.status is AgentStatus.CANCELLED:
                self.cancelled(replace(agent, waiting_for=waiting_for))  # while it sent
            return None  # else another attempt owns it, and its send finds the same task
        waiting = replace(agent, status=AgentStatus.WAITING, waiting_for=waiting_for,
                          heartbeat_at=None, updated_at=now)
        self.events.publish_status(waiting)
        return waiting

    def _end(self, agent: Agent, outcome: Outcome | None, call: Mapping[str, Any],
             error: str | None = None) -> Agent | None:
        name = call.get("agent")
        # What the remote task says it used is this child's usage, so its caller's too.
        used = Usage(**outcome.usage) if outcome is not None and outcome.usage else Usage()
        if outcome is not None and outcome.state == a2a_calls.TaskState.TASK_STATE_COMPLETED:
            done = agent.with_completed(outcome.text, step_count=0, usage=used)
        else:
            if outcome is not None and outcome.state == a2a_calls.TaskState.TASK_STATE_INPUT_REQUIRED:
                error = f"the remote agent '{name}' needs input to go on; it asks: {outcome.text!r}"
            elif outcome is not None:
                how = _STATES.get(outcome.state, "ended")
                error = f"the remote agent '{name}' {how}" + (f": {outcome.text}" if outcome.text else "")
            done = agent.with_failed(error or "", stop_reason=StopReason.MODEL_ERROR, step_count=0,
                                     usage=used)
        if not self.repository.transition(
                agent.id, AgentStatus.RUNNING, done.status, attempt=agent.attempt,
                final_answer=done.final_answer, error=done.error, stop_reason=done.stop_reason,
                completed_at=done.completed_at, step_count=0, now=done.updated_at,
                input_tokens=used.input_tokens, output_tokens=used.output_tokens,
                model_calls=used.model_calls):
            return None
        self.events.publish_status(done)
        return done

    # --- the sweep ------------------------------------------------------------------------

    def sweep(self) -> int:
        """Ask after the open calls due (each once per JARVIS_HEARTBEAT_INTERVAL across all
        workers), one round of `GetTask`s per remote agent; queue the children whose task
        ended to be ended. How many it moved."""
        by_agent: dict[str, list[Agent]] = defaultdict(list)
        now = utcnow()
        polled_before = now - timedelta(seconds=self.settings.heartbeat_interval_s)
        for child in self.repository.delegation.remote_due(polled_before=polled_before, now=now):
            call = remote_of(child) or {}
            if call.get("task_id"):
                by_agent[str(call.get("agent"))].append(child)
        moved = 0
        for name, children in by_agent.items():
            remote = self.agents.get(name)
            if remote is None:
                continue
            task_ids = [str((remote_of(c) or {})["task_id"]) for c in children]
            try:
                ended = a2a_calls.poll(remote, task_ids)
            except UNREACHABLE as exc:  # it may come back: the next sweep asks again
                log.warning("remote agent %s could not be asked after its tasks: %s", name, exc)
                continue
            for child, task_id in zip(children, task_ids, strict=True):
                found = ended.get(task_id)
                if isinstance(found, Outcome):
                    moved += self._answered(child, found)
                elif found is not None:
                    log.warning("remote task %s of agent %s: %s", task_id, child.id, found)
        return moved

    def _answered(self, child: Agent, outcome: Outcome) -> int:
        """WAITING → PENDING with the outcome, queued for a worker to end it."""
        waiting_for = {**(child.waiting_for or {}),
                       "outcome": {"state": int(outcome.state), "text": outcome.text,
                                   "usage": outcome.usage}}
        now = utcnow()
        task_id = f"{child.id}:{child.attempt + 1}"
        if not self.repository.transition(child.id, AgentStatus.WAITING, AgentStatus.PENDING,
                                          attempt=child.attempt, waiting_for=waiting_for,
                                          task_id=task_id, heartbeat_at=None, now=now):
            return 0
        self.enqueue(replace(child, status=AgentStatus.PENDING, waiting_for=waiting_for,
                             task_id=task_id, heartbeat_at=None, updated_at=now))
        return 1

    # --- cancels --------------------------------------------------------------------------

    def cancelled(self, agent: Agent) -> None:
        """The child `agent` (as it was before its cancel) was cancelled: so is its task.
        The cancel's own commit owed it (`cancel_fields`); done, the debt is settled, else
        left for the sweeps to try again (`retry_cancels`)."""
        call = remote_of(agent) or {}
        remote = self.agents.get(str(call.get("agent")))
        if remote is not None and call.get("task_id") and "outcome" not in call:
            done = self._cancel_task(remote, str(call["task_id"]))
            self.repository.delegation.owe_cancel(agent.id, call if done else {**call, "cancel_owed": True})

    def retry_cancels(self) -> int:
        """CancelTask again for the calls whose cancel failed, each once per period (no
        sooner than one try may take, the canceller's own first) across all workers, until
        it is done or the remote task has ended, for CANCEL_RETRY_S after the cancel; how
        many were settled."""
        now = utcnow()
        interval = timedelta(seconds=max(self.settings.heartbeat_interval_s, a2a_calls.TIMEOUT_S))
        settled = 0
        for child in self.repository.delegation.cancels_due(
                cancelled_after=now - timedelta(seconds=CANCEL_RETRY_S),
                polled_before=now - interval, now=now):
            call = {k: v for k, v in (child.waiting_for or {}).items() if k != "cancel_owed"}
            remote, task_id = self.agents.get(str(call.get("agent"))), str(call.get("task_id"))
            if remote is None or self._cancel_task(remote, task_id) or self._ended(remote, task_id):
                settled += self.repository.delegation.owe_cancel(child.id, call)
            elif now + interval >= (child.completed_at or now) + timedelta(seconds=CANCEL_RETRY_S):
                log.warning("remote task %s of %s: gave up cancelling it, %d s after its call was "
                            "cancelled", task_id, remote.name, CANCEL_RETRY_S)
                self.repository.delegation.owe_cancel(child.id, call)
        return settled

    def _ended(self, remote: RemoteAgent, task_id: str) -> bool:
        """Whether the remote task has ended (a CancelTask of it is refused then)."""
        try:
            return isinstance(a2a_calls.poll(remote, [task_id]).get(task_id), Outcome)
        except UNREACHABLE:
            return False

    def _cancel_task(self, remote: RemoteAgent, task_id: str) -> bool:
        try:
            a2a_calls.cancel(remote, task_id)
        except UNREACHABLE as exc:
            log.warning("remote task %s of %s could not be cancelled: %s", task_id, remote.name, exc)
            return False
        return True
