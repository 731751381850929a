"""The tool registry: exact name lookup, bounded calls, failures turned into observations.

`ToolRegistry.call` never raises for anything a tool does. An unknown name, a
ToolError, any other exception and a tool that hangs all come back as a ToolResult
with `ok=False` and a sentence the model can act on, so the ReACT loop goes on.
What it raises is the caller's own stop: Cancelled when the agent is stopped while a
blocking tool runs. The wait wakes on the agent's StopSignal and the tool's thread is
abandoned, its request left to end on its own timeout: a thread blocked in a socket
read cannot be interrupted from outside, and an HTTP request on a shared pool's
connection offers no handle to cut it with.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from types import TracebackType
from typing import Self

import httpx

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ToolError
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.tools.base import Tool, ToolContext
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.builtin.get_time import GetTimeTool
from jarvis_agents.tools.builtin.get_weather import GetWeatherTool
from jarvis_agents.tools.builtin.search import SearchTool
from jarvis_agents.tools.http import make_http_client

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "jarvis_agents.tools"
# How often a wait on a blocking tool looks at a stop condition that does not wake it
# (a plain callable, or a StopSignal's polled conditions: see its poll_s).
STOP_POLL_S = 0.1


@dataclass(frozen=True)
class ToolResult:
    """The observation of one tool call; `tool` is the canonical name, None if unknown."""

    content: str
    ok: bool
    tool: str | None
    duration_ms: int


@dataclass
class _Outcome:
    """What the worker thread hands back: a value or the exception it raised."""

    value: object = None
    error: BaseException | None = None


def builtin_tools() -> list[Tool]:
    """The four tools every registry starts with, in the order the model sees them."""
    return [CalculateTool(), GetTimeTool(), GetWeatherTool(), SearchTool()]


class ToolRegistry:
    """The tools one agent may call, and the one place that calls them."""

    def __init__(
        self, tools: Iterable[Tool], *, settings: Settings, http: httpx.Client | None = None
    ) -> None:
        self._settings = settings
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            problem = _check_tool(tool, self._tools)
            if problem:  # a developer mistake in code we were handed: refuse loudly
                raise ValueError(problem)
            self._tools[tool.name.lower()] = tool
        # Why track ownership: subsets share their parent's client and must not close it.
        self._owns_http = http is None
        self._http = http if http is not None else make_http_client(settings)

    @classmethod
    def default(cls, settings: Settings) -> ToolRegistry:
        """The built-ins plus every plugin registered under the `jarvis_agents.tools` group."""
        tools = builtin_tools()
        by_name = {tool.name.lower(): tool for tool in tools}
        for tool in load_plugins():
            problem = _check_tool(tool, by_name)
            if problem:  # a plugin must never take the whole system down
                logger.warning("skipping tool plugin: %s", problem)
                continue
            by_name[tool.name.lower()] = tool
            tools.append(tool)
        return cls(tools, settings=settings)

    # --- lookup -------------------------------------------------------------------

    def names(self) -> list[str]:
        """Canonical names, in registration order."""
        return [tool.name for tool in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        """The tool called exactly `name`, ignoring case and surrounding whitespace."""
        # Why exact: a fuzzy match would let `search` dispatch `webSearch` (CONTRACT §5).
        return self._tools.get(name.strip().lower())

    def describe(self) -> list[dict[str, str]]:
        """Name and description of each tool, for the prompt."""
        return [{"name": t.name, "description": t.description} for t in self._tools.values()]

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The names `get` cannot resolve, in the order given."""
        return [name for name in names if self.get(name) is None]

    def subset(self, names: Iterable[str] | None) -> ToolRegistry:
        """A registry with only `names` (None: all); names it cannot resolve are left out."""
        if names is None:
            chosen = list(self._tools.values())
        else:
            found = (self.get(name) for name in names)
            chosen = list({id(t): t for t in found if t is not None}.values())
        return ToolRegistry(chosen, settings=self._settings, http=self._http)

    # --- calling ------------------------------------------------------------------

    def call(
        self, name: str, tool_input: str, *, should_stop: Callable[[], bool] | None = None
    ) -> ToolResult:
        """Run one tool with the registry's limits; never raises for the tool's failures.

        Raises Cancelled when `should_stop` turns true while a blocking tool runs (a
        StopSignal's wake() is seen at once).
        """
        started = time.perf_counter()
        tool = self.get(name)
        if tool is None:
            available = ", ".join(self.names()) or "(none)"
            content = (
                f"Unknown tool '{name.strip()[:80]}'. Available tools: {available}. "
                "Reply with one of these names in ACTION."
            )
            return self._result(content, ok=False, tool=None, started=started)
        content, ok = self._run(tool, tool_input, should_stop)
        return self._result(content, ok=ok, tool=tool.name, started=started)

    def runs_inline(self, name: str) -> bool:
        """Whether a call of `name` ends on the caller's thread, at once and offline.

        True for an unknown name (the call only answers with the list of tools) and
        for a tool that declares `blocking = False`; such a call is safe to repeat.
        """
        tool = self.get(name)
        return tool is None or not _is_blocking(tool)

    def _run(
        self, tool: Tool, tool_input: str, should_stop: Callable[[], bool] | None
    ) -> tuple[str, bool]:
        timeout_s = self._settings.tool_timeout_s
        context = ToolContext(settings=self._settings, http=self._http, timeout_s=timeout_s)
        outcome = _Outcome()
        finished, woken = threading.Event(), threading.Event()

        def work() -> None:
            try:
                outcome.value = tool.run(tool_input, context=context)
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                outcome.error = exc
            finally:
                finished.set()
                woken.set()

        if not _is_blocking(tool):
            # Offline and bounded: a thread to start, join and time out would cost
            # more than the call itself. A KeyboardInterrupt here is the caller's.
            try:
                outcome.value = tool.run(tool_input, context=context)
            except Exception as exc:  # noqa: BLE001 - reported to the caller below
                outcome.error = exc
            return self._observation(tool, outcome)
        # Why a daemon thread and not an executor: a tool stuck in C code or a socket
        # cannot be interrupted, so we stop waiting and abandon it; a daemon thread
        # never blocks interpreter exit the way pool workers do.
        worker = threading.Thread(
            target=contextvars.copy_context().run, args=(work,), name=f"tool-{tool.name}", daemon=True
        )
        worker.start()
        if not _wait(finished, woken, timeout_s, should_stop):
            logger.info("tool %s abandoned: the agent was stopped", tool.name)
            raise Cancelled(f"the agent was stopped while its tool {tool.name} was running")
        if not finished.is_set():
            logger.warning("tool %s timed out after %s s; thread abandoned", tool.name, timeout_s)
            message = (
                f"Tool '{tool.name}' timed out after {timeout_s:g} s; "
                "try a simpler input or another tool."
            )
            return message, False
        return self._observation(tool, outcome)

    @staticmethod
    def _observation(tool: Tool, outcome: _Outcome) -> tuple[str, bool]:
        """The observation text of a finished call, and whether it succeeded."""
        error = outcome.error
        if isinstance(error, ToolError):
            return str(error) or f"Tool '{tool.name}' failed without a message.", False
        if error is not None:
            logger.error("tool %s raised an unexpected error", tool.name, exc_info=error)
            message = (
                f"Tool '{tool.name}' failed with {type(error).__name__}: {error}. "
                "Try a different input or another tool."
            )
            return message, False
        value = outcome.value
        return (value if isinstance(value, str) else "" if value is None else str(value)), True

    def _result(self, content: str, *, ok: bool, tool: str | None, started: float) -> ToolResult:
        duration_ms = int((time.perf_counter() - started) * 1000)
        content = truncate(content, self._settings.tool_output_max_chars)
        return ToolResult(content=content, ok=ok, tool=tool, duration_ms=duration_ms)

    # --- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client if this registry created it."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _wait(finished: threading.Event, woken: threading.Event, timeout_s: float,
          should_stop: Callable[[], bool] | None) -> bool:
    """Wait until the tool has `finished` or `timeout_s` pass; False if stopped first.

    `woken` is set by the tool's end and by every wake() of a StopSignal.
    """
    deadline = time.monotonic() + timeout_s
    poll_s = STOP_POLL_S
    waking: AbstractContextManager[None] = nullcontext()
    if isinstance(should_stop, StopSignal):
        poll_s = should_stop.poll_s if should_stop.poll_s is not None else timeout_s
        waking = should_stop.waking(woken.set)
    with waking:
        while not finished.is_set():
            if should_stop is not None and should_stop():
                return False
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                break
            woken.wait(min(left_s, poll_s) if should_stop is not None else left_s)
            woken.clear()
    return True


def truncate(text: str, max_chars: int) -> str:
    """`text` cut so that it, with a visible marker, fits in `max_chars` characters."""
    if len(text) <= max_chars:
        return text
    # The marker's length depends on the count it reports; sizing it with the largest
    # possible count keeps the total within max_chars.
    longest_marker = f"\n… [truncated {len(text)} characters]"
    keep = max(max_chars - len(longest_marker), 0)
    return text[:keep] + f"\n… [truncated {len(text) - keep} characters]"


def load_plugins() -> list[Tool]:
    """Tools from entry points; each loads a Tool instance or a no-argument factory."""
    try:
        entry_points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # broken package metadata must not stop the worker
        logger.exception("could not list tool plugins")
        return []
    tools: list[Tool] = []
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


def _is_blocking(tool: Tool) -> bool:
    # Plugins written before the flag existed are blocking: the safe default.
    return getattr(tool, "blocking", True) is not False


def _check_tool(tool: object, existing: dict[str, Tool]) -> str | None:
    """Why `tool` cannot be registered, or None when it can."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name or name.split() != [name]:
        return f"{tool!r} has no usable name (a non-empty word without spaces): {name!r}"
    if not isinstance(getattr(tool, "description", None), str):
        return f"tool {name!r} has no description"
    if not isinstance(getattr(tool, "input_hint", None), str):
        return f"tool {name!r} has no input_hint"
    if not callable(getattr(tool, "run", None)):
        return f"tool {name!r} has no run() method"
    if name.lower() in existing:
        return f"two tools are called {name!r} (names are case-insensitive)"
    return None
