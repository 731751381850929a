"""Where the API forwards `/mcp` (api/mcp_proxy.py); the forwarding itself is driven end to
end by tests/integration/test_mcp_via_api.py."""

from __future__ import annotations

from api.mcp_proxy import forward_url
from jarvis_agents.config import Settings


def test_mcp_goes_to_the_mcp_server_next_to_the_api_unless_told_where() -> None:
    assert forward_url(Settings.from_env({})) == "http://127.0.0.1:8001/mcp"
    assert forward_url(Settings.from_env({"PORT": "9000"})) == "http://127.0.0.1:9001/mcp"
    assert forward_url(Settings.from_env({"JARVIS_MCP_PORT": "7000"})) == "http://127.0.0.1:7000/mcp"
    settings = Settings.from_env({"JARVIS_MCP_URL": "http://mcp:8001/mcp", "JARVIS_MCP_PORT": "7000"})
    assert forward_url(settings) == "http://mcp:8001/mcp"
