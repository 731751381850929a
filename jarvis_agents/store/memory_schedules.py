"""Schedules in memory: store/schedules.py's twin, for unit tests and demos
(`MemoryStore().schedules`). The same rules: at most so many per user, every read and
write a user asks for scoped to them, a due time fired once (one lock makes the
compare-and-set and the agent's insert one step)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jarvis_agents.errors import RateLimited
from jarvis_agents.schedules import Decide, Firing, Schedule

if TYPE_CHECKING:
    from jarvis_agents.store.memory import MemoryStore


class MemorySchedules:
    """Schedules by id, behind one lock, beside the store whose agents they make."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.schedules: dict[uuid.UUID, Schedule] = {}
        self._lock = threading.RLock()

    def insert(self, schedule: Schedule, *, max_per_user: int) -> None:
        with self._lock:
            held = len(self.of_user(schedule.user_id))
            if held >= max_per_user:
                raise RateLimited(f"you already have {held} schedules (the limit is "
                                  f"{max_per_user}); delete one first", code="too_many_schedules")
            self.schedules[schedule.id] = schedule

    def find(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> Schedule | None:
        found = self.schedules.get(schedule_id)
        return found if found is not None and found.user_id == user_id else None

    def of_user(self, user_id: uuid.UUID) -> list[Schedule]:
        return sorted((s for s in list(self.schedules.values()) if s.user_id == user_id),
                      key=lambda s: (s.created_at, s.id))

    def change(self, user_id: uuid.UUID, schedule_id: uuid.UUID, **values: Any) -> Schedule | None:
        with self._lock:
            current = self.find(user_id, schedule_id)
            if current is None:
                return None
            changed = self.schedules[schedule_id] = replace(current, **values)
            return changed

    def delete(self, user_id: uuid.UUID, schedule_id: uuid.UUID) -> bool:
        with self._lock:
            return self.find(user_id, schedule_id) is not None and bool(
                self.schedules.pop(schedule_id, None))

    def fire_due(self, now: datetime, *, limit: int, decide: Decide) -> Sequence[Firing]:
        with self._lock:
            due = sorted((s for s in self.schedules.values() if s.enabled and s.next_run_at <= now),
                         key=lambda s: s.next_run_at)[:limit]
            won = []
            for schedule in due:
                last = self.store.agents.get(schedule.last_agent_id) if schedule.last_agent_id else None
                firing = decide(schedule, last is None or last.is_terminal, now)
                changes: dict[str, Any] = {"next_run_at": firing.next_run_at, "updated_at": now,
                                           "thread_id": firing.thread_id}
                if firing.agent is None:
                    changes["skipped"] = schedule.skipped + 1
                else:
                    changes["last_agent_id"] = firing.agent.id
                    self.store.add(firing.agent)
                self.schedules[schedule.id] = replace(schedule, **changes)
                won.append(firing)
            return won
