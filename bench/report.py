"""BENCHMARKS.md from a run's results: targets first, then method and every number.

Each figure is the median over the runs, with the runs' own values in brackets. The
file is rewritten on every run except for the hand-written notes between the
`notes:begin` and `notes:end` markers, which are carried over.
"""

from __future__ import annotations

import re
from typing import Any

from bench import routing, scale, tokens, webhooks
from bench.figures import best_workers, by_workers, cell, med, num, processes
from bench.targets import targets
from bench.thread_turns import THREAD_TURNS

NOTES_BEGIN = "<!-- notes:begin -->"
NOTES_END = "<!-- notes:end -->"
DEFAULT_NOTES = "(Nothing yet: profiles and proposed fixes go here; this part is kept.)"


def kept_notes(previous: str | None) -> str:
    if previous:
        found = re.search(
            re.escape(NOTES_BEGIN) + r"\n(.*?)\n?" + re.escape(NOTES_END), previous, re.DOTALL
        )
        if found and found.group(1).strip():
            return found.group(1).rstrip()
    return DEFAULT_NOTES


# --- the document ----------------------------------------------------------------------------


def render(results: dict[str, Any], *, notes: str) -> str:
    meta = results["meta"]
    out: list[str] = [
        "# Benchmarks",
        "",
        (
            "Written by `python -m bench` (`make bench`), the harness of issue 7: it starts the "
            "real system — PostgreSQL, Redis, `jarvis-agents api`, `jarvis-agents worker`, an "
            "Ollama-protocol model server of a chosen latency — and the peer, runs every scenario "
            "and rewrites this file. Only the notes at the end are written by hand."
        ),
        "",
        f"This run: {meta['started']} UTC, `{meta['command']}`, {meta['duration']}. "
        f"Each figure is the **median of {meta['runs']} runs** with each run's value in "
        "brackets; ratios compare numbers measured in the same invocation."
        + (
            " **Quick mode: tiny sizes, for a smoke test only — not a benchmark.**"
            if meta["quick"]
            else ""
        ),
        "",
        "## Targets (issue 7)",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[f"| {t} | {m} | {v} |" for t, m, v in targets(results)],
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in meta["machine"].items()],
        (
            f"- load average (1/5/15 min) before: {meta['load_before']}, after: {meta['load_after']}."
            " The machine is shared with other work (test suites, browsers); a load average near "
            "or above the core count means the numbers carry that noise."
        ),
        "",
        "## Versions",
        "",
        "| component | version |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in meta["versions"].items()],
        "",
    ]
    out += _method(meta)
    if results.get("overhead"):
        out += _overhead(results["overhead"], meta)
    if results.get("concurrency"):
        out += _concurrency(results["concurrency"])
    if results.get("fanout"):
        out += _fanout(results["fanout"])
    if results.get("webhooks"):
        out += webhooks.section(results["webhooks"])
    if results.get("routing"):
        out += routing.section(results["routing"])
    if results.get("scale"):
        out += scale.section(results["scale"])
    if results.get("tokens"):
        out += tokens.section(results["tokens"])
    if results.get("peer"):
        out += _peer(results)
    out += ["## Notes: profiles, causes, proposed fixes", "", NOTES_BEGIN, notes, NOTES_END, ""]
    return "\n".join(out)


def _method(meta: dict[str, Any]) -> list[str]:
    return [
        "## Method",
        "",
        (
            "- **System under test**: a fresh database `jarvis_bench_<random>` on the local "
            "PostgreSQL (dropped afterwards), a private `redis-server` on a free port (so the test "
            "suite's `FLUSHDB`s on the shared Redis cannot touch it), `jarvis-agents db upgrade`, "
            "one `jarvis-agents api` (gunicorn, one gevent worker), `jarvis-agents worker` "
            "processes, and `python -m bench.model_server` — a real HTTP/1.1 server speaking "
            "Ollama's `/api/chat` (streamed and not, keep-alive) on one asyncio loop, so that "
            "the stand-in for a model server costs little of the cores it shares, answering 3 "
            "`calculate` actions then a FINAL_ANSWER (scenario 1) or 1 then the answer "
            "(scenario 2) after a fixed latency. `JARVIS_MAX_ACTIVE_PER_USER` and "
            "`JARVIS_MAX_STREAMS_PER_USER` are raised to 1,000,000 (the defaults, 20 and 100, "
            "would answer the bursts and the fan-out with 429s); everything else is default "
            "unless a row says otherwise."
        ),
        (
            "- **Clients**: every concurrent HTTP client is its own process (spawned), with one "
            "keep-alive `http.client` connection; 8 of them, one user each, released together "
            "by a barrier. SSE subscribers are raw asyncio sockets (an `asyncio.Protocol` each), "
            "250 per process in 4 processes. All clients share the machine's cores with the "
            "system under test."
        ),
        (
            "- **Timestamps** are wall-clock (`time.time()`, `completed_at` in the database) "
            "on one machine, so they compare across processes."
        ),
        "",
    ]


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


def _overhead(o: dict[str, Any], meta: dict[str, Any]) -> list[str]:
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


def _concurrency(c: dict[str, Any]) -> list[str]:
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


def _fanout(f: dict[str, Any]) -> list[str]:
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


def _peer(results: dict[str, Any]) -> list[str]:
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


def _parts(runs: list[dict]) -> str:
    return " / ".join(
        num(med(runs, f"part_{name}_p50_ms"), 2) for name in ("reply", "act", "next", "final")
    )
