"""`JARVIS_MCP_CONFIG`: the MCP servers to use, in the `mcpServers` shape desktop clients use.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
    }}

A server is a command (stdio) or a URL (Streamable HTTP). `${VAR}` in any string value
(`command`, `args`, `env`, `url`, `headers`) is replaced with the process's environment
variable when the file is read, so secrets stay out of the file; a variable that is not
set is an error. Read once, by `Settings.from_env`: a missing or malformed file is a
ConfigError naming the file and the problem, and the process does not start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jarvis_agents.errors import ConfigError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_STDIO_KEYS = {"command", "args", "env"}
_HTTP_KEYS = {"url", "headers"}
# Keys desktop clients write that say nothing we act on; accepted so a file copied from
# one works as it is.
_IGNORED_KEYS = {"type", "transport", "disabled", "description", "timeout"}


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: started as `command` (stdio) or reached at `url` (Streamable HTTP)."""

    name: str
    command: str | None = None
    # Never in a repr, as env and headers: a server's arguments may carry a token.
    args: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


def load_mcp_config(path: str | None, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    """The servers the file at `path` names (none without a path); ConfigError if it is bad."""
    if not path:
        return ()
    where = f"JARVIS_MCP_CONFIG {path}"
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be read ({exc})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'{where}: expected a JSON object with "mcpServers": {{"<server>": {{…}}}}')
    return tuple(_server(where, name, spec, env) for name, spec in servers.items())


def _server(where: str, name: str, spec: Any, env: Mapping[str, str]) -> McpServerConfig:
    at = f"{where}: server {name!r}"
    if not _SERVER_NAME.match(name):
        raise ConfigError(f"{at}: a server name is letters, digits, _ and - only")
    if not isinstance(spec, dict):
        raise ConfigError(f'{at}: expected an object with "command" or "url"')
    unknown = set(spec) - _STDIO_KEYS - _HTTP_KEYS - _IGNORED_KEYS
    if unknown:
        raise ConfigError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
    has_command, has_url = "command" in spec, "url" in spec
    if has_command == has_url:
        raise ConfigError(f'{at}: give exactly one of "command" (stdio) or "url" (Streamable HTTP)')
    if has_command:
        if set(spec) & _HTTP_KEYS:
            raise ConfigError(f'{at}: "headers" belongs to a "url" server, not a "command" one')
        command = _expand(at, "command", _string(at, "command", spec["command"]), env)
        if not command.strip():
            raise ConfigError(f'{at}: "command" is empty')
        args = spec.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f'{at}: "args" must be a list of strings')
        return McpServerConfig(
            name, command=command, args=tuple(_expand(at, "args", a, env) for a in args),
            env=_strings(at, "env", spec.get("env", {}), env),
        )
    if set(spec) & {"args", "env"}:
        raise ConfigError(f'{at}: "args" and "env" belong to a "command" server, not a "url" one')
    url = _expand(at, "url", _string(at, "url", spec["url"]), env)
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"{at}: url must be an http(s):// URL, not {url!r}")
    return McpServerConfig(name, url=url, headers=_strings(at, "headers", spec.get("headers", {}), env))


def _string(at: str, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f'{at}: "{key}" must be a string')
    return value


def _strings(at: str, key: str, value: Any, env: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f'{at}: "{key}" must be an object of strings')
    return {k: _expand(at, f"{key}.{k}", v, env) for k, v in value.items()}


def _expand(at: str, key: str, value: str, env: Mapping[str, str]) -> str:
    """`value` with each `${VAR}` replaced by the environment's VAR."""

    def replace(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in env:
            raise ConfigError(f'{at}: "{key}" refers to ${{{variable}}}, which is not set')
        return env[variable]

    return _VARIABLE.sub(replace, value)
