"""Tools an agent may call: a registry, the built-ins, and entry-point plugins."""

from jarvis_agents.tools.base import Tool, ToolContext

__all__ = ["Tool", "ToolContext"]
