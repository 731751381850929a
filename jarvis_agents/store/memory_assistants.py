"""Assistants and their versions in memory: store/assistants.py's twin, for unit tests
and demos (`MemoryStore().assistants`). The same rules: a name once per user, every
read and write scoped to a user, each version numbered one past the last."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import datetime

from jarvis_agents.assistants import Assistant, AssistantConfig, AssistantVersion
from jarvis_agents.errors import Conflict


class MemoryAssistants:
    """Assistants by id, each with its versions oldest first, behind one lock."""

    def __init__(self) -> None:
        self.assistants: dict[uuid.UUID, Assistant] = {}
        self.versions_of: dict[uuid.UUID, list[AssistantVersion]] = {}
        self._lock = threading.Lock()

    def insert(self, assistant: Assistant) -> None:
        with self._lock:
            if any((a.user_id, a.name) == (assistant.user_id, assistant.name)
                   for a in self.assistants.values()):
                raise Conflict(f"you already have an assistant named {assistant.name!r}; change "
                               "it with PATCH, or choose another name", code="assistant_exists")
            self.assistants[assistant.id] = assistant
            self.versions_of[assistant.id] = [AssistantVersion(
                assistant.id, assistant.name, assistant.version, assistant.config,
                assistant.created_at)]

    def find(self, user_id: uuid.UUID, *, assistant_id: uuid.UUID | None = None,
             name: str | None = None) -> Assistant | None:
        return next((a for a in list(self.assistants.values()) if a.user_id == user_id and (
            a.id == assistant_id if assistant_id is not None else a.name == name)), None)

    def of_user(self, user_id: uuid.UUID) -> list[Assistant]:
        return sorted((a for a in list(self.assistants.values()) if a.user_id == user_id),
                      key=lambda a: a.name)

    def add_version(self, user_id: uuid.UUID, assistant_id: uuid.UUID,
                    config: AssistantConfig, *, now: datetime) -> Assistant | None:
        with self._lock:
            current = self.assistants.get(assistant_id)
            if current is None or current.user_id != user_id:
                return None
            patched = replace(current, version=current.version + 1, config=config, updated_at=now)
            self.assistants[assistant_id] = patched
            self.versions_of[assistant_id].append(
                AssistantVersion(assistant_id, patched.name, patched.version, config, now))
            return patched

    def delete(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> bool:
        with self._lock:
            current = self.assistants.get(assistant_id)
            if current is None or current.user_id != user_id:
                return False
            del self.assistants[assistant_id]
            del self.versions_of[assistant_id]
            return True

    def versions(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> list[AssistantVersion]:
        current = self.assistants.get(assistant_id)
        if current is None or current.user_id != user_id:
            return []
        return list(reversed(self.versions_of.get(assistant_id, [])))
