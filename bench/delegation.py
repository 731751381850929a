"""Agents that call agents (`python -m bench.delegation`): the round trip of a call, and a fan-out.

One stack (bench/stack.py: PostgreSQL, a private Redis, the API) and one worker process.
The model is the test suite's scripted team (tests/support/delegation_team.py) on the
demo's model server, in this process, speaking native tool calling: a `boss` asks its
delegate `researcher` in one reply, the researcher answers at once, the boss answers.

1. Round trip, an instant model. A caller's round-trip overhead is the time from its ACT
   step to its resume (the OBSERVE of the call, written by the attempt that resumed it)
   minus its child's own run (started → completed): the child's create and queue, its end
   waking the caller, the caller's queue and claim. First `--baseline` bosses one at a
   time, against one agent's create → first streamed event (`POST /api/v1/agents/stream`,
   one at a time); then `--callers` bosses created at once, each delegating to one child:
   agents per second count callers and children (from the first create to the last
   boss's end), and the overhead is compared with the same callers' create → first step,
   under the same load.
2. Fan-out, a `--latency` s model: `--fanout-callers` bosses each asking `--children` in one
   reply. The ideal makespan is one child's run plus the boss's two iterations: three
   model calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.environment import load_average
from bench.stack import Stack
from bench.stats import percentile
from jarvis_agents.demo.server import ModelServer
from jarvis_agents.lifecycle import AgentStatus, StepType
from tests.support.delegation_team import Team, role


@dataclass(frozen=True)
class Model:
    """What Stack.start_worker needs of a model server: where it is."""

    url: str


def team_assistants(http: httpx.Client) -> None:
    for name, delegates in (("researcher", []), ("boss", ["researcher"])):
        made = http.post("/api/v1/assistants", json={
            "name": name, "description": f"The {name}.", "instructions": role(name),
            "delegates": delegates, "mode": "native"})
        made.raise_for_status()


def create_bosses(http_for: Any, count: int) -> list[uuid.UUID]:
    def create(i: int) -> uuid.UUID:
        created = http_for().post("/api/v1/agents", json={"goal": f"Question {i}",
                                                          "assistant": "boss"})
        created.raise_for_status()
        return uuid.UUID(created.json()["id"])

    with ThreadPoolExecutor(min(count, 50)) as pool:
        return list(pool.map(create, range(count)))


def wait_all_ended(repository: Any, ids: list[uuid.UUID], timeout_s: float) -> float:
    """Wait until every agent of `ids` has ended; the time.monotonic() it was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        agents = repository.get_many(ids)
        if len(agents) == len(ids) and all(a.is_terminal for a in agents):
            failed = [a for a in agents if a.status is not AgentStatus.COMPLETED]
            if failed:
                raise SystemExit(f"error: {len(failed)} bosses did not complete: {failed[0].error}")
            return time.monotonic()
        time.sleep(0.05)
    raise SystemExit(f"error: the bosses did not end within {timeout_s} s")


def round_trip_ms(repository: Any, boss_id: uuid.UUID) -> dict[str, float]:
    """The caller's ACT → resume, minus its child's own run, in ms (`overhead`), and its
    parts: the ACT to the child's row, the child's queue, its end to the caller's resume."""
    steps = repository.steps_after(boss_id)
    act = next(s for s in steps if s.type is StepType.ACT)
    observe = next(s for s in steps if s.type is StepType.OBSERVE)
    [child] = repository.delegation.children(boss_id)

    def ms(later: Any, earlier: Any) -> float:
        return (later - earlier).total_seconds() * 1000

    boss = repository.get(boss_id)
    return {"overhead": ms(observe.created_at, act.created_at) - ms(child.completed_at, child.started_at),
            "create_to_first_step": ms(steps[0].created_at, boss.created_at),
            "act_to_child": ms(child.created_at, act.created_at),
            "child_queue": ms(child.started_at, child.created_at),
            "end_to_resume": ms(observe.created_at, child.completed_at)}


def round_trip(repository: Any, bosses: list[uuid.UUID]) -> list[dict[str, float]]:
    wait_all_ended(repository, bosses, 60)
    return [round_trip_ms(repository, boss) for boss in bosses]


def median(trips: list[dict[str, float]], part: str) -> float:
    return statistics.median(trip[part] for trip in trips)


def summary(values: list[float], name: str) -> dict[str, float]:
    return {f"{name}_ms_p50": statistics.median(values), f"{name}_ms_p99": percentile(values, 99)}


def fanout_parts(repository: Any, bosses: list[uuid.UUID]) -> dict[str, float]:
    """Where a fan-out's time went, each phase's latest moment from the first create (s):
    the bosses' calls written, their children started and ended, the bosses resumed, ended."""
    agents = repository.get_many(bosses)
    first = min(a.created_at for a in agents)
    kids = [c for boss in bosses for c in repository.delegation.children(boss)]
    steps = {boss: repository.steps_after(boss) for boss in bosses}

    def last(moments: Any) -> float:
        return max((m - first).total_seconds() for m in moments)

    return {
        "calls_written": last(s.created_at for rows in steps.values() for s in rows
                              if s.type is StepType.ACT),
        "children_started": last(c.started_at for c in kids),
        "children_ended": last(c.completed_at for c in kids),
        "bosses_resumed": last(s.created_at for rows in steps.values() for s in rows
                               if s.type is StepType.OBSERVE),
        "bosses_ended": last(a.completed_at for a in agents),
    }


def first_event_ms(http: httpx.Client) -> float:
    """One agent's create → its first streamed event (a plain agent of the default assistant)."""
    began = time.perf_counter()
    with http.stream("POST", "/api/v1/agents/stream", json={"goal": "What is 6 * 7?"}) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                return (time.perf_counter() - began) * 1000
    raise SystemExit("error: a stream ended without an event")


def run(*, callers: int, fanout_callers: int, children: int, latency_s: float,
        baseline: int, fanout_workers: int = 1) -> dict[str, Any]:
    from jarvis_agents.store import repository_for

    results: dict[str, Any] = {"load_average_before": load_average()}
    with Stack(log_dir=Path(tempfile.mkdtemp(prefix="bench-delegation-"))) as stack:
        team = Team()
        model = ModelServer(responder=team, latency_s=0.0)
        model.default_capabilities = ["completion", "tools"]
        model.start()
        try:
            stack.start_worker(Model(model.url))  # type: ignore[arg-type]
            _, key = stack.create_user("bench-delegation")
            repository = repository_for(stack.engine)
            with httpx.Client(base_url=stack.api_url, timeout=120,
                              headers={"Authorization": f"Bearer {key}"}) as http:
                team_assistants(http)
                for _ in range(5):  # warm up: connections, caches, imports
                    first_event_ms(http)
                wait_all_ended(repository, create_bosses(lambda: http, 5), 60)

                one_by_one = [round_trip(repository, create_bosses(lambda: http, 1))[0]
                              for _ in range(baseline)]
                firsts = [first_event_ms(http) for _ in range(baseline)]
                began = time.monotonic()
                bosses = create_bosses(lambda: http, callers)
                ended = wait_all_ended(repository, bosses, 600)
                trips = [round_trip_ms(repository, boss) for boss in bosses]
                results["one_at_a_time"] = {
                    "callers": baseline, **summary([t["overhead"] for t in one_by_one], "overhead"),
                    **summary(firsts, "create_to_first_event"),
                    "ratio_p50": median(one_by_one, "overhead") / statistics.median(firsts),
                }
                results["round_trip"] = {
                    "callers": callers, "agents_per_s": 2 * callers / (ended - began),
                    **summary([t["overhead"] for t in trips], "overhead"),
                    **summary([t["create_to_first_step"] for t in trips], "create_to_first_step"),
                    "ratio_p50": median(trips, "overhead") / median(trips, "create_to_first_step"),
                    "parts_ms_p50": {part: median(trips, part) for part in
                                     ("act_to_child", "child_queue", "end_to_resume")},
                }

                for extra in range(1, fanout_workers):  # the fan-out may have more processes
                    stack.start_worker(Model(model.url), name=f"worker-{extra + 1}")  # type: ignore[arg-type]
                model.latency_s = latency_s
                team.questions = tuple(f"part {i}" for i in range(children))
                began = time.monotonic()
                bosses = create_bosses(lambda: http, fanout_callers)
                ended = wait_all_ended(repository, bosses, 600)
                ideal = 3 * latency_s
                results["fanout"] = {
                    "callers": fanout_callers, "children": children, "latency_s": latency_s,
                    "worker_processes": fanout_workers, "makespan_s": ended - began, "ideal_s": ideal,
                    "ratio": (ended - began) / ideal,
                    "parts_s_max": fanout_parts(repository, bosses),
                }
        finally:
            model.stop()
    results["load_average_after"] = load_average()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.delegation",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=200)
    parser.add_argument("--fanout-callers", type=int, default=50)
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--baseline", type=int, default=30, help="plain creates one at a time")
    parser.add_argument("--fanout-workers", type=int, default=1, help="worker processes of the fan-out")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()
    results = run(callers=options.callers, fanout_callers=options.fanout_callers,
                  children=options.children, latency_s=options.latency,
                  baseline=options.baseline, fanout_workers=options.fanout_workers)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    one, trip, fan = results["one_at_a_time"], results["round_trip"], results["fanout"]
    print(f"load average: {results['load_average_before']} -> {results['load_average_after']}")
    print(f"one at a time ({one['callers']}): round-trip overhead p50 {one['overhead_ms_p50']:.1f} ms, "
          f"p99 {one['overhead_ms_p99']:.1f} ms; create -> first event p50 "
          f"{one['create_to_first_event_ms_p50']:.1f} ms; ratio x{one['ratio_p50']:.2f} (target <= 3)")
    print(f"{trip['callers']} callers at once: {trip['agents_per_s']:.1f} agents/s (callers and "
          f"children); round-trip overhead p50 {trip['overhead_ms_p50']:.1f} ms, p99 "
          f"{trip['overhead_ms_p99']:.1f} ms; a caller's create -> first step p50 "
          f"{trip['create_to_first_step_ms_p50']:.1f} ms; ratio x{trip['ratio_p50']:.2f} (target <= 3)")
    print("  its parts, p50 ms: " + ", ".join(f"{k} {v:.1f}" for k, v in trip["parts_ms_p50"].items()))
    print(f"fan-out: {fan['callers']} x {fan['children']} at {fan['latency_s']:g} s, "
          f"{fan['worker_processes']} worker process(es): makespan "
          f"{fan['makespan_s']:.2f} s vs ideal {fan['ideal_s']:.1f} s = x{fan['ratio']:.2f} "
          f"(target <= 1.5)")
    print("  the latest of each phase, s from the first create: " + ", ".join(
        f"{k} {v:.2f}" for k, v in fan["parts_s_max"].items()))


if __name__ == "__main__":
    main()
