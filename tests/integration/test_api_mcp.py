"""MCP tools end to end: a real API, a real worker process running MCP servers over stdio
and Streamable HTTP, PostgreSQL, Redis and the Ollama look-alike calling them in react mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env
from tests.support.api_server import wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.mcp_fixtures"]

SCRIPT = [
    'THOUGHT: add them\nACTION: srv__add\nINPUT: {"a": 2, "b": 40}',
    "THOUGHT: say it over HTTP\nACTION: web__echo\nINPUT: forty-two",
    "THOUGHT: a plain string where JSON is needed\nACTION: srv__add\nINPUT: 2 and 40",
    "THOUGHT: this one fails\nACTION: srv__fail\nINPUT: ",
    "THOUGHT: this one crashes\nACTION: crashy__explode\nINPUT: ",
    'THOUGHT: this one is slow\nACTION: slow__sleep\nINPUT: {"seconds": 30}',
    "THOUGHT: this server never started\nACTION: dead__read\nINPUT: x",
    "THOUGHT: done\nFINAL_ANSWER: 42",
]


def mcp_config(tmp_path: Path, web_url: str) -> Path:
    def stdio(kind: str) -> dict[str, object]:
        return {"command": sys.executable, "args": ["-m", "tests.support.mcp_servers", kind]}

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "srv": stdio("calc"), "crashy": stdio("crashy"), "slow": stdio("slow"),
        "web": {"url": web_url, "headers": {"X-Token": "${MCP_TOKEN}"}},
        "dead": {"command": "/nonexistent/mcp-server"},
    }}))
    return path


def test_an_agent_uses_stdio_and_http_mcp_tools_and_goes_on_past_every_failure(
    http_server, api_env, start_api, start_worker, fake_ollama, tmp_path
):  # http_server first: it stops last, after the worker has closed its session
    fake_ollama.responder = FakeOllama.by_turn(SCRIPT)
    env = {**api_env, "JARVIS_MCP_CONFIG": str(mcp_config(tmp_path, http_server("calc"))),
           "MCP_TOKEN": "t0ken", "JARVIS_TOOL_TIMEOUT": "2"}
    api = start_api(env)
    start_worker(env)
    with api.client(api.user()) as http:
        def mcp_listed() -> dict[str, dict] | None:
            tools = {t["name"]: t for t in http.get("/api/v1/tools").json()["tools"]}
            return tools if {"srv__add", "web__echo"} <= set(tools) else None

        tools = wait_until(mcp_listed, timeout_s=30)
        assert tools["srv__add"]["source"] == "mcp:srv" and tools["web__echo"]["source"] == "mcp:web"
        assert tools["srv__add"]["input_schema"]["properties"]["b"]["type"] == "integer"
        assert tools["srv__add"]["description"] == "Add two whole numbers."

        ready = http.get("/readyz")
        assert ready.status_code == 200, ready.text  # a dead MCP server is a warning only
        mcp = ready.json()["mcp"]
        assert mcp["servers"]["srv"] == {"ok": True, "error": None, "tools": 5}
        assert mcp["servers"]["dead"]["ok"] is False
        assert any("'dead'" in warning for warning in mcp["warnings"])

        unknown = http.post("/api/v1/agents", json={"goal": "x", "tools": ["srv__nope"]})
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_tool"

        created = http.post("/api/v1/agents", json={
            "goal": "What is 2 + 40?", "max_steps": 10,
            "tools": ["srv__add", "WEB__echo", "srv__fail", "crashy__explode", "slow__sleep",
                      "dead__read"],  # dead has not answered: accepted, resolved when it does
        })
        assert created.status_code == 202, created.text
        agent = http.get(created.headers["Location"], params={"wait": 60}).json()
        assert agent["status"] == "COMPLETED", agent
        steps = http.get(f"/api/v1/agents/{agent['id']}/steps").json()["steps"]

    observed = [(s["tool"], s["content"]) for s in steps if s["type"] == "OBSERVE"]
    assert observed[0] == ("srv__add", "42")
    assert observed[1] == ("web__echo", "forty-two")
    assert observed[2][1].startswith("Tool 'srv__add' takes a JSON object as INPUT, not plain text.")
    assert observed[3][1].startswith("The tool reported an error:")
    assert "The MCP server 'crashy' closed the connection during the call" in observed[4][1]
    assert observed[5][1].startswith("Tool 'slow__sleep' timed out after 2 s")
    assert observed[6][1].startswith("Unknown tool 'dead__read'. Available tools: srv__add, ")
    assert "web__echo" in observed[6][1] and "calculate" not in observed[6][1]
    assert agent["final_answer"] == "42"

    prompt = fake_ollama.requests[0]["messages"][0]["content"]
    assert '- srv__add: Add two whole numbers.\n  Input: a JSON object {"a": integer, "b": integer}' in prompt
    assert "- calculate:" not in prompt  # the agent's own tool list only


def test_a_bad_mcp_config_stops_the_worker_with_one_line(api_env, tmp_path):
    broken = tmp_path / "mcp.json"
    broken.write_text('{"mcpServers": {"srv": {"command": 42}}}')
    result = subprocess.run(
        [sys.executable, "-m", "jarvis_agents.cli", "worker"], check=False,
        env=cli_env(**api_env, JARVIS_MCP_CONFIG=str(broken)), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr == f'error: JARVIS_MCP_CONFIG {broken}: server \'srv\': "command" must be a string\n'
