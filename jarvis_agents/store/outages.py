"""An agent's own database calls, riding out a restart of the database in place.

A restart of PostgreSQL shorter than the heartbeat's staleness must cost a running
agent nothing (docs/api.md §3): no lost worker counted, no step lost or written twice.
So every call an attempt makes for its agent (claim, take-over, reads, step writes,
the end) is retried where it failed, under `retry.database_outage_policy`, for at
most `Settings.outage_budget_s`: a longer outage ends the attempt before another
worker may take the agent over. The heartbeat and the sweeper are loops that simply
try again on their next round; they use the Repository itself.

Every write here is safe to repeat: the attempt guard refuses it once the agent has
moved on. One failure needs care: the connection may break after the server
committed, before the reply came back. The repeat then meets its own work, a step's
`seq` already taken under its attempt (refused as another run's would be) or the
status already changed (the compare-and-set matches nothing), and reads the row back
to tell its own write, recognised by exactly what it wrote, from someone else's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jarvis_agents.errors import StaleAttempt
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step, utcnow
from jarvis_agents.retry import database_outage_policy, is_database_outage
from jarvis_agents.store.interface import AgentStore

T = TypeVar("T")


class OutageTolerantStore:
    """The store calls of one agent's attempt, each retried through an outage."""

    def __init__(self, repository: AgentStore, *, budget_s: float) -> None:
        self.repository = repository
        self.budget_s = budget_s

    # --- reads ---------------------------------------------------------------------

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None:
        return self._retried("reading an agent", lambda _: self.repository.get(agent_id, user_id=user_id))

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]:
        return self._retried("reading steps", lambda _: self.repository.steps_after(agent_id, seq))

    # --- writes --------------------------------------------------------------------

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None = None,
        modes: Mapping[str, AgentMode] | None = None,
    ) -> Agent | None:
        now = utcnow()  # what the claim stamps on heartbeat_at: how to know it again

        def claim(retry: bool) -> Agent | None:
            claimed = self.repository.claim(agent_id, task_id=task_id, now=now, modes=modes)
            if claimed is None and retry:
                current = self.repository.get(agent_id)
                if (current is not None and current.status is AgentStatus.RUNNING
                        and current.heartbeat_at == now and current.task_id == task_id):
                    return current  # the earlier try's claim had committed
            return claimed

        return self._retried("claiming an agent", claim)

    def take_over(
        self, agent_id: uuid.UUID, *, attempt: int, stale_before: datetime,
        task_id: str | None = None,
    ) -> Agent | None:
        now = utcnow()

        def take_over(retry: bool) -> Agent | None:
            taken = self.repository.take_over(
                agent_id, attempt=attempt, stale_before=stale_before, task_id=task_id, now=now)
            if taken is None and retry:
                current = self.repository.get(agent_id)
                if (current is not None and current.status is AgentStatus.RUNNING
                        and current.attempt == attempt + 1 and current.heartbeat_at == now):
                    return current  # the earlier try's take-over had committed
            return taken

        return self._retried("taking an agent over", take_over)

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        def append(retry: bool) -> None:
            try:
                self.repository.append_steps(agent_id, attempt, steps, step_count=step_count)
            except StaleAttempt:
                # Its steps' seq written already under its attempt: on a retry, maybe by
                # its own earlier try, whose commit came before the connection broke.
                if not (retry and self._written(agent_id, steps)):
                    raise

        self._retried("writing steps", append)

    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, *,
        attempt: int | None = None, **fields: Any,
    ) -> bool:
        """Repository.transition; True also when an earlier try had won and committed."""
        fields.setdefault("now", utcnow())  # updated_at: how to know this write again
        now = fields["now"]

        def transition(retry: bool) -> bool:
            if self.repository.transition(agent_id, expected, new, attempt=attempt, **fields):
                return True
            if not retry:
                return False
            current = self.repository.get(agent_id)
            return (current is not None and current.status is new and current.updated_at == now
                    and (attempt is None or current.attempt == attempt))

        return self._retried(f"changing an agent to {new.value}", transition)

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None:
        # The same value under the same guard: a repeat changes nothing.
        self._retried("recording an agent's mode",
                      lambda _: self.repository.set_mode(agent_id, attempt, mode))

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        # A repeat sets the same NULL heartbeat under the same guard: nothing to tell apart.
        return self._retried("handing an agent back", lambda _: self.repository.release(agent_id, attempt))

    # --- the retries -----------------------------------------------------------------

    def _retried(self, what: str, call: Callable[[bool], T]) -> T:
        """`call(retry)` under the outage policy; `retry` is True from the second try on,
        when an earlier try may have committed before its connection broke.

        The first try runs outside the policy, which is built only once it failed (the
        policy costs CPU on every call, and nearly every call succeeds); that failure is
        handed to the policy as its first attempt: same backoffs, same logs, same budget.
        """
        try:
            return call(False)
        except Exception as exc:
            if not is_database_outage(exc):
                raise
            first: BaseException | None = exc
        for attempt in database_outage_policy(self.budget_s, what=what):
            with attempt:
                if first is not None:
                    failed, first = first, None
                    raise failed
                return call(True)
        raise AssertionError("unreachable: the policy reraises")  # pragma: no cover

    def _written(self, agent_id: uuid.UUID, steps: Sequence[Step]) -> bool:
        """Whether these very steps are stored (an earlier try wrote them)."""
        stored = {s.seq: s for s in self.repository.steps_after(agent_id, min(s.seq for s in steps) - 1)}
        return all(
            (old := stored.get(s.seq)) is not None
            and (old.step, old.type, old.tool, old.content) == (s.step, s.type, s.tool, s.content)
            for s in steps
        )
