"""What the operator's figures read of the agents table: counts by status, the
PENDING backlog by model, the FAILED by reason, the oldest ended agent kept. Reads only, none on a hot path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import Executable, func, select
from sqlalchemy.engine import RowMapping

from jarvis_agents.lifecycle import AgentStatus
from jarvis_agents.store.models import AgentRow, as_utc

agents = AgentRow.__table__


class Statistics:
    """The agents table in figures, through the repository's way of reading."""

    def __init__(self, *, read: Callable[[Executable], Sequence[RowMapping]]) -> None:
        self._read = read

    def status_counts(self) -> dict[str, int]:
        """Agents by status (a status no agent has is left out)."""
        rows = self._read(select(agents.c.status, func.count().label("n")).group_by(agents.c.status))
        return {row["status"]: row["n"] for row in rows}

    def oldest_pending_created_at(self) -> datetime | None:
        (row,) = self._read(
            select(func.min(agents.c.created_at).label("oldest"))
            .where(agents.c.status == AgentStatus.PENDING.value)
        )
        return as_utc(row["oldest"]) if row["oldest"] else None

    def oldest_ended_at(self) -> datetime | None:
        """When the ended agent kept longest ended: the first entry of the ended agents'
        index (retention's, migration 0020)."""
        (row,) = self._read(select(func.min(agents.c.completed_at).label("oldest"))
                            .where(agents.c.completed_at.is_not(None)))
        return as_utc(row["oldest"]) if row["oldest"] else None

    def failed_by_reason(self) -> dict[str, int]:
        """FAILED agents by stop reason."""
        rows = self._read(
            select(agents.c.stop_reason, func.count().label("n"))
            .where(agents.c.status == AgentStatus.FAILED.value)
            .group_by(agents.c.stop_reason)
        )
        return {row["stop_reason"] or "": row["n"] for row in rows}

    def busy_models(self) -> set[str]:
        """The models with agents PENDING or RUNNING (routing keeps their queues)."""
        rows = self._read(
            select(agents.c.model).distinct()
            .where(agents.c.status.in_((AgentStatus.PENDING.value, AgentStatus.RUNNING.value)))
        )
        return {row["model"] for row in rows}

    def pending_by_model(self) -> dict[str, tuple[int, datetime]]:
        """PENDING agents by model: how many, and when the oldest was created."""
        rows = self._read(
            select(agents.c.model, func.count().label("n"),
                   func.min(agents.c.created_at).label("oldest"))
            .where(agents.c.status == AgentStatus.PENDING.value)
            .group_by(agents.c.model)
        )
        return {row["model"]: (row["n"], as_utc(row["oldest"])) for row in rows}  # type: ignore[misc]
