"""Per-iteration time outside the model and the tool, measured from outside: the model
server's clocks (when each request arrived, when each reply ended), the step rows'
`created_at` (taken by the worker as it builds them) and the status events' arrival
(see bench/overhead.py's docstring for what each part means)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

from bench.driver import AgentRow, StatusListener, StepRow
from bench.model_server import TAG
from bench.stats import percentile


def model_turns(calls: list[tuple]) -> dict[str, dict[int, tuple[float, float]]]:
    """The model server's clocks, by agent tag and turn: (arrived, reply finished)."""
    turns: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for tag, turn, arrived, finished in calls:
        turns[tag][turn] = (arrived, finished)
    return turns


def step_overheads(
    rows: list[AgentRow],
    steps: list[StepRow],
    calls: list[tuple],
    listener: StatusListener,
    tool_calls: int,
) -> dict[str, Any]:
    """Per-iteration time outside the model and the tool (see the module docstring).

    Also `built`: (agent_id, seq, wall clock) of each inline iteration's last row (its
    OBSERVE) when it was built, for what the target itself names, persist + publish +
    cancellation check: from then until that row's event is seen by a subscriber.

    Also split into parts with the rows' `created_at` (taken by the worker as it builds
    them): `reply` = end of the model's reply → the iteration's rows built (the model
    client's tail: reading, parsing); `act` = rows built → tool result, minus the tool's
    own time (an inline tool's bookkeeping); `next` = tool result → next model request
    arrives (the one write of THINK+ACT+OBSERVE, publish, the cancellation check,
    prompt, request) or, for the final iteration, rows built → COMPLETED published.
    """
    turns = model_turns(calls)
    written: dict[tuple[uuid.UUID, int, str], StepRow] = {
        (s.agent_id, s.step, s.type): s for s in steps
    }
    parts: dict[str, list[float]] = {
        "samples": [],
        "start": [],
        "reply": [],
        "act": [],
        "next": [],
        "final": [],
        "built": [],
    }
    for row in rows:
        match = TAG.search(row.goal)
        calls_of = turns.get(match.group(1)) if match else None
        if row.status != "COMPLETED" or not calls_of or len(calls_of) != tool_calls + 1:
            continue
        for k in range(1, tool_calls + 1):
            observe = written.get((row.id, k - 1, "OBSERVE"))
            think = written.get((row.id, k - 1, "THINK"))
            tool_s = (observe.duration_ms or 0) / 1000 if observe else 0.0
            parts["samples"].append(calls_of[k][0] - calls_of[k - 1][1] - tool_s)
            if observe and think:
                built, result = think.created_at.timestamp(), observe.created_at.timestamp()
                parts["reply"].append(built - calls_of[k - 1][1])
                parts["act"].append(result - built - tool_s)
                parts["next"].append(calls_of[k][0] - result)
                parts["built"].append((str(row.id), observe.seq, result))
        completed_seen = listener.get(row.id, "COMPLETED")
        final = written.get((row.id, tool_calls, "THINK"))
        if completed_seen is not None:
            parts["samples"].append(completed_seen - calls_of[tool_calls][1])
            if final is not None:
                parts["reply"].append(final.created_at.timestamp() - calls_of[tool_calls][1])
                parts["final"].append(completed_seen - final.created_at.timestamp())
        running_seen = listener.get(row.id, "RUNNING")
        if running_seen is not None:
            parts["start"].append(calls_of[0][0] - running_seen)
    return parts


def parts(overhead: dict[str, list[float]]) -> dict[str, float]:
    """p50 of each part of the per-step overhead, in ms."""
    return {
        f"part_{name}_p50_ms": percentile(overhead[name], 50) * 1000
        for name in ("reply", "act", "next", "final", "start")
    }
