"""Section 2 of BENCHMARKS.md, I/O-bound concurrency: makespan against the ideal."""

from __future__ import annotations

from typing import Any

from bench.figures import cell


def section(c: dict[str, Any]) -> list[str]:
    """Section 2 of BENCHMARKS.md: slow-model agents on one worker process."""
    sizes, threads = c["sizes"], c["worker_concurrency"]
    setting = (
        f"the default `JARVIS_WORKER_CONCURRENCY` ({threads} threads)"
        if c["setting"] == "default"
        else f"`{c['setting']}`"
    )
    rows = [
        "## 2. I/O-bound concurrency (slow model, one worker process)",
        "",
        (
            f"{sizes['agents']} agents × {sizes['planning_calls']} planning calls × "
            f"{sizes['latency_s']:g} s of model latency on ONE worker process at {setting}; "
            f"ideal makespan {c['ideal_s']:g} s (every agent waits at once, which needs a thread "
            "per agent: "
            + (
                "all of them fit in one wave"
                if threads >= sizes["agents"]
                else f"they take {-(-sizes['agents'] // threads)} waves, so the ideal is out of reach"
            )
            + "). Makespan = first create sent → last `completed_at`. *Worker CPU* = CPU "
            "seconds the worker process used per second of makespan (1.00 = one core busy "
            "throughout: the process is CPU-bound, and the GIL lets it use only one)."
        ),
        "",
        "| setting | makespan | × ideal | completed | all created after | worker CPU | API CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    runs = c["runs"]
    if runs:
        rows.append(
            f"| {c['setting']} ({threads}) | {cell(runs, 'makespan_s', 2)} s | "
            f"{cell(runs, 'vs_ideal', 2)} | {cell(runs, 'completed', 0)} | "
            f"{cell(runs, 'all_created_s', 2)} s | {cell(runs, 'worker_cpu_share', 2)} | "
            f"{cell(runs, 'api_cpu_share', 2)} |"
        )
    return rows + [""]
