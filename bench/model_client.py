"""The model adapter's own cost: CPU per chat call and calls/s against an instant model.

    python -m bench.model_client [--baseline DIR ...] [--calls 2000] [--concurrency 200]

Starts `bench.model_server` (no latency) and makes `OllamaChatModel.chat` calls to it,
`--calls` one after another, then as many again from `--concurrency` threads at once
(a worker's agents), and reports the client process's CPU time per call and the calls
per second of each, and the model server's CPU per call over all of them (it shares
the cores, as in `python -m bench`). With `--baseline`, a directory holding another checkout of the
project (`git worktree add /tmp/base main`; repeatable), the same is measured with
that checkout's `jarvis_agents`, the variants taking turns round after round in fresh
processes so that all see the same machine; the figures are medians over the rounds.

What it leaves out on purpose: everything an agent does besides the model call (the
store, the bus, the tools). The whole-system figures are `python -m bench`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.processes import ROOT, cpu_seconds, free_port

# A conversation of the size the executor sends: the ReACT prompt, a goal, a turn.
SYSTEM = "You are a helpful agent. Answer in the ReACT format.\n" * 40
MESSAGES = [("system", SYSTEM), ("user", "What is 1234 * 902? [bench client]")]


def _child(root: Path, url: str, calls: int, concurrency: int) -> dict[str, Any]:
    """Runs in a fresh process: the figures of the adapter found under `root`."""
    sys.path.insert(0, str(root))
    from jarvis_agents.llm import ollama
    from jarvis_agents.llm.base import ChatMessage

    if not Path(ollama.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"imported {ollama.__file__}, not the adapter under {root}")
    connects = 0
    connect = socket.socket.connect

    def counting(sock: socket.socket, address: Any) -> None:
        nonlocal connects
        connects += 1
        connect(sock, address)

    socket.socket.connect = counting  # type: ignore[method-assign]
    messages = [ChatMessage(role, text) for role, text in MESSAGES]  # type: ignore[arg-type]
    model = ollama.OllamaChatModel(host=url)

    def ask() -> None:
        reply = model.chat(messages, model="llama3.2", stop=["OBSERVATION:"],
                           deadline=time.monotonic() + 30, should_stop=lambda: False)
        assert "ACTION: calculate" in reply, reply

    def measure(threads: int) -> dict[str, float]:
        per_thread = calls // threads
        barrier = threading.Barrier(threads + 1)

        def run() -> None:
            barrier.wait()
            for _ in range(per_thread):
                ask()

        workers = [threading.Thread(target=run) for _ in range(threads)]
        for worker in workers:
            worker.start()
        before = connects
        barrier.wait()
        cpu, wall = time.process_time(), time.perf_counter()
        for worker in workers:
            worker.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        done = per_thread * threads
        return {"cpu_us": cpu / done * 1e6, "calls_s": done / wall,
                "connections": float(connects - before)}

    for _ in range(50):  # warm-up: imports, the first connection, caches
        ask()
    measure(concurrency)  # warm-up: every thread's connection
    figures: dict[str, Any] = {"sequential": measure(1), "concurrent": measure(concurrency)}
    figures["calls"] = 50 + calls + 2 * (calls // concurrency) * concurrency
    model.close()
    return figures


def _run_child(server_pid: int, root: Path, url: str, calls: int,
               concurrency: int) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.model_client", "--child", str(root), "--url", url,
            "--calls", str(calls), "--concurrency", str(concurrency)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    server_cpu_s = cpu_seconds(server_pid)
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measurement under {root} failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["server_cpu_us"] = (cpu_seconds(server_pid) - server_cpu_s) / figures["calls"] * 1e6
    return figures


def _start_server() -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.model_server", "--port", str(port), "--latency", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    if "listening" not in server.stdout.readline():
        server.kill()
        raise SystemExit("the bench model server did not start")
    return server, f"http://127.0.0.1:{port}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_client")
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="another checkout to compare with (repeatable)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child, args.url, args.calls, args.concurrency)))
        return 0
    variants = {str(path): path.resolve() for path in args.baseline} | {"this checkout": ROOT}
    server, url = _start_server()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for r in range(args.rounds):
            # Each in turn first, so that none always runs on a warmer machine.
            order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
            for name in order:
                results[name].append(
                    _run_child(server.pid, variants[name], url, args.calls, args.concurrency))
                print(f"round {r + 1}, {name}: {json.dumps(results[name][-1])}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"\nmedian of {args.rounds} rounds, {args.calls} calls each "
          f"(one at a time; then {args.concurrency} threads):")
    print("| variant | CPU/call 1 at a time | calls/s 1 at a time "
          f"| CPU/call {args.concurrency} threads | calls/s {args.concurrency} threads "
          "| model server CPU/call | new connections |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        def median(mode: str, key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(run[mode][key] for run in runs)

        print(f"| {name} | {median('sequential', 'cpu_us'):.0f} µs "
              f"| {median('sequential', 'calls_s'):.0f} "
              f"| {median('concurrent', 'cpu_us'):.0f} µs | {median('concurrent', 'calls_s'):.0f} "
              f"| {statistics.median(run['server_cpu_us'] for run in runs):.0f} µs "
              f"| {median('sequential', 'connections'):.0f} / "
              f"{median('concurrent', 'connections'):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
