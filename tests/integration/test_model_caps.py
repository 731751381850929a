"""Per-model caps across the cluster and the figures the API reports of the workers
(docs/api.md §10), with real worker processes, PostgreSQL and Redis."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_api_health import scrape
from tests.support.api_server import CALC_SCRIPT, wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]


class Held:
    """A responder that holds every reply until `open` is set, and counts the replies in
    flight."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.now = self.most = self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> str:
        with self._lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        self.open.wait(60)
        with self._lock:
            self.now -= 1
        return "THOUGHT: done\nFINAL_ANSWER: 42"


def test_a_cap_of_2_holds_across_3_worker_processes(api_env, start_api, start_worker):
    import redis

    held = Held()
    with FakeOllama(responder=held, models=["capped", "free"]) as server, \
            redis.Redis.from_url(api_env["REDIS_URL"]) as client:
        env = {**api_env, "OLLAMA_HOST": server.url, "JARVIS_MODEL_CONCURRENCY": "capped=2"}
        # 4 threads each for 12 agents created at once: every process runs some of them.
        workers = [start_worker(env, concurrency=4, wait=False) for _ in range(3)]
        api = start_api(env)
        with api.client(api.user()) as http:
            wait_until(lambda: scrape(http).get("jarvis_workers_alive") == 3, timeout_s=60)
            ids = [http.post("/api/v1/agents", json={"goal": f"g{i}", "model": "capped"}).json()["id"]
                   for i in range(12)]

            def count(name: str) -> float | None:
                return scrape(http).get(f'jarvis_{name}{{model="capped"}}')

            # Two calls at the model, held there; the ten others wait their turn.
            wait_until(lambda: held.now == 2 and client.zcard("jarvis:slots:capped:queue") == 10,
                       timeout_s=60, interval_s=0.2)
            waiting_since = time.monotonic()
            # A call's wait is reported as it starts: the two under way, and no other.
            wait_until(lambda: count("model_wait_seconds_count") == 2, timeout_s=30, interval_s=0.5)
            held_s = time.monotonic() - waiting_since
            held.open.set()

            def ended() -> list[dict[str, Any]] | None:
                agents = [http.get(f"/api/v1/agents/{i}").json() for i in ids]
                return agents if all(a["status"] not in ("PENDING", "RUNNING") for a in agents) else None

            agents = wait_until(ended, timeout_s=60, interval_s=0.3)
            assert {a["status"] for a in agents} == {"COMPLETED"}  # waiting never fails a call
            assert held.calls == 12
            assert held.most == 2  # never above the cap, and the cap was used
            assert all("running agent" in worker.output() for worker in workers)

            # The waits are their own figure, reported by the API for all three workers.
            # A call's wait is counted as it starts, its time as it ends: a flush may
            # come between the two.
            wait_until(lambda: [count("model_wait_seconds_count"), count("planning_seconds_count")]
                       == [12, 12], timeout_s=30, interval_s=0.5)
            # Each of the ten waited, at least, while the test held the two in flight.
            assert count("model_wait_seconds_sum") >= 10 * held_s  # type: ignore[operator]


def test_metrics_report_what_the_workers_did(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT * 3)
    start_worker({**api_env, "JARVIS_MODEL": "test-model"}, concurrency=5, models="test-model")
    api = start_api(api_env)
    with api.client(api.user()) as http:
        ids = [http.post("/api/v1/agents", json={"goal": f"g{i}", "model": "test-model"}).json()["id"]
               for i in range(3)]
        wait_until(lambda: all(http.get(f"/api/v1/agents/{i}").json()["status"] == "COMPLETED"
                               for i in ids), timeout_s=30, interval_s=0.3)

        def reported() -> dict[str, float] | None:
            found = scrape(http)
            return found if found.get('jarvis_tool_seconds_count{tool="calculate"}') == 3 else None

        samples = wait_until(reported, timeout_s=30, interval_s=0.5)
        text = http.get("/metrics").text
    names = [family.name for family in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))  # valid exposition: no family twice in one scrape
    assert {"jarvis_webhook_deliveries", "jarvis_model_wait_seconds", "jarvis_agents_failed"} <= set(names)
    (running,) = [k for k in samples if k.startswith("jarvis_worker_running{")]  # what each runs
    assert 'models="test-model"' in running
    assert samples['jarvis_planning_seconds_count{model="test-model"}'] == 6  # 2 calls per agent
    assert samples['jarvis_planning_seconds_bucket{le="+Inf",model="test-model"}'] == 6
    assert samples['jarvis_model_tokens_total{direction="input",model="test-model"}'] > 0
    assert samples['jarvis_model_tokens_total{direction="output",model="test-model"}'] > 0
    assert samples["jarvis_workers_alive"] == 1
    assert samples['jarvis_queue_depth{model="test-model"}'] == 0
