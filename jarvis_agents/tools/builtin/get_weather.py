"""The `getWeather` tool: current weather for a city from Open-Meteo (no API key).

Two requests: the geocoding API turns the city into coordinates, the forecast API
returns the current conditions there. Both URLs come from settings, never from the
model; the model's text is only ever a query parameter.
"""

from __future__ import annotations

import time
from typing import Any

from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.http import fetch_json

SERVICE = "the weather service (Open-Meteo)"
MAX_CITY_CHARS = 100
CURRENT_FIELDS = (
    "temperature_2m,relative_humidity_2m,apparent_temperature,weather_code,wind_speed_10m"
)

# WMO weather interpretation codes, as documented by Open-Meteo.
WMO_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "depositing rime fog",
    51: "light drizzle",
    53: "moderate drizzle",
    55: "dense drizzle",
    56: "light freezing drizzle",
    57: "dense freezing drizzle",
    61: "slight rain",
    63: "moderate rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "slight snowfall",
    73: "moderate snowfall",
    75: "heavy snowfall",
    77: "snow grains",
    80: "slight rain showers",
    81: "moderate rain showers",
    82: "violent rain showers",
    85: "slight snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with slight hail",
    99: "thunderstorm with heavy hail",
}


def describe_weather_code(code: object) -> str:
    """Words for a WMO code; an unknown code is named rather than guessed."""
    if isinstance(code, (int, float)) and int(code) in WMO_CODES:
        return WMO_CODES[int(code)]
    return f"weather code {code}"


class GetWeatherTool:
    """Reports the current temperature, conditions, humidity and wind for a city."""

    name = "getWeather"
    description = (
        "Get the current weather for a city: temperature, feels-like temperature, "
        "conditions, humidity and wind. Add the country after a comma if the name is "
        "ambiguous, e.g. Paris, France."
    )
    input_hint = "a city name, e.g. London or Springfield, United States"
    input_parameter = "city"  # its schema: {"city": string}, required

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        city = tool_input.strip().strip("`'\"").strip()
        if not city:
            raise ToolError("Give the name of a city, e.g. London.")
        if len(city) > MAX_CITY_CHARS:
            raise ToolError(
                f"A city name is at most {MAX_CITY_CHARS} characters; give just the name."
            )
        # Why one deadline: two requests share the tool's budget, so the second only
        # gets what the first left over.
        deadline = time.monotonic() + context.timeout_s
        place = self._geocode(city, context, deadline)
        forecast = fetch_json(
            context.http,
            context.settings.weather_forecast_url,
            params={
                "latitude": place["latitude"],
                "longitude": place["longitude"],
                "current": CURRENT_FIELDS,
                "timezone": "auto",
            },
            service=SERVICE,
            timeout_s=deadline - time.monotonic(),
        )
        return _format(place, forecast)

    def _geocode(self, city: str, context: ToolContext, deadline: float) -> dict[str, Any]:
        # The geocoder matches names only: "Paris, France" is searched as "Paris" and
        # the part after the comma picks among the candidates.
        name, _, qualifier = (part.strip() for part in city.partition(","))
        data = fetch_json(
            context.http,
            context.settings.weather_geocoding_url,
            params={
                "name": name,
                "count": 10 if qualifier else 1,
                "language": "en",
                "format": "json",
            },
            service=SERVICE,
            timeout_s=deadline - time.monotonic(),
        )
        results = data.get("results") if isinstance(data, dict) else None
        candidates = [
            r
            for r in results or []
            if isinstance(r, dict)
            and _is_number(r.get("latitude"))
            and _is_number(r.get("longitude"))
        ]
        if not candidates:
            raise ToolError(
                f"No place called {city!r} was found; "
                "check the spelling or try a larger nearby city."
            )
        if qualifier:
            wanted = qualifier.lower()
            for candidate in candidates:
                fields = (
                    candidate.get("country"),
                    candidate.get("country_code"),
                    candidate.get("admin1"),
                )
                if any(isinstance(f, str) and f.lower() == wanted for f in fields):
                    return candidate
        return candidates[0]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _format(place: dict[str, Any], forecast: object) -> str:
    current = forecast.get("current") if isinstance(forecast, dict) else None
    units = forecast.get("current_units") if isinstance(forecast, dict) else None
    if not isinstance(current, dict) or not _is_number(current.get("temperature_2m")):
        raise ToolError(
            f"{SERVICE[0].upper()}{SERVICE[1:]} sent no current conditions; try again later."
        )
    units = units if isinstance(units, dict) else {}

    def value(field: str, default_unit: str) -> str:
        raw = current.get(field)
        if not _is_number(raw):
            return "unknown"
        return f"{raw:g} {units.get(field) or default_unit}"

    where = (
        ", ".join(str(part) for part in (place.get("name"), place.get("country")) if part)
        or f"{place['latitude']}, {place['longitude']}"
    )
    return (
        f"{where}: {value('temperature_2m', '°C')} "
        f"(feels like {value('apparent_temperature', '°C')}), "
        f"{describe_weather_code(current.get('weather_code'))}, "
        f"humidity {value('relative_humidity_2m', '%')}, "
        f"wind {value('wind_speed_10m', 'km/h')}"
    )
