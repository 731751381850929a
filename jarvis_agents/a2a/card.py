"""The agent cards (README, A2A): the public one, which anyone may read, and the extended
one, whose skills are the caller's assistants."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from jarvis_agents.assistants import DEFAULT_NAME, Assistant

RPC_PATH = "/a2a"
SCHEME = "bearer"
MODES = ["text/plain", "application/json"]
DEFAULT_DESCRIPTION = (
    "Works towards a goal step by step (a ReACT agent) with its tools, and answers it."
)


def _version() -> str:
    try:
        return version("jarvis-agents")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0"


def skill_of(assistant: Assistant) -> AgentSkill:
    """An assistant as a skill: choose it with the message's `metadata.assistant`."""
    description = assistant.config.description or (
        DEFAULT_DESCRIPTION if assistant.name == DEFAULT_NAME else f"the assistant {assistant.name}")
    return AgentSkill(
        id=assistant.name, name=assistant.name, description=description,
        tags=["assistant"], examples=[f'metadata: {{"assistant": "{assistant.name}"}}'],
        input_modes=MODES, output_modes=MODES,
    )


def agent_card(base_url: str, skills: Iterable[AgentSkill] = ()) -> AgentCard:
    """The card of the server at `base_url` (its scheme and host, as the caller reached
    it). Without `skills`, the public card's one: the default assistant."""
    skills = list(skills) or [AgentSkill(
        id=DEFAULT_NAME, name=DEFAULT_NAME, description=DEFAULT_DESCRIPTION, tags=["assistant"],
        input_modes=MODES, output_modes=MODES)]
    return AgentCard(
        name="jarvis-agents",
        description=("ReACT agents on a task queue: send a goal, an agent works on it with its "
                     "tools and answers. Every assistant of yours is a skill (the extended card "
                     "lists them)."),
        supported_interfaces=[AgentInterface(
            url=base_url.rstrip("/") + RPC_PATH, protocol_binding=TransportProtocol.JSONRPC.value,
            protocol_version=PROTOCOL_VERSION_1_0)],
        version=_version(),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True,
                                       extended_agent_card=True),
        security_schemes={SCHEME: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", description="the API key of a jarvis-agents user"))},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
    )
