"""`python -m bench.stack_ab REF`: the whole system of this tree against REF's, in turns.

Issue 19 asks that the per-step overhead one agent at a time stay within 10 % of the
figure before it (`a074e00`), measured in the same session. This measures exactly
that figure, as `make bench` does (bench/overhead.py, bench/step_overheads.py): the
model server's clocks between one reply and the next request, agents streamed over
SSE one at a time. But it runs two complete systems side by side, each from its own
tree and virtualenv (REF's checked out under bench/.trees, as `bench.tree_ab` does):
its API, one worker process, a database and a Redis of its own, one instant model
server between them. They take turns, a batch of agents each, the order swapped
every pair, so a machine whose speed drifts slows both alike; the report gives each
side's median and the median of the per-pair ratios, with each half of the pairs.
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bench import driver
from bench.clients import stream_one
from bench.processes import ROOT, StartupError
from bench.stack import ModelServer, Stack, Tree
from bench.stats import percentile
from bench.step_overheads import step_overheads
from bench.tree_ab import Side, checkout, main_of, ratio_line

TOOL_CALLS = 3  # as the bench's one-at-a-time phase: 3 `calculate` calls, then the answer
WARM_UP = 5  # agents per side before the first measured turn
LISTENER_WAIT_S = 5.0  # for the last agent's COMPLETED to reach the status listener


class System:
    """One side: a tree's stack, its user, its worker and a status listener."""

    def __init__(self, side: Side, stack: Stack, model: ModelServer) -> None:
        self.side, self.stack = side, stack
        self.api_key = _create_user(stack, f"ab-{secrets.token_hex(3)}")
        stack.start_worker(model)
        self.listener = driver.StatusListener(stack.redis)
        self.turns: list[dict[str, float]] = []

    def turn(self, model: ModelServer, agents: int, tag: str) -> dict[str, float]:
        """`agents` agents one after another, streamed; their overhead p50 and more."""
        model.calls(clear=True)
        timings = [stream_one(self.stack.api_url, self.api_key, driver.goal(f"{tag}-{i}"))
                   for i in range(agents)]
        ids = [uuid.UUID(t.agent_id) for t in timings]
        deadline = time.monotonic() + LISTENER_WAIT_S
        while not self.listener.all_ended({str(i) for i in ids}) and time.monotonic() < deadline:
            time.sleep(0.01)
        rows = driver.agent_rows(self.stack, ids)
        if any(row.status != "COMPLETED" for row in rows):
            raise RuntimeError(f"{self.side.name}: an agent did not complete")
        samples = step_overheads(rows, driver.step_rows(self.stack, ids), model.calls(clear=True),
                                 self.listener, TOOL_CALLS)["samples"]
        return {"overhead_p50_ms": percentile(samples, 50) * 1000,
                "overhead_p99_ms": percentile(samples, 99) * 1000,
                "first_event_p50_ms": percentile([t.first_think_s for t in timings], 50) * 1000}


def _create_user(stack: Stack, name: str) -> str:
    """A user made by the tree's own CLI (its schema may not be ours); its API key."""
    made = subprocess.run(
        [stack.tree.python, "-m", "jarvis_agents.cli", "users", "create", name],
        env=stack.env(), cwd=stack.tree.root, check=False, capture_output=True, text=True,
        timeout=120)
    if made.returncode != 0:
        raise StartupError(f"users create failed: {made.stderr.strip()[-500:]}")
    return made.stdout.strip().splitlines()[-1]


def run(ref: str, pairs: int, agents: int, log_dir: Path) -> str:
    sides = (Side("this tree", ROOT, Path(sys.executable)), checkout(ref))
    with ExitStack() as running:
        stacks = [running.enter_context(Stack(log_dir=log_dir / f"side-{n}",
                                              tree=Tree(side.root, str(side.python))))
                  for n, side in enumerate(sides)]
        model = stacks[0].start_model(latency_s=0.0, tool_calls=TOOL_CALLS)
        systems = [System(side, stack, model) for side, stack in zip(sides, stacks, strict=True)]
        try:
            for n, system in enumerate(systems):
                system.turn(model, WARM_UP, f"warm{n}")
            for pair in range(pairs):
                for n, system in (list(enumerate(systems)) if pair % 2 == 0
                                  else list(enumerate(systems))[::-1]):
                    system.turns.append(system.turn(model, agents, f"p{pair}s{n}"))
                print(f"  pair {pair + 1} of {pairs}: per-step p50 "
                      f"{systems[0].turns[-1]['overhead_p50_ms']:.2f} against "
                      f"{systems[1].turns[-1]['overhead_p50_ms']:.2f} ms", flush=True)
        finally:
            for system in systems:
                system.listener.close()
    return report(systems, pairs, agents)


def report(systems: Sequence[System], pairs: int, agents: int) -> str:
    this, other = systems
    lines = [
        (f"{pairs} pairs of turns of {agents} agents one at a time over SSE, this tree against "
        f"{other.side.name}; ms, medians of the turns; ratio = the median of the per-pair "
        "ratios (first half / second half)"),
        "",
        f"| figure | this tree | {other.side.name} | ratio | halves |",
        "|---|---|---|---|---|",
    ]
    for key, label in (("overhead_p50_ms", "per-step overhead p50"),
                       ("overhead_p99_ms", "per-step overhead p99"),
                       ("first_event_p50_ms", "create → first event p50")):
        lines.append(ratio_line(label, [turn[key] for turn in this.turns],
                                [turn[key] for turn in other.turns], shown=".2f"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stack_ab",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the git commit (branch, tag) to measure this tree "
                                    "against; '.' for this tree again")
    parser.add_argument("--pairs", type=int, default=12, help="pairs of turns (default 12)")
    parser.add_argument("--agents", type=int, default=40,
                        help="agents per turn, one at a time (default 40)")
    args = parser.parse_args(argv)
    return main_of("stack-ab", lambda log_dir: run(args.ref, args.pairs, args.agents, log_dir))


if __name__ == "__main__":
    sys.exit(main())
