"""Tool plug-ins: tools other packages register under the `jarvis_agents.tools` entry points.

A plug-in is a Tool (a dict of arguments, with an `input_schema`) or a TextTool (one
string, with an `input_hint`), an instance or a no-argument factory of one. One that
cannot be loaded or checked is skipped with a warning, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from jarvis_agents.tools.arguments import schema_problem

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "jarvis_agents.tools"


def load_plugins() -> list[Any]:
    """Tools from entry points; each loads a Tool or TextTool instance, or a no-argument
    factory of one."""
    try:
        entry_points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # broken package metadata must not stop the worker
        logger.exception("could not list tool plugins")
        return []
    tools: list[Any] = []
    for entry_point in entry_points:
        try:
            loaded = entry_point.load()
            # A class or factory is called; an object that already has run() is the tool.
            is_factory = isinstance(loaded, type) or (
                callable(loaded) and not hasattr(loaded, "run")
            )
            tool = loaded() if is_factory else loaded
        except Exception:  # a broken plugin is skipped, never fatal
            logger.exception("could not load tool plugin %r", entry_point.name)
            continue
        tools.append(tool)
    return tools


def check_tool(tool: object, existing: Mapping[str, object]) -> str | None:
    """Why `tool` cannot be registered, or None when it can."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name or name.split() != [name]:
        return f"{tool!r} has no usable name (a non-empty word without spaces): {name!r}"
    if not isinstance(getattr(tool, "description", None), str):
        return f"tool {name!r} has no description"
    schema = getattr(tool, "input_schema", None)
    if schema is not None:
        problem = schema_problem(schema)
        if problem:
            return f"tool {name!r}: {problem}"
    elif not isinstance(getattr(tool, "input_hint", None), str):
        return f"tool {name!r} has neither an input_schema nor an input_hint"
    if not callable(getattr(tool, "run", None)):
        return f"tool {name!r} has no run() method"
    if name.lower() in existing:
        return f"two tools are called {name!r} (names are case-insensitive)"
    return None
