"""The model adapters' own cost: CPU per chat call and calls/s against an instant model.

    python -m bench.model_client [--baseline DIR ...] [--protocol P ...] [--calls 2000]
                                 [--concurrency 200]

Starts an instant model server and makes chat calls to it, `--calls` one after
another, then as many again from `--concurrency` threads at once (a worker's agents),
and reports the client process's CPU time per call and the calls per second of each,
and the model server's CPU per call over all of them (it shares the cores, as in
`python -m bench`). With `--baseline`, a directory holding another checkout of the
project (`git worktree add /tmp/base main`; repeatable), the same is measured with
that checkout's `jarvis_agents`, the variants taking turns round after round in fresh
processes so that all see the same machine; the figures are medians over the rounds.

`--protocol` (repeatable) says which client: `ollama` (the Ollama adapter, the
default), `openai` (the OpenAI-compatible adapter: the `openai` client over our
exchange) or `openai-httpx2` (the `openai` client alone, on its own httpx2 transport,
for comparison). With only `ollama`, the server is `bench.model_server`; with any
other, every variant runs against `tests.support.fake_ollama`, which speaks both
protocols and sends the same pieces in each (its server CPU is higher: http.server).

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.processes import ROOT, cpu_seconds, free_port

PROTOCOLS = ("ollama", "openai", "openai-httpx2")
# A conversation of the size the executor sends: the ReACT prompt, a goal, a turn.
SYSTEM = "You are a helpful agent. Answer in the ReACT format.\n" * 40
MESSAGES = [("system", SYSTEM), ("user", "What is 1234 * 902? [bench client]")]


def _child(root: Path, url: str, calls: int, concurrency: int, protocol: str) -> dict[str, Any]:
    """Runs in a fresh process: the figures of the adapter found under `root`."""
    sys.path.insert(0, str(root))
    import jarvis_agents

    if not Path(jarvis_agents.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"imported {jarvis_agents.__file__}, not the adapters under {root}")
    connects = 0
    connect = socket.socket.connect

    def counting(sock: socket.socket, address: Any) -> None:
        nonlocal connects
        connects += 1
        connect(sock, address)

    socket.socket.connect = counting  # type: ignore[method-assign]
    ask, close = _asker(protocol, url)

    def checked() -> None:
        reply = ask()
        assert "ACTION: calculate" in reply, reply

    def measure(threads: int) -> dict[str, float]:
        per_thread = calls // threads
        barrier = threading.Barrier(threads + 1)

        def run() -> None:
            barrier.wait()
            for _ in range(per_thread):
                checked()

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
        checked()
    measure(concurrency)  # warm-up: every thread's connection
    figures: dict[str, Any] = {"sequential": measure(1), "concurrent": measure(concurrency)}
    figures["calls"] = 50 + calls + 2 * (calls // concurrency) * concurrency
    close()
    return figures


def _asker(protocol: str, url: str) -> tuple[Callable[[], str], Callable[[], None]]:
    """How the child asks for one reply with `protocol`'s client, and how it closes it."""
    if protocol == "openai-httpx2":
        import openai

        client = openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=30)

        def ask_alone() -> str:
            stream = client.chat.completions.create(
                model="llama3.2", messages=[{"role": r, "content": t} for r, t in MESSAGES],  # type: ignore[misc]
                stop=["OBSERVATION:"], stream=True, stream_options={"include_usage": True})
            return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

        return ask_alone, client.close
    from jarvis_agents.llm import base

    messages = [base.ChatMessage(role, text) for role, text in MESSAGES]  # type: ignore[arg-type]
    if protocol == "openai":
        from jarvis_agents.llm.openai_compatible import OpenAIChatModel

        model: Any = OpenAIChatModel(base_url=f"{url}/v1", api_key="bench")
    else:
        from jarvis_agents.llm.ollama import OllamaChatModel

        model = OllamaChatModel(host=url)

    def ask() -> str:
        if not hasattr(model, "complete"):  # a checkout from before ChatModel.complete
            return str(model.chat(messages, model="llama3.2", stop=["OBSERVATION:"],
                                  deadline=time.monotonic() + 30, should_stop=lambda: False))
        request = base.ChatRequest(messages, model="llama3.2", stop=["OBSERVATION:"])
        return str(model.complete(request, deadline=time.monotonic() + 30,
                                  should_stop=lambda: False).content)

    return ask, model.close


def _run_child(server_pid: int, root: Path, url: str, calls: int,
               concurrency: int, protocol: str) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.model_client", "--child", str(root), "--url", url,
            "--calls", str(calls), "--concurrency", str(concurrency), "--protocol", protocol]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    server_cpu_s = cpu_seconds(server_pid)
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measurement under {root} failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["server_cpu_us"] = (cpu_seconds(server_pid) - server_cpu_s) / figures["calls"] * 1e6
    return figures


def _start_server(both_protocols: bool) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    command = (["tests.support.fake_ollama", "--script", "calc"] if both_protocols
               else ["bench.model_server"])
    server = subprocess.Popen(
        [sys.executable, "-m", *command, "--port", str(port), "--latency", "0"],
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
    parser.add_argument("--protocol", action="append", choices=PROTOCOLS,
                        help="which client to measure (repeatable; default: ollama)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    protocols = args.protocol or ["ollama"]
    if args.child is not None:
        print(json.dumps(_child(args.child, args.url, args.calls, args.concurrency, protocols[0])))
        return 0
    checkouts = {str(path): path.resolve() for path in args.baseline} | {"this checkout": ROOT}
    variants = {(f"{name}, {protocol}" if len(protocols) > 1 else name): (root, protocol)
                for name, root in checkouts.items() for protocol in protocols}
    server, url = _start_server(protocols != ["ollama"])
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for r in range(args.rounds):
            # Each in turn first, so that none always runs on a warmer machine.
            order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
            for name in order:
                root, protocol = variants[name]
                results[name].append(
                    _run_child(server.pid, root, url, args.calls, args.concurrency, protocol))
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
