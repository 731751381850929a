"""What a tool is: a name, a description for the model, a JSON-Schema input, and a run.

Two shapes of tool are accepted. A `Tool` takes a dict of arguments described by its
`input_schema` (a JSON Schema object), exactly what native tool calling passes and what
MCP servers declare. A `TextTool` takes one string (the built-ins, and plug-ins written
before schemas existed); the registry presents it as a tool of one required string
parameter, named by its `input_parameter` (default `input`) and described by its
`input_hint`, so the model and the user see the two shapes alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

    from jarvis_agents.config import Settings

# Where a tool comes from, as `GET /api/v1/tools` says it (docs/api.md §2).
BUILTIN = "builtin"
PLUGIN = "plugin"
TEXT_PARAMETER = "input"  # the parameter of a text plug-in that names none


def mcp_source(server: str) -> str:
    """The `source` of the tools of an MCP server."""
    return f"mcp:{server}"


def idempotency_key(agent_id: object, call_id: str) -> str:
    """The key of one tool call, `<agent_id>:<call_id>`: a call run again after a crash
    carries the same key as its first run, a new call another (README, The ReACT
    contract and tools)."""
    return f"{agent_id}:{call_id}"


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the settings, the one shared HTTP client, and the call's
    idempotency key (None for a call made outside an agent, e.g. in a test)."""

    settings: Settings
    http: httpx.Client
    timeout_s: float
    idempotency_key: str | None = None


class Tool(Protocol):
    """A tool the model calls with a JSON object of arguments.

    `run` returns the observation. It raises ToolError for a failure the model can
    act on (bad input, a city not found, a service unreachable); the registry turns
    that, and any other exception, into an observation. The arguments it receives
    have been validated against `input_schema` (JSON Schema, Draft 2020-12).

    Optional: `blocking = False` declares the tool offline and bounded (no I/O, a
    run time of milliseconds whatever the input), so calling it again is harmless;
    the registry then runs it on the caller's thread, with no timeout. A tool
    without the attribute is blocking: it runs on a helper thread under the tool
    timeout. A tool may instead offer `submit` (see `SubmittedTool`): its call runs
    elsewhere and is cancelled when the wait for it ends early.
    """

    name: str
    description: str
    input_schema: dict[str, Any]

    def run(self, arguments: Mapping[str, Any], *, context: ToolContext) -> str: ...


class TextTool(Protocol):
    """A tool the model calls with one line (or block) of text.

    Optional: `input_parameter`, the name its text goes by in its schema (`input` when
    absent), and `blocking` as for `Tool`.
    """

    name: str
    description: str
    input_hint: str

    def run(self, tool_input: str, *, context: ToolContext) -> str: ...


class ListedTool(Protocol):
    """What the model and the user see of any tool, whatever its kind."""

    name: str
    description: str
    input_schema: dict[str, Any]
    source: str


class SubmittedTool(Protocol):
    """A tool whose call runs elsewhere (an MCP server): started, then waited on.

    `submit` returns at once; the future's result is the observation, or ToolError.
    Cancelling the future cancels the call (a timeout, an agent stopped).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    source: str

    def submit(self, arguments: Mapping[str, Any], *, context: ToolContext) -> Future[str]: ...


def describe(tool: ListedTool) -> dict[str, Any]:
    """A tool as `GET /api/v1/tools` lists it (docs/api.md §2)."""
    return {"name": tool.name, "description": tool.description, "source": tool.source,
            "input_schema": tool.input_schema}


def string_schema(parameter: str, description: str) -> dict[str, Any]:
    """The input schema of a tool of one required string parameter."""
    return {
        "type": "object",
        "properties": {parameter: {"type": "string", "description": description}},
        "required": [parameter],
        "additionalProperties": False,
    }


@dataclass(frozen=True, eq=False)
class RegisteredTool:
    """A built-in or plug-in tool as the registry keeps it: what the model and the user
    see, where it comes from, and how to run it with a dict of arguments."""

    tool: Any  # the Tool or TextTool it was made from
    name: str
    description: str
    input_schema: dict[str, Any]
    source: str
    text_parameter: str | None  # set when `tool` is a TextTool: its text's parameter
    blocking: bool

    @classmethod
    def of(cls, tool: Any, *, source: str) -> RegisteredTool:
        """`tool` (a Tool or a TextTool) under its schema; a TextTool gets one string."""
        # Plug-ins written before the flag existed are blocking: the safe default.
        blocking = getattr(tool, "blocking", True) is not False
        schema = getattr(tool, "input_schema", None)
        if isinstance(schema, dict):
            return cls(tool, tool.name, tool.description, schema, source, None, blocking)
        parameter = getattr(tool, "input_parameter", None) or TEXT_PARAMETER
        return cls(tool, tool.name, tool.description, string_schema(parameter, tool.input_hint),
                   source, parameter, blocking)

    def takes_as_is(self, arguments: Mapping[str, Any]) -> bool:
        """Whether `arguments` fit the schema with no check: a text tool's one string (its
        schema is `string_schema`'s, which any such string fits)."""
        return (self.text_parameter is not None and len(arguments) == 1
                and isinstance(arguments.get(self.text_parameter), str))

    def run(self, arguments: Mapping[str, Any], *, context: ToolContext) -> str:
        if self.text_parameter is not None:
            return self.tool.run(arguments[self.text_parameter], context=context)
        return self.tool.run(dict(arguments), context=context)
