"""Call one of your assistants as an MCP tool, with the official `mcp` client (README, MCP server).

    make up                                                  # in one terminal
    .venv/bin/python examples/mcp_client.py "What is 1234 * 902?"

It lists your tools (one per assistant), calls one (`--assistant`, default `agent`),
prints each progress notification (at least one per ReACT iteration) and the answer.
The server is the API's `/mcp`; the API's URL and the key are the ones `jarvis-agents up`
saved in its data directory, unless JARVIS_URL and JARVIS_API_KEY say otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from jarvis_agents.cli.client import KEY_FILE, URL_FILE
from jarvis_agents.config import default_data_dir


def saved(name: str) -> str | None:
    """A value `jarvis-agents up` saved in its data directory (JARVIS_DATA_DIR)."""
    try:
        return (default_data_dir(os.environ) / name).read_text().strip() or None
    except OSError:
        return None


async def main(goal: str, assistant: str, url: str, api_key: str) -> int:
    # Our own HTTP client, to send the key; the read timeout is the SDK's default: a call
    # lasts as long as its agent, and the server keeps the stream alive meanwhile.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api_key}"},
                              timeout=httpx2.Timeout(30.0, read=300.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        tools = (await client.list_tools()).tools
        print("your assistants:", ", ".join(tool.name for tool in tools))

        async def progress(value: float, total: float | None, message: str | None) -> None:
            print(f"  … {message}")

        result = await client.call_tool(assistant, {"goal": goal}, progress_callback=progress)
    answer = "".join(block.text for block in result.content if block.type == "text")
    if result.is_error:
        print(f"error: {answer}", file=sys.stderr)
        return 1
    print(answer)
    if result.structured_content is not None:
        print(json.dumps(result.structured_content, indent=2))
    print(f"(agent {result.meta['jarvis/agent_id']}; a follow-up passes "
          f"thread_id {result.meta['jarvis/thread_id']})")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("goal", nargs="?", default="What is 1234 * 902?")
    parser.add_argument("--assistant", default="agent", help="the tool to call (default: agent)")
    args = parser.parse_args()
    url = (os.environ.get("JARVIS_URL") or saved(URL_FILE) or "http://127.0.0.1:8000").rstrip("/") + "/mcp"
    key = os.environ.get("JARVIS_API_KEY") or saved(KEY_FILE)
    if not key:
        sys.exit("error: no API key: run `make up` first, or set JARVIS_API_KEY")
    sys.exit(anyio.run(main, args.goal, args.assistant, url, key))
