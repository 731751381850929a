"""getWeather and search against local HTTP servers speaking Open-Meteo, SearXNG and DuckDuckGo."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from jarvis_agents import __version__
from jarvis_agents.config import Settings
from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.get_weather import GetWeatherTool, describe_weather_code
from jarvis_agents.tools.builtin.search import SearchTool
from jarvis_agents.tools.http import make_http_client
from jarvis_agents.tools.registry import ToolRegistry

LONDON = {
    "id": 2643743,
    "name": "London",
    "latitude": 51.50853,
    "longitude": -0.12574,
    "country": "United Kingdom",
    "country_code": "GB",
    "admin1": "England",
    "timezone": "Europe/London",
}
PARIS_TEXAS = {
    **LONDON,
    "name": "Paris",
    "country": "United States",
    "country_code": "US",
    "admin1": "Texas",
    "latitude": 33.66,
    "longitude": -95.55,
}
PARIS_FRANCE = {
    **LONDON,
    "name": "Paris",
    "country": "France",
    "country_code": "FR",
    "admin1": "Île-de-France",
    "latitude": 48.85,
    "longitude": 2.35,
}
FORECAST = {
    "latitude": 51.5,
    "longitude": -0.12,
    "timezone": "Europe/London",
    "current_units": {
        "time": "iso8601",
        "temperature_2m": "°C",
        "relative_humidity_2m": "%",
        "apparent_temperature": "°C",
        "weather_code": "wmo code",
        "wind_speed_10m": "km/h",
    },
    "current": {
        "time": "2026-11-29T12:00",
        "temperature_2m": 12.3,
        "relative_humidity_2m": 80,
        "apparent_temperature": 10.1,
        "weather_code": 3,
        "wind_speed_10m": 14.2,
    },
}


HOUR = 3600.0  # an answer held this long comes only when the test ends (FakeServer.release)


@dataclass
class Route:
    """What the fake server answers on one path."""

    body: object = None  # JSON-encoded unless bytes
    status: int = 200
    delay_s: float = 0.0


@dataclass
class FakeServer:
    """A real HTTP server on 127.0.0.1 whose answers each test chooses."""

    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def _handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(parts.query).items()}
            fake.requests.append((parts.path, query, dict(self.headers)))
            route = fake.routes.get(parts.path, Route({"error": "not found"}, status=404))
            if route.delay_s:
                fake.release.wait(route.delay_s)
            body = route.body if isinstance(route.body, bytes) else json.dumps(route.body).encode()
            try:
                self.send_response(route.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting, as the slow-server test intends

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    yield fake
    fake.release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


@pytest.fixture
def settings(tmp_path: Path, server: FakeServer) -> Settings:
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}).with_overrides(
        tool_timeout_s=2.0,
        weather_geocoding_url=f"{server.url}/v1/search",
        weather_forecast_url=f"{server.url}/v1/forecast",
        search_backend="searxng",
        searxng_url=f"{server.url}/searx/",
        duckduckgo_url=f"{server.url}/ddg/",
    )


@pytest.fixture
def make_context() -> Iterator[Callable[[Settings], ToolContext]]:
    clients = []

    def make(settings: Settings) -> ToolContext:
        client = make_http_client(settings)
        clients.append(client)
        return ToolContext(settings=settings, http=client, timeout_s=settings.tool_timeout_s)

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def context(settings: Settings, make_context: Callable[[Settings], ToolContext]) -> ToolContext:
    return make_context(settings)


def unused_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more: connection refused


def weather_error(context: ToolContext, city: str = "London") -> str:
    with pytest.raises(ToolError) as caught:
        GetWeatherTool().run(city, context=context)
    return str(caught.value)


# --- getWeather --------------------------------------------------------------------


def test_weather_is_formatted_for_the_model(server: FakeServer, context: ToolContext) -> None:
    server.routes["/v1/search"] = Route({"results": [LONDON], "generationtime_ms": 0.4})
    server.routes["/v1/forecast"] = Route(FORECAST)
    answer = GetWeatherTool().run("  London ", context=context)
    assert answer == (
        "London, United Kingdom: 12.3 °C (feels like 10.1 °C), overcast, "
        "humidity 80 %, wind 14.2 km/h"
    )
    (geo_path, geo, headers), (forecast_path, forecast, _) = server.requests
    assert geo_path == "/v1/search"
    assert geo == {"name": "London", "count": "1", "language": "en", "format": "json"}
    assert headers["User-Agent"] == f"jarvis-agents/{__version__}"
    assert forecast_path == "/v1/forecast"
    assert forecast["latitude"] == "51.50853" and forecast["longitude"] == "-0.12574"
    assert forecast["timezone"] == "auto"
    assert forecast["current"].split(",") == [
        "temperature_2m",
        "relative_humidity_2m",
        "apparent_temperature",
        "weather_code",
        "wind_speed_10m",
    ]


def test_a_country_after_a_comma_picks_the_candidate(
    server: FakeServer, context: ToolContext
) -> None:
    server.routes["/v1/search"] = Route({"results": [PARIS_FRANCE, PARIS_TEXAS]})
    server.routes["/v1/forecast"] = Route(FORECAST)
    answer = GetWeatherTool().run("Paris, United States", context=context)
    assert answer.startswith("Paris, United States: ")
    (_, geo, _), (_, forecast, _) = server.requests
    assert geo["name"] == "Paris" and geo["count"] == "10"
    assert forecast["latitude"] == "33.66"


@pytest.mark.parametrize(
    "body", [{"generationtime_ms": 0.3}, {"results": []}, {"results": [{"name": "x"}]}]
)
def test_a_city_not_found(server: FakeServer, context: ToolContext, body: object) -> None:
    server.routes["/v1/search"] = Route(body)
    assert weather_error(context, "Atlantis") == (
        "No place called 'Atlantis' was found; check the spelling or try a larger nearby city."
    )
    assert len(server.requests) == 1  # no forecast without coordinates


def test_weather_http_500(server: FakeServer, context: ToolContext) -> None:
    server.routes["/v1/search"] = Route({"results": [LONDON]})
    server.routes["/v1/forecast"] = Route({"error": True, "reason": "boom"}, status=500)
    assert weather_error(context) == (
        "The weather service (Open-Meteo) answered with HTTP 500; try again later."
    )


def test_weather_malformed_json(server: FakeServer, context: ToolContext) -> None:
    server.routes["/v1/search"] = Route(b'{"results": [ {"name": "Lon')
    assert (
        weather_error(context)
        == "The weather service (Open-Meteo) sent an answer that is not valid JSON."
    )


def test_weather_without_current_conditions(server: FakeServer, context: ToolContext) -> None:
    server.routes["/v1/search"] = Route({"results": [LONDON]})
    server.routes["/v1/forecast"] = Route({"latitude": 51.5})
    assert "sent no current conditions" in weather_error(context)


def test_weather_unreachable(
    settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    dead = settings.with_overrides(weather_geocoding_url=f"{unused_port_url()}/v1/search")
    message = weather_error(make_context(dead))
    assert message == (
        "The weather service (Open-Meteo) could not be reached (ConnectError); try again later."
    )


def test_weather_slow_server_times_out(
    server: FakeServer, settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    # An hour's wait for the answer: only the tool's timeout ends the call in time.
    server.routes["/v1/search"] = Route({"results": [LONDON]}, delay_s=HOUR)
    context = make_context(settings.with_overrides(tool_timeout_s=0.3))
    message = weather_error(context)
    assert message == "The weather service (Open-Meteo) did not answer in time; try again later."


def test_weather_needs_a_city(context: ToolContext) -> None:
    assert weather_error(context, "   ") == "Give the name of a city, e.g. London."
    assert "at most 100 characters" in weather_error(context, "x" * 101)


def test_weather_codes_in_words() -> None:
    assert describe_weather_code(0) == "clear sky"
    assert describe_weather_code(95) == "thunderstorm"
    assert describe_weather_code(3.0) == "overcast"
    assert describe_weather_code(42) == "weather code 42"


# --- search ------------------------------------------------------------------------


def searxng_result(n: int) -> dict[str, object]:
    return {
        "title": f"Result {n}",
        "url": f"https://example.org/{n}",
        "content": f"Snippet   number {n}.",
    }


def test_searxng_top_five(server: FakeServer, context: ToolContext) -> None:
    server.routes["/searx/search"] = Route(
        {"query": "cats", "results": [searxng_result(n) for n in range(1, 8)]}
    )
    answer = SearchTool().run("cats and dogs", context=context)
    lines = answer.splitlines()
    assert lines[:2] == ["1. Result 1 — https://example.org/1", "   Snippet number 1."]
    assert lines[-2:] == ["5. Result 5 — https://example.org/5", "   Snippet number 5."]
    assert len(lines) == 10
    ((path, query, _),) = server.requests
    assert path == "/searx/search" and query == {"q": "cats and dogs", "format": "json"}


def test_searxng_no_results(server: FakeServer, context: ToolContext) -> None:
    server.routes["/searx/search"] = Route({"query": "zzqx", "results": []})
    assert SearchTool().run("zzqx", context=context) == (
        "No results found for 'zzqx'. Try fewer or different words."
    )


def test_searxng_not_configured(
    settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    context = make_context(settings.with_overrides(searxng_url=None))
    with pytest.raises(ToolError) as caught:
        SearchTool().run("cats", context=context)
    assert str(caught.value) == "Web search is not configured (set JARVIS_SEARXNG_URL)."


@pytest.mark.parametrize(
    ("route", "message"),
    [
        (
            Route({"error": "x"}, status=500),
            "The search service (SearXNG) answered with HTTP 500; try again later.",
        ),
        (
            Route({"error": "x"}, status=403),
            "The search service (SearXNG) answered with HTTP 403; try again later.",
        ),
        (
            Route(b"<html>not json</html>"),
            "The search service (SearXNG) sent an answer that is not valid JSON.",
        ),
        (
            Route([1, 2, 3]),
            "The search service (SearXNG) sent an answer without results; try again.",
        ),
    ],
)
def test_searxng_failures(
    server: FakeServer, context: ToolContext, route: Route, message: str
) -> None:
    server.routes["/searx/search"] = route
    with pytest.raises(ToolError) as caught:
        SearchTool().run("cats", context=context)
    assert str(caught.value) == message


def test_search_unreachable_and_slow(
    server: FakeServer, settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    dead = make_context(settings.with_overrides(searxng_url=unused_port_url()))
    with pytest.raises(ToolError, match=r"could not be reached \(ConnectError\)"):
        SearchTool().run("cats", context=dead)
    server.routes["/searx/search"] = Route({"results": []}, delay_s=HOUR)
    slow = make_context(settings.with_overrides(tool_timeout_s=0.3))
    with pytest.raises(ToolError, match="did not answer in time"):
        SearchTool().run("cats", context=slow)


DDG_ANSWER = {
    "Heading": "Python (programming language)",
    "AbstractText": "Python is a high-level, general-purpose programming language.",
    "AbstractURL": "https://en.wikipedia.org/wiki/Python_(programming_language)",
    "RelatedTopics": [
        {
            "Text": "CPython - The reference implementation of Python.",
            "FirstURL": "https://duckduckgo.com/CPython",
        },
        {
            "Name": "Implementations",
            "Topics": [
                {
                    "Text": "PyPy - A fast Python with a JIT.",
                    "FirstURL": "https://duckduckgo.com/PyPy",
                },
                {
                    "Text": "Jython - Python on the JVM.",
                    "FirstURL": "https://duckduckgo.com/Jython",
                },
            ],
        },
        {"Text": "MicroPython", "FirstURL": "https://duckduckgo.com/MicroPython"},
        {"Text": "IronPython - Python on .NET.", "FirstURL": "https://duckduckgo.com/IronPython"},
    ],
}


def test_duckduckgo_instant_answers(
    server: FakeServer, settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    server.routes["/ddg/"] = Route(DDG_ANSWER)
    context = make_context(settings.with_overrides(search_backend="duckduckgo"))
    expected = (
        "1. Python (programming language) — "
        "https://en.wikipedia.org/wiki/Python_(programming_language)\n"
        "   Python is a high-level, general-purpose programming language.\n"
        "2. CPython — https://duckduckgo.com/CPython\n"
        "   The reference implementation of Python.\n"
        "3. PyPy — https://duckduckgo.com/PyPy\n"
        "   A fast Python with a JIT.\n"
        "4. Jython — https://duckduckgo.com/Jython\n"
        "   Python on the JVM.\n"
        "5. MicroPython — https://duckduckgo.com/MicroPython"
    )
    assert SearchTool().run("python language", context=context) == expected
    ((path, query, _),) = server.requests
    assert path == "/ddg/"
    assert query == {"q": "python language", "format": "json", "no_html": "1", "skip_disambig": "1"}


def test_duckduckgo_empty_and_malformed(
    server: FakeServer, settings: Settings, make_context: Callable[[Settings], ToolContext]
) -> None:
    context = make_context(settings.with_overrides(search_backend="duckduckgo"))
    server.routes["/ddg/"] = Route({"Heading": "", "AbstractText": "", "RelatedTopics": []})
    assert SearchTool().run("zzqx", context=context).startswith("No results found for 'zzqx'.")
    server.routes["/ddg/"] = Route(b"")
    with pytest.raises(ToolError, match="DuckDuckGo"):
        SearchTool().run("zzqx", context=context)


def test_search_needs_a_query(context: ToolContext) -> None:
    with pytest.raises(ToolError, match="Give a search query"):
        SearchTool().run("  ", context=context)


# --- through the registry ------------------------------------------------------------


def test_network_failures_are_observations_in_the_registry(
    server: FakeServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/v1/search"] = Route({"results": [LONDON]})
    server.routes["/v1/forecast"] = Route(b"oops", status=502)
    monkeypatch.setattr("jarvis_agents.tools.plugins.metadata.entry_points", lambda **_: [])
    with ToolRegistry.default(settings) as registry:
        result = registry.call_text("getweather", "London")
    assert (result.ok, result.tool) == (False, "getWeather")
    assert (
        result.content
        == "The weather service (Open-Meteo) answered with HTTP 502; try again later."
    )
