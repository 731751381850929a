"""Issue 33's MCP targets, same-run ratios against REST (BENCHMARKS.md, section 10):

- an MCP `tools/call` from request to answer, instant model, one at a time, within 1.3×
  REST's create + `GET /agents/{id}?wait=`;
- at 200 concurrent callers, agents/s through MCP at least 0.8× REST's.

MCP is measured twice: at the API's `/mcp`, which clients use (the API forwards it), and at
`jarvis-agents mcp`'s own port, which it forwards to.

    python -m bench.mcp_door [--runs 3] [--calls 100] [--callers 200] [--per-caller 10]

It starts the stack (`bench.stack`: PostgreSQL, a private Redis, the API), two worker
processes on an instant model, and `jarvis-agents mcp`; the callers are client processes
(`CLIENT_PROCESSES`, each with its share of the callers: the official `mcp` client, or
httpx for REST), started together, so that neither side's client is the bottleneck alone.
It prints the figures as JSON and as the Markdown of the section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.processes import ROOT, Process, free_port, machine_busy_s
from bench.stack import Stack

CLIENT_PROCESSES = 4
GOAL = "What is 2 + 2?"
CALLERS = 200
ONE_AT_A_TIME_BOUND = 1.3
CONCURRENT_BOUND = 0.8


# --- the callers -----------------------------------------------------------------------------


def rest_call(http: httpx.Client) -> None:
    created = http.post("/api/v1/agents", json={"goal": GOAL})
    created.raise_for_status()
    done = http.get(f"/api/v1/agents/{created.json()['id']}", params={"wait": 60}).json()
    if done["status"] != "COMPLETED":
        raise RuntimeError(f"agent {done['id']} ended {done['status']}: {done.get('error')}")


async def mcp_call(client: Any) -> None:
    result = await client.call_tool("agent", {"goal": GOAL})
    if result.is_error:
        raise RuntimeError(result.content[0].text)


def mcp_session(url: str, key: str) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                              timeout=httpx2.Timeout(60.0))
    return http, Client(streamable_http_client(url, http_client=http))


def one_at_a_time_rest(api_url: str, key: str, n: int) -> list[float]:
    times = []
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"},
                      timeout=60) as http:
        rest_call(http)  # the connection, warm
        for _ in range(n):
            began = time.perf_counter()
            rest_call(http)
            times.append(time.perf_counter() - began)
    return times


async def one_at_a_time_mcp(url: str, key: str, n: int) -> list[float]:
    times = []
    http, session = mcp_session(url, key)
    async with http, session as client:
        await mcp_call(client)
        for _ in range(n):
            began = time.perf_counter()
            await mcp_call(client)
            times.append(time.perf_counter() - began)
    return times


def client_process(kind: str, url: str, key: str, callers: int, per_caller: int,
                   start_at: float) -> dict[str, Any]:
    """One client process's callers, each making `per_caller` calls back to back."""
    done: list[float] = []
    errors: list[str] = []
    if kind == "rest":
        def caller() -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                              timeout=120) as http:
                time.sleep(max(0.0, start_at - time.time()))
                for _ in range(per_caller):
                    try:
                        rest_call(http)
                        done.append(time.time())
                    except Exception as exc:  # noqa: BLE001 - counted and reported
                        errors.append(repr(exc))

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        async def callers_of_mcp() -> None:
            async def caller() -> None:
                http, session = mcp_session(url, key)
                async with http, session as client:
                    await anyio.sleep(max(0.0, start_at - time.time()))
                    for _ in range(per_caller):
                        try:
                            await mcp_call(client)
                            done.append(time.time())
                        except Exception as exc:  # noqa: BLE001 - counted and reported
                            errors.append(repr(exc))

            async with anyio.create_task_group() as group:
                for _ in range(callers):
                    group.start_soon(caller)

        anyio.run(callers_of_mcp)
    return {"done": done, "errors": errors[:5], "error_count": len(errors),
            "cpu_s": time.process_time()}


def concurrently(kind: str, url: str, key: str, callers: int, per_caller: int,
                 servers: list[Process]) -> dict[str, Any]:
    """`callers` callers across CLIENT_PROCESSES processes, started together: agents/s, and
    the CPU per agent of the door's server processes and of the clients."""
    server_cpu = sum(server.cpu_s() for server in servers)
    start_at = time.time() + 8.0  # every process imported and connected by then
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bench.mcp_door", "--client", kind, "--url", url, "--key", key,
         "--callers", str(callers // CLIENT_PROCESSES), "--per-caller", str(per_caller),
         "--start-at", str(start_at)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(CLIENT_PROCESSES)]
    results = [json.loads(proc.communicate(timeout=600)[0].splitlines()[-1]) for proc in procs]
    done = sorted(t for r in results for t in r["done"])
    failed = sum(r["error_count"] for r in results)
    if failed:  # counted against the side (not in its agents/s), and said
        examples = [e for r in results for e in r["errors"]][:3]
        print(f"bench.mcp_door: {kind}: {failed} calls failed, e.g. {examples}", file=sys.stderr)
    return {"agents": len(done), "failed": failed, "seconds": done[-1] - start_at,
            "agents_per_s": len(done) / (done[-1] - start_at),
            "server_cpu_ms_per_agent": (sum(server.cpu_s() for server in servers) - server_cpu)
            * 1000 / len(done),
            "client_cpu_ms_per_agent": sum(r["cpu_s"] for r in results) * 1000 / len(done)}


# --- the run ---------------------------------------------------------------------------------


def start_mcp(stack: Stack, port: int) -> tuple[Process, str]:
    """`jarvis-agents mcp` on `port`, where the API forwards `/mcp` (its JARVIS_MCP_PORT)."""
    process = Process("mcp", [sys.executable, "-m", "jarvis_agents.cli", "mcp", "--port", str(port)],
                      env=stack.env(), log_dir=stack.log_dir)
    process.wait_for("MCP server listening on", timeout_s=60)
    return process, f"http://127.0.0.1:{port}/mcp"


def measure(runs: int, calls: int, callers: int, per_caller: int) -> dict[str, Any]:
    log_dir = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    figures: dict[str, Any] = {"runs": [], "load_before": os.getloadavg()}
    # A port picked free, not the API's + 1: that one may be any client's ephemeral port.
    mcp_port = free_port()
    with Stack(log_dir=log_dir, api_env={"JARVIS_MCP_PORT": str(mcp_port)}) as stack:
        model = stack.start_model(latency_s=0.0, tool_calls=0)
        stack.start_workers(model, names=["worker-1", "worker-2"])
        mcp, url = start_mcp(stack, mcp_port)
        try:
            _, key = stack.create_user("bench-mcp")
            for _ in range(runs):
                busy, began = machine_busy_s(), time.monotonic()
                rest_one = one_at_a_time_rest(stack.api_url, key, calls)
                api_one = anyio.run(one_at_a_time_mcp, f"{stack.api_url}/mcp", key, calls)
                mcp_one = anyio.run(one_at_a_time_mcp, url, key, calls)
                assert stack.api is not None
                rest_many = concurrently("rest", stack.api_url, key, callers, per_caller, [stack.api])
                api_many = concurrently("mcp", f"{stack.api_url}/mcp", key, callers, per_caller,
                                        [stack.api, mcp])
                mcp_many = concurrently("mcp", url, key, callers, per_caller, [mcp])
                sides = (("rest", rest_many), ("api", api_many), ("mcp", mcp_many))
                figures["runs"].append({
                    "rest_p50_ms": statistics.median(rest_one) * 1000,
                    "api_p50_ms": statistics.median(api_one) * 1000,
                    "mcp_p50_ms": statistics.median(mcp_one) * 1000,
                    **{f"{side}_agents_per_s": many["agents_per_s"] for side, many in sides},
                    "failed": {side: many["failed"] for side, many in sides},
                    **{f"{side}_{what}_cpu_ms_per_agent": many[f"{what}_cpu_ms_per_agent"]
                       for side, many in sides for what in ("server", "client")},
                    "machine_busy_cores": (machine_busy_s() - busy) / (time.monotonic() - began),
                })
        finally:
            mcp.stop()
    figures["load_after"] = os.getloadavg()
    return figures


def markdown(figures: dict[str, Any]) -> str:
    runs = figures["runs"]

    def median(name: str) -> float:
        return statistics.median(r[name] for r in runs)

    def each(name: str, fmt: str = "{:.1f}") -> str:
        return "[" + ", ".join(fmt.format(r[name]) for r in runs) + "]"

    load = " / ".join(f"{v:.2f}" for v in figures["load_before"])
    rows = ["| target | measured | |", "|---|---|---|"]
    for side, door in (("api", "the API's `/mcp`"), ("mcp", "`jarvis-agents mcp` itself")):
        one = median(f"{side}_p50_ms") / median("rest_p50_ms")
        many = median(f"{side}_agents_per_s") / median("rest_agents_per_s")
        rows += [
            (f"| MCP `tools/call` at {door}, one at a time, ≤ {ONE_AT_A_TIME_BOUND}× REST create "
             f"+ `?wait=` (p50) | {median(f'{side}_p50_ms'):.1f} {each(f'{side}_p50_ms')} vs "
             f"{median('rest_p50_ms'):.1f} {each('rest_p50_ms')} ms = {one:.2f}× | "
             f"{'met' if one <= ONE_AT_A_TIME_BOUND else '**missed**'} |"),
            (f"| {CALLERS} concurrent callers at {door}: MCP agents/s ≥ {CONCURRENT_BOUND}× "
             f"REST's | {median(f'{side}_agents_per_s'):.1f} {each(f'{side}_agents_per_s')} vs "
             f"{median('rest_agents_per_s'):.1f} {each('rest_agents_per_s')} = {many:.2f}× | "
             f"{'met' if many >= CONCURRENT_BOUND else '**missed**'} |"),
        ]
    return "\n".join([
        *rows,
        "",
        f"Calls that failed (not counted): {[r['failed'] for r in runs]}.",
        (f"CPU per agent at {CALLERS} callers, the door's processes: REST (the API) "
         f"{median('rest_server_cpu_ms_per_agent'):.2f} ms, MCP at the API's `/mcp` (the API "
         f"and the MCP server) {median('api_server_cpu_ms_per_agent'):.2f} ms, MCP at its own "
         f"port (the MCP server) {median('mcp_server_cpu_ms_per_agent'):.2f} ms; the callers' "
         f"processes {median('rest_client_cpu_ms_per_agent'):.2f}, "
         f"{median('api_client_cpu_ms_per_agent'):.2f} and "
         f"{median('mcp_client_cpu_ms_per_agent'):.2f} ms."),
        (f"Machine: {os.cpu_count()} cores; load average before the run {load}; all cores busy "
         f"{each('machine_busy_cores', '{:.2f}')} cores on average during each run (the stack, "
         "the clients, and whatever else ran on the machine)."),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_door")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100, help="one-at-a-time calls per side")
    parser.add_argument("--callers", type=int, default=CALLERS)
    parser.add_argument("--per-caller", type=int, default=10,
                        help="calls each caller makes back to back (an MCP host keeps its session)")
    parser.add_argument("--client", choices=["rest", "mcp"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client_process(args.client, args.url, args.key, args.callers,
                                        args.per_caller, args.start_at)))
        return
    figures = measure(args.runs, args.calls, args.callers, args.per_caller)
    print(json.dumps(figures, indent=2))
    print(markdown(figures))


if __name__ == "__main__":
    main()
