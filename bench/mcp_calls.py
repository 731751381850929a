"""Scenario 9 of `python -m bench` (also `python -m bench.mcp_calls` alone): what calling
a tool over MCP costs, against a built-in.

The same registry call path for both (`ToolRegistry.call`, arguments validated, the
result truncated): the built-in `calculate` runs inline on the caller's thread; the
MCP tool `bench__noop` does nothing, on a stdio server this process started, so its
figure is the overhead of the round trip (the submit to the process's MCP loop
thread, the JSON-RPC request over the pipe, the server's dispatch, the answer). Each
round makes `--calls` sequential calls, then the same number spread over `--threads`
threads at once; the median of `--rounds` rounds is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.figures import cell
from jarvis_agents.config import Settings
from jarvis_agents.tools.mcp.config import McpServerConfig
from jarvis_agents.tools.mcp.provider import McpTools
from jarvis_agents.tools.registry import ToolRegistry

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "built-in calculate": ("calculate", {"expression": "1 + 1"}),
    "MCP no-op (stdio)": ("bench__noop", {}),
}


def measure(call: Callable[[], object], calls: int, threads: int) -> float:
    """Seconds for `calls` calls, made by `threads` threads at once (1: sequentially)."""
    began = time.perf_counter()
    if threads == 1:
        for _ in range(calls):
            call()
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda _: call(), range(calls)))
    return time.perf_counter() - began


def run(rounds: int, calls: int, threads: int) -> list[dict[str, Any]]:
    server = McpServerConfig("bench", command=sys.executable, args=("-m", "bench.mcp_noop_server"))
    settings = Settings.from_env({"JARVIS_DATA_DIR": tempfile.mkdtemp(prefix="bench-mcp-")})
    mcp = McpTools([server])
    if not mcp.wait_started(60) or not mcp.tools():
        raise SystemExit(f"error: the MCP server did not start: {mcp.servers()}")
    results = []
    with ToolRegistry.default(settings, providers=[mcp]) as registry:
        for label, (name, arguments) in CASES.items():
            def call(name: str = name, arguments: dict[str, Any] = arguments) -> None:
                result = registry.call(name, arguments)
                if not result.ok:
                    raise SystemExit(f"error: {name} failed: {result.content}")

            measure(call, min(calls, 50), 1)  # warm up
            for mode, width in (("sequential", 1), (f"{threads} threads", threads)):
                seconds = statistics.median(measure(call, calls, width) for _ in range(rounds))
                results.append({"tool": label, "mode": mode, "calls_per_s": calls / seconds,
                                "ms_per_call": seconds / calls * 1000})
    return results


QUICK_CALLS = 20


def scenario(*, runs: int, quick: bool) -> dict[str, Any]:
    """`python -m bench`'s scenario 9: each round's rows, `runs` rounds (one process)."""
    calls = QUICK_CALLS if quick else 500
    return {"calls": calls, "threads": 8,
            "rounds": [run(1, calls, 8) for _ in range(runs)]}


def section(m: dict[str, Any]) -> list[str]:
    """The scenario's part of BENCHMARKS.md: ms per call, each row's median over the rounds."""
    rows = [
        "## 9. MCP tool calls against a built-in",
        "",
        (f"The same registry call (`ToolRegistry.call`: arguments validated, the result cut) "
         f"{m['calls']} times a round, sequentially and then over {m['threads']} threads at "
         "once: the built-in `calculate` runs inline; the MCP tool `bench__noop` does nothing "
         "on a stdio server this process started, so its figure is the round trip (the "
         "process's MCP loop thread, JSON-RPC over the pipe, the server's dispatch)."),
        "",
        "| tool | calls | ms per call | calls/s |",
        "|---|---|---|---|",
    ]
    for index, first in enumerate(m["rounds"][0]):
        each = [rows_of_round[index] for rows_of_round in m["rounds"]]
        rows.append(f"| {first['tool']} | {first['mode']} | {cell(each, 'ms_per_call', 3)} | "
                    f"{cell(each, 'calls_per_s', 0)} |")
    return [*rows, ""]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_calls", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500, help="calls per round (default 500)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()
    results = run(options.rounds, options.calls, options.threads)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"median of {options.rounds} rounds of {options.calls} calls")
    print(f"{'tool':<22} {'mode':<12} {'calls/s':>10} {'ms/call':>9}")
    for row in results:
        print(f"{row['tool']:<22} {row['mode']:<12} {row['calls_per_s']:>10.0f} {row['ms_per_call']:>9.3f}")


if __name__ == "__main__":
    main()
