"""The ReACT loop for one agent: plan, act, observe, until an answer or a limit.

The loop keeps no state of its own between iterations: it rebuilds history, the
next `step` and the next `seq` from the persisted steps, so any attempt can resume
an agent exactly where the last one stopped. Each iteration writes its rows in
two transactions, [THINK, ACT] then [OBSERVE], or [THINK, FINAL] together with the
completion; a resumed attempt that finds an ACT without its OBSERVE runs the tool
again, and nothing is ever written twice (the schema refuses it anyway). A tool
that runs inline (offline, bounded, safe to repeat: `calculate`, `getTime`, or an
unknown name) is called before anything is written and its iteration is one write,
[THINK, ACT, OBSERVE]: a crash before it leaves nothing, and the resumed attempt
plans the iteration again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol

from jarvis_agents import tracing
from jarvis_agents.approvals import ApprovalGate, call_id_of, new_call_id
from jarvis_agents.errors import Cancelled, ModelError, StaleAttempt, StepTimeout
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import (
    Agent,
    AgentStatus,
    Step,
    StepType,
    StopReason,
    storable,
    utcnow,
)
from jarvis_agents.llm.base import ChatModel, ChatRequest
from jarvis_agents.react.parser import Action, FinalAnswer, parse_reply
from jarvis_agents.react.prompt import STOP_SEQUENCES, build_messages
from jarvis_agents.threads import with_context
from jarvis_agents.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


class StepStore(Protocol):
    """What the loop needs of persistence (the Repository provides it)."""

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None: ...
    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]: ...
    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None: ...
    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, **fields: object
    ) -> bool: ...


class Timings(Protocol):
    """Where the loop reports how long things took (Prometheus in production)."""

    def planning(self, seconds: float) -> None: ...
    def tool(self, name: str, seconds: float) -> None: ...
    def step(self, kind: str) -> None: ...
    def agent(self, status: str, seconds: float) -> None: ...


class _NoTimings:
    def planning(self, seconds: float) -> None:
        pass

    def tool(self, name: str, seconds: float) -> None:
        pass

    def step(self, kind: str) -> None:
        pass

    def agent(self, status: str, seconds: float) -> None:
        pass


@dataclass(frozen=True)
class Limits:
    step_timeout_s: float
    total_timeout_s: float


@dataclass
class _State:
    """Where the agent stands, rebuilt from its persisted steps."""

    history: list[Step]
    next_step: int
    next_seq: int
    pending_act: Step | None  # an ACT whose OBSERVE was never written

    @classmethod
    def rebuild(cls, steps: list[Step]) -> _State:
        if not steps:
            return cls([], 0, 1, None)
        last = max(s.step for s in steps)
        kinds = {s.type: s for s in steps if s.step == last}
        pending = kinds.get(StepType.ACT) if StepType.OBSERVE not in kinds else None
        return cls(steps, last if pending else last + 1, max(s.seq for s in steps) + 1, pending)


class Executor:
    """Runs agents step by step against a model, tools, a store and an event bus."""

    def __init__(
        self,
        *,
        store: StepStore,
        model: ChatModel,
        tools: ToolRegistry,
        events: EventBus,
        limits: Limits,
        timings: Timings | None = None,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.tools = tools
        self.events = events
        self.limits = limits
        self.timings = timings or _NoTimings()
        self.approvals = approvals or ApprovalGate()

    def run(
        self, agent: Agent, *, should_stop: Callable[[], bool] = lambda: False,
        check_status: Callable[[], bool] = lambda: False,
    ) -> Agent | None:
        """Drive a RUNNING agent owned by `agent.attempt` to its end.

        Returns the agent as this attempt left it when it ended it, or None when the
        agent was cancelled or taken over by another attempt meanwhile. `should_stop`
        is the stop signal (a cancel heard, a shutdown); `check_status` says when to
        read the agent's status from the store before an iteration, in case its
        cancel was never heard.
        """
        tools = self.tools.subset(agent.tools)
        # A first attempt at 0 steps (nearly every claim) has none to read back: its
        # claim found the agent PENDING. Any later attempt reads them, whatever count it
        # came with: a take-over that waited for the last attempt's step write to commit
        # counted the steps as they were when it began (PostgreSQL's READ COMMITTED).
        fresh = agent.attempt <= 1 and not agent.step_count
        state = _State.rebuild([] if fresh else self.store.steps_after(agent.id))
        started = agent.started_at or utcnow()
        # Time spent WAITING for a person is not the agent's (CONTRACT §7).
        deadline_at = started + timedelta(seconds=self.limits.total_timeout_s,
                                          milliseconds=agent.waited_ms)
        try:
            if state.pending_act is not None:
                if self.approvals.waits(agent, state.pending_act):
                    return self._wait(agent, state, [], state.pending_act)
                self._observe(agent, tools, state, state.pending_act, should_stop)
            while True:
                # The cancel listener and the revoke set should_stop within ms; any write
                # after a cancellation is refused in SQL anyway. The read is for a cancel
                # that was never heard: it saves the model call of one more iteration.
                if should_stop() or (check_status() and not self._still_owned(agent)):
                    return None
                if utcnow() >= deadline_at:
                    return self._fail(
                        agent, state, StopReason.TOTAL_TIMEOUT,
                        f"the agent ran out of time: the total timeout of "
                        f"{self.limits.total_timeout_s:g} s has passed",
                    )
                if state.next_step >= agent.max_steps:
                    return self._fail(
                        agent, state, StopReason.MAX_STEPS,
                        f"reached the step limit ({agent.max_steps}) without a final answer",
                    )
                with tracing.iteration(agent, state.next_step):
                    finished = self._iterate(agent, tools, state, deadline_at, should_stop)
                if finished is not None:
                    return finished
        except (Cancelled, StaleAttempt) as exc:
            log.info("agent %s attempt %s stopped: %s", agent.id, agent.attempt, exc)
            return None

    def _still_owned(self, agent: Agent) -> bool:
        current = self.store.get(agent.id)
        if current is not None and current.status is AgentStatus.RUNNING and current.attempt == agent.attempt:
            return True
        now = "gone" if current is None else f"{current.status.value} under attempt {current.attempt}"
        log.info("agent %s attempt %s stopped: the agent is %s", agent.id, agent.attempt, now)
        return False

    # --- one iteration ---------------------------------------------------------------

    def _iterate(self, agent, tools, state, deadline_at, should_stop) -> Agent | None:  # type: ignore[no-untyped-def]
        remaining_s = (deadline_at - utcnow()).total_seconds()
        step_budget_s = min(self.limits.step_timeout_s, remaining_s)
        # The tools as they are now: an MCP server's may have come, gone or changed.
        messages = with_context(build_messages(agent.goal, tools.listed(), state.history), agent.context)
        began = time.monotonic()
        try:
            reply = self.model.complete(
                ChatRequest(messages, model=agent.model, stop=STOP_SEQUENCES),
                deadline=began + step_budget_s, should_stop=should_stop,
            ).content
        except StepTimeout:
            if step_budget_s < self.limits.step_timeout_s:
                return self._fail(
                    agent, state, StopReason.TOTAL_TIMEOUT,
                    f"the agent ran out of time: the total timeout of "
                    f"{self.limits.total_timeout_s:g} s passed while the model was planning",
                )
            return self._fail(
                agent, state, StopReason.STEP_TIMEOUT,
                f"the model took longer than the step timeout of "
                f"{self.limits.step_timeout_s:g} s to plan step {state.next_step}",
            )
        except ModelError as exc:
            return self._fail(agent, state, StopReason.MODEL_ERROR, str(exc))
        planning_s = time.monotonic() - began
        self.timings.planning(planning_s)
        plan = parse_reply(storable(reply))
        rows = self._rows(state, plan, planning_ms=int(planning_s * 1000), tools=tools)
        if isinstance(plan, FinalAnswer):
            return self._complete(agent, state, rows, plan.answer)
        act = rows[-1]
        if self.approvals.waits(agent, act):  # a person answers first (approvals.py)
            return self._wait(agent, state, rows, act)
        if tools.runs_inline(act.tool or ""):
            # One commit and one publish instead of two: the call is safe to repeat.
            observation = self._call(agent, tools, act, seq=act.seq + 1, should_stop=should_stop)
            self._write(agent, state, [*rows, observation], step_count=act.step + 1)
            state.next_step = act.step + 1
            return None
        self._write(agent, state, rows, step_count=state.next_step + 1)
        self._observe(agent, tools, state, act, should_stop)
        return None

    def _rows(self, state: _State, plan: Action | FinalAnswer, *, planning_ms: int, tools: ToolRegistry) -> list[Step]:
        now = utcnow()
        rows: list[Step] = []
        seq = state.next_seq
        if plan.thought.strip():
            rows.append(Step(seq, state.next_step, StepType.THINK, plan.thought, created_at=now,
                             duration_ms=planning_ms))
            seq += 1
        if isinstance(plan, FinalAnswer):
            rows.append(Step(seq, state.next_step, StepType.FINAL, plan.answer, created_at=now,
                             duration_ms=None if rows else planning_ms))
        else:
            known = tools.get(plan.tool)
            name = known.name if known is not None else (plan.tool.strip() or "(none)")
            rows.append(Step(seq, state.next_step, StepType.ACT, plan.tool_input, tool=name,
                             created_at=now, duration_ms=None if rows else planning_ms,
                             call_id=new_call_id()))
        return rows

    def _observe(self, agent: Agent, tools: ToolRegistry, state: _State, act: Step,
                 should_stop: Callable[[], bool]) -> None:
        observation = self._call(agent, tools, act, seq=state.next_seq, should_stop=should_stop)
        self._write(agent, state, [observation], step_count=act.step + 1)
        state.next_step = act.step + 1
        state.pending_act = None

    def _call(self, agent: Agent, tools: ToolRegistry, act: Step, *, seq: int,
              should_stop: Callable[[], bool]) -> Step:
        """Run the ACT's tool (as a person's answer says, if it had to wait for one); its
        OBSERVE row, numbered `seq`. Raises Cancelled if the agent is stopped while a
        blocking tool runs (the tool is abandoned)."""
        answer = self.approvals.answer_for(agent, act)
        if answer is not None and not answer.approve:
            return Step(seq, act.step, StepType.OBSERVE, storable(answer.observation),
                        tool=act.tool, created_at=utcnow(), duration_ms=0, call_id=act.call_id)
        tool_input = answer.tool_input if answer is not None else act.content
        result = tools.call_text(act.tool or "", tool_input, should_stop=should_stop)
        self.timings.tool(result.tool or "unknown", result.duration_ms / 1000)
        return Step(
            seq, act.step, StepType.OBSERVE, storable(result.content), tool=act.tool,
            created_at=utcnow(), duration_ms=result.duration_ms, call_id=act.call_id,
        )

    # --- persistence -----------------------------------------------------------------

    def _write(self, agent: Agent, state: _State, rows: list[Step], *, step_count: int) -> None:
        self.store.append_steps(agent.id, agent.attempt, rows, step_count=step_count)
        state.history.extend(rows)
        state.next_seq += len(rows)
        for row in rows:
            self.timings.step(row.type.value)
        self.events.publish_steps(agent, rows)

    def _complete(self, agent: Agent, state: _State, rows: list[Step], answer: str) -> Agent | None:
        done = replace(agent.with_completed(answer), step_count=state.next_step + 1)
        return self._end(agent, done, rows)

    def _fail(self, agent: Agent, state: _State, reason: StopReason, error: str) -> Agent | None:
        step = min(state.next_step, max(agent.max_steps - 1, 0))
        if any(s.step == step and s.type is StepType.ERROR for s in state.history):
            step = state.next_step  # never a second ERROR row for one iteration
        error = storable(error)  # it may quote the model server or a tool
        row = Step(state.next_seq, step, StepType.ERROR, error, created_at=utcnow())
        done = replace(
            agent.with_failed(error, stop_reason=reason),
            step_count=min(state.next_step, agent.max_steps),
        )
        return self._end(agent, done, [row])

    def _wait(self, agent: Agent, state: _State, rows: list[Step], act: Step) -> Agent | None:
        """RUNNING → WAITING on the call `act`, with this iteration's `rows`, in one
        transaction that also owes the `agent.waiting` webhook; the attempt ends here."""
        waiting = replace(
            agent.with_waiting(call_id=call_id_of(act), tool=act.tool or "", tool_input=act.content),
            step_count=act.step + 1,
        )
        if not self.store.transition(
            agent.id, AgentStatus.RUNNING, AgentStatus.WAITING, attempt=agent.attempt, steps=rows,
            waiting_for=waiting.waiting_for, heartbeat_at=None, now=waiting.updated_at,
        ):
            return None
        state.history.extend(rows)
        for row in rows:
            self.timings.step(row.type.value)
        self.events.publish_steps(waiting, rows, status=True)  # the API sends `waiting`
        return waiting

    def _end(self, agent: Agent, done: Agent, rows: list[Step]) -> Agent | None:
        won = self.store.transition(
            agent.id, AgentStatus.RUNNING, done.status, attempt=agent.attempt, steps=rows,
            final_answer=done.final_answer, error=done.error, stop_reason=done.stop_reason,
            step_count=done.step_count, completed_at=done.completed_at, now=done.updated_at,
        )
        if not won:
            return None
        for row in rows:
            self.timings.step(row.type.value)
        if done.duration_ms is not None:
            self.timings.agent(done.status.value, done.duration_ms / 1000)
        self.events.publish_steps(done, rows, status=True)  # the status after its steps
        return done
