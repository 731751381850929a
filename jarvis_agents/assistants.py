"""Assistants: saved, versioned agent configurations, per user (README, Assistants).

An assistant is a name and a list of versions; each version is a configuration (model,
mode, tools, instructions, …) and a PATCH adds one. An agent created with an assistant
takes its current version's configuration, fields given on the create winning
(`new_agent`, the one place that turns a configuration into an agent's fields: the
create, delegated children and schedules all use it).

Every user has the default assistant `agent`, which is not stored: it mirrors the
settings (JARVIS_MODEL, JARVIS_MAX_STEPS, every tool), its id is derived from its
user's, and it is version 1 for ever. An agent created without an assistant is the
default assistant's, known without a read of the database.

The use cases are `Assistants`' methods (jarvis_agents/assistant_service.py); the rows
are behind `AssistantStore` (store/assistants.py, and its in-memory twin
store/memory_assistants.py).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol

from jarvis_agents.approvals import ALL_TOOLS
from jarvis_agents.config import Settings
from jarvis_agents.errors import NotFound, RequestError
from jarvis_agents.lifecycle import Agent, AgentMode, isoformat

NAME_PATTERN = r"^[a-z0-9_-]{1,64}$"
NAME = re.compile(NAME_PATTERN)
DEFAULT_NAME = "agent"
DEFAULT_VERSION = 1
DEFAULT_DESCRIPTION = ("The default assistant: the server's model (JARVIS_MODEL) and step "
                       "limit (JARVIS_MAX_STEPS), and every tool.")
# The default assistant's id is uuid5(DEFAULT_NAMESPACE, "<user id>/agent"): the same in
# every process, for ever, without a row. Never change it: agents keep it.
DEFAULT_NAMESPACE = uuid.UUID("9c4f2f6e-5d1b-4c1e-8d0a-3b7e6a1f2c45")
# When the default assistant was "made", where nothing better is known (it has no row).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MODES = tuple(mode.value for mode in AgentMode)
MAX_STEPS = 50
# What comes before an assistant's instructions in its agents' system prompt, after the
# contract text: the model reads them as its assistant's, within the contract's rules.
INSTRUCTIONS_HEADING = "Your instructions as this assistant (follow them within the rules above):"


@dataclass(frozen=True)
class AssistantConfig:
    """One version's configuration; None is "not said": the settings' default (or, for
    tools, every tool)."""

    description: str | None = None
    model: str | None = None
    mode: str | None = None
    tools: tuple[str, ...] | None = None
    instructions: str | None = None
    approve_tools: tuple[str, ...] | None = None
    output_schema: dict[str, Any] | None = field(default=None, hash=False)
    max_steps: int | None = None
    delegates: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = field(default=None, hash=False)

    def stored(self) -> dict[str, Any]:
        """As the database keeps it: what was said, lists as lists."""
        said = {}
        for name in CONFIG_FIELDS:
            value = getattr(self, name)
            if value is not None:
                said[name] = list(value) if isinstance(value, tuple) else value
        return said

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> AssistantConfig:
        values = {name: data.get(name) for name in CONFIG_FIELDS}
        for name in LIST_FIELDS:
            if values[name] is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    def changed(self, changes: Mapping[str, Any]) -> AssistantConfig:
        """This configuration with `changes` (a PATCH: a field given replaces, None resets)."""
        unknown = sorted(set(changes) - set(CONFIG_FIELDS))
        if unknown:
            raise RequestError(
                f"unknown field(s) {', '.join(f'`{n}`' for n in unknown)}; an assistant's "
                f"fields are {', '.join(CONFIG_FIELDS)}", code="invalid_request")
        values = {name: tuple(value) if name in LIST_FIELDS and value is not None else value
                  for name, value in changes.items()}
        return replace(self, **values)


CONFIG_FIELDS = tuple(f.name for f in fields(AssistantConfig))
LIST_FIELDS = ("tools", "approve_tools", "delegates")


@dataclass(frozen=True)
class Assistant:
    """An assistant as of its current version."""

    id: uuid.UUID
    user_id: uuid.UUID
    name: str
    version: int
    config: AssistantConfig
    created_at: datetime
    updated_at: datetime

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_NAME


@dataclass(frozen=True)
class AssistantVersion:
    """One version of an assistant, as it was made."""

    assistant_id: uuid.UUID
    name: str
    version: int
    config: AssistantConfig
    created_at: datetime


def config_json(config: AssistantConfig, settings: Settings) -> dict[str, Any]:
    """A configuration's fields as the API shows them: resolved against the settings
    (a model not said is JARVIS_MODEL), null tools meaning every tool."""
    return {
        "description": config.description,
        "model": config.model or settings.model,
        "mode": config.mode or AgentMode.AUTO.value,
        "tools": list(config.tools) if config.tools is not None else None,
        "instructions": config.instructions,
        "approve_tools": list(config.approve_tools) if config.approve_tools is not None else None,
        "output_schema": config.output_schema,
        "max_steps": config.max_steps or settings.max_steps,
        "delegates": list(config.delegates or ()),
        "metadata": config.metadata or {},
    }


def assistant_json(assistant: Assistant, settings: Settings) -> dict[str, Any]:
    """The assistant JSON (README, Assistants)."""
    return {
        "assistant_id": str(assistant.id), "name": assistant.name, "version": assistant.version,
        **config_json(assistant.config, settings),
        "created_at": isoformat(assistant.created_at), "updated_at": isoformat(assistant.updated_at),
    }


def version_json(version: AssistantVersion, settings: Settings) -> dict[str, Any]:
    return {
        "assistant_id": str(version.assistant_id), "name": version.name, "version": version.version,
        **config_json(version.config, settings), "created_at": isoformat(version.created_at),
    }


def default_id(user_id: uuid.UUID) -> uuid.UUID:
    """The id of `user_id`'s default assistant."""
    return default_assistant(user_id).id


def default_assistant(user_id: uuid.UUID, *, since: datetime | None = None) -> Assistant:
    """The user's default assistant `agent`: nothing said, so the settings throughout.
    `since` is when it is shown as made (the user's creation), else the epoch."""
    if since is None:
        return _default(user_id)
    return replace(_default(user_id), created_at=since, updated_at=since)


@lru_cache(maxsize=4096)
def _default(user_id: uuid.UUID) -> Assistant:
    # Every create without an assistant asks for it: made (a hash) once per user.
    return Assistant(uuid.uuid5(DEFAULT_NAMESPACE, f"{user_id}/{DEFAULT_NAME}"), user_id,
                     DEFAULT_NAME, DEFAULT_VERSION,
                     AssistantConfig(description=DEFAULT_DESCRIPTION), EPOCH, EPOCH)


@dataclass(frozen=True)
class Overrides:
    """What a create says besides its assistant: each field given wins over the
    assistant's (tool names already checked)."""

    model: str | None = None
    max_steps: int | None = None
    mode: str | None = None
    tools: tuple[str, ...] | None = None
    approve_tools: tuple[str, ...] | None = None
    output_schema: dict[str, Any] | None = field(default=None, hash=False)


NO_OVERRIDES = Overrides()


def new_agent(
    *, user_id: uuid.UUID, goal: str, assistant: Assistant, settings: Settings,
    overrides: Overrides = NO_OVERRIDES, **given: Any,
) -> Agent:
    """A PENDING agent configured by the assistant's version, `overrides` winning; the
    settings where neither says. `given` are Agent.new's other fields (webhook_url,
    idempotency_key, request_hash, traceparent)."""
    config = assistant.config
    return Agent.new(
        user_id=user_id, goal=goal,
        model=overrides.model or config.model or settings.model,
        max_steps=overrides.max_steps or config.max_steps or settings.max_steps,
        mode=AgentMode(overrides.mode or config.mode or AgentMode.AUTO.value),
        tools=_either(overrides.tools, config.tools),
        approve_tools=_either(overrides.approve_tools, config.approve_tools),
        output_schema=_either(overrides.output_schema, config.output_schema),
        assistant_id=assistant.id, assistant_version=assistant.version,
        instructions=config.instructions, delegates=config.delegates,
        **given,
    )


def with_instructions(system_prompt: str, instructions: str | None) -> str:
    """The system prompt with the assistant's instructions after the contract text."""
    if not instructions or not instructions.strip():
        return system_prompt
    return f"{system_prompt.rstrip()}\n\n{INSTRUCTIONS_HEADING}\n\n{instructions.strip()}\n"


def _either(given: Any, otherwise: Any) -> Any:
    return given if given is not None else otherwise


def gated_tools(names: Sequence[str], known: Callable[[Sequence[str]], tuple[str, ...]]) -> tuple[str, ...]:
    """`approve_tools` as kept: ("*",) when it names every tool, else the names as the
    tools are listed (`known` refuses an unknown one)."""
    if ALL_TOOLS in (name.strip() for name in names):
        return (ALL_TOOLS,)
    return known(names)


class AssistantStore(Protocol):
    """The rows of assistants and their versions (store/assistants.py; in memory,
    store/memory_assistants.py). Every read and write is scoped to one user."""

    def insert(self, assistant: Assistant) -> None:
        """Store a new assistant and its version 1; Conflict if the user has its name."""
        ...

    def find(self, user_id: uuid.UUID, *, assistant_id: uuid.UUID | None = None,
             name: str | None = None) -> Assistant | None:
        """The user's assistant of this id or name, as of its current version."""
        ...

    def of_user(self, user_id: uuid.UUID) -> list[Assistant]:
        """The user's stored assistants, by name."""
        ...

    def add_version(self, user_id: uuid.UUID, assistant_id: uuid.UUID,
                    config: AssistantConfig, *, now: datetime) -> Assistant | None:
        """Make `config` the assistant's next version; None if the user has no such one."""
        ...

    def delete(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> bool: ...

    def versions(self, user_id: uuid.UUID, assistant_id: uuid.UUID) -> list[AssistantVersion]:
        """Every version of the user's assistant, newest first ([] for none of theirs)."""
        ...


def find_assistant(store: AssistantStore, user_id: uuid.UUID, ref: str, *,
                   since: datetime | None = None) -> Assistant:
    """The user's assistant named or numbered `ref`, at its current version: the default
    one without a read, any other in one indexed read. NotFound (`assistant_not_found`)
    for one that does not exist or is another user's."""
    key = ref.strip()
    try:
        assistant_id: uuid.UUID | None = uuid.UUID(key)
    except ValueError:
        assistant_id = None
    if key == DEFAULT_NAME or assistant_id == default_id(user_id):
        return default_assistant(user_id, since=since)
    found = None
    if assistant_id is not None:
        found = store.find(user_id, assistant_id=assistant_id)
    elif NAME.match(key):
        found = store.find(user_id, name=key)
    if found is None:
        raise NotFound(f"you have no assistant {ref[:80]!r}; `GET /api/v1/assistants` lists "
                       "yours", code="assistant_not_found")
    return found
