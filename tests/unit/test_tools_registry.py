"""The tool registry: exact lookup, failures as observations, time and size limits, plugins."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import Cancelled, ToolError
from jarvis_agents.tools import plugins as plugins_module
from jarvis_agents.tools.base import Tool, ToolContext
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry, ToolResult, truncate

TIMEOUT_S = 0.3
HOUR = 3600.0  # a hang nothing sits out: only a timeout or a stop ends it in time


@dataclass
class FakeTool:
    """A tool whose behaviour is a plain function of its input."""

    name: str
    behaviour: Callable[[str], str] = lambda text: f"echo: {text}"
    description: str = "a fake tool for tests"
    input_hint: str = "anything"
    contexts: list[ToolContext] = field(default_factory=list)

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        self.contexts.append(context)
        return self.behaviour(tool_input)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}).with_overrides(
        tool_timeout_s=TIMEOUT_S, tool_output_max_chars=200
    )


@pytest.fixture
def no_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    # Isolate the tests from whatever plugins the environment happens to have installed.
    monkeypatch.setattr(plugins_module.metadata, "entry_points", lambda **_: [])


@pytest.fixture
def make_registry(settings: Settings) -> Iterator[Callable[..., ToolRegistry]]:
    made: list[ToolRegistry] = []

    def make(*tools: Tool, **overrides: object) -> ToolRegistry:
        registry = ToolRegistry(tools, settings=settings.with_overrides(**overrides))
        made.append(registry)
        return registry

    yield make
    for registry in made:
        registry.close()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown so that a deliberately hung tool's thread can finish."""
    event = threading.Event()
    yield event
    event.set()


def test_lookup_is_exact_trimmed_and_case_insensitive(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    search, web_search = FakeTool("search"), FakeTool("webSearch")
    registry = make_registry(search, web_search)
    assert registry.get("search").tool is search
    assert registry.get("  SEARCH\n").tool is search
    assert registry.get("websearch").tool is web_search
    for near_miss in ["web search", "searchx", "searc", "web_search", "search()", ""]:
        assert registry.get(near_miss) is None, near_miss


def test_search_never_dispatches_web_search(make_registry: Callable[..., ToolRegistry]) -> None:
    only_web = make_registry(FakeTool("webSearch"))
    result = only_web.call_text("search", "cats")
    assert (result.ok, result.tool) == (False, None)
    assert result.content == (
        "Unknown tool 'search'. Available tools: webSearch. "
        "Reply with one of these names in ACTION."
    )


def test_the_default_registry_names_the_builtins(settings: Settings, no_plugins: None) -> None:
    with ToolRegistry.default(settings) as registry:
        assert registry.names() == ["calculate", "getTime", "getWeather", "search"]
        assert [d["name"] for d in registry.describe()] == registry.names()
        assert all(
            set(d) == {"name", "description", "source", "input_schema"} and d["description"]
            and d["source"] == "builtin" for d in registry.describe()
        )
        assert registry.describe()[0]["input_schema"] == {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": CalculateTool.input_hint}},
            "required": ["expression"], "additionalProperties": False,
        }
        result = registry.call_text("web_search", "cats")
    assert result == ToolResult(
        content=(
            "Unknown tool 'web_search'. Available tools: calculate, getTime, getWeather, search. "
            "Reply with one of these names in ACTION."
        ),
        ok=False,
        tool=None,
        duration_ms=result.duration_ms,
    )


def test_a_call_returns_the_canonical_name(make_registry: Callable[..., ToolRegistry]) -> None:
    registry = make_registry(FakeTool("getTime"))
    result = registry.call_text(" GETTIME ", "Tokyo")
    assert result.ok and result.tool == "getTime" and result.content == "echo: Tokyo"
    assert isinstance(result.duration_ms, int) and result.duration_ms >= 0


def test_the_tool_gets_settings_client_and_timeout(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    tool = FakeTool("probe")
    registry = make_registry(tool)
    registry.call_text("probe", "")
    (context,) = tool.contexts
    assert context.timeout_s == TIMEOUT_S
    assert isinstance(context.http, httpx.Client)
    assert context.settings.tool_timeout_s == TIMEOUT_S


def test_the_tool_gets_the_calls_idempotency_key(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    offline, blocking = FakeTool("offline"), FakeTool("blocking")
    offline.blocking = False  # type: ignore[attr-defined]
    registry = make_registry(offline, blocking)
    registry.call_text("offline", "a", idempotency_key="agent-1:call-1")
    registry.call("blocking", {"input": "b"}, idempotency_key="agent-1:call-2")
    registry.call_text("blocking", "c")  # a call made outside an agent carries none
    assert [c.idempotency_key for c in offline.contexts] == ["agent-1:call-1"]
    assert [c.idempotency_key for c in blocking.contexts] == ["agent-1:call-2", None]


def test_unknown_lists_what_get_cannot_resolve(make_registry: Callable[..., ToolRegistry]) -> None:
    registry = make_registry(FakeTool("calculate"), FakeTool("search"))
    assert registry.unknown(["Calculate", " search ", "webSearch", "nope"]) == ["webSearch", "nope"]
    assert registry.unknown([]) == []


def test_subset_keeps_only_the_named_tools(make_registry: Callable[..., ToolRegistry]) -> None:
    calculate, search = FakeTool("calculate"), FakeTool("search")
    registry = make_registry(calculate, search)
    assert registry.subset(None).names() == ["calculate", "search"]
    only = registry.subset(["SEARCH", "search", "missing"])
    assert only.names() == ["search"]
    assert only.call_text("calculate", "1+1").ok is False
    assert only.call_text("search", "x").content == "echo: x"


def test_subsets_share_the_client_and_only_the_creator_closes_it(settings: Settings) -> None:
    tool = FakeTool("probe")
    registry = ToolRegistry([tool], settings=settings)
    child = registry.subset(["probe"])
    child.call_text("probe", "")
    child.close()
    registry.call_text("probe", "")
    first, second = tool.contexts
    assert first.http is second.http
    assert not first.http.is_closed
    registry.close()
    assert first.http.is_closed


def test_a_client_passed_in_is_left_open(settings: Settings) -> None:
    with httpx.Client() as client:
        registry = ToolRegistry([FakeTool("probe")], settings=settings, http=client)
        registry.close()
        assert not client.is_closed


def test_a_hung_tool_times_out(
    make_registry: Callable[..., ToolRegistry], release: threading.Event
) -> None:
    # The tool hangs for an hour: only the registry's 0.3 s timeout ends the call in time.
    registry = make_registry(FakeTool("slow", lambda _: str(release.wait(HOUR))))
    result = registry.call_text("slow", "")
    assert (result.ok, result.tool) == (False, "slow")
    assert (
        result.content == "Tool 'slow' timed out after 0.3 s; try a simpler input or another tool."
    )
    # The registry stays usable while the abandoned thread still hangs.
    assert registry.call_text("slow", "").ok is False


def test_a_stop_signal_wakes_the_wait_for_a_blocking_tool(
    make_registry: Callable[..., ToolRegistry], release: threading.Event
) -> None:
    from jarvis_agents.llm.base import StopSignal

    # An hour's tool under an hour's timeout: only the stop ends the call in time.
    registry = make_registry(FakeTool("slow", lambda _: str(release.wait(HOUR))),
                             tool_timeout_s=HOUR)
    looked, stopped = threading.Event(), threading.Event()

    def condition() -> bool:
        looked.set()
        return stopped.is_set()

    signal = StopSignal(condition)  # wakes only: nothing to poll

    def stop_once_it_waits() -> None:
        looked.wait(60)  # the call found it not stopped, and waits
        stopped.set()
        signal.wake()

    threading.Thread(target=stop_once_it_waits, daemon=True).start()
    with pytest.raises(Cancelled, match="slow"):
        registry.call_text("slow", "", should_stop=signal)
    # A plain callable is polled: false at the first look, true at the next.
    looks = iter([False])
    with pytest.raises(Cancelled):
        registry.call_text("slow", "", should_stop=lambda: next(looks, True))
    # A tool that ends first is not cut short.
    quick = make_registry(FakeTool("quick"), tool_timeout_s=HOUR)
    assert quick.call_text("quick", "x", should_stop=lambda: False).content == "echo: x"


def test_offline_tools_run_on_the_callers_thread(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    threads: list[threading.Thread] = []
    offline = FakeTool("offline", lambda text: threads.append(threading.current_thread()) or text)
    offline.blocking = False  # type: ignore[attr-defined]
    plain = FakeTool("plain", lambda text: threads.append(threading.current_thread()) or text)
    registry = make_registry(offline, plain)
    assert registry.call_text("offline", "a").content == "a"
    assert registry.call_text("plain", "b").content == "b"
    assert threads[0] is threading.current_thread()
    assert threads[1] is not threading.current_thread()  # no flag: blocking, on a thread
    assert registry.runs_inline("offline") and registry.runs_inline("no-such-tool")
    assert not registry.runs_inline("plain")


def test_an_offline_tools_failure_is_still_an_observation(
    make_registry: Callable[..., ToolRegistry],
) -> None:
    def refuse(_: str) -> str:
        raise ToolError("Division by zero is not defined.")

    offline = FakeTool("offline", refuse)
    offline.blocking = False  # type: ignore[attr-defined]
    result = make_registry(offline).call_text("offline", "1/0")
    assert (result.ok, result.content) == (False, "Division by zero is not defined.")


def test_the_builtins_declare_which_of_them_are_offline(settings: Settings, no_plugins: None) -> None:
    with ToolRegistry.default(settings) as registry:
        assert [registry.runs_inline(name) for name in registry.names()] == [
            True, True, False, False,  # calculate, getTime | getWeather, search
        ]


def test_a_tool_error_becomes_its_message(make_registry: Callable[..., ToolRegistry]) -> None:
    def refuse(_: str) -> str:
        raise ToolError("No place called 'Atlantis' was found.")

    result = make_registry(FakeTool("getWeather", refuse)).call_text("getWeather", "Atlantis")
    assert result == ToolResult(
        "No place called 'Atlantis' was found.", False, "getWeather", result.duration_ms
    )


def test_any_other_exception_becomes_a_readable_observation(
    make_registry: Callable[..., ToolRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    def explode(_: str) -> str:
        raise KeyError("latitude")

    with caplog.at_level(logging.ERROR, logger="jarvis_agents.tools.registry"):
        result = make_registry(FakeTool("explode", explode)).call_text("explode", "x")
    assert result.ok is False and result.tool == "explode"
    assert result.content == (
        "Tool 'explode' failed with KeyError: 'latitude'. Try a different input or another tool."
    )
    assert any(record.exc_info and record.exc_info[0] is KeyError for record in caplog.records)


def test_long_output_is_truncated_with_a_marker(make_registry: Callable[..., ToolRegistry]) -> None:
    result = make_registry(FakeTool("big", lambda _: "x" * 10_000)).call_text("big", "")
    assert result.ok
    assert len(result.content) <= 200
    kept = result.content.split("\n…")[0]
    assert set(kept) == {"x"}
    assert result.content.endswith(f"… [truncated {10_000 - len(kept)} characters]")


def test_truncate_leaves_short_text_alone() -> None:
    assert truncate("short", 200) == "short"
    assert truncate("y" * 200, 200) == "y" * 200
    assert len(truncate("y" * 201, 200)) <= 200


def test_non_text_results_are_shown_as_text(make_registry: Callable[..., ToolRegistry]) -> None:
    # A plugin may break the str contract; the observation is still text.
    number = FakeTool("number", lambda _: 42)  # type: ignore[arg-type,return-value]
    nothing = FakeTool("nothing", lambda _: None)  # type: ignore[arg-type,return-value]
    registry = make_registry(number, nothing)
    assert registry.call_text("number", "").content == "42"
    assert registry.call_text("nothing", "").content == ""


def test_bad_tools_are_refused_at_construction(settings: Settings) -> None:
    for tools in ([FakeTool("same"), FakeTool("SAME")], [FakeTool("two words")], [FakeTool("")]):
        with pytest.raises(ValueError):
            ToolRegistry(tools, settings=settings, http=None)


# --- plugins -----------------------------------------------------------------------


class PluginClass:
    name = "fromClass"
    description = "a plugin registered as a class"
    input_hint = "anything"

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        return "class plugin"


@dataclass
class FakeEntryPoint:
    name: str
    target: Callable[[], object]

    def load(self) -> object:
        return self.target()


def _broken_import() -> object:
    raise ImportError("No module named 'missing_dependency'")


def _broken_factory() -> object:
    raise RuntimeError("factory blew up")


def test_plugins_load_from_entry_points(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    entry_points = [
        FakeEntryPoint("instance", lambda: FakeTool("fromInstance")),
        FakeEntryPoint("class", lambda: PluginClass),
        FakeEntryPoint("factory", lambda: lambda: FakeTool("fromFactory")),
        FakeEntryPoint("broken-import", _broken_import),
        FakeEntryPoint("broken-factory", lambda: _broken_factory),
        FakeEntryPoint("not-a-tool", lambda: object()),
        FakeEntryPoint("shadow", lambda: FakeTool("Calculate")),
    ]
    groups: list[str] = []

    def fake_entry_points(*, group: str) -> list[FakeEntryPoint]:
        groups.append(group)
        return entry_points

    monkeypatch.setattr(plugins_module.metadata, "entry_points", fake_entry_points)
    with caplog.at_level(logging.WARNING), ToolRegistry.default(settings) as registry:
        assert groups == ["jarvis_agents.tools"]
        assert registry.names() == [
            "calculate",
            "getTime",
            "getWeather",
            "search",
            "fromInstance",
            "fromClass",
            "fromFactory",
        ]
        assert registry.call_text("fromClass", "").content == "class plugin"
        assert registry.call_text("calculate", "6 * 7").content == "42"  # the built-in still wins
    logged = caplog.text
    for problem in [
        "broken-import",
        "broken-factory",
        "no usable name",
        "two tools are called 'Calculate'",
    ]:
        assert problem in logged


def test_a_failing_plugin_listing_is_logged_not_raised(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(**_: object) -> list[object]:
        raise OSError("unreadable metadata")

    monkeypatch.setattr(plugins_module.metadata, "entry_points", broken)
    with ToolRegistry.default(settings) as registry:
        assert registry.names() == ["calculate", "getTime", "getWeather", "search"]
    assert "could not list tool plugins" in caplog.text
