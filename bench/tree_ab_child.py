"""One side of `bench.tree_ab`: a worker's real pieces, in process, running one agent per
`run` line on stdin and answering with what it measured.

Run by the side's own Python with its tree first on the path, so it uses only what
every tree since a074e00 has: Settings.from_env, build_worker, Agent.new, the
repository's create_agent and users, the runner's run and start_background. It is not
imported by the rest of bench/.

Per agent it prints one JSON line: the run's wall and process CPU time; the per-step
gaps (from the end of one model call to the start of the next, iterations 1-3: the
reply read into rows, the tool, the step write, the publish, the next prompt) as
wall and thread CPU; and the wall, CPU and count of the executor's calls of its model,
store and event bus. Times in microseconds.

With JARVIS_AB_PROFILE set to a path, the measured runs also run under cProfile (the
agent's own thread), whose stats are written there when the parent says `stop`.
"""

from __future__ import annotations

import cProfile
import json
import os
import resource
import sys
import time
import uuid
from typing import Any

GOAL = "What is 1234 * 902, then 1235 * 902, then 1236 * 902?"


MODEL_CALLS = ("chat", "complete")  # the model's call in a074e00's trees, in later ones


class Clock:
    """What an agent's run spent in each clocked call, and the gaps between model calls."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = {}  # "store.append_steps" -> [wall, cpu, calls]
        self.gaps: list[tuple[float, float]] = []
        self.last: tuple[float, float] | None = None

    def reset(self) -> None:
        self.spent, self.gaps, self.last = {}, [], None


class Clocked:
    """An executor's collaborator (model, store, event bus) whose calls `clock` times."""

    def __init__(self, label: str, inner: Any, clock: Clock) -> None:
        self.label, self.inner, self.clock = label, inner, clock

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found
        clock, key, model = self.clock, f"{self.label}.{name}", name in MODEL_CALLS

        def call(*args: Any, **kwargs: Any) -> Any:
            start = (time.perf_counter(), time.thread_time())
            if model and clock.last is not None:
                clock.gaps.append((start[0] - clock.last[0], start[1] - clock.last[1]))
            try:
                return found(*args, **kwargs)
            finally:
                end = (time.perf_counter(), time.thread_time())
                spent = clock.spent.setdefault("model.call" if model else key, [0.0, 0.0, 0])
                spent[0] += end[0] - start[0]
                spent[1] += end[1] - start[1]
                spent[2] += 1
                if model:
                    clock.last = end

        return call


def main() -> None:
    from jarvis_agents.components import build_worker
    from jarvis_agents.config import Settings
    from jarvis_agents.lifecycle import Agent

    database_url, redis_url, model_url, data_dir = sys.argv[1:5]
    settings = Settings.from_env({"DATABASE_URL": database_url, "REDIS_URL": redis_url,
                                  "OLLAMA_HOST": model_url, "JARVIS_DATA_DIR": data_dir})

    class Dispatcher:  # nothing is queued: the agents are run here, one at a time
        def enqueue(self, *args: Any, **kwargs: Any) -> None: ...
        def revoke(self, *args: Any, **kwargs: Any) -> None: ...
        def notify(self, *args: Any, **kwargs: Any) -> None: ...

    worker = build_worker(settings, Dispatcher())
    runner, repository = worker.runner, worker.repository
    executor, clock = runner.executor, Clock()
    for label in ("model", "store", "events"):
        setattr(executor, label, Clocked(label, getattr(executor, label), clock))
    # The cancel listener, as in a worker: while it is connected no iteration reads the
    # agent's status from the database.
    runner.start_background(redis_client=worker.redis, sweep=False)
    users = getattr(repository, "users", None)
    user, _ = (users.create if users else repository.create_user)(f"ab-{uuid.uuid4().hex[:8]}")

    def new_agent() -> uuid.UUID:
        agent, _ = repository.create_agent(
            Agent.new(user_id=user.id, goal=GOAL, model="llama3.2", max_steps=10))
        return agent.id

    for _ in range(10):  # warm: connections, prepared statements, the model's mode
        runner.run(new_agent(), task_id="warm")
    time.sleep(1.0)  # the listener connected
    agent_id = new_agent()
    profile_path = os.environ.get("JARVIS_AB_PROFILE")
    profile = cProfile.Profile() if profile_path else None
    print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        clock.reset()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        began, cpu = time.perf_counter(), usage.ru_utime + usage.ru_stime
        if profile is not None:
            profile.runcall(runner.run, agent_id, task_id="ab")
        else:
            runner.run(agent_id, task_id="ab")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        wall, cpu = time.perf_counter() - began, usage.ru_utime + usage.ru_stime - cpu
        status = repository.get(agent_id).status.value
        print(json.dumps({
            "status": status, "wall": wall * 1e6, "cpu": cpu * 1e6,
            "gaps": [[w * 1e6, c * 1e6] for w, c in clock.gaps],
            "spent": {k: [w * 1e6, c * 1e6, n] for k, (w, c, n) in clock.spent.items()},
        }), flush=True)
        agent_id = new_agent()
    if profile is not None:
        profile.dump_stats(profile_path)
    os._exit(0)  # the worker's threads are daemons with nothing to flush


if __name__ == "__main__":
    main()
