"""LangGraph's `runs.stream` and `runs.join_stream` (README, LangGraph SDK), driven by
`langgraph_sdk` against a real API and worker: the modes, `metadata` first and `end`
last, live tokens as `messages-tuple` chunks, and a stream that resumes after its
connection was cut, with every step once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from langchain_core.messages import convert_to_messages
from langgraph_sdk import get_sync_client

from tests.support.api_server import wait_until
from tests.support.cutting_proxy import CuttingProxy
from tests.support.live_stack import LiveStack

pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]
pytestmark = pytest.mark.integration

GOAL = "What is 1234 * 902?"
ANSWER = "1113068"
MODES = ["values", "updates", "messages-tuple"]


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture(scope="module")
def client(live_stack: LiveStack):
    with get_sync_client(url=f"{live_stack.url}/langgraph", api_key=live_stack.api_key) as sdk:
        yield sdk


def test_a_stream_tells_metadata_first_each_mode_then_end(client):
    thread = client.threads.create()
    parts = list(client.runs.stream(thread["thread_id"], "agent", input=human(GOAL),
                                    stream_mode=MODES))
    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "end"
    run_id = parts[0].data["run_id"]
    assert parts[-1].data == {"run_id": run_id, "status": "success"}
    assert {"values", "updates", "messages"} <= set(events)
    final = [p.data for p in parts if p.event == "values"][-1]
    assert [m.type for m in convert_to_messages(final["messages"])] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == ANSWER
    nodes = [next(iter(p.data)) for p in parts if p.event == "updates"]
    assert "agent" in nodes and "tools" in nodes
    chunks = [p.data for p in parts if p.event == "messages"]
    assert all(len(c) == 2 and c[1]["langgraph_node"] in ("agent", "tools") for c in chunks)
    assert client.runs.get(thread["thread_id"], run_id)["status"] == "success"


def test_messages_tuple_chunks_are_the_live_tokens(client):
    """The chunks of a reply, joined, are its text as the model wrote it (its labels
    included), which only its live tokens carry: the steps hold the parsed parts."""
    parts = list(client.runs.stream(None, "agent", input=human(GOAL), stream_mode="messages-tuple"))
    assert {p.event for p in parts} == {"metadata", "messages", "end"}
    last_reply = [c for c, meta in (p.data for p in parts if p.event == "messages")
                  if c["type"] == "AIMessageChunk" and meta["langgraph_step"] == 1]
    assert "".join(c["content"] for c in last_reply) == "THOUGHT: done\nFINAL_ANSWER: " + ANSWER


def test_a_stream_cut_midway_resumes_from_last_event_id_with_every_step_once(
    live_stack: LiveStack,
):
    proxy = CuttingProxy(urlsplit(live_stack.url).port or 80)
    try:
        with get_sync_client(url=f"{proxy.url}/langgraph", api_key=live_stack.api_key) as sdk:
            parts = []
            for part in sdk.runs.stream(None, "agent", input=human("slow: " + GOAL),
                                        stream_mode=["updates"]):
                parts.append(part)
                if proxy.connections == 1 and part.event == "updates":
                    proxy.cut()  # after the first step: the SDK reconnects to Location
    finally:
        proxy.close()
    assert proxy.connections >= 2  # it did reconnect
    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "end" and events.count("metadata") == 1
    # THINK, ACT, OBSERVE, THINK, FINAL: each step once, none lost to the cut
    assert [int(p.id) for p in parts if p.event == "updates"] == [1, 2, 3, 4, 5]
    updates = [p.data for p in parts if p.event == "updates"]
    assert updates[-1]["agent"]["messages"][0]["content"] == ANSWER


def test_join_stream_with_last_event_id_replays_only_what_came_after(client):
    thread = client.threads.create()
    run = client.runs.create(thread["thread_id"], "agent", input=human(GOAL))
    client.runs.join(thread["thread_id"], run["run_id"])
    whole = list(client.runs.join_stream(thread["thread_id"], run["run_id"],
                                         stream_mode="updates"))
    assert whole[0].event == "metadata" and whole[-1].event == "end"
    ids = [p.id for p in whole if p.event == "updates"]
    rest = list(client.runs.join_stream(thread["thread_id"], run["run_id"],
                                        stream_mode="updates", last_event_id=ids[0]))
    assert [p.id for p in rest if p.event == "updates"] == ids[1:]
    assert rest[-1].event == "end"


def test_the_example_streams_a_run(live_stack: LiveStack):
    root = Path(__file__).resolve().parents[2]
    example = subprocess.run(
        [sys.executable, "examples/langgraph_client.py", GOAL], env=live_stack.client_env(),
        cwd=root, check=False, capture_output=True, text=True, timeout=60)
    assert example.returncode == 0, example.stdout + example.stderr
    assert "[agent] ai: calculate(" in example.stdout
    assert f"answer: {ANSWER}" in example.stdout and ": success" in example.stdout


def test_on_disconnect_cancel_cancels_the_run_when_its_client_leaves(client):
    thread = client.threads.create()
    for on_disconnect, status in (("cancel", "interrupted"), ("continue", "success")):
        stream = client.runs.stream(thread["thread_id"], "agent", input=human("slow: " + GOAL),
                                    stream_mode="updates", on_disconnect=on_disconnect)
        run_id = next(stream).data["run_id"]
        stream.close()  # the client leaves
        wait_until(lambda run_id=run_id: client.runs.get(
            thread["thread_id"], run_id)["status"] not in ("pending", "running"), timeout_s=30)
        assert client.runs.get(thread["thread_id"], run_id)["status"] == status
