"""What tracing costs per ReACT iteration: off (the default) against a tree without it, and on.

    python -m bench.tracing_cost [--before DIR] [--agents N] [--rounds R]

The ReACT loop alone, in a process of its own: an instant scripted model, the
`calculate` tool, the in-memory store and event bus, so the figure is the loop's
own CPU per iteration and nothing else can hide a difference (a real worker adds
~1.5 ms of database write per iteration: bench.overhead). Each agent makes three
tool iterations and a final one. Each mode runs in a process of its own, kept for the
whole measure and warmed up first; the processes take turns running a batch of agents
(in the opposite order every other round), so a machine whose speed wanders (a shared
one) slows them alike, and each mode's CPU per iteration is compared with `before`'s
batch by batch (the median of the differences). The modes:

- `before`: the loop of another source tree (`--before`, e.g. `git worktree add
  /tmp/before main`), which has no tracing at all;
- `off`: this tree without OTEL_EXPORTER_OTLP_ENDPOINT;
- `on`: this tree with it, spans exported by the batch processor to a local OTLP
  sink (an HTTP server that accepts anything), flushed before the clock stops.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = [
    "THOUGHT: first\nACTION: calculate\nINPUT: 12 * 7",
    "THOUGHT: second\nACTION: calculate\nINPUT: 84 + 1",
    "THOUGHT: third\nACTION: calculate\nINPUT: 85 / 5",
    "THOUGHT: done\nFINAL_ANSWER: 17",
]

# Run in the child, with the tree under test first on sys.path.
CHILD = r"""
import json, sys, tempfile, time, uuid
from jarvis_agents.config import Settings
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent
from jarvis_agents.llm.scripted import ScriptedChatModel, by_turn
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry

agents, endpoint, script = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
env = {"JARVIS_DATA_DIR": tempfile.mkdtemp()}
if endpoint:
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
settings = Settings.from_env(env)
model, tools, store = ScriptedChatModel(by_turn(script)), ToolRegistry([CalculateTool()], settings=settings), MemoryStore()
executor = Executor(store=store, model=model, tools=tools, events=MemoryEventBus(),
                    limits=Limits(step_timeout_s=30, total_timeout_s=600))
flush = lambda: None
if endpoint:
    from jarvis_agents import tracing
    from jarvis_agents.llm.router import split_model
    tracing.configure(settings, service="bench")
    executor = tracing.traced_executor(Executor(
        store=store, model=tracing.traced_model(model, provider_of=split_model),
        tools=tracing.traced_tools(tools), events=MemoryEventBus(),
        limits=Limits(step_timeout_s=30, total_timeout_s=600)))
    flush = tracing.flush

def run(n):
    for _ in range(n):
        agent = Agent.new(user_id=uuid.uuid4(), goal="what is 12 * 7 + 1, over 5?", model="m", max_steps=10)
        assert executor.run(store.add(agent.with_running(attempt=1))).final_answer == "17"

run(max(agents, 50))  # warm-up
flush()
for line in sys.stdin:  # one batch per line
    cpu = time.process_time()
    run(agents)
    flush()  # the export's CPU (the batch processor's thread) counts
    print(json.dumps({"cpu_us": (time.process_time() - cpu) / (agents * len(script)) * 1e6}), flush=True)
"""


class _Sink(BaseHTTPRequestHandler):
    """Takes any OTLP/HTTP export and answers 200 with an empty response."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def start(tree: Path, *, agents: int, endpoint: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(agents), endpoint, json.dumps(SCRIPT)],
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, cwd=tree,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def batch(child: subprocess.Popen[str]) -> float:
    """CPU µs per iteration of one batch in `child`."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("run\n")
    child.stdin.flush()
    line = child.stdout.readline()
    if not line:
        raise RuntimeError(f"the bench process exited with code {child.wait()}")
    return float(json.loads(line)["cpu_us"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a source tree without tracing, for the A/B")
    parser.add_argument("--agents", type=int, default=100, help="agents per batch")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    modes = {"off": (ROOT, ""), "on": (ROOT, endpoint)}
    if args.before:
        modes = {"before": (args.before.resolve(), ""), **modes}
    children = {mode: start(tree, agents=args.agents, endpoint=url) for mode, (tree, url) in modes.items()}
    figures: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        for round_ in range(args.rounds):
            order = list(children.items())
            for mode, child in order[::-1] if round_ % 2 else order:  # neither always first
                figures[mode].append(batch(child))
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=30)
        sink.shutdown()
    print(f"CPU per ReACT iteration: {args.rounds} rounds of {args.agents} agents x "
          f"{len(SCRIPT)} iterations per mode")
    print(f"{'mode':<8} {'median µs':>10} {'min µs':>8} {'vs before, median of pairs':>28}")
    for mode, runs in figures.items():
        paired = ""
        if "before" in figures and mode != "before":
            delta = statistics.median(b - a for a, b in zip(figures["before"], runs, strict=True))
            paired = f"{delta:+.2f} µs"
        print(f"{mode:<8} {statistics.median(runs):>10.1f} {min(runs):>8.1f} {paired:>28}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
