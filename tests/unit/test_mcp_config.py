"""JARVIS_MCP_CONFIG: the mcpServers file, `${VAR}` from the environment, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError
from jarvis_agents.tools.mcp.provider import tool_name


def settings_with(tmp_path: Path, document: object, **env: str) -> Settings:
    path = tmp_path / "mcp.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_MCP_CONFIG": str(path), **env})


def test_no_file_means_no_servers(tmp_path: Path) -> None:
    assert Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}).mcp_servers == ()


def test_stdio_and_http_servers_with_variables_expanded(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${ROOT}"],
                  "env": {"TOKEN": "${SECRET}"}},
        "remote": {"url": "https://mcp.example.com/${PATH_PART}", "headers": {"Authorization": "Bearer ${SECRET}"}},
        "bare": {"command": "uvx", "type": "stdio"},  # desktop clients' extra keys are accepted
    }}, ROOT="/srv/data", SECRET="s3cret", PATH_PART="mcp")
    files, remote, bare = settings.mcp_servers
    assert (files.name, files.transport, files.command) == ("files", "stdio", "npx")
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/srv/data")
    assert dict(files.env) == {"TOKEN": "s3cret"}
    assert (remote.transport, remote.url) == ("http", "https://mcp.example.com/mcp")
    assert dict(remote.headers) == {"Authorization": "Bearer s3cret"}
    assert (bare.args, dict(bare.env)) == ((), {})
    assert "s3cret" not in repr(settings)  # secrets stay out of logs


@pytest.mark.parametrize(("document", "message"), [
    ("{", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ({"servers": {}}, 'expected a JSON object with "mcpServers"'),
    ({"mcpServers": {"a": {"args": []}}}, "server 'a': give exactly one of \"command\" (stdio) or \"url\""),
    ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "give exactly one of"),
    ({"mcpServers": {"a": {"command": "x", "args": "-y"}}}, "server 'a': \"args\" must be a list of strings"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": "${NOPE}"}}}},
     "server 'a': \"env.K\" refers to ${NOPE}, which is not set"),
    ({"mcpServers": {"a": {"url": "ftp://h"}}}, "server 'a': url must be an http(s):// URL"),
    ({"mcpServers": {"a": {"url": "http://h", "args": []}}}, '"args" and "env" belong to a "command" server'),
    ({"mcpServers": {"a b": {"command": "x"}}}, "server 'a b': a server name is letters, digits, _ and - only"),
    ({"mcpServers": {"a": {"command": "x", "cwd": "/"}}}, "server 'a': unknown key(s) cwd"),
])
def test_a_malformed_file_is_one_line_naming_the_file(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_with(tmp_path, document)
    text = str(caught.value)
    assert text.startswith(f"JARVIS_MCP_CONFIG {tmp_path / 'mcp.json'}: ") and "\n" not in text
    assert message in text


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^JARVIS_MCP_CONFIG /nowhere/mcp.json: no such file$"):
        Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path), "JARVIS_MCP_CONFIG": "/nowhere/mcp.json"})


def test_tool_names_join_server_and_tool_with_other_characters_replaced() -> None:
    assert tool_name("srv", "add") == "srv__add"
    assert tool_name("files", "read.file v2") == "files__read_file_v2"
