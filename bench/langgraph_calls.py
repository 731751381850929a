"""LangGraph's `runs.wait` against REST's create + `?wait=` (`python -m bench.langgraph_calls`).

The harness of bench/a2a_calls.py (one stack, an instant model, one caller at a time,
then `--callers` at once, rounds alternating the two), with LangGraph's call in A2A's
place: `POST /langgraph/runs/wait` with the body `langgraph_sdk`'s `runs.wait` sends,
which answers the thread's values once the run has ended. Figures go in BENCHMARKS.md.
"""

from __future__ import annotations

import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.a2a_calls import Call, Clients, at_once, door_main, one_at_a_time, rest_call
from bench.environment import load_average
from bench.stack import Stack

BODY = {"assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": "What is 6 * 7?"}]}}


def langgraph_call(client: httpx.Client) -> None:
    values = client.post("/langgraph/runs/wait", json=BODY)
    values.raise_for_status()
    messages = values.json().get("messages") or []
    if not messages or messages[-1].get("type") != "ai" or "__error__" in values.json():
        raise SystemExit(f"error: a LangGraph run did not succeed: {values.text[:300]}")


CALLS: dict[str, Call] = {"REST create + ?wait=": rest_call, "LangGraph runs.wait": langgraph_call}


def run(*, rounds: int, calls: int, callers: int, agents: int) -> dict[str, Any]:
    with Stack(log_dir=Path(tempfile.mkdtemp(prefix="bench-langgraph-"))) as stack:
        model = stack.start_model(latency_s=0.0, tool_calls=0)
        stack.start_worker(model, concurrency=max(callers, 20))
        _, key = stack.create_user("bench-langgraph")
        clients = Clients(stack.api_url, key)
        latency: dict[str, list[float]] = {name: [] for name in CALLS}
        rate: dict[str, list[float]] = {name: [] for name in CALLS}
        try:
            with ThreadPoolExecutor(callers) as pool:
                for call in CALLS.values():  # warm up: connections, caches, the API's imports
                    one_at_a_time(call, clients, 10)
                    at_once(call, pool, clients, callers)
                for _ in range(rounds):
                    for name, call in CALLS.items():
                        latency[name].append(one_at_a_time(call, clients, calls))
                    for name, call in CALLS.items():
                        rate[name].append(at_once(call, pool, clients, agents))
        finally:
            clients.close()
    rest, langgraph = CALLS
    ms = {name: statistics.median(v) * 1000 for name, v in latency.items()}
    per_s = {name: statistics.median(v) for name, v in rate.items()}
    return {
        "rounds": rounds, "calls": calls, "callers": callers, "agents": agents,
        "load_average": load_average(), "ms_per_call": ms, "agents_per_s": per_s,
        "latency_ratio": ms[langgraph] / ms[rest],
        "throughput_ratio": per_s[langgraph] / per_s[rest],
        "raw": {"latency_s": latency, "agents_per_s": rate},
    }


def main() -> None:
    door_main("python -m bench.langgraph_calls", __doc__.splitlines()[0], run, CALLS,
              "LangGraph")


if __name__ == "__main__":
    main()
