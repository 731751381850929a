"""`JARVIS_A2A_AGENTS`: the remote agents an assistant may name as delegates (README,
Agents that call agents), served elsewhere over A2A.

    {"agents": {"far": {"url": "https://agents.example.com/.well-known/agent-card.json",
                        "headers": {"Authorization": "Bearer ..."}}}}

The operator's own list: any address, loopback included. Read once, by
`Settings.from_env`: a missing or malformed file is a ConfigError naming the file and
the problem, and the process does not start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jarvis_agents.errors import ConfigError

_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")  # as an assistant's: `ask_<name>` is a tool name


@dataclass(frozen=True)
class RemoteAgent:
    """One remote agent: its agent card's URL and the headers every request carries."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold keys

    @property
    def base_url(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def card_path(self) -> str:
        parts = urlsplit(self.url)
        return parts.path + (f"?{parts.query}" if parts.query else "")


def load_a2a_agents(path: str | None) -> tuple[RemoteAgent, ...]:
    """The agents the file at `path` lists; () without a path."""
    if not path:
        return ()
    try:
        document = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"JARVIS_A2A_AGENTS: cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"JARVIS_A2A_AGENTS: {path} is not JSON: {exc}") from None
    agents = document.get("agents") if isinstance(document, dict) else None
    if not isinstance(agents, dict):
        raise ConfigError(f'JARVIS_A2A_AGENTS: {path} must be {{"agents": {{"<name>": {{"url": ...}}}}}}')
    return tuple(_agent(path, name, entry) for name, entry in agents.items())


def _agent(path: str, name: str, entry: Any) -> RemoteAgent:
    where = f"JARVIS_A2A_AGENTS: {path}: agent {name!r}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a name is 1-64 characters of a-z, 0-9, _ and -")
    if not isinstance(entry, dict) or set(entry) - {"url", "headers"}:
        raise ConfigError(f'{where} must be {{"url": str, "headers"?: {{str: str}}}}')
    url = entry.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{where}: `url` must be the http(s) URL of its agent card")
    headers = entry.get("headers") or {}
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ConfigError(f"{where}: `headers` must be an object of strings")
    return RemoteAgent(name=name, url=url, headers=tuple(headers.items()))
