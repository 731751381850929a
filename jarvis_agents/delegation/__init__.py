"""Agents that call agents: delegates as `ask_<name>` tools, children, waits and wakes."""

from jarvis_agents.delegation.service import Delegation, Settled

__all__ = ["Delegation", "Settled"]
