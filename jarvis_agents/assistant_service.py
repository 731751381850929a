"""The assistants' use cases (README, Assistants): create, list, get, PATCH (a new
version), delete, versions, each checked and scoped to its user. What an assistant is,
and how an agent takes one, is in jarvis_agents/assistants.py; the rows behind
`AssistantStore` are in store/assistants.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from jarvis_agents.answers import check_schema
from jarvis_agents.assistants import (
    CONFIG_FIELDS,
    DEFAULT_NAME,
    MAX_STEPS,
    MODES,
    NAME,
    Assistant,
    AssistantConfig,
    AssistantStore,
    AssistantVersion,
    default_assistant,
    find_assistant,
    gated_tools,
)
from jarvis_agents.config import Settings
from jarvis_agents.errors import Conflict, NotFound, RequestError
from jarvis_agents.lifecycle import utcnow


class Assistants:
    """The use cases: create, list, get, patch, delete, versions; and `resolve`, which
    the agent create (and delegation, and schedules) ask for an assistant by id or name."""

    def __init__(
        self, store: AssistantStore, *, settings: Settings,
        known_tools: Callable[[Sequence[str]], tuple[str, ...]],
        remote_agents: Callable[[], Collection[str]] = lambda: (),
    ) -> None:
        """`known_tools` gives names as the tools list them, or raises for an unknown
        one; `remote_agents` names the remote agents a delegate may be (JARVIS_A2A_AGENTS)."""
        self.store = store
        self.settings = settings
        self.known_tools = known_tools
        self.remote_agents = remote_agents

    def resolve(self, user_id: uuid.UUID, ref: str, *, since: datetime | None = None) -> Assistant:
        """The user's assistant named or numbered `ref` (find_assistant)."""
        return find_assistant(self.store, user_id, ref, since=since)

    def list(self, user_id: uuid.UUID, *, since: datetime | None = None) -> list[Assistant]:
        """The default assistant first, then the user's own by name."""
        return [default_assistant(user_id, since=since), *self.store.of_user(user_id)]

    def create(self, user_id: uuid.UUID, name: str, config: AssistantConfig) -> Assistant:
        if not NAME.match(name):
            raise RequestError(f"an assistant's name is 1-64 characters of a-z, 0-9, _ and -, "
                               f"not {name[:80]!r}", code="invalid_request")
        if name == DEFAULT_NAME:
            raise Conflict(f"{DEFAULT_NAME!r} is the default assistant's name; choose another",
                           code="assistant_exists")
        now = utcnow()
        assistant = Assistant(uuid.uuid4(), user_id, name, 1, self.checked(user_id, config),
                              now, now)
        self.store.insert(assistant)
        return assistant

    def patch(self, user_id: uuid.UUID, ref: str, changes: Mapping[str, Any]) -> Assistant:
        """A new version: the current one with `changes` (a field given replaces it,
        None resets it to the default)."""
        current = self._own(user_id, ref, doing="changed")
        # Only what changes is checked: a tool or a delegate gone since is no reason to
        # refuse a new description.
        config = self.checked(user_id, current.config.changed(changes), only=set(changes))
        patched = self.store.add_version(user_id, current.id, config, now=utcnow())
        if patched is None:  # deleted meanwhile
            raise NotFound(f"you have no assistant {ref[:80]!r}", code="assistant_not_found")
        return patched

    def delete(self, user_id: uuid.UUID, ref: str) -> None:
        """Delete the assistant and its versions; agents made from it keep its id."""
        assistant = self._own(user_id, ref, doing="deleted")
        if not self.store.delete(user_id, assistant.id):
            raise NotFound(f"you have no assistant {ref[:80]!r}", code="assistant_not_found")

    def versions(self, user_id: uuid.UUID, ref: str, *,
                 since: datetime | None = None) -> list[AssistantVersion]:
        """Every version, newest first."""
        assistant = self.resolve(user_id, ref, since=since)
        if assistant.is_default:
            return [AssistantVersion(assistant.id, assistant.name, assistant.version,
                                     assistant.config, assistant.created_at)]
        return self.store.versions(user_id, assistant.id)

    def _own(self, user_id: uuid.UUID, ref: str, *, doing: str) -> Assistant:
        """A stored assistant of the user; the default one is a Conflict."""
        assistant = self.resolve(user_id, ref)
        if assistant.is_default:
            raise Conflict(
                f"the default assistant {DEFAULT_NAME!r} follows the server's settings and "
                f"cannot be {doing}; create an assistant of your own (POST /api/v1/assistants)",
                code="assistant_read_only")
        return assistant

    def checked(self, user_id: uuid.UUID, config: AssistantConfig, *,
                only: Collection[str] = CONFIG_FIELDS) -> AssistantConfig:
        """The configuration with tool names as the tools list them; a RequestError
        saying what is wrong with any field of those in `only`."""
        if "mode" in only and config.mode is not None and config.mode not in MODES:
            raise RequestError(f"`mode` must be one of {', '.join(MODES)}, not {config.mode!r}",
                               code="invalid_request")
        if "max_steps" in only and config.max_steps is not None and not (
                1 <= config.max_steps <= MAX_STEPS):
            raise RequestError(f"`max_steps` must be a whole number from 1 to {MAX_STEPS}, "
                               f"not {config.max_steps}", code="invalid_request")
        if "output_schema" in only and config.output_schema is not None:
            check_schema(config.output_schema)
        changes: dict[str, Any] = {}
        if "tools" in only and config.tools is not None:
            changes["tools"] = self.known_tools(config.tools)
        if "approve_tools" in only and config.approve_tools is not None:
            changes["approve_tools"] = gated_tools(config.approve_tools, self.known_tools)
        if "delegates" in only and config.delegates:
            self._check_delegates(user_id, config.delegates)
            changes["delegates"] = tuple(dict.fromkeys(config.delegates))
        return replace(config, **changes)

    def _check_delegates(self, user_id: uuid.UUID, delegates: Sequence[str]) -> None:
        known = {DEFAULT_NAME, *(a.name for a in self.store.of_user(user_id)),
                 *self.remote_agents()}
        unknown = [name for name in delegates if name not in known]
        if unknown:
            raise RequestError(
                f"unknown delegate(s): {', '.join(unknown)}; a delegate is the name of one of "
                f"your assistants ({', '.join(sorted(known))})", code="unknown_delegate")
