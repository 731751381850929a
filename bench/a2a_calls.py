"""A2A's blocking SendMessage against REST's create + `?wait=` (`python -m bench.a2a_calls`).

One stack (bench/stack.py: PostgreSQL, a private Redis, the API, one worker) and an
instant model (one reply, the final answer): each caller asks for an agent and holds
until it has ended, over REST (`POST /api/v1/agents`, then `GET /api/v1/agents/{id}?wait=60`)
or over A2A (`SendMessage` on `/a2a`, which answers once the task has ended). The
JSON-RPC body is made from the `a2a-sdk`'s types; both sides use one httpx client per
calling thread. First one caller at a time (each call's time, the median of the rounds'
medians), then `--callers` callers at once (agents per second over the round). Rounds
alternate REST and A2A, so that drift on a shared machine falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict

from bench.environment import load_average
from bench.stack import Stack

Call = Callable[[httpx.Client], None]


def rest_call(client: httpx.Client) -> None:
    created = client.post("/api/v1/agents", json={"goal": "What is 6 * 7?"})
    created.raise_for_status()
    agent = client.get(f"/api/v1/agents/{created.json()['id']}", params={"wait": 60}).json()
    if agent["status"] != "COMPLETED":
        raise SystemExit(f"error: a REST agent ended {agent['status']}: {agent.get('error')}")


def a2a_call(client: httpx.Client) -> None:
    request = SendMessageRequest(message=Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="What is 6 * 7?")]))
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": MessageToDict(request)}
    answer = client.post("/a2a", json=body, headers={"A2A-Version": "1.0"}).json()
    state = answer.get("result", {}).get("task", {}).get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":
        raise SystemExit(f"error: an A2A task ended {state}: {answer}")


CALLS: dict[str, Call] = {"REST create + ?wait=": rest_call, "A2A SendMessage": a2a_call}


class Clients:
    """One httpx client per calling thread, each with the user's key."""

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.local = threading.local()
        self.made: list[httpx.Client] = []

    def get(self) -> httpx.Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.url, timeout=120,
                                  headers={"Authorization": f"Bearer {self.key}"})
            self.local.client = client
            self.made.append(client)
        return client

    def close(self) -> None:
        for client in self.made:
            client.close()


def one_at_a_time(call: Call, clients: Clients, calls: int) -> float:
    """The median seconds of one call, `calls` made one after the other."""
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        call(clients.get())
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def at_once(call: Call, pool: ThreadPoolExecutor, clients: Clients, agents: int) -> float:
    """Agents per second: `agents` calls made by the pool's callers at once."""
    began = time.perf_counter()
    list(pool.map(lambda _: call(clients.get()), range(agents)))
    return agents / (time.perf_counter() - began)


def run(*, rounds: int, calls: int, callers: int, agents: int) -> dict[str, Any]:
    with Stack(log_dir=Path(tempfile.mkdtemp(prefix="bench-a2a-"))) as stack:
        model = stack.start_model(latency_s=0.0, tool_calls=0)
        stack.start_worker(model, concurrency=max(callers, 20))
        _, key = stack.create_user("bench-a2a")
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
    rest, a2a = CALLS
    ms = {name: statistics.median(v) * 1000 for name, v in latency.items()}
    per_s = {name: statistics.median(v) for name, v in rate.items()}
    return {
        "rounds": rounds, "calls": calls, "callers": callers, "agents": agents,
        "load_average": load_average(),
        "ms_per_call": ms, "agents_per_s": per_s,
        "latency_ratio": ms[a2a] / ms[rest], "throughput_ratio": per_s[a2a] / per_s[rest],
        "raw": {"latency_s": latency, "agents_per_s": rate},
    }


def door_main(prog: str, description: str, run: Callable[..., dict[str, Any]],
              names: Iterable[str], label: str) -> None:
    """The command line of a door's bench against REST: its options, then the figures."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50, help="one-at-a-time calls per round")
    parser.add_argument("--callers", type=int, default=200, help="callers at once")
    parser.add_argument("--agents", type=int, default=600, help="agents per concurrent round")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()
    results = run(rounds=options.rounds, calls=options.calls, callers=options.callers,
                  agents=options.agents)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"load average at the end: {results['load_average']}")
    for name in names:
        print(f"{name:<22} one at a time {results['ms_per_call'][name]:7.1f} ms   "
              f"{options.callers} at once {results['agents_per_s'][name]:7.1f} agents/s")
    print(f"{label} / REST: latency x{results['latency_ratio']:.2f} (target <= 1.3), "
          f"throughput x{results['throughput_ratio']:.2f} (target >= 0.8)")


def main() -> None:
    door_main("python -m bench.a2a_calls", __doc__.splitlines()[0], run, CALLS, "A2A")


if __name__ == "__main__":
    main()
