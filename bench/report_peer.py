"""Section 4 of BENCHMARKS.md, the peer: LangGraph's Agent Server on the same scenarios."""

from __future__ import annotations

from typing import Any

from bench.figures import best_workers, cell, med, num, processes


def section(results: dict[str, Any]) -> list[str]:
    """Section 4 of BENCHMARKS.md: ours beside the LangGraph Agent Server."""
    p, o, c = results["peer"], results.get("overhead") or {}, results.get("concurrency") or {}
    rows = ["## 4. The peer: LangGraph Agent Server (`langgraph dev`, in-memory runtime)", ""]
    best = best_workers(o)
    ours_runs = best[1] if best else None
    ours_at = f" ({processes(best[0])})" if best else ""
    if p.get("unavailable"):
        return rows + [f"Not measured: {p['unavailable']}", ""]
    rows += [
        "`bench/peer/graph.py` (`langgraph.json` beside it) is the same ReACT agent as a "
        "`StateGraph`: a model node and a tool node in a loop; the model is a `BaseChatModel` "
        "that waits the same latency (`asyncio.sleep`, its best case) and asks for the same "
        "`calculate` calls. Its model lives in-process — no HTTP round trip, unlike ours, "
        "which talks to a real Ollama-protocol server: an advantage to the peer. Runs are "
        "created with `POST /runs` by the same 8 client processes, completion polled with "
        "`POST /threads/count`, makespan = first create sent → last run's `updated_at`. "
        "Settings: " + "; ".join(f"*{k}*: {v}" for k, v in p["settings"].items()) + ". "
        "In scenario 1 ours is taken at its best setting too, the number of worker processes "
        "with the most agents/s"
        + (f" ({processes(best[0])}; section 1 has each)" if best else "")
        + "; in scenario 2 at the default concurrency, on one worker process.",
        "",
        "| scenario | setting | peer | ours | ours ÷ peer |",
        "|---|---|---|---|---|",
    ]
    ours_tp = med(ours_runs, "agents_per_s")
    for name, runs in p.get("throughput", {}).items():
        theirs = med(runs, "runs_per_s")
        rows.append(
            f"| 1: runs/s ({runs[0]['runs']} runs, instant model) | {name} | "
            f"{cell(runs, 'runs_per_s')} | {num(ours_tp)}{ours_at} | {num(ours_tp / theirs, 2)}× |"
        )
    ours_cr = med(o.get("create"), "p50_ms")
    for name, runs in p.get("throughput", {}).items():
        rows.append(
            f"| 1: create p50 / p99 | {name} | {cell(runs, 'create_p50_ms')} / "
            f"{cell(runs, 'create_p99_ms')} ms | {num(ours_cr, 2)} / "
            f"{num(med(o.get('create'), 'p99_ms'), 2)} ms | |"
        )
    ours_fe = med(o.get("first_event"), "p50_ms")
    for name, runs in p.get("first_event", {}).items():
        theirs = med(runs, "p50_ms")
        rows.append(
            f"| 1: create → first streamed event p50 | {name} | {cell(runs, 'p50_ms', 0)} "
            f"ms | {num(ours_fe)} ms | {num(ours_fe / theirs, 3)}× |"
        )
    ours_io = med(c.get("runs"), "makespan_s")
    for name, runs in p.get("io", {}).items():
        theirs = med(runs, "makespan_s")
        ratio = (
            f"{num(ours_io / theirs, 2)}×"
            if runs[0]["runs"] == c.get("sizes", {}).get("agents")
            else "(different size)"
        )
        rows.append(
            f"| 2: makespan, {runs[0]['runs']} runs × 2 calls × "
            f"{c.get('sizes', {}).get('latency_s', 2):g} s | {name} | "
            f"{cell(runs, 'makespan_s', 2)} s | {num(ours_io, 2)} s | {ratio} |"
        )
    ours_cpu = sum(
        med(ours_runs, f"cpu_ms_per_agent_{part}")
        for part in ("workers", "api", "model", "postgres", "redis")
    )
    for name, runs in p.get("throughput", {}).items():
        theirs = med(runs, "cpu_ms_per_run")
        rows.append(
            f"| 1: CPU per run: its server process / our workers + API + model server + "
            f"PostgreSQL + Redis | {name} | {cell(runs, 'cpu_ms_per_run')} ms | "
            f"{num(ours_cpu)} ms{ours_at} | {num(ours_cpu / theirs, 2)}× |"
        )
    return rows + [""]
