"""The tool registry: exact name lookup, bounded calls, failures turned into observations.

`ToolRegistry.call` takes a tool's arguments as a dict (what native tool calling
passes); `call_text` reads them from the text contract's INPUT first (docs/api.md §7) and
then takes the same path. Neither raises for anything a tool does: an unknown name,
arguments that do not fit the tool's schema, a ToolError, any other exception and a
tool that hangs all come back as a ToolResult with `ok=False` and a sentence the model
can act on, so the ReACT loop goes on. What they raise is the caller's own stop:
Cancelled when the agent is stopped while a blocking tool runs. The wait wakes on the
agent's StopSignal. A tool that was submitted (an MCP call) is cancelled; a tool's
thread is abandoned, its request left to end on its own timeout: a thread blocked in a
socket read cannot be interrupted from outside, and an HTTP request on a shared pool's
connection offers no handle to cut it with.

Besides its own tools (the built-ins and plug-ins, fixed at start), a registry may
have providers whose tools come and go (MCP servers): they are looked up on every call.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

import httpx

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ToolError
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.tools.arguments import (
    ArgumentsError,
    arguments_from_text,
    check_arguments,
)
from jarvis_agents.tools.base import (
    BUILTIN,
    PLUGIN,
    ListedTool,
    RegisteredTool,
    SubmittedTool,
    ToolContext,
    describe,
)
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.builtin.get_time import GetTimeTool
from jarvis_agents.tools.builtin.get_weather import GetWeatherTool
from jarvis_agents.tools.builtin.search import SearchTool
from jarvis_agents.tools.http import make_http_client
from jarvis_agents.tools.plugins import check_tool, load_plugins

logger = logging.getLogger(__name__)

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


class ToolProvider(Protocol):
    """Tools that come and go while the process runs (the MCP servers' tools)."""

    def tools(self) -> Sequence[SubmittedTool]:
        """The tools available now."""

    def close(self) -> None:
        """Stop whatever the provider runs."""


def builtin_tools() -> list[RegisteredTool]:
    """The four tools every registry starts with, in the order the model sees them."""
    return [RegisteredTool.of(tool, source=BUILTIN)
            for tool in (CalculateTool(), GetTimeTool(), GetWeatherTool(), SearchTool())]


class ToolRegistry:
    """The tools one agent may call, and the one place that calls them."""

    def __init__(
        self,
        tools: Iterable[Any],
        *,
        settings: Settings,
        http: httpx.Client | None = None,
        providers: Sequence[ToolProvider] = (),
        allowed: Iterable[str] | None = None,
    ) -> None:
        """`tools`: Tool, TextTool or RegisteredTool objects (the bare ones count as
        built-ins). `allowed`: the only names this registry resolves (None: all)."""
        self._settings = settings
        self._tools: dict[str, RegisteredTool] = {}
        for tool in tools:
            if isinstance(tool, RegisteredTool):  # checked when it was registered (subsets)
                self._tools[tool.name.lower()] = tool
                continue
            problem = check_tool(tool, self._tools)
            if problem:  # a developer mistake in code we were handed: refuse loudly
                raise ValueError(problem)
            self._tools[tool.name.lower()] = RegisteredTool.of(tool, source=BUILTIN)
        self._providers = tuple(providers)
        self._allowed = None if allowed is None else frozenset(n.strip().lower() for n in allowed)
        # Why track ownership: subsets share their parent's client and providers.
        self._owner = http is None
        self._http = http if http is not None else make_http_client(settings)

    @classmethod
    def default(cls, settings: Settings, *, providers: Sequence[ToolProvider] = ()) -> ToolRegistry:
        """The built-ins, every plugin of the `jarvis_agents.tools` group, and `providers`
        (closed with the registry)."""
        tools = builtin_tools()
        by_name = {tool.name.lower(): tool for tool in tools}
        for tool in load_plugins():
            problem = check_tool(tool, by_name)
            if problem:  # a plugin must never take the whole system down
                logger.warning("skipping tool plugin: %s", problem)
                continue
            entry = RegisteredTool.of(tool, source=PLUGIN)
            by_name[entry.name.lower()] = entry
            tools.append(entry)
        return cls(tools, settings=settings, providers=providers)

    # --- lookup -------------------------------------------------------------------

    def listed(self) -> list[ListedTool]:
        """Every tool available now, built-ins and plug-ins first, in order."""
        found: dict[str, ListedTool] = {}
        for key, tool in self._tools.items():
            if self._allowed is None or key in self._allowed:
                found[key] = tool
        for provider in self._providers:
            for tool in provider.tools():
                key = tool.name.lower()
                if key not in found and (self._allowed is None or key in self._allowed):
                    found[key] = tool
        return list(found.values())

    def names(self) -> list[str]:
        """Canonical names of the tools available now, in order."""
        return [tool.name for tool in self.listed()]

    def get(self, name: str) -> ListedTool | None:
        """The tool called exactly `name`, ignoring case and surrounding whitespace."""
        # Why exact: a fuzzy match would let `search` dispatch `webSearch` (docs/api.md §5).
        key = name.strip().lower()
        if self._allowed is not None and key not in self._allowed:
            return None
        tool = self._tools.get(key)
        if tool is not None:
            return tool
        for provider in self._providers:
            for candidate in provider.tools():
                if candidate.name.lower() == key:
                    return candidate
        return None

    def describe(self) -> list[dict[str, Any]]:
        """Each tool as `GET /api/v1/tools` lists it (docs/api.md §2)."""
        return [describe(tool) for tool in self.listed()]

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The names `get` cannot resolve, in the order given."""
        return [name for name in names if self.get(name) is None]

    def subset(self, names: Iterable[str] | None) -> ToolRegistry:
        """A registry with only `names` (None: all). A name that resolves to nothing now
        (an MCP server not up yet) resolves once its tool appears."""
        allowed = None if names is None else list(names)
        return ToolRegistry(self._tools.values(), settings=self._settings, http=self._http,
                            providers=self._providers, allowed=allowed)

    def plus(self, extra: Sequence[RegisteredTool]) -> ToolRegistry:
        """This registry with `extra` tools besides (an agent's delegates)."""
        allowed = None if self._allowed is None else [*self._allowed, *(t.name for t in extra)]
        return ToolRegistry([*self._tools.values(), *extra], settings=self._settings,
                            http=self._http, providers=self._providers, allowed=allowed)

    # --- calling ------------------------------------------------------------------

    def call_text(
        self, name: str, tool_input: str, *, should_stop: Callable[[], bool] | None = None,
        idempotency_key: str | None = None,
    ) -> ToolResult:
        """`call` with the arguments an INPUT of the text contract stands for."""
        started = time.perf_counter()
        tool = self.get(name)
        if tool is None:
            return self._unknown(name, started)
        try:
            arguments = arguments_from_text(tool.name, tool.input_schema, tool_input)
        except ArgumentsError as exc:
            return self._result(str(exc), ok=False, tool=tool.name, started=started)
        return self._checked_call(tool, arguments, should_stop, idempotency_key, started)

    def call(
        self, name: str, arguments: Mapping[str, Any], *,
        should_stop: Callable[[], bool] | None = None, idempotency_key: str | None = None,
    ) -> ToolResult:
        """Run one tool with the registry's limits; never raises for the tool's failures.

        `idempotency_key` (base.idempotency_key) reaches the tool in its context, and an
        MCP server in the request's `_meta`. Raises Cancelled when `should_stop` turns
        true while a blocking tool runs (a StopSignal's wake() is seen at once).
        """
        started = time.perf_counter()
        tool = self.get(name)
        if tool is None:
            return self._unknown(name, started)
        return self._checked_call(tool, arguments, should_stop, idempotency_key, started)

    def runs_inline(self, name: str) -> bool:
        """Whether a call of `name` ends on the caller's thread, at once and offline.

        True for an unknown name (the call only answers with the list of tools) and
        for a tool that declares `blocking = False`; such a call is safe to repeat.
        """
        tool = self.get(name)
        return tool is None or (isinstance(tool, RegisteredTool) and not tool.blocking)

    def _checked_call(
        self, tool: ListedTool, arguments: Mapping[str, Any],
        should_stop: Callable[[], bool] | None, idempotency_key: str | None, started: float,
    ) -> ToolResult:
        # A text tool's one string fits the schema made for it: nothing to check (the
        # check was a visible cost of every text-mode call in a busy worker).
        if not (isinstance(tool, RegisteredTool) and tool.takes_as_is(arguments)):
            try:
                check_arguments(tool.name, tool.input_schema, arguments)
            except ArgumentsError as exc:
                return self._result(str(exc), ok=False, tool=tool.name, started=started)
        timeout_s = self._settings.tool_timeout_s
        context = ToolContext(settings=self._settings, http=self._http, timeout_s=timeout_s,
                              idempotency_key=idempotency_key)
        content, ok = self._run(tool, arguments, context, should_stop)
        return self._result(content, ok=ok, tool=tool.name, started=started)

    def _unknown(self, name: str, started: float) -> ToolResult:
        available = ", ".join(self.names()) or "(none)"
        content = (
            f"Unknown tool '{name.strip()[:80]}'. Available tools: {available}. "
            "Reply with one of these names in ACTION."
        )
        return self._result(content, ok=False, tool=None, started=started)

    def _run(
        self, tool: ListedTool, arguments: Mapping[str, Any], context: ToolContext,
        should_stop: Callable[[], bool] | None,
    ) -> tuple[str, bool]:
        timeout_s = context.timeout_s
        if isinstance(tool, RegisteredTool) and not tool.blocking:
            # Offline and bounded: a thread to start, join and time out would cost
            # more than the call itself. A KeyboardInterrupt here is the caller's.
            try:
                value = tool.run(arguments, context=context)
            except Exception as exc:  # noqa: BLE001 - reported to the caller below
                return self._observation(tool, None, exc)
            return self._observation(tool, value, None)
        future = _start(tool, arguments, context)
        woken = threading.Event()
        future.add_done_callback(lambda _: woken.set())
        if not _wait(future, woken, timeout_s, should_stop):
            future.cancel()
            logger.info("tool %s abandoned: the agent was stopped", tool.name)
            raise Cancelled(f"the agent was stopped while its tool {tool.name} was running")
        if not future.done():
            future.cancel()
            logger.warning("tool %s timed out after %s s; its call abandoned", tool.name, timeout_s)
            message = (
                f"Tool '{tool.name}' timed out after {timeout_s:g} s; "
                "try a simpler input or another tool."
            )
            return message, False
        try:
            error = future.exception(timeout=0)
        except CancelledError:  # the call's own machinery gave it up
            error = ToolError(f"Tool '{tool.name}' was interrupted; try again or use another tool.")
        return self._observation(tool, None if error else future.result(timeout=0), error)

    @staticmethod
    def _observation(tool: ListedTool, value: object, error: BaseException | None) -> tuple[str, bool]:
        """The observation text of a finished call (its value, or the error it raised),
        and whether it succeeded."""
        if isinstance(error, ToolError):
            return str(error) or f"Tool '{tool.name}' failed without a message.", False
        if error is not None:
            logger.error("tool %s raised an unexpected error", tool.name, exc_info=error)
            message = (
                f"Tool '{tool.name}' failed with {type(error).__name__}: {error}. "
                "Try a different input or another tool."
            )
            return message, False
        return (value if isinstance(value, str) else "" if value is None else str(value)), True

    def _result(self, content: str, *, ok: bool, tool: str | None, started: float) -> ToolResult:
        duration_ms = int((time.perf_counter() - started) * 1000)
        content = truncate(content, self._settings.tool_output_max_chars)
        return ToolResult(content=content, ok=ok, tool=tool, duration_ms=duration_ms)

    # --- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client and the providers, if this registry is not a subset."""
        if self._owner:
            self._http.close()
            for provider in self._providers:
                provider.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _start(tool: ListedTool, arguments: Mapping[str, Any], context: ToolContext) -> Future[str]:
    """Start a blocking call: submitted where the tool runs it, else on a thread of its own."""
    if not isinstance(tool, RegisteredTool):
        return tool.submit(arguments, context=context)  # type: ignore[attr-defined]
    future: Future[str] = Future()
    future.set_running_or_notify_cancel()

    def work() -> None:
        try:
            value = tool.run(arguments, context=context)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(value)

    # Why a daemon thread and not an executor: a tool stuck in C code or a socket
    # cannot be interrupted, so we stop waiting and abandon it; a daemon thread
    # never blocks interpreter exit the way pool workers do.
    threading.Thread(
        target=contextvars.copy_context().run, args=(work,), name=f"tool-{tool.name}", daemon=True
    ).start()
    return future


def _wait(call: Future[str], woken: threading.Event, timeout_s: float,
          should_stop: Callable[[], bool] | None) -> bool:
    """Wait until the `call` is done or `timeout_s` pass; False if stopped first.

    `woken` is set by the tool's end and by every wake() of a StopSignal.
    """
    deadline = time.monotonic() + timeout_s
    poll_s = STOP_POLL_S
    waking: AbstractContextManager[None] = nullcontext()
    if isinstance(should_stop, StopSignal):
        poll_s = should_stop.poll_s if should_stop.poll_s is not None else timeout_s
        waking = should_stop.waking(woken.set)
    with waking:
        while not call.done():
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
