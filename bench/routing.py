"""Scenario 6 — what routing by model and per-model caps cost (issue 23: under 5 % of
agents/s).

The throughput phase of scenario 1 (instant model, 4 planning calls and 3 `calculate`
calls per agent, created at once by the 8 clients) on one worker process, twice per run
in turn: a worker for every model without caps, and a worker started with `--models
llama3.2` under `JARVIS_MODEL_CONCURRENCY=llama3.2=<CAP>`. The cap is far above what the
worker runs at once, so it never makes a call wait: what is measured is what the
semaphore's bookkeeping (two Redis script calls per model call) and the model's own
queue cost, not a cap doing its job. Agents/s counts over the makespan (first create
sent → last `completed_at`); the CPU each half spent per agent (worker, API, PostgreSQL,
Redis and the model server) is the steadier measure.

Approvals (issue 21: they cost nothing to agents that do not use them): on the plain
worker, in turn with its phase (the order swapped on every other run), the same agents
created with `approve_tools` naming a tool they never call (`getTime`); ratio = agents/s
with ÷ without.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from bench import driver
from bench.driver import StatusListener, User
from bench.figures import cell, med, num
from bench.processes import Process
from bench.stack import ModelServer, Stack

MODEL = "llama3.2"  # the stack's JARVIS_MODEL
CAP = 10_000
UNUSED_APPROVAL = {"approve_tools": ["getTime"]}  # the agents call only `calculate`


@dataclass(frozen=True)
class RoutingSizes:
    agents: int = 500
    tool_calls: int = 3
    warmup_agents: int = 20
    timeout_s: float = 300.0


QUICK = RoutingSizes(agents=16, warmup_agents=2, timeout_s=60.0)
HALVES: dict[str, tuple[list[str], dict[str, str]]] = {
    "plain": ([], {}),
    "routed": (["--models", MODEL], {"JARVIS_MODEL_CONCURRENCY": f"{MODEL}={CAP}"}),
}


def run(
    stack: Stack, users: list[User], *, runs: int, sizes: RoutingSizes, log: Any = print,
) -> dict[str, Any]:
    model = stack.start_model(latency_s=0.0, tool_calls=sizes.tool_calls)
    listener = StatusListener(stack.redis)
    results: dict[str, Any] = {"runs": []}
    try:
        for r in range(runs):
            # In turn, and the other way round on odd runs: drift favours neither half.
            order = ("plain", "routed") if r % 2 == 0 else ("routed", "plain")
            found = {half: _half(stack, model, users, listener, half, r, sizes) for half in order}
            plain, routed = found["plain"], found["routed"]
            entry = {
                "plain_agents_per_s": plain["agents_per_s"],
                "routed_agents_per_s": routed["agents_per_s"],
                "ratio": routed["agents_per_s"] / plain["agents_per_s"],
                "plain_cpu_ms_per_agent": plain["cpu_ms_per_agent"],
                "routed_cpu_ms_per_agent": routed["cpu_ms_per_agent"],
                "cpu_ratio": routed["cpu_ms_per_agent"] / plain["cpu_ms_per_agent"],
                "completed": min(plain["completed"], routed["completed"]),
                "approvals_agents_per_s": plain["approvals"]["agents_per_s"],
                "approvals_ratio": plain["approvals"]["agents_per_s"] / plain["agents_per_s"],
                "approvals_cpu_ratio": (plain["approvals"]["cpu_ms_per_agent"]
                                        / plain["cpu_ms_per_agent"]),
            }
            results["runs"].append(entry)
            log(
                f"  scenario 6, run {r + 1}: {entry['plain_agents_per_s']:.1f} agents/s plain, "
                f"{entry['routed_agents_per_s']:.1f} routed and capped ({entry['ratio']:.3f}); "
                f"CPU {entry['plain_cpu_ms_per_agent']:.1f} vs "
                f"{entry['routed_cpu_ms_per_agent']:.1f} ms per agent; with an unused "
                f"approval {entry['approvals_agents_per_s']:.1f} agents/s "
                f"({entry['approvals_ratio']:.3f}, CPU × {entry['approvals_cpu_ratio']:.3f})"
            )
    finally:
        listener.close()
        stack.stop(model.process)
    return results


def _half(
    stack: Stack, model: ModelServer, users: list[User], listener: StatusListener, half: str,
    r: int, sizes: RoutingSizes,
) -> dict[str, Any]:
    args, env = HALVES[half]
    (worker,) = stack.start_workers(model, names=[f"worker-routing-{half}-{r}"], extra_args=args,
                                    extra_env=env)
    processes_now = [worker, model.process]
    try:
        _phase(stack, users, listener, processes_now, sizes.warmup_agents, f"rw{r}{half[0]}", sizes)
        if half != "plain":
            return _phase(stack, users, listener, processes_now, sizes.agents, f"r{r}{half[0]}",
                          sizes)
        # The approvals' A/B on the same worker, in turn.
        found: dict[str, dict[str, Any]] = {}
        for phase in ("plain", "approvals") if r % 2 == 0 else ("approvals", "plain"):
            extra = UNUSED_APPROVAL if phase == "approvals" else None
            found[phase] = _phase(stack, users, listener, processes_now, sizes.agents,
                                  f"r{r}{phase[0]}", sizes, extra=extra)
        return {**found["plain"], "approvals": found["approvals"]}
    finally:
        stack.stop(worker)


def _phase(
    stack: Stack, users: list[User], listener: StatusListener, processes_now: list[Process],
    agents: int, run: str, sizes: RoutingSizes, *, extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    cpu0 = stack.system_cpu_s(processes_now)
    replies = driver.create_agents(stack, users, [f"{run}-{i}" for i in range(agents)],
                                   extra=extra)
    ids = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    driver.wait_terminal(stack, ids, timeout_s=sizes.timeout_s, listener=listener)
    rows = driver.agent_rows(stack, ids)
    completed = [row for row in rows if row.status == "COMPLETED"]
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    return {
        "agents_per_s": len(completed) / (ended - started),
        "completed": len(completed),
        "cpu_ms_per_agent": (stack.system_cpu_s(processes_now) - cpu0) * 1000 / len(ids),
    }


# --- the report ----------------------------------------------------------------------------


def target(w: dict[str, Any]) -> tuple[str, str, bool | None]:
    """The issue's target: (what, the figures, whether it was met; None: not measured)."""
    ratio = med(w["runs"], "ratio")
    measured = (
        f"{num((1 - ratio) * 100, 1)} % ({num(med(w['runs'], 'routed_agents_per_s'))} vs "
        f"{num(med(w['runs'], 'plain_agents_per_s'))} agents/s, ratio {num(ratio, 3)}; CPU "
        f"per agent × {num(med(w['runs'], 'cpu_ratio'), 3)})"
    )
    label = ("`--models` and a per-model cap cost < 5 % of agents/s (1 worker process; "
             "issue 23)")
    return label, measured, None if math.isnan(ratio) else ratio >= 0.95


def approvals_target(w: dict[str, Any]) -> tuple[str, str, bool | None]:
    """Issue 21: approvals cost nothing to agents that do not use them (within noise: 5 %)."""
    runs = [run for run in w["runs"] if "approvals_ratio" in run]
    ratio = med(runs, "approvals_ratio")
    measured = (
        f"{num(med(runs, 'approvals_agents_per_s'))} vs {num(med(runs, 'plain_agents_per_s'))} "
        f"agents/s, ratio {num(ratio, 3)}; CPU per agent × {num(med(runs, 'approvals_cpu_ratio'), 3)}"
    )
    label = ("an `approve_tools` the agent never calls costs < 5 % of agents/s (1 worker "
             "process; issue 21)")
    return label, measured, None if math.isnan(ratio) else ratio >= 0.95


def section(w: dict[str, Any]) -> list[str]:
    sizes, runs = w["sizes"], w["runs"]
    return [
        "## 6. Routing by model and per-model caps",
        "",
        (
            f"{sizes['agents']} agents created at once, as in scenario 1's throughput phase, on "
            "1 worker process: one for every model without caps, then one started with "
            f"`--models {MODEL}` under `JARVIS_MODEL_CONCURRENCY={MODEL}={CAP}` (in turn, the "
            "order swapped on every other run). The cap never binds: this is the cost of the "
            "semaphore's bookkeeping in Redis on every model call, not of waiting. Ratio = "
            "agents/s routed and capped ÷ plain."
        ),
        "",
        "| | plain | routed and capped | ratio |",
        "|---|---|---|---|",
        (
            f"| agents/s | {cell(runs, 'plain_agents_per_s')} | "
            f"{cell(runs, 'routed_agents_per_s')} | {cell(runs, 'ratio', 3)} |"
        ),
        (
            f"| CPU ms per agent (all but the clients) | {cell(runs, 'plain_cpu_ms_per_agent', 2)} "
            f"| {cell(runs, 'routed_cpu_ms_per_agent', 2)} | {cell(runs, 'cpu_ratio', 3)} |"
        ),
        "",
        (
            "Approvals that are never asked for, on the plain worker in turn with its phase: "
            f"the same agents with `\"approve_tools\": {json.dumps(UNUSED_APPROVAL['approve_tools'])}` (they "
            "call only `calculate`). Ratio = with ÷ without."
        ),
        "",
        "| | without | with an unused `approve_tools` | ratio |",
        "|---|---|---|---|",
        (
            f"| agents/s | {cell(runs, 'plain_agents_per_s')} | "
            f"{cell(runs, 'approvals_agents_per_s')} | {cell(runs, 'approvals_ratio', 3)} |"
        ),
        f"| CPU per agent | | | {cell(runs, 'approvals_cpu_ratio', 3)} |",
        "",
    ]
