"""Section 3 of BENCHMARKS.md, SSE fan-out: latency per shape against the floor."""

from __future__ import annotations

from typing import Any

from bench.figures import cell, med, num


def section(f: dict[str, Any]) -> list[str]:
    """Section 3 of BENCHMARKS.md: SSE streams on one API process, and their floor."""
    sizes = f["sizes"]
    rows = [
        "## 3. SSE fan-out (one API process)",
        "",
        (
            f"{sizes['subscribers']} concurrent `GET /api/v1/agents/{{id}}/events` streams on one "
            f"`jarvis-agents api` process (a fresh one per run, warmed with "
            f"{sizes['warmup_streams']} streams), held by {sizes['client_processes']} client "
            "processes. The harness publishes step events on Redis exactly as a worker does "
            "(`RedisEventBus.publish_steps`, seq 1, 2, 3 … per agent) with the publish time in the "
            "event; latency = received − published. It leaves out the worker's commit (~0.3 ms; "
            "scenario 1's first-event time covers the whole path). *Spread*: "
            f"{sizes['spread_agents']} agents × {sizes['subscribers'] // sizes['spread_agents']} "
            f"streams, one event every {sizes['spread_interval_s'] * 1000:g} ms round-robin "
            f"({sizes['spread_rounds']} per agent). *Hot*: 1 agent × {sizes['subscribers']} streams, "
            f"{sizes['hot_events']} events {sizes['hot_interval_s'] * 1000:g} ms apart, each written "
            "to every stream at once. *Floor*: the hot shape without the API — one plain Python "
            "process (`bench/sse_floor.py`) holding the same streams from the same client "
            "processes writes each event's frame, encoded once, to every socket with a "
            "non-blocking `send()` in a tight loop; no server can do less, so hot ÷ floor is "
            "what the API adds. Memory = (RSS of the API worker process with the streams "
            "open and the events delivered − RSS before they opened) / streams."
        ),
        "",
        (
            "| shape | p50 | p90 | p99 | max | events received | streams with every event | "
            "KiB per stream | API RSS before → after |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in ("spread", "hot", "floor"):
        runs = f.get(shape)
        if runs:
            memory = (
                f"{cell(runs, 'kib_per_stream', 1)} | {num(med(runs, 'rss_before_mib'), 0)} → "
                f"{num(med(runs, 'rss_after_mib'), 0)} MiB"
                if shape != "floor"
                else "— | —"
            )
            rows.append(
                f"| {shape} | {cell(runs, 'p50_ms', 2)} ms | {cell(runs, 'p90_ms', 2)} ms | "
                f"{cell(runs, 'p99_ms', 2)} ms | {cell(runs, 'max_ms', 1)} ms | "
                f"{cell(runs, 'events_received', 0)} of {num(med(runs, 'events_expected'), 0)} | "
                f"{cell(runs, 'complete_streams', 0)} of {num(med(runs, 'streams'), 0)} | "
                f"{memory} |"
            )
    floor, hot = f.get("floor"), f.get("hot")
    if floor:
        rows += [
            "",
            (
                f"The floor's send loop takes {cell(floor, 'send_loop_ms', 2)} ms per event "
                f"({num(med(floor, 'send_us_per_stream'), 1)} µs per socket, "
                f"{num(med(floor, 'frame_bytes'), 0)}-byte chunks); the rest of its latency is "
                "the client processes reading, on the same cores."
                + (
                    f" Hot ÷ floor: p50 {num(med(hot, 'p50_ms') / med(floor, 'p50_ms'), 1)}×, "
                    f"p99 {num(med(hot, 'p99_ms') / med(floor, 'p99_ms'), 1)}×."
                    if hot
                    else ""
                )
            ),
        ]
    return rows + [""]
