"""The store as its callers see it: one interface, with its implementations side by side.

`AgentStore` is everything the service, the runner and the executor ask of persistence
about agents and their steps. It has two complete implementations: the SQLAlchemy
`Repository` (store/repository.py), which serves SQLite and PostgreSQL alike, and the
in-memory `MemoryStore` (store/memory.py) that unit tests and demos run on. Users
(store/users.py), statistics (store/statistics.py) and the webhook outbox
(store/outbox.py) are rooms of their own beside it.

The rules every implementation keeps: each status change is a compare-and-set (the
call says whether it won); a step write is refused with StaleAttempt unless the agent
is RUNNING under the writer's attempt; an agent reads back exactly as it was written
(tools and approve_tools as tuples, waited_ms 0 when never set, aware timestamps).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from jarvis_agents.assistants import AssistantStore
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step, Usage
from jarvis_agents.retention import DeletionStore
from jarvis_agents.schedules import ScheduleStore
from jarvis_agents.threads import Earlier


class DelegationStore(Protocol):
    """Callers and their children (store/delegation.py; in memory, memory_delegation.py)."""

    def children(self, caller_id: uuid.UUID) -> list[Agent]: ...
    def start(self, caller: Agent, *, children: Sequence[Agent], waiting_for: dict[str, Any],
              steps: Sequence[Step], now: datetime) -> bool: ...
    def ended_waits(self, *, limit: int = 100) -> list[Agent]: ...
    def orphans(self, *, limit: int = 100) -> list[Agent]: ...
    def remote_due(self, *, polled_before: datetime, now: datetime,
                   limit: int = 100) -> list[Agent]: ...
    def cancels_due(self, *, cancelled_after: datetime, polled_before: datetime,
                    now: datetime, limit: int = 100) -> list[Agent]: ...
    def owe_cancel(self, agent_id: uuid.UUID, waiting_for: dict[str, Any]) -> bool: ...
    def roll_up(self, agent_id: uuid.UUID, descendants: Usage) -> bool: ...


class AgentStore(Protocol):
    """Agents and their steps, with compare-and-set writes; assistants, the delegation's
    rows, schedules and deletions beside them."""

    assistants: AssistantStore
    delegation: DelegationStore
    schedules: ScheduleStore
    deletions: DeletionStore

    # --- agents --------------------------------------------------------------------

    def create_agent(self, agent: Agent, *, max_active: int | None = None) -> tuple[Agent, bool]:
        """Insert a PENDING agent; (agent, created). An idempotency key this user
        already used returns the earlier agent (created=False) for the same request
        hash, else raises Conflict; RateLimited past `max_active` active agents."""
        ...

    def get(self, agent_id: uuid.UUID, *, user_id: uuid.UUID | None = None) -> Agent | None: ...

    def get_many(self, agent_ids: Sequence[uuid.UUID]) -> list[Agent]:
        """These agents, in no particular order (one that does not exist is left out)."""
        ...

    def list_agents(
        self, user_id: uuid.UUID, *, status: AgentStatus | None = None, limit: int = 20,
        cursor: str | None = None, thread_id: uuid.UUID | None = None,
        caller_id: uuid.UUID | None = None,
        schedule_id: uuid.UUID | None = None,
    ) -> tuple[list[Agent], str | None]:
        """The user's agents (of a thread, of a schedule), newest first, and the cursor of the next page (or None)."""
        ...

    def models_of(self, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The model of each of these agents (those that exist)."""
        ...

    def waiting_since(self, cutoff: datetime, *, limit: int = 100) -> list[Agent]:
        """Agents WAITING since before `cutoff` (their approval may have timed out)."""
        ...

    # --- threads and forks (docs/api.md §8) ------------------------------------------

    def agents_of_thread(self, user_id: uuid.UUID, thread_id: uuid.UUID) -> list[Earlier]:
        """The user's agents of the thread, oldest first; [] for an unknown or another
        user's thread."""
        ...

    def insert_fork(self, agent: Agent, steps: Sequence[Step], *, max_active: int | None) -> None:
        """Insert the PENDING fork and its copied steps at once; RateLimited past
        `max_active` active agents."""
        ...

    # --- the lifecycle --------------------------------------------------------------

    def transition(
        self, agent_id: uuid.UUID, expected: AgentStatus, new: AgentStatus, *,
        attempt: int | None = None, heartbeat_before: datetime | None = None,
        steps: Sequence[Step] = (), **fields: Any,
    ) -> bool:
        """Compare-and-set the status (and `fields`); True when this call won. `steps`
        are written with it, only if it won."""
        ...

    def resume(
        self, agent_id: uuid.UUID, *, user_id: uuid.UUID, attempt: int, max_active: int | None,
        **fields: Any,
    ) -> bool:
        """WAITING → PENDING under `attempt` (and `fields`); False when it no longer waits
        under it. RateLimited, changing nothing, when the user already has `max_active`
        agents PENDING or RUNNING: the check and the change are one atomic step."""
        ...

    def claim(
        self, agent_id: uuid.UUID, *, task_id: str | None = None, now: datetime | None = None,
        modes: Mapping[str, AgentMode] | None = None,
    ) -> Agent | None:
        """PENDING → RUNNING under a new attempt; None when someone else got there first.
        An `auto` agent of a model in `modes` takes the mode given for it."""
        ...

    def take_over(
        self, agent_id: uuid.UUID, *, attempt: int, stale_before: datetime,
        task_id: str | None = None, now: datetime | None = None,
    ) -> Agent | None:
        """Supersede a RUNNING attempt whose heartbeat stopped or that was handed back."""
        ...

    def release(self, agent_id: uuid.UUID, attempt: int) -> bool:
        """Hand back a RUNNING agent this attempt owns, for another worker to resume."""
        ...

    def heartbeat(self, owned: Iterable[tuple[uuid.UUID, int]]) -> int:
        """Mark these (agent, attempt) executions alive; returns how many still are."""
        ...

    def set_mode(self, agent_id: uuid.UUID, attempt: int, mode: AgentMode) -> None: ...

    def forget_task(self, agent_id: uuid.UUID) -> None:
        """Mark a PENDING agent as not on the queue, for the sweeper to enqueue later."""
        ...

    def requeue_pending(
        self, *, untouched_before: datetime, limit: int = 100
    ) -> list[tuple[uuid.UUID, str]]:
        """Claim the PENDING agents whose message to look for: (id, task id) of each."""
        ...

    def requeue_stale_running(
        self, *, stale_before: datetime, handed_back_before: datetime | None = None,
        limit: int = 100,
    ) -> list[tuple[uuid.UUID, int, bool]]:
        """Claim the RUNNING agents whose attempt is gone: (id, attempt, handed back)."""
        ...

    # --- steps ---------------------------------------------------------------------

    def append_steps(
        self, agent_id: uuid.UUID, attempt: int, steps: Sequence[Step], *, step_count: int
    ) -> None:
        """Persist one iteration's steps at once, or raise StaleAttempt."""
        ...

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]: ...

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]:
        """The agent (of `user_id`, if given) and its steps after seq `after`, read in one
        statement; (None, []) when there is no such agent."""
        ...
