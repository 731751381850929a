"""Stream a run of jarvis-agents with LangGraph's own SDK (README, LangGraph SDK).

    .venv/bin/python examples/langgraph_client.py "What is 1234 * 902?"

It is a program written for LangGraph's Agent Server, pointed at ours: `langgraph_sdk`
only (a dev extra: `make test` or `pip install -e '.[dev]'` installs it). It makes a
thread, streams a run of the assistant `agent` in the `updates` and `messages-tuple`
modes (the reply's live tokens), and prints the thread's messages at the end. The
server and key are JARVIS_URL and JARVIS_API_KEY, or what `jarvis-agents up` saved.
"""

from __future__ import annotations

import os
import sys

from langgraph_sdk import get_sync_client

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


def main(goal: str) -> int:
    url, key = server()
    with get_sync_client(url=f"{url}/langgraph", api_key=key) as client:
        thread = client.threads.create()
        print(f"thread {thread['thread_id']} at {url}/langgraph: {goal}")
        status = None
        streaming = False
        for part in client.runs.stream(
            thread["thread_id"], "agent", stream_mode=["updates", "messages-tuple"],
            input={"messages": [{"role": "user", "content": goal}]},
        ):
            if part.event == "messages":  # a live token of the model's reply
                chunk, _ = part.data
                if chunk["type"] == "AIMessageChunk" and chunk["content"]:
                    print(chunk["content"], end="", flush=True)
                    streaming = True
            elif part.event == "updates":
                if streaming:
                    print()
                    streaming = False
                for node, update in part.data.items():
                    for message in update.get("messages", []) if isinstance(update, dict) else []:
                        calls = ", ".join(f"{c['name']}({c['args']})" for c in message.get(
                            "tool_calls", []))
                        print(f"  [{node}] {message['type']}: {calls or message['content']}")
            elif part.event == "end":
                status = part.data["status"]
                print(f"run {part.data['run_id']}: {status}")
        final = client.threads.get_state(thread["thread_id"])["values"]["messages"][-1]
        print(f"answer: {final['content']}")
    return 0 if status == "success" else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: examples/langgraph_client.py "GOAL"')
    sys.exit(main(sys.argv[1]))
