"""Section 1 of BENCHMARKS.md, the orchestration overhead: create latency against its
floors, per-step overhead and its parts, throughput per number of worker processes,
and native mode beside text mode."""

from __future__ import annotations

from typing import Any

from bench.figures import by_workers, cell, med, num, processes
from bench.thread_turns import THREAD_TURNS


def _create_floor_rows(
    o: dict[str, Any], cr: list[dict[str, Any]], how: str, *, suffix: str = ""
) -> list[str]:
    """The create floors of one way of creating (`how`, its results' key `suffix`): on
    our server, and threaded."""
    rows: list[str] = []
    for key, server in (
        ("create_floor", "same server"),
        ("create_floor_threaded", "gunicorn's threaded worker instead"),
    ):
        floor = o.get(key + suffix)
        if not floor:
            continue
        rows += [
            (
                f"| create floor p50 / p90 / p99, {how}: the same clients against a minimal "
                "Flask view (`bench/create_floor.py`: one INSERT, one `send_task`, "
                f"{server}, nothing else) | {cell(floor, 'p50_ms', 2)} / "
                f"{cell(floor, 'p90_ms', 2)} / {cell(floor, 'p99_ms', 2)} ms "
                f"({cell(floor, 'creates_per_s', 0)}/s) |"
            ),
            (
                f"| create ÷ floor ({server}), {how}, p50 / p99 | "
                f"{num(med(cr, 'p50_ms') / med(floor, 'p50_ms'), 2)}× / "
                f"{num(med(cr, 'p99_ms') / med(floor, 'p99_ms'), 2)}× |"
            ),
        ]
    return rows


def _paced_create_rows(o: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    paced = o.get("create_paced")
    if not paced:
        return []
    return [
        (
            f"| create latency p50 / p90 / p99, the same clients paced at "
            f"{num(sizes['create_rate_per_s'], 0)}/s in all ({sizes['paced_creates_per_client']} "
            f"creates each, on fixed schedules, from when each was due) | "
            f"{cell(paced, 'p50_ms', 2)} / {cell(paced, 'p90_ms', 2)} / {cell(paced, 'p99_ms', 2)} ms |"
        ),
        (
            "| … of which the clients' own delay in sending, p99 (they share the cores) | "
            f"{cell(paced, 'send_late_p99_ms', 2)} ms |"
        ),
        *_create_floor_rows(o, paced, "paced", suffix="_paced"),
    ]


def _step_floor_rows(o: dict[str, Any]) -> list[str]:
    floor = o.get("step_floor")
    if not floor:
        return []
    return [
        (
            f"| per-step floor p50 / p99: a loop that only asks the model server, persists the "
            f"iteration's 3 rows (one durable INSERT) and publishes their 3 events (one "
            f"PUBLISH round trip), clocked as ours ({floor[0]['n']} iterations) | "
            f"{cell(floor, 'p50_ms', 2)} / {cell(floor, 'p99_ms', 2)} ms |"
        ),
    ]


def _persist_rows(o: dict[str, Any]) -> list[str]:
    fe, floor = o["first_event"], o.get("step_floor")
    if not any("persist_p50_ms" in run for run in fe):
        return []
    rows = [
        (
            "| … of it, persist + publish (what the target names), p50 / p99: an iteration's "
            "last row built → its event seen by a subscriber | "
            f"{cell(fe, 'persist_p50_ms', 2)} / {cell(fe, 'persist_p99_ms', 2)} ms |"
        ),
    ]
    if floor and any("persist_p50_ms" in run for run in floor):
        rows.append(
            "| … the floor's, the same way (its INSERT and PUBLISH) | "
            f"{cell(floor, 'persist_p50_ms', 2)} / {cell(floor, 'persist_p99_ms', 2)} ms |"
        )
    return rows


def _thread_rows(o: dict[str, Any]) -> list[str]:
    """A follow-up in a thread of THREAD_TURNS earlier turns, one at a time (issue 22)."""
    th = o.get("first_event_thread")
    if not th:
        return []
    return [(
        f"| per-step overhead p50 / p99, one follow-up at a time in a thread of "
        f"{THREAD_TURNS} earlier turns | {cell(th, 'overhead_p50_ms', 2)} / "
        f"{cell(th, 'overhead_p99_ms', 2)} ms |"
    )]


def section(o: dict[str, Any]) -> list[str]:
    """Section 1 of BENCHMARKS.md: create latency, per-step overhead, throughput."""
    cr, fe = o["create"], o["first_event"]
    sizes, threads = o["sizes"], o["worker_concurrency"]
    settings = by_workers(o)
    on = " and on ".join(processes(n) for n, _ in settings)
    rows = [
        "## 1. Orchestration overhead (instant model)",
        "",
        (
            f"{sizes['agents']} agents × 4 planning calls + 3 `calculate` calls, at the default "
            f"concurrency ({threads} threads per worker process). The create and one-at-a-time "
            f"phases run on 1 worker process; the throughput phase, in every run, on {on} in "
            "turn: 1, and one per core, as ops would run `jarvis-agents worker` (one process; "
            "it scales horizontally)."
        ),
        "",
        *([] if not o.get("create_paced") else [(
            "**Create latency**, two ways, from the same 8 client processes. *Back to back*: "
            "each client sends its next create as soon as its last answer came, so the clients "
            "keep the server saturated and p50 ≈ 8 ÷ creates/s: a measure of capacity. *Paced*: "
            "the clients share a fixed offered rate, each on a schedule staggered from the "
            "others', and a create's latency counts from when it was due (a slow answer that "
            "made the next create late is charged to it): the latency a client sees at a "
            "steady load well inside that capacity."
        ), ""]),
        (
            "**Per-step overhead**, measured from outside: the model server clocks each chat "
            "request's arrival (its first line read off the socket, before the server parses "
            "the headers) and the end of its reply; for iterations 1–3 of an agent the "
            "overhead is `arrival(k) − reply end(k−1) − tool duration(k−1)` (the OBSERVE row's "
            "`duration_ms`), for the final iteration `COMPLETED published on Redis − reply "
            "end(3)` (a subscriber in the harness clocks it). It is everything the loop does "
            "between two model calls: read and parse the reply, run the tool (`calculate` runs "
            "inline), commit THINK+ACT+OBSERVE in one write, publish, rebuild the prompt, "
            "send the next request (or commit the completion and publish). 4 samples per agent. "
            "*One at a time* = the agents of the first-event phase, run strictly one after "
            f"another (the unloaded cost); *{sizes['agents']} at once* = the throughput phase, "
            "where the overhead also contains the wait for a CPU and for the GIL behind up to "
            f"{min(threads, sizes['agents']) - 1} other agents in the same process."
        ),
        "",
        (
            "**Floors**, measured in the same run, tell a target that nothing could meet on "
            "this machine from one that ours misses (as the SSE floor does in section 3). "
            "*Create floor*: the same client processes, in turn with our create runs, against "
            "`bench/create_floor.py` — the issue's own \"minimal Flask INSERT + send_task\", "
            "served as ours is (gunicorn, one gevent worker, the same PostgreSQL and Redis), "
            "and the same view on gunicorn's threaded worker (gthread, 16 threads, psycopg2 "
            "blocking in C), to tell what gevent costs a create. "
            "*Per-step floor*: `step_floor` in `bench/step_floor.py`, a ReACT loop cut to what "
            "the target names, one agent at a time from the harness: the same model server "
            "asked over a kept-alive connection, each reply followed by the iteration's three "
            "rows in one durable INSERT into `agent_steps` and their three events in one "
            "Redis PUBLISH round trip, then the next request — no guard, no prompt, no tool, "
            "no threads — clocked like ours (iterations 1–3). Its waits are the ones ours "
            "has, so it pays what this machine charges for them, wake-ups of idle cores "
            "included."
        ),
        "",
        "| metric | value |",
        "|---|---|",
        (
            f"| create latency p50 / p90 / p99, API alone ({cr[0]['clients'] if cr else 8} "
            f"clients × {sizes['creates_per_client']} creates, no worker) | {cell(cr, 'p50_ms', 2)} / "
            f"{cell(cr, 'p90_ms', 2)} / {cell(cr, 'p99_ms', 2)} ms |"
        ),
        f"| creates/s in that phase | {cell(cr, 'creates_per_s', 0)} |",
        *_create_floor_rows(o, cr, "back to back"),
        *_paced_create_rows(o, sizes),
        (
            f"| create → first `think` event, p50 / p99 ({sizes['first_event_samples']} "
            f"streams, one at a time) | {cell(fe, 'p50_ms')} / {cell(fe, 'p99_ms')} ms |"
        ),
        f"| create → `done`, p50 (same streams) | {cell(fe, 'done_p50_ms')} ms |",
        (
            f"| per-step overhead p50 / p99, one agent at a time | {cell(fe, 'overhead_p50_ms', 2)}"
            f" / {cell(fe, 'overhead_p99_ms', 2)} ms |"
        ),
        (
            f"| … its parts, p50: reply → rows built / rows built → tool result (less the tool's "
            f"time) / write THINK+ACT+OBSERVE, publish, prompt, next request arrives / final "
            f"write + COMPLETED published | "
            f"{_parts(fe)} ms |"
        ),
        *_thread_rows(o),
        *_step_floor_rows(o),
        *_persist_rows(o),
        (
            f"| claim → first model request p50, one at a time | "
            f"{cell(fe, 'part_start_p50_ms', 2)} ms |"
        ),
        "",
        (
            f"Throughput, {sizes['agents']} agents created at once. *CPU per agent* of the "
            "workers is summed over all the worker processes."
        ),
        "",
        "| metric | " + " | ".join(processes(n) for n, _ in settings) + " |",
        "|---|" + "---|" * len(settings),
    ]
    throughput: list[tuple[str, Any]] = [
        ("agents/s", lambda tp: cell(tp, "agents_per_s")),
        ("ReACT steps (iterations) /s", lambda tp: cell(tp, "react_steps_per_s")),
        ("step rows persisted /s", lambda tp: cell(tp, "step_rows_per_s")),
        ("makespan", lambda tp: f"{cell(tp, 'makespan_s', 2)} s"),
        (
            "per-step overhead p50 / p99",
            lambda tp: f"{cell(tp, 'overhead_p50_ms', 1)} / {cell(tp, 'overhead_p99_ms', 1)} ms",
        ),
        ("… its parts, p50 (as above)", lambda tp: f"{_parts(tp)} ms"),
        (
            "create latency p50 / p99 while they run",
            lambda tp: (
                f"{cell(tp, 'create_loaded_p50_ms', 1)} / {cell(tp, 'create_loaded_p99_ms', 1)} ms"
            ),
        ),
        (
            "CPU per agent: workers / API / PostgreSQL (all its processes) / Redis / model server",
            lambda tp: (
                f"{cell(tp, 'cpu_ms_per_agent_workers')} / {cell(tp, 'cpu_ms_per_agent_api')} / "
                f"{cell(tp, 'cpu_ms_per_agent_postgres')} / {cell(tp, 'cpu_ms_per_agent_redis')} / "
                f"{cell(tp, 'cpu_ms_per_agent_model')} ms"
            ),
        ),
        (
            "CPU per agent, whole machine (includes the clients and any other load)",
            lambda tp: f"{cell(tp, 'cpu_ms_per_agent_machine')} ms",
        ),
        ("agents completed", lambda tp: f"{cell(tp, 'completed', 0)} of {sizes['agents']}"),
    ]
    for label, show in throughput:
        rows.append(f"| {label} | " + " | ".join(show(tp) for _, tp in settings) + " |")
    return rows + [""] + _native(o)


def _native(o: dict[str, Any]) -> list[str]:
    """The native-mode row beside text mode's, both on 1 worker process."""
    native, text = o.get("throughput_native"), dict(by_workers(o)).get(1)
    if not native or not text:
        return []
    ratio = med(native, "overhead_p50_ms") / med(text, "overhead_p50_ms")
    return [
        (f"Native tool calling (`mode: native`, the model calling `calculate` as a tool), "
         f"{o['sizes']['agents']} agents at once on 1 worker process, beside text mode's:"),
        "",
        "| metric | text (react) | native |",
        "|---|---|---|",
        f"| agents/s | {cell(text, 'agents_per_s')} | {cell(native, 'agents_per_s')} |",
        (f"| per-step overhead p50 / p99 | {cell(text, 'overhead_p50_ms', 1)} / "
         f"{cell(text, 'overhead_p99_ms', 1)} ms | {cell(native, 'overhead_p50_ms', 1)} / "
         f"{cell(native, 'overhead_p99_ms', 1)} ms ({ratio:.2f}× text) |"),
        (f"| CPU per agent, workers | {cell(text, 'cpu_ms_per_agent_workers')} ms | "
         f"{cell(native, 'cpu_ms_per_agent_workers')} ms |"),
        "",
    ]


def _parts(runs: list[dict]) -> str:
    return " / ".join(
        num(med(runs, f"part_{name}_p50_ms"), 2) for name in ("reply", "act", "next", "final")
    )
