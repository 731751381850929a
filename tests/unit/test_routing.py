"""Routing by model, the sweeper's share of it, the workers' figures and the model cap's
decorator, on fakes (the real Redis and workers: tests/integration/test_routing.py,
test_model_caps.py, test_model_slots.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client.core import HistogramMetricFamily

from jarvis_agents.cluster_metrics import ClusterMetrics, read_families
from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError
from jarvis_agents.llm.base import ChatMessage, ChatReply, ChatRequest, Usage
from jarvis_agents.llm.governed import GovernedModel
from jarvis_agents.routing import (
    DEFAULT_QUEUE,
    WorkerAdvert,
    WorkerPresence,
    model_of,
    parse_models,
    queue_for,
    unserved,
)
from jarvis_agents.runner import AgentRunner


def test_a_queue_per_model_named_after_it() -> None:
    assert queue_for("llama3.2") == "jarvis-agents@llama3.2"
    assert queue_for("openai/gpt-4o") == "jarvis-agents@openai/gpt-4o"
    assert queue_for(None) == DEFAULT_QUEUE
    assert model_of(queue_for("qwen2.5:7b")) == "qwen2.5:7b"
    assert model_of(DEFAULT_QUEUE) is None


def test_models_flag() -> None:
    assert parse_models(None) is None
    assert parse_models(" a, b ,a,, ") == ("a", "b")
    assert parse_models(" , ") == ()


def test_a_model_is_unserved_when_no_live_worker_takes_it() -> None:
    only_a = WorkerAdvert("w1", ("a",), 10, 0)
    assert unserved(["a", "c", "b"], [only_a]) == ["b", "c"]
    assert unserved(["a", "c"], [only_a, WorkerAdvert("w2", None, 10, 0)]) == []
    assert unserved(["a"], []) == ["a"]


def test_model_concurrency_setting() -> None:
    settings = Settings.from_env({"JARVIS_MODEL_CONCURRENCY": "llama3.2=2, openai/gpt-4o=20"})
    assert settings.model_concurrency == (("llama3.2", 2), ("openai/gpt-4o", 20))
    assert Settings.from_env({}).model_concurrency == ()
    for bad in ("llama3.2", "llama3.2=0", "=3", "a=two"):
        with pytest.raises(ConfigError, match="JARVIS_MODEL_CONCURRENCY must be MODEL=N"):
            Settings.from_env({"JARVIS_MODEL_CONCURRENCY": bad})


class Directory:
    """The QueueDirectory as workers see it: listed models and live adverts."""

    prune_every_s = 60.0
    forget_after_s = 120.0

    def __init__(self, models: set[str], workers: list[WorkerAdvert]) -> None:
        self.listed = models
        self.alive = workers
        self.adverts: list[WorkerAdvert] = []
        self.forgotten: list[str] = []

    def models(self) -> set[str]:
        return set(self.listed)

    def workers(self) -> list[WorkerAdvert]:
        return list(self.alive)

    def advertise(self, advert: WorkerAdvert, *, ttl_s: float) -> None:
        self.adverts.append(advert)

    def withdraw(self, name: str) -> None:
        self.alive = [w for w in self.alive if w.name != name]

    def forget(self, model: str) -> None:
        self.forgotten.append(model)

    def prune(self, busy: Any) -> list[str]:
        self.pruned_with = set(busy())
        return []


def presence(directory: Directory, models: tuple[str, ...] | None, subscribed: list[str]) -> WorkerPresence:
    return WorkerPresence(directory, name="w", models=models, concurrency=7, running=lambda: 3,  # type: ignore[arg-type]
                          subscribe=subscribed.append, interval_s=1.0)


def test_a_worker_for_every_model_follows_each_new_models_queue() -> None:
    directory = Directory({"a"}, [])
    subscribed: list[str] = []
    every = presence(directory, None, subscribed)
    every.follow()
    directory.listed |= {"b", "c"}
    every.follow()
    every.follow()
    assert subscribed == [queue_for("a"), queue_for("b"), queue_for("c")]  # each once


def test_a_worker_for_every_model_drops_a_model_unlisted_for_long_enough() -> None:
    directory = Directory({"a", "b", "c"}, [])
    subscribed: list[str] = []
    dropped: list[str] = []
    forgotten: list[str] = []
    clock = [0.0]
    every = WorkerPresence(directory, name="w", models=None, concurrency=7,  # type: ignore[arg-type]
                           running=lambda: 0, subscribe=subscribed.append, interval_s=1.0,
                           unsubscribe=dropped.append, forget=forgotten.append,
                           clock=lambda: clock[0])
    every.follow()
    directory.listed -= {"b", "c"}  # unlisted: b idle; c by a Redis restart, in use
    every.follow()
    clock[0] += 60.0
    directory.listed |= {"c"}  # a prune lists a model in use again within its period
    every.follow()
    clock[0] += 60.0
    every.follow()
    assert (dropped, forgotten, directory.forgotten) == ([queue_for("b")], ["b"], ["b"])
    assert every.subscribed == {"a", "c"}
    directory.listed |= {"b"}  # its next agent lists it again
    every.follow()
    assert subscribed[-1] == queue_for("b") and every.subscribed == {"a", "b", "c"}


def test_a_worker_with_models_follows_nothing_and_advertises_them() -> None:
    directory = Directory({"a", "b"}, [])
    subscribed: list[str] = []
    only_a = presence(directory, ("a",), subscribed)
    only_a.follow()
    only_a.renew()
    assert subscribed == []
    assert directory.adverts == [WorkerAdvert("w", ("a",), 7, 3)]
    assert only_a.ttl_s == 3.0


def test_a_worker_prunes_the_list_of_queues_now_and_then() -> None:
    from tests.support.api_server import wait_until

    directory = Directory({"a"}, [])
    directory.prune_every_s = 0.0
    worker = WorkerPresence(directory, name="w", models=("a",), concurrency=1,  # type: ignore[arg-type]
                            running=lambda: 0, subscribe=lambda queue: None, interval_s=0.05,
                            busy_models=lambda: {"a"})
    worker.start()
    try:
        assert wait_until(lambda: getattr(directory, "pruned_with", None) == {"a"}, timeout_s=5)
    finally:
        worker.stop()


class SweepRepository:
    """What the sweep reads: agents to queue again, and their models."""

    def __init__(self, models: dict[uuid.UUID, str], *, stale: list[uuid.UUID], pending: list[uuid.UUID]) -> None:
        self.models = models
        self.stale = stale
        self.pending = pending

    def requeue_stale_running(self, *, stale_before: Any,
                              handed_back_before: Any) -> list[tuple[uuid.UUID, int, bool]]:
        return [(agent_id, 1, False) for agent_id in self.stale]

    def requeue_pending(self, *, untouched_before: Any) -> list[tuple[uuid.UUID, str]]:
        return [(agent_id, str(agent_id)) for agent_id in self.pending]

    def models_of(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        return {i: self.models[i] for i in ids}

    def waiting_since(self, cutoff: Any) -> list[Any]:  # no agent waits for an approval here
        return []

    @property
    def delegation(self) -> Any:
        return NoCallers()


class NoCallers:
    """No caller waits on its children here, none was cancelled with children left, and
    no remote delegate was called."""

    def ended_waits(self) -> list[Any]:
        return []

    def remote_due(self, **_: Any) -> list[Any]:
        return []

    def cancels_due(self, **_: Any) -> list[Any]:
        return []

    def orphans(self) -> list[Any]:
        return []


def test_the_sweep_sends_again_on_its_models_queue_only_a_message_that_is_gone() -> None:
    from jarvis_agents.dispatch import MemoryDispatcher

    a1, b1, a2, c1 = (uuid.uuid4() for _ in range(4))
    repository = SweepRepository({a1: "a", b1: "b", a2: "a", c1: "c"}, stale=[a1, b1], pending=[a2, c1])
    queues = MemoryDispatcher()
    # b1's resume waits on b's queue (no worker takes b), as a2's message does on a's.
    queues.enqueue(b1, task_id=f"{b1}:2", queue=queue_for("b"))
    queues.enqueue(a2, task_id=str(a2), queue=queue_for("a"))
    queues.enqueue(c1, task_id=str(c1), queue=queue_for("b"))  # on another queue: not c's
    runner = AgentRunner(repository=repository, store=None, executor=None, events=None,  # type: ignore[arg-type]
                         dispatcher=queues, settings=Settings.from_env({}))
    assert runner.sweeper.sweep() == 2
    sent = [(q.task_id, q.queue) for q in queues.queued[3:]]
    assert sent == [(f"{a1}:2", queue_for("a")), (str(c1), queue_for("c"))]
    assert runner.sweeper.sweep() == 0  # each is on its queue now: no copies pile up


class FakeRedis:
    """The hash commands the figures use, with a pipeline that runs them at once."""

    def __init__(self) -> None:
        self.hash: dict[str, float] = {}

    def pipeline(self, transaction: bool = True) -> FakeRedis:
        return self

    def hincrbyfloat(self, key: str, field: str, amount: float) -> None:
        self.hash[field] = self.hash.get(field, 0.0) + amount

    def execute(self) -> list[Any]:
        return []

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return {k.encode(): str(v).encode() for k, v in self.hash.items()}

    def hscan_iter(self, key: str) -> Iterator[tuple[bytes, bytes]]:
        yield from list(self.hgetall(key).items())

    def hdel(self, key: str, *fields: bytes) -> None:
        for field in fields:
            self.hash.pop(field.decode(), None)


def samples(redis: FakeRedis) -> dict[str, float]:
    found = {}
    for family in read_families(redis):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def test_two_workers_figures_add_up_in_one_read() -> None:
    redis = FakeRedis()
    first, second = ClusterMetrics(redis), ClusterMetrics(redis)
    first.observe("jarvis_planning_seconds", "m", seconds=0.3)
    second.observe("jarvis_planning_seconds", "m", seconds=200)
    second.inc("jarvis_model_tokens", "m", "input", amount=12)
    first.inc("jarvis_webhook_deliveries", "delivered")
    first.flush()
    second.flush()
    second.flush()  # nothing new: nothing added twice
    found = samples(redis)
    assert found["jarvis_planning_seconds_count{model=m}"] == 2
    assert found["jarvis_planning_seconds_sum{model=m}"] == pytest.approx(200.3)
    assert found["jarvis_planning_seconds_bucket{le=0.5,model=m}"] == 1
    assert found["jarvis_planning_seconds_bucket{le=120.0,model=m}"] == 1  # cumulative
    assert found["jarvis_planning_seconds_bucket{le=+Inf,model=m}"] == 2
    assert found["jarvis_model_tokens_total{direction=input,model=m}"] == 12
    assert found["jarvis_webhook_deliveries_total{outcome=delivered}"] == 1
    assert any(isinstance(f, HistogramMetricFamily) for f in read_families(redis))


def test_a_failed_flush_keeps_the_figures_for_the_next() -> None:
    class Down(FakeRedis):
        def execute(self) -> list[Any]:
            raise ConnectionError("Redis is down")

    metrics = ClusterMetrics(Down())
    metrics.inc("jarvis_webhook_deliveries", "failed")
    metrics.flush()
    working = FakeRedis()
    metrics.redis = working
    metrics.flush()
    assert samples(working)["jarvis_webhook_deliveries_total{outcome=failed}"] == 1


class Slots:
    """ModelSlots as the decorator uses it: the cap of "capped" is 1, its wait 5 s."""

    def cap(self, model: str) -> int | None:
        return 1 if model == "capped" else None

    @contextmanager
    def slot(self, model: str, *, should_stop: Any) -> Iterator[float]:
        yield 5.0


class Model:
    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def complete(self, request: ChatRequest, *, deadline: float, should_stop: Any, on_delta: Any = None) -> ChatReply:
        self.deadlines.append(deadline)
        return ChatReply("FINAL_ANSWER: 1", request.model, usage=Usage(7, 3))


def test_a_wait_for_a_slot_moves_the_deadline_and_is_its_own_figure() -> None:
    redis, inner = FakeRedis(), Model()
    model = GovernedModel(inner, slots=Slots(), metrics=(metrics := ClusterMetrics(redis)))  # type: ignore[arg-type]
    request = ChatRequest([ChatMessage("user", "hi")], model="capped")
    model.complete(request, deadline=100.0, should_stop=lambda: False)
    model.complete(ChatRequest(request.messages, model="free"), deadline=100.0, should_stop=lambda: False)
    assert inner.deadlines == [105.0, 100.0]  # the wait is not a step timeout
    metrics.flush()
    found = samples(redis)
    assert found["jarvis_model_wait_seconds_count{model=capped}"] == 1
    assert "jarvis_model_wait_seconds_count{model=free}" not in found
    assert found["jarvis_model_tokens_total{direction=output,model=free}"] == 3
    assert found["jarvis_planning_seconds_count{model=capped}"] == 1


def test_a_worker_forgets_every_map_it_keeps_by_model(fake_ollama: Any, tmp_path: Any) -> None:
    """What a worker keeps by model (README, Routing by model and caps) goes when the model
    is forgotten: the mode its agents settled on, what its server said, its series."""
    import time

    from prometheus_client import REGISTRY

    from jarvis_agents.cluster_metrics import ClusterTimings
    from jarvis_agents.events import MemoryEventBus
    from jarvis_agents.executor import Executor, Limits
    from jarvis_agents.lifecycle import Agent, AgentMode
    from jarvis_agents.llm.ollama import OllamaChatModel
    from jarvis_agents.llm.router import ModelRouter
    from jarvis_agents.llm.scripted import ScriptedChatModel
    from jarvis_agents.metrics import PrometheusTimings
    from jarvis_agents.store.memory import MemoryStore
    from jarvis_agents.tools.registry import ToolRegistry

    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    store, tools = MemoryStore(), ToolRegistry([], settings=settings)
    executor = Executor(store=store, model=ScriptedChatModel(["FINAL_ANSWER: 1"] * 2, tools=False),
                        tools=tools, events=MemoryEventBus(),
                        limits=Limits(step_timeout_s=5, total_timeout_s=10))
    for model in ("junk", "kept"):
        agent = Agent.new(user_id=uuid.uuid4(), goal="g", model=model, max_steps=3, mode=AgentMode.AUTO)
        executor.run(store.add(agent.with_running(attempt=1)))
    assert set(executor.settled) == {"junk", "kept"}

    fake_ollama.models = ["junk", "kept"]
    router = ModelRouter(ollama=OllamaChatModel(host=fake_ollama.url))
    for model in ("junk", "kept"):
        router.capabilities(model, deadline=time.monotonic() + 5, should_stop=lambda: False)

    redis = FakeRedis()
    metrics = ClusterMetrics(redis)
    timings = ClusterTimings(PrometheusTimings(), metrics)
    for model in ("junk", "kept"):
        timings.tokens(model, input_tokens=5, output_tokens=3)
        metrics.inc("jarvis_model_tokens", model, "input", amount=5)
    metrics.flush()  # the sums in Redis, then counts not flushed yet
    metrics.observe("jarvis_planning_seconds", "junk", seconds=0.1)

    for forget in (executor.forget, router.forget, timings.forget):
        forget("junk")
    assert set(executor.settled) == {"kept"}
    for model in ("junk", "kept"):  # asked again only of the one forgotten
        router.capabilities(model, deadline=time.monotonic() + 5, should_stop=lambda: False)
    assert fake_ollama.shows == ["junk", "kept", "junk"]
    tokens = {"direction": "input"}
    assert REGISTRY.get_sample_value("jarvis_model_tokens_total", {**tokens, "model": "junk"}) is None
    assert REGISTRY.get_sample_value("jarvis_model_tokens_total", {**tokens, "model": "kept"}) == 5
    metrics.flush()
    assert [name for name in samples(redis) if "junk" in name] == []
    assert samples(redis)['jarvis_model_tokens_total{direction=input,model=kept}'] == 5
    router.close()
    tools.close()
