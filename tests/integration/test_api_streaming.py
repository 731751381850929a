"""Server-sent events end to end (docs/api.md §4): order, ids, resume, user streams, cancels."""

from __future__ import annotations

import json
import re
import selectors
import socket
import threading
import time
import uuid

import pytest

from jarvis_agents.config import Settings
from jarvis_agents.lifecycle import AgentStatus, Step, StepType, StopReason
from jarvis_agents.store import open_repository
from tests.support.api_server import CALC_SCRIPT, EventStream, wait_until
from tests.support.fake_ollama import FakeOllama

pytestmark = [pytest.mark.integration, pytest.mark.long]
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api, stack

STEP_EVENTS = ["think", "act", "observe", "think", "final"]


def test_post_stream_yields_every_step_then_done(stack):
    stack.fake.responder = FakeOllama.by_turn(CALC_SCRIPT)
    api = stack.api
    with api.client(api.user()) as http, EventStream(
        http, "POST", "/api/v1/agents/stream", json={"goal": "What is 1234 * 902?"}
    ) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["Content-Type"] == "text/event-stream"
        assert stream.response.headers["Cache-Control"] == "no-cache"
        agent_url = stream.response.headers["Location"]
        events = stream.rest()

        assert [e.event for e in events] == [*STEP_EVENTS, "done"]
        assert [e.id for e in events] == ["1", "2", "3", "4", "5", None]
        agent_id = agent_url.rsplit("/", 1)[1]
        for event, seq, step in zip(events, range(1, 6), [0, 0, 0, 1, 1], strict=False):
            assert event.data["agent_id"] == agent_id
            assert event.data["seq"] == seq and event.data["step"] == step
            assert event.data["type"] == event.event
        assert events[1].data["tool"] == "calculate" and events[1].data["content"] == "1234 * 902"
        assert events[2].data["content"] == "1113068"
        assert events[-1].data == {"agent_id": agent_id, "status": "COMPLETED",
                                   "stop_reason": "final_answer"}
        assert http.get(agent_url).json()["status"] == "COMPLETED"


def test_a_client_that_reconnects_with_last_event_id_gets_every_event_once(stack):
    stack.fake.responder = FakeOllama.by_turn(CALC_SCRIPT)
    stack.fake.latency_s = 1.5  # each planning call: the run takes ~3 s
    api = stack.api
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"}).json()
        events_url = f"/api/v1/agents/{agent['id']}/events"

        with EventStream(http, "GET", events_url) as first:
            received = first.until(lambda e: e.event == "act")
        # Hung up mid-run (the model is still planning the second iteration).
        assert http.get(f"/api/v1/agents/{agent['id']}").json()["status"] == "RUNNING"

        with EventStream(http, "GET", events_url,
                         headers={"Last-Event-ID": received[-1].id}) as second:
            received += second.rest()

        assert [e.event for e in received] == [*STEP_EVENTS, "done"]
        assert [e.id for e in received] == ["1", "2", "3", "4", "5", None]
        assert received[-1].data["status"] == "COMPLETED"  # the hang-up cancelled nothing

        # Joining an ended agent replays after the given position, then `done`.
        with EventStream(http, "GET", events_url, params={"after": 3}) as late:
            assert [(e.event, e.id) for e in late.rest()] == [
                ("think", "4"), ("final", "5"), ("done", None)
            ]
        with EventStream(http, "GET", events_url, headers={"Last-Event-ID": "5"},
                         params={"after": 1}) as caught_up:
            assert [e.event for e in caught_up.rest()] == ["done"]


def test_user_stream_shows_status_changes_of_own_agents_only(stack):
    stack.fake.responder = FakeOllama.by_turn(CALC_SCRIPT)
    api = stack.api
    with api.client(api.user()) as alice, api.client(api.user()) as bob, \
            EventStream(alice, "GET", "/api/v1/events") as alice_events, \
            EventStream(bob, "GET", "/api/v1/events") as bob_events:
        assert alice_events.response.headers["Content-Type"] == "text/event-stream"
        mine = alice.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"}).json()["id"]
        seen = alice_events.until(
            lambda e: e.data["agent_id"] == mine and e.data["status"] == "COMPLETED"
        )
        assert {e.event for e in seen} == {"status"}
        assert [e.data["status"] for e in seen] == ["PENDING", "RUNNING", "COMPLETED"]
        assert set(seen[-1].data) == {"agent_id", "status", "stop_reason", "step_count", "updated_at"}
        assert seen[-1].data["stop_reason"] == "final_answer" and seen[-1].data["step_count"] == 2

        # Bob's stream, read up to his own agent's first change, holds nothing of Alice's.
        his = bob.post("/api/v1/agents", json={"goal": "bob's"}).json()["id"]
        bobs = bob_events.until(lambda e: e.data["agent_id"] == his)
        assert [e.data["agent_id"] for e in bobs] == [his]


def test_cancelling_a_running_agent_mid_reply(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    fake_ollama.chunk_delay_s = 1.0  # the first reply, a piece a second: ten seconds long
    api = start_api(api_env)
    start_worker(api_env)
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"}).json()
        url = f"/api/v1/agents/{agent['id']}"
        with EventStream(http, "GET", f"{url}/events") as watcher:
            assert fake_ollama.wait_for_chunks(1, timeout_s=20)  # the model is mid-reply
            assert http.get(url).json()["status"] == "RUNNING"

            cancelled = http.delete(url)
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"

            events = watcher.rest()
            assert [e.event for e in events] == ["cancelled", "done"]
            assert events[-1].data == {"agent_id": agent["id"], "status": "CANCELLED",
                                       "stop_reason": "cancelled"}
            # The model call was cut, not waited for nor just left unread: the model
            # server saw the client go while it was writing the reply, before its end.
            assert fake_ollama.wait_for_hangups(1, timeout_s=3.0)
            assert fake_ollama.hangups == 1 and fake_ollama.call_count == 1

        # Nothing of the reply was written, and no other model call was made.
        assert http.get(f"{url}/steps").json() == {"steps": []}
        final = http.get(url).json()
        assert final["status"] == "CANCELLED" and final["step_count"] == 0
        assert http.delete(url).status_code == 409


def test_hanging_up_a_post_stream_cancels_its_agent(api_env, start_api, start_worker, fake_ollama):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    fake_ollama.latency_s = 5.0
    api = start_api(api_env)
    start_worker(api_env)
    with api.client(api.user()) as http:
        with EventStream(http, "POST", "/api/v1/agents/stream",
                         json={"goal": "What is 1234 * 902?"}) as stream:
            url = stream.response.headers["Location"]
            wait_until(lambda: fake_ollama.call_count == 1)
        # Cancelled while its first model call (5 s) is still under way.
        agent = wait_until(lambda: (a := http.get(url).json())["status"] == "CANCELLED" and a)
        assert agent["stop_reason"] == "cancelled"
        assert fake_ollama.wait_for_hangups(1, timeout_s=10)

        # GET …/events is only a watcher: hanging up cancels nothing.
        other = http.post("/api/v1/agents", json={"goal": "keep running"}).json()
        with EventStream(http, "GET", f"/api/v1/agents/{other['id']}/events"):
            wait_until(lambda: fake_ollama.call_count == 2)  # mid-call (5 s) as it hangs up
        wait_until(lambda: api.open_streams() == 0)  # the API saw the hang-up
        fake_ollama.latency_s = 0.0
        done = wait_until(lambda: (a := http.get(f"/api/v1/agents/{other['id']}").json())
                          ["status"] in {"COMPLETED", "FAILED", "CANCELLED"} and a, timeout_s=30)
        assert done["status"] == "COMPLETED"


def test_a_stream_catches_up_from_the_database_when_publishes_are_lost(shared_api):
    """A worker whose publishes never arrive: the record alone must finish the stream."""
    api = shared_api()  # no worker: this test plays it, writing without publishing
    repository = open_repository(Settings.from_env(api.env), pool_size=1)
    try:
        with api.client(api.user()) as http:
            agent_id = http.post("/api/v1/agents", json={"goal": "silent"}).json()["id"]
            with EventStream(http, "GET", f"/api/v1/agents/{agent_id}/events") as stream:
                running = repository.claim(uuid.UUID(agent_id))
                assert running is not None
                think = Step(1, 0, StepType.THINK, "thinking quietly")
                final = Step(2, 0, StepType.FINAL, "42")
                repository.append_steps(running.id, running.attempt, [think], step_count=1)
                done = running.with_completed("42")
                assert repository.transition(
                    running.id, AgentStatus.RUNNING, AgentStatus.COMPLETED,
                    attempt=running.attempt, steps=[final], final_answer="42",
                    stop_reason=StopReason.FINAL_ANSWER, step_count=1,
                    completed_at=done.completed_at,
                )
                events = stream.rest()  # ended by the periodic re-check: nothing was published
            assert [(e.event, e.id) for e in events] == [("think", "1"), ("final", "2"),
                                                         ("done", None)]
            assert events[-1].data["status"] == "COMPLETED"
    finally:
        repository.engine.dispose()


def test_one_status_query_per_interval_ends_every_stream_of_an_unannounced_end(redis_url):
    """In process, on a PostgreSQL that counts every statement it runs (the store's
    prepared ones on raw cursors included): N open streams of quiet agents cost one
    status query per `recheck_s` for them all and no read of their own, and a
    terminal status that was written to the record but never published still ends
    each of them with `done`."""
    from api import create_app
    from api.context import StreamTiming
    from tests.support.api_server import parse_events
    from tests.support.server_statements import counting_postgres

    recheck_s, n_streams, n_agents, checks = 0.5, 12, 3, 4
    with counting_postgres() as (database_url, statements):
        settings = Settings.from_env({"DATABASE_URL": database_url, "REDIS_URL": redis_url,
                                      "OLLAMA_HOST": "http://127.0.0.1:9"})
        app = create_app(settings, timing=StreamTiming(recheck_s=recheck_s, tick_s=0.05))
        context = app.extensions["jarvis"]
        try:
            _, api_key = context.service.repository.users.create(f"watcher-{uuid.uuid4()}")
            headers = {"Authorization": f"Bearer {api_key}"}
            client = app.test_client()
            ids = [client.post("/api/v1/agents", json={"goal": f"quiet {i}"}, headers=headers)
                   .get_json()["id"] for i in range(n_agents)]
            watched = [ids[i % len(ids)] for i in range(n_streams)]

            received: dict[int, list] = {}
            opened = threading.Barrier(n_streams + 1, timeout=30)

            def watch(i: int) -> None:
                response = app.test_client().get(
                    f"/api/v1/agents/{watched[i]}/events", headers=headers, buffered=False
                )
                try:
                    opened.wait()
                    lines = (line for chunk in response.response
                             for line in chunk.decode().split("\n"))
                    received[i] = list(parse_events(lines))
                finally:
                    response.close()

            threads = [threading.Thread(target=watch, args=(i,)) for i in range(n_streams)]
            for thread in threads:
                thread.start()
            opened.wait()  # every stream has read its agent and steps

            # Two status checks after the hub heard Redis (until then the streams poll;
            # as it connects, it tells them to catch up once), then `checks` more.
            wait_until(lambda: context.hub.connected)
            settled = wait_for_status_checks(statements, statements.calls(), 2)
            after = wait_for_status_checks(statements, settled, checks)
            reads = {q: n - settled[q] for q, n in after.items()
                     if READS_AGENTS.search(q) and n > settled[q] and not is_status_check(q)}
            assert reads == {}, f"the streams read the store on their own: {reads}"

            for agent_id in ids:
                assert context.service.repository.transition(
                    uuid.UUID(agent_id), AgentStatus.PENDING, AgentStatus.CANCELLED,
                    stop_reason=StopReason.CANCELLED,
                )
            for thread in threads:  # ended by the status check: nothing was published
                thread.join(timeout=30)
            assert sorted(received) == list(range(n_streams))
            for i, events in received.items():
                assert [e.event for e in events] == ["cancelled", "done"]
                assert events[-1].data == {"agent_id": watched[i], "status": "CANCELLED",
                                           "stop_reason": "cancelled"}
        finally:
            context.close()


# A statement that reads agents or their steps; the status check's reads all the
# watched agents (here three) in one.
READS_AGENTS = re.compile(r"\bFROM agent(s|_steps)\b")
STATUS_CHECK = re.compile(r"\bFROM agents\s+WHERE agents\.id IN \((\$\d+[^,)]*, ){2}\$\d+[^,)]*\)$")


def is_status_check(query: str) -> bool:
    return STATUS_CHECK.search(query) is not None


def wait_for_status_checks(statements, since, n):
    """The server's counts once the status check has run `n` times after `since`'s."""
    def checked(counts):
        return sum(c for q, c in counts.items() if is_status_check(q))

    def done():
        counts = statements.calls()
        return counts if checked(counts) >= checked(since) + n else None

    return wait_until(done, timeout_s=30)


class RawStream:
    """`GET …/events` on a plain socket, read only when asked: a client that can stall."""

    def __init__(self, url: str, api_key: str, path: str, *, rcvbuf: int | None = None) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.socket()
        if rcvbuf is not None:  # before connecting: it sets the window the server sees
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((host, int(port)))
        self.sock.settimeout(10)
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        self.buffer = b""
        while b": keepalive" not in self.buffer:  # the head and the first keepalive
            self.buffer += self.sock.recv(65536)
        assert self.buffer.startswith(b"HTTP/1.1 200")
        self.buffer = self.buffer.split(b": keepalive\n\n", 1)[1]
        self.events: list[tuple[str, int]] = []  # (id, the data's seq), in arrival order
        self.event_id = ""

    def read(self) -> None:
        """What has arrived (waits for at least one read)."""
        self.buffer += self.sock.recv(1 << 20)
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"id: "):
                self.event_id = line[4:].decode()
            elif line.startswith(b"data: "):
                self.events.append((self.event_id, json.loads(line[6:])["seq"]))

    def close(self) -> None:
        self.sock.close()


def test_every_stream_of_a_hot_agent_gets_every_step_in_order_while_one_client_stalls(
    shared_api,
):
    """Ten streams of one agent and an eleventh client that stops reading: the ten get
    every published step once, in order, with its id, without waiting for the stalled
    one; once it reads again it gets every step in order too."""
    import redis

    from jarvis_agents.events import RedisEventBus

    api = shared_api()  # no worker: this test publishes as one would
    api_key = api.user()
    repository = open_repository(Settings.from_env(api.env), pool_size=1)
    redis_client = redis.Redis.from_url(api.env["REDIS_URL"])
    streams: list[RawStream] = []
    try:
        with api.client(api_key) as http:
            agent_id = http.post("/api/v1/agents", json={"goal": "watched by many"}).json()["id"]
        agent = repository.get(uuid.UUID(agent_id))
        path = f"/api/v1/agents/{agent_id}/events"
        stalled = RawStream(api.url, api_key, path, rcvbuf=4096)
        streams = [stalled] + [RawStream(api.url, api_key, path) for _ in range(10)]
        readers = streams[1:]

        # ~3 MB per stream: more than the stalled client's socket buffers take.
        n, content = 400, "x" * 8000
        bus = RedisEventBus(redis_client)
        for seq in range(1, n + 1):
            bus.publish_steps(agent, [Step(seq, 0, StepType.THINK, content)])
        assert bus.flush()

        expected = [(str(seq), seq) for seq in range(1, n + 1)]
        deadline = time.monotonic() + 30
        with selectors.DefaultSelector() as selector:
            for reader in readers:
                selector.register(reader.sock, selectors.EVENT_READ, reader)
            while any(len(r.events) < n for r in readers) and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=1):
                    key.data.read()
        for reader in readers:
            assert reader.events == expected
        assert stalled.events == []  # it has read nothing yet

        while len(stalled.events) < n and time.monotonic() < deadline + 30:
            stalled.read()
        assert stalled.events == expected
    finally:
        for stream in streams:
            stream.close()
        redis_client.close()
        repository.engine.dispose()


def test_the_hub_writes_live_steps_straight_to_the_socket_as_gunicorn_frames_them(shared_api):
    """The fast path (api.sse.SocketWriter) is taken under the installed gunicorn, and
    what it writes is the body gunicorn frames: a strict HTTP/1.1 client reads every
    step once, in order. If a gunicorn release frames a streamed body otherwise, or
    stops saying how, this fails rather than the fast path going quietly unused."""
    import redis

    from jarvis_agents.events import RedisEventBus

    api = shared_api()  # no worker: this test publishes as one would
    api_key = api.user()
    repository = open_repository(Settings.from_env(api.env), pool_size=1)
    redis_client = redis.Redis.from_url(api.env["REDIS_URL"])

    def direct_streams() -> float:
        with api.client() as http:
            line = next(line for line in http.get("/metrics").text.splitlines()
                        if line.startswith("jarvis_api_direct_streams "))
        return float(line.split()[1])

    try:
        with api.client(api_key) as http:
            agent_id = http.post("/api/v1/agents", json={"goal": "watched"}).json()["id"]
            agent = repository.get(uuid.UUID(agent_id))
            with EventStream(http, "GET", f"/api/v1/agents/{agent_id}/events") as stream:
                assert stream.response.headers["transfer-encoding"] == "chunked"
                wait_until(lambda: direct_streams() == 1)
                bus = RedisEventBus(redis_client)
                for seq in range(1, 51):  # sizes that cross chunk-size digits and buffers
                    bus.publish_steps(agent, [Step(seq, 0, StepType.THINK, "x" * (seq * 97))])
                assert bus.flush()
                told = [stream.next() for _ in range(50)]
            assert [(e.id, e.data["seq"], len(e.data["content"])) for e in told] == [
                (str(seq), seq, seq * 97) for seq in range(1, 51)]
        wait_until(lambda: direct_streams() == 0)
    finally:
        redis_client.close()
        repository.engine.dispose()
