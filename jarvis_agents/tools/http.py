"""The one HTTP client the network tools share: bounded timeouts, a pool, a User-Agent.

One `httpx.Client` per process (or per registry) rather than one per call: the
connection pool is reused across ~100 concurrent agents, and every request inherits
the same explicit timeouts so a slow service can never hold a worker thread longer
than `settings.tool_timeout_s`. `fetch_json` is the one way tools read a JSON API, so
every network failure reads the same to the model.
"""

from __future__ import annotations

import httpx

from jarvis_agents import __version__
from jarvis_agents.config import Settings
from jarvis_agents.errors import ToolError

USER_AGENT = f"jarvis-agents/{__version__}"

# Why these sizes: a worker runs up to ~100 agents at once and each may have one tool
# call in flight. Keep-alive connections beyond 20 mostly sit idle, so we keep fewer
# than we allow in total.
MAX_CONNECTIONS = 100
MAX_KEEPALIVE_CONNECTIONS = 20
KEEPALIVE_EXPIRY_S = 30.0

# Why a cap on connect: a TCP handshake that takes more than a few seconds is a dead
# host; waiting the whole tool budget for it leaves no time for the answer.
CONNECT_TIMEOUT_CAP_S = 5.0


def make_timeout(total_s: float) -> httpx.Timeout:
    """Per-phase timeouts, none of them longer than the tool's whole budget."""
    connect = min(CONNECT_TIMEOUT_CAP_S, total_s)
    return httpx.Timeout(connect=connect, read=total_s, write=total_s, pool=total_s)


def make_http_client(settings: Settings) -> httpx.Client:
    """Build the shared client for network tools; the caller owns it and must close it."""
    return httpx.Client(
        timeout=make_timeout(settings.tool_timeout_s),
        limits=httpx.Limits(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        ),
        headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
        # Why no redirects: tool URLs come from settings, and a redirect could lead a
        # request somewhere the operator never configured.
        follow_redirects=False,
    )


def fetch_json(
    client: httpx.Client,
    url: str,
    *,
    params: dict[str, str | int | float],
    service: str,
    timeout_s: float,
) -> object:
    """GET `url` and decode its JSON; every failure is a ToolError written for the model.

    `service` names what was called ("the weather service") so the sentence tells the
    model which tool failed and that trying again later or another tool may help.
    """
    if timeout_s <= 0:
        raise ToolError(f"There was no time left to ask {service}; try again.")
    try:
        response = client.get(url, params=params, timeout=make_timeout(timeout_s))
    except httpx.TimeoutException:
        raise ToolError(
            f"{_capitalise(service)} did not answer in time; try again later."
        ) from None
    except httpx.HTTPError as exc:  # connection refused, DNS failure, protocol error …
        raise ToolError(
            f"{_capitalise(service)} could not be reached ({type(exc).__name__}); try again later."
        ) from None
    if not response.is_success:
        # Why 3xx too: redirects are not followed, so a redirect is as useless as a 500.
        raise ToolError(
            f"{_capitalise(service)} answered with HTTP {response.status_code}; try again later."
        )
    try:
        return response.json()
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError both subclass it
        raise ToolError(f"{_capitalise(service)} sent an answer that is not valid JSON.") from None


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]
