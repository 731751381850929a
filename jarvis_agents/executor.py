"""The ReACT loop for one agent: plan, act, observe, until an answer or a limit.

The loop keeps no state of its own between iterations: it rebuilds history, the
next `step` and the next `seq` from the persisted steps, so any attempt can resume
an agent exactly where the last one stopped, and never asks the model again for a
reply whose rows are written. What differs between the text contract and native
tool calling (the request, the rows of a reply, how an ACT runs) is the mode's
strategy (`jarvis_agents.modes`). Each iteration writes its rows in two
transactions, [THINK, ACT…] then [OBSERVE…], or [THINK, FINAL] together with the
completion; a resumed attempt that finds ACTs without their OBSERVEs runs those
calls again, and nothing is ever written twice (the schema refuses it anyway). When
every call of an iteration runs inline (offline, bounded, safe to repeat:
`calculate`, `getTime`, or an unknown name), the calls are made before anything is
written and the iteration is one write, [THINK, ACT…, OBSERVE…]: a crash before it
leaves nothing, and the resumed attempt plans the iteration again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jarvis_agents import tracing
from jarvis_agents.answers import MAX_RETRIES, parse_answer, rejected_answers
from jarvis_agents.approvals import ApprovalGate, call_id_of, wait
from jarvis_agents.errors import Cancelled, ModelError, StaleAttempt, StepTimeout, internal_error
from jarvis_agents.events import EventBus
from jarvis_agents.lifecycle import (
    Agent,
    AgentMode,
    AgentStatus,
    IterationRows,
    Step,
    StepType,
    StopReason,
    Usage,
    storable,
    utcnow,
)
from jarvis_agents.llm.base import ChatModel
from jarvis_agents.loop_state import Limits, LoopState, StepStore
from jarvis_agents.modes import Strategy, settle, strategy_for
from jarvis_agents.retry import is_infrastructure_fault
from jarvis_agents.threads import with_context
from jarvis_agents.timings import NoTimings, Timings
from jarvis_agents.tools.base import idempotency_key
from jarvis_agents.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from jarvis_agents.delegation import Delegation

# At most this many tool calls of one reply run at once.
MAX_PARALLEL_CALLS = 8

log = logging.getLogger(__name__)


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
        delegation: Delegation | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.tools = tools
        self.events = events
        self.limits = limits
        self.timings = timings or NoTimings()
        self.approvals = approvals or ApprovalGate()
        # Calls of an agent's delegates (`ask_<name>`) start children instead of running.
        self.delegation = delegation
        # By model, the mode its `auto` agents settled on here: a claim records it for
        # the next ones (store.claim's `modes`). Replaced, never changed, when it grows.
        self.settled: Mapping[str, AgentMode] = {}

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
        if self.delegation is not None:
            tools = self.delegation.tools(agent, tools)
        # A first attempt at 0 steps (nearly every claim) has none to read back: its
        # claim found the agent PENDING. Any later attempt reads them, whatever count it
        # came with: a take-over that waited for the last attempt's step write to commit
        # counted the steps as they were when it began (PostgreSQL's READ COMMITTED).
        fresh = agent.attempt <= 1 and not agent.step_count
        state = LoopState.rebuild([] if fresh else self.store.steps_after(agent.id))
        started = agent.started_at or utcnow()
        # Time spent WAITING (for a person, or on the agents it called) is not its own.
        deadline_at = started + timedelta(seconds=self.limits.total_timeout_s,
                                          milliseconds=agent.waited_ms)
        try:
            try:
                agent = self._settle(agent, deadline_at, should_stop)
            except StepTimeout:
                if utcnow() >= deadline_at:
                    return self._fail(agent, state, StopReason.TOTAL_TIMEOUT,
                                      f"the agent ran out of time: the total timeout of "
                                      f"{self.limits.total_timeout_s:g} s has passed")
                return self._fail(agent, state, StopReason.STEP_TIMEOUT,
                                  f"the model's server did not say within the step timeout of "
                                  f"{self.limits.step_timeout_s:g} s what {agent.model} supports")
            except ModelError as exc:
                return self._fail(agent, state, StopReason.MODEL_ERROR, str(exc))
            strategy = strategy_for(agent.mode)
            if state.pending_acts:
                if (waits := self.approvals.first_waiting(agent, state.pending_acts)) is not None:
                    return self._wait(agent, state, [], waits)
                if (parked := self._observe(agent, tools, strategy, state, state.pending_acts,
                                            should_stop)) is not None:
                    return parked
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
                    finished = self._iterate(agent, tools, strategy, state, deadline_at,
                                             should_stop)
                if finished is not None:
                    return finished
        except (Cancelled, StaleAttempt) as exc:
            log.info("agent %s attempt %s stopped: %s", agent.id, agent.attempt, exc)
            return None
        except Exception as exc:
            if is_infrastructure_fault(exc):
                raise  # left to be resumed, as a lost worker's attempt is
            # A bug of ours: resumed elsewhere it would fail again (README, How it works).
            log.exception("agent %s attempt %s: internal error", agent.id, agent.attempt)
            return self._fail(agent, state, StopReason.INTERNAL_ERROR, internal_error(exc))

    def _settle(self, agent: Agent, deadline_at: datetime, should_stop: Callable[[], bool]) -> Agent:
        """The agent in the mode it runs in, recorded once an `auto` agent has one."""
        budget_s = min(self.limits.step_timeout_s, (deadline_at - utcnow()).total_seconds())
        mode = settle(agent, self.model, deadline=time.monotonic() + budget_s,
                      should_stop=should_stop)
        if mode is agent.mode:
            return agent
        self.store.set_mode(agent.id, agent.attempt, mode)
        if agent.model not in self.settled:
            self.settled = {**self.settled, agent.model: mode}
        return replace(agent, mode=mode)

    def forget(self, model: str) -> None:
        """Forget the mode `model`'s agents settled on (the model is no longer in use)."""
        self.settled = {m: mode for m, mode in self.settled.items() if m != model}

    def _still_owned(self, agent: Agent) -> bool:
        current = self.store.get(agent.id)
        if current is not None and current.status is AgentStatus.RUNNING and current.attempt == agent.attempt:
            return True
        now = "gone" if current is None else f"{current.status.value} under attempt {current.attempt}"
        log.info("agent %s attempt %s stopped: the agent is %s", agent.id, agent.attempt, now)
        return False

    # --- one iteration ---------------------------------------------------------------

    def _iterate(self, agent: Agent, tools: ToolRegistry, strategy: Strategy, state: LoopState,
                 deadline_at: datetime, should_stop: Callable[[], bool]) -> Agent | None:
        remaining_s = (deadline_at - utcnow()).total_seconds()
        step_budget_s = min(self.limits.step_timeout_s, remaining_s)
        # The tools as they are now (an MCP server's may have come, gone or changed), and
        # the thread's earlier turns before the goal.
        request = strategy.request(agent, tools, state.history)
        if agent.context:
            request = replace(request, messages=with_context(list(request.messages), agent.context))
        began = time.monotonic()
        try:
            # The reply's text goes out live while somebody listens (docs/api.md §6).
            with self.events.reply_tokens(agent.id, state.next_step) as on_delta:
                reply = self.model.complete(request, deadline=began + step_budget_s,
                                            should_stop=should_stop, on_delta=on_delta)
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
        used = Usage(reply.usage.input_tokens, reply.usage.output_tokens, 1) if reply.usage else Usage(0, 0, 1)
        self.timings.tokens(agent.model, input_tokens=used.input_tokens, output_tokens=used.output_tokens)
        rows = strategy.rows(reply, IterationRows(step=state.next_step, seq=state.next_seq,
                                                  duration_ms=int(planning_s * 1000), usage=used),
                             tools=tools)
        if rows[-1].type is StepType.FINAL:
            return self._answer(agent, state, rows)
        acts = [row for row in rows if row.type is StepType.ACT]
        if (waits := self.approvals.first_waiting(agent, acts)) is not None:
            return self._wait(agent, state, rows, waits)  # a person answers first (approvals.py)
        if all(tools.runs_inline(act.tool or "") for act in acts) and not self._delegated(agent, acts):
            # One commit and one publish instead of two: the calls are safe to repeat.
            observations = self._calls(agent, tools, strategy, acts, seq=rows[-1].seq + 1,
                                       should_stop=should_stop)
            self._write(agent, state, [*rows, *observations], step_count=state.next_step + 1)
            state.next_step += 1
            return None
        if len(self._delegated(agent, acts)) == len(acts):  # written with the children
            return self._observe(agent, tools, strategy, state, acts, should_stop, unwritten=rows)
        self._write(agent, state, rows, step_count=state.next_step + 1)
        return self._observe(agent, tools, strategy, state, acts, should_stop)

    def _answer(self, agent: Agent, state: LoopState, rows: list[Step]) -> Agent | None:
        """End with the FINAL row's answer, or send it back if it does not match the
        agent's output schema (MAX_RETRIES times; then the agent FAILS)."""
        answer = rows[-1].content
        if agent.output_schema is None:
            return self._complete(agent, state, rows, answer)
        output, problem = parse_answer(answer, agent.output_schema)
        if problem is None:
            return self._complete(agent, state, rows, answer, output=output)
        tries = rejected_answers(state.history) + 1
        if tries > MAX_RETRIES:
            return self._fail(agent, state, StopReason.INVALID_OUTPUT,
                              f"the final answer did not match the output schema after {tries} "
                              f"tries: {problem}", rows=rows)
        refused = Step(rows[-1].seq + 1, state.next_step, StepType.ERROR, storable(problem),
                       created_at=utcnow())
        self._write(agent, state, [*rows, refused], step_count=state.next_step + 1)
        state.next_step += 1
        return None

    def _observe(self, agent: Agent, tools: ToolRegistry, strategy: Strategy, state: LoopState,
                 acts: list[Step], should_stop: Callable[[], bool], *,
                 unwritten: list[Step] | None = None) -> Agent | None:
        """Run the ACTs' calls and write their OBSERVEs (after the iteration's `unwritten`
        rows, when calls of delegates are all it has); the agent as it now WAITS when calls
        of its delegates started children (delegation/service.py), else None."""
        delegated = self._delegated(agent, acts)
        ran = [act for act in acts if act not in delegated]
        if ran:
            observations = self._calls(agent, tools, strategy, ran, seq=state.next_seq,
                                       should_stop=should_stop)
            self._write(agent, state, observations, step_count=acts[0].step + 1)
        if delegated and self.delegation is not None:
            before = unwritten or []
            settled = self.delegation.settle(
                agent, delegated, seq=state.next_seq + len(before), before=before,
                answer_for=lambda act: self.approvals.answer_for(agent, act))
            if settled.lost:
                raise StaleAttempt(f"agent {agent.id} is no longer RUNNING under attempt {agent.attempt}")
            rows = [*before, *settled.observations]
            if settled.waiting is None:
                self._write(agent, state, rows, step_count=acts[0].step + 1)
            else:  # written with the wait (delegation/service.py): told, and the attempt ends
                self._told(settled.waiting, rows)
                return settled.waiting
        state.next_step = acts[0].step + 1
        state.pending_acts = []
        return None

    def _delegated(self, agent: Agent, acts: Sequence[Step]) -> list[Step]:
        return [] if self.delegation is None else self.delegation.calls(agent, acts)

    def _calls(self, agent: Agent, tools: ToolRegistry, strategy: Strategy, acts: list[Step], *,
               seq: int, should_stop: Callable[[], bool]) -> list[Step]:
        """Run the ACTs' calls (as a person answered, if one was asked), those that block at
        once; their OBSERVE rows, numbered from `seq` in the ACTs' order. Raises Cancelled
        if the agent is stopped while a blocking tool runs (the tool is abandoned)."""
        def call(act: Step, seq: int) -> Step:
            if (answer := self.approvals.answer_for(agent, act)) is not None:
                if not answer.approve:
                    return replace(answer.denied(act), seq=seq)
                act = replace(act, content=answer.tool_input)
            key = idempotency_key(agent.id, call_id_of(act))  # the same in a re-run
            result = strategy.observe(tools, act, idempotency_key=key, should_stop=should_stop)
            self.timings.tool(result.tool or "unknown", result.duration_ms / 1000)
            return Step(seq, act.step, StepType.OBSERVE, storable(result.content), tool=act.tool,
                        created_at=utcnow(), duration_ms=result.duration_ms, call_id=act.call_id)

        numbers = range(seq, seq + len(acts))
        blocking = sum(1 for act in acts if not tools.runs_inline(act.tool or ""))
        if blocking < 2:
            return [call(act, number) for act, number in zip(acts, numbers, strict=True)]
        with ThreadPoolExecutor(min(len(acts), MAX_PARALLEL_CALLS),
                                thread_name_prefix="tool-call") as pool:
            return list(pool.map(call, acts, numbers))

    # --- persistence -----------------------------------------------------------------

    def _write(self, agent: Agent, state: LoopState, rows: list[Step], *, step_count: int) -> None:
        self.store.append_steps(agent.id, agent.attempt, rows, step_count=step_count)
        state.history.extend(rows)
        state.next_seq += len(rows)
        for row in rows:
            self.timings.step(row.type.value)
        self.events.publish_steps(agent, rows)

    def _complete(self, agent: Agent, state: LoopState, rows: list[Step], answer: str, *,
                  output: object = None) -> Agent | None:
        done = agent.with_completed(answer, output=output, step_count=state.next_step + 1,
                                    usage=state.usage(rows))
        return self._end(agent, done, rows)

    def _fail(self, agent: Agent, state: LoopState, reason: StopReason, error: str, *,
              rows: Sequence[Step] = ()) -> Agent | None:
        """End the agent FAILED with an ERROR row after `rows` (of the current iteration)."""
        if rows:
            step = rows[0].step
        else:
            step = min(state.next_step, max(agent.max_steps - 1, 0))
            if any(s.step == step and s.type is StepType.ERROR for s in state.history):
                step = state.next_step  # never a second ERROR row for one iteration
        error = storable(error)  # it may quote the model server or a tool
        row = Step(rows[-1].seq + 1 if rows else state.next_seq, step, StepType.ERROR, error,
                   created_at=utcnow())
        ended = [*rows, row]
        done = agent.with_failed(
            error, stop_reason=reason, usage=state.usage(ended),
            step_count=min(state.next_step + (1 if rows else 0), agent.max_steps),
        )
        return self._end(agent, done, ended)

    def _wait(self, agent: Agent, state: LoopState, rows: list[Step], act: Step) -> Agent | None:
        """RUNNING → WAITING on `act`, with the iteration's `rows` (approvals.wait): it ends here."""
        if (waiting := wait(self.store, agent, rows, act)) is not None:
            self._told(waiting, rows)
        return waiting

    def _told(self, waiting: Agent, rows: list[Step]) -> None:
        """Count and publish the rows written with a wait; the API sends `waiting`."""
        for row in rows:
            self.timings.step(row.type.value)
        self.events.publish_steps(waiting, rows, status=True)

    def _end(self, agent: Agent, done: Agent, rows: list[Step]) -> Agent | None:
        """Write the end `done` (its usage counting `rows`) with `rows`, and tell it."""
        usage = done.usage
        won = self.store.transition(
            agent.id, AgentStatus.RUNNING, done.status, attempt=agent.attempt, steps=rows,
            final_answer=done.final_answer, error=done.error, stop_reason=done.stop_reason,
            step_count=done.step_count, completed_at=done.completed_at, now=done.updated_at,
            output=done.output, input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, model_calls=usage.model_calls,
        )
        if not won:
            return None
        for row in rows:
            self.timings.step(row.type.value)
        if done.duration_ms is not None:
            self.timings.agent(done.status.value, done.duration_ms / 1000)
        self.events.publish_steps(done, rows, status=True)  # the status after its steps
        return done
