"""Live tokens end to end (docs/api.md §6): `?tokens=1` over real SSE, a real worker, the test
model server streaming slowly on either protocol; nothing published when nobody listens."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import private_redis
from tests.support.api_server import CALC_SCRIPT, Event, EventStream, wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # stack

STEP_EVENTS = ["think", "act", "observe", "think", "final"]
MODELS = {"ollama": "test-model", "openai": "openai/test-model"}


class Published:
    """Every message published on the agents' channels, read from Redis itself."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe("jarvis:agent:*")
        self.kinds: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            message = self.pubsub.get_message(timeout=0.1)
            if message is not None and message["type"] == "pmessage":
                self.kinds.append(json.loads(message["data"])["kind"])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.pubsub.close()
        self.client.close()


@pytest.fixture(scope="module")
def stack_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server of the stack's own: `script_calls` counts the whole server's."""
    with private_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def stack_extra_env(stack_model) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The module's stack reaches both of the test server's protocols."""
    return {"OPENAI_BASE_URL": f"{stack_model.url}/v1"}


@pytest.fixture
def published(stack) -> Iterator[Published]:  # type: ignore[no-untyped-def]
    watcher = Published(stack.env["REDIS_URL"])
    yield watcher
    watcher.close()


def script_calls(redis_url: str) -> int:
    """How many scripts Redis has run (a token batch goes out as one)."""
    with redis.Redis.from_url(redis_url) as client:
        stats = client.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def replies_by_step(events: list[Event]) -> dict[int, str]:
    told: dict[int, str] = {}
    for event in events:
        if event.event == "token":
            told[event.data["step"]] = told.get(event.data["step"], "") + event.data["delta"]
    return told


def streamed_with_tokens(stack, *, goal: str, model: str) -> list[Event]:  # type: ignore[no-untyped-def]
    """Every event of a react agent started with `POST /agents/stream?tokens=1`, on an API
    and a worker that reach both of the test server's protocols."""
    api = stack.api
    with api.client(api.user()) as http, EventStream(
        http, "POST", "/api/v1/agents/stream", params={"tokens": "1"},
        json={"goal": goal, "model": model, "mode": "react"},
    ) as stream:
        return stream.rest()


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_tokens_stream_each_reply_before_its_steps(stack, provider):
    fake_ollama = stack.fake
    fake_ollama.responder = fake_ollama.by_turn(CALC_SCRIPT)
    fake_ollama.chunk_delay_s = 0.03  # a word every 30 ms
    events = streamed_with_tokens(stack, goal="What is 1234 * 902?", model=MODELS[provider])
    steps = [e for e in events if e.event != "token"]
    assert [e.event for e in steps] == [*STEP_EVENTS, "done"]
    assert [e.id for e in steps] == ["1", "2", "3", "4", "5", None]
    tokens = [e for e in events if e.event == "token"]
    assert all(e.id is None for e in tokens)
    assert len(tokens) > 4  # written as the model wrote, not in one piece
    assert set(tokens[0].data) == {"agent_id", "step", "delta"}
    assert replies_by_step(events) == dict(enumerate(CALC_SCRIPT))
    for step in (0, 1):  # an iteration's tokens come before its step events
        names = [(e.event, e.data.get("step")) for e in events]
        last_token = max(i for i, n in enumerate(names) if n == ("token", step))
        assert last_token < names.index(("think", step))


def test_no_token_is_published_while_nobody_listens_with_tokens(stack, published):
    fake_ollama, api, redis_url = stack.fake, stack.api, stack.env["REDIS_URL"]
    fake_ollama.responder = fake_ollama.by_turn(CALC_SCRIPT)
    fake_ollama.chunk_delay_s = 0.02
    # Nobody listens: the listeners of the module's earlier tests have gone.
    wait_until(lambda: not redis.Redis.from_url(redis_url).keys("jarvis:tokens:*"), 5)
    scripts_before = script_calls(redis_url)
    with api.client(api.user()) as http:
        # A stream without tokens, and none at all, publish steps only.
        with EventStream(http, "POST", "/api/v1/agents/stream",
                         json={"goal": "What is 1234 * 902?"}) as stream:
            events = stream.rest()
        assert [e.event for e in events] == [*STEP_EVENTS, "done"]
        agent = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"}).json()
        http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 20})
        wait_until(lambda: published.kinds.count("step") >= 10)
        assert "token" not in published.kinds
        keys = redis.Redis.from_url(redis_url).keys("jarvis:tokens:*")
        assert keys == []
        # Nor does the worker send Redis anything for their replies' text.
        assert script_calls(redis_url) == scripts_before

        # With a listener, they are; once it has gone, its registration is too.
        with EventStream(http, "POST", "/api/v1/agents/stream", params={"tokens": "1"},
                         json={"goal": "What is 1234 * 902?"}) as stream:
            assert "token" in [e.event for e in stream.rest()]
        assert "token" in published.kinds
        wait_until(lambda: not redis.Redis.from_url(redis_url).keys("jarvis:tokens:*"), 5)


def test_a_client_that_joins_mid_reply_gets_that_reply_from_its_start(stack):
    fake_ollama, api = stack.fake, stack.api
    reply = " ".join(f"word{i}" for i in range(40))
    fake_ollama.responder = fake_ollama.by_turn([f"THOUGHT: counting\nFINAL_ANSWER: {reply}"])
    fake_ollama.chunk_delay_s = 0.05  # ~2 s for the reply
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "count"}).json()
        assert fake_ollama.wait_for_chunks(10, timeout_s=20)  # the model is mid-reply
        with EventStream(http, "GET", f"/api/v1/agents/{agent['id']}/events",
                         params={"tokens": "1"}) as stream:
            events = stream.rest()
    told = replies_by_step(events)[0]
    # The worker keeps a reply's text until it ends: the deltas heard after the join
    # start with what was written before it, and nothing is missing or repeated.
    assert told == f"THOUGHT: counting\nFINAL_ANSWER: {reply}"
    assert [e.event for e in events if e.event != "token"] == ["think", "final", "done"]


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_reply_retried_after_its_stream_broke_is_told_once(stack, provider):
    fake_ollama = stack.fake
    whole = "THOUGHT: counting\nFINAL_ANSWER: " + " ".join(f"word{i}" for i in range(30))
    fake_ollama.responder = fake_ollama.by_turn([whole])
    fake_ollama.chunk_delay_s = 0.03  # several batches of tokens go out before the cut
    fake_ollama.drop_next(1, after_chunks=12)
    events = streamed_with_tokens(stack, goal="count", model=MODELS[provider])
    assert fake_ollama.call_count == 2  # the reply was asked for again
    assert replies_by_step(events) == {0: whole}  # its start told once, not twice
    assert [e.event for e in events if e.event != "token"] == ["think", "final", "done"]


def test_tokens_must_be_0_or_1(stack):
    api = stack.api
    with api.client(api.user()) as http:
        response = http.get(f"/api/v1/agents/{'0' * 8}-0000-0000-0000-{'0' * 12}/events",
                            params={"tokens": "yes"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_tokens"
