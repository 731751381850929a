"""Send a goal to jarvis-agents over A2A 1.0 and stream the task (README, A2A).

    .venv/bin/python examples/a2a_client.py "What is 1234 * 902?"

It uses the official `a2a-sdk` client only: the agent card from the well-known URL, then
SendStreamingMessage, printing each event as it comes. The server and key are JARVIS_URL
and JARVIS_API_KEY, or what `jarvis-agents up` saved.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from jarvis_agents.cli.client import KEY_FILE, URL_FILE
from jarvis_agents.config import Settings


def server() -> tuple[str, str]:
    """JARVIS_URL and JARVIS_API_KEY, else the URL and key `jarvis-agents up` saved."""
    data_dir = Settings.from_env().data_dir

    def saved(name: str) -> str:
        path = data_dir / name
        return path.read_text().strip() if path.exists() else ""

    url = os.environ.get("JARVIS_URL") or saved(URL_FILE) or "http://127.0.0.1:8000"
    key = os.environ.get("JARVIS_API_KEY") or saved(KEY_FILE)
    if not key:
        sys.exit("error: no API key: set JARVIS_API_KEY, or run `make up` first")
    return url.rstrip("/"), key


async def main(goal: str) -> int:
    url, key = server()
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=300) as http:
        # The card at <url>/.well-known/agent-card.json says where the JSON-RPC endpoint is.
        client = await ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create_from_url(url)
        print(f"sending to {url}/a2a: {goal}")
        message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=goal)])
        state = TaskState.TASK_STATE_UNSPECIFIED
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("task"):
                print(f"task {event.task.id} ({TaskState.Name(event.task.status.state)})")
            elif event.HasField("status_update"):
                status = event.status_update.status
                state = status.state
                step = MessageToDict(status.message.metadata) if status.HasField("message") else {}
                text = "".join(p.text for p in status.message.parts)
                label = step.get("type") or TaskState.Name(state)
                print(f"  [{label}] {text}" if text else f"  [{label}]")
            elif event.HasField("artifact_update"):
                answer = "".join(p.text for p in event.artifact_update.artifact.parts)
                print(f"answer: {answer}")
        return 0 if state == TaskState.TASK_STATE_COMPLETED else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: examples/a2a_client.py "GOAL"')
    sys.exit(asyncio.run(main(sys.argv[1])))
