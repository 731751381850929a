"""What a tool is: a name, a description for the model, and a function of text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

    from jarvis_agents.config import Settings


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use: the settings and the one shared HTTP client."""

    settings: Settings
    http: httpx.Client
    timeout_s: float


class Tool(Protocol):
    """A tool the model can call with one line (or block) of text.

    `run` returns the observation. It raises ToolError for a failure the model can
    act on (bad input, a city not found, a service unreachable); the registry turns
    that, and any other exception, into an observation.

    Optional: `blocking = False` declares the tool offline and bounded (no I/O, a
    run time of milliseconds whatever the input), so calling it again is harmless;
    the registry then runs it on the caller's thread, with no timeout. A tool
    without the attribute is blocking: it runs on a helper thread under the tool
    timeout.
    """

    name: str
    description: str
    input_hint: str

    def run(self, tool_input: str, *, context: ToolContext) -> str: ...
