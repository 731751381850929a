"""The worker side: take an agent off the queue, own it, run it, keep it alive.

One AgentRunner lives in each worker process. Besides running agents it keeps
three small threads: a heartbeat that marks this process's agents alive (the model
call cannot block it), a listener for cancellations published on Redis, and the
sweeper's (jarvis_agents/sweeper.py), which queues again what the queue no longer holds.

An agent's own database calls ride out a database restart in place (store/outages.py);
the heartbeat and the sweeper just try again on their next round. The runner records
when it last saw the database fail, for the sweeper's judgement of heartbeats.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.delegation.remote import remote_of
from jarvis_agents.dispatch import Dispatcher
from jarvis_agents.errors import DependencyUnavailable, first_line
from jarvis_agents.events import CONTROL_CHANNEL, EventBus, decode
from jarvis_agents.executor import Executor
from jarvis_agents.lifecycle import Agent, AgentStatus, StopReason, utcnow
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.logs import current_agent_id
from jarvis_agents.retry import is_database_outage
from jarvis_agents.routing import queue_for
from jarvis_agents.store.interface import AgentStore
from jarvis_agents.store.outages import OutageTolerantStore
from jarvis_agents.sweeper import Sweeper

log = logging.getLogger(__name__)

# How often a waiting model call still looks at the one stop condition that cannot
# wake it, a Celery revoke (a set in the worker). A revoke always follows the cancel
# published on Redis, which wakes the call at once; this only bounds the fallback.
REVOKE_POLL_S = 1.0
# How long an agent goes on without reading its status from the database while the
# cancel listener is connected but has heard no cancel (of any agent) for as long:
# a cancel and its revoke can both be lost (published while Redis restarted).
STATUS_CHECK_S = 10.0
# The longest the cancel listener waits for a message before it looks at the stop flag
# again: how much it adds to a worker's shutdown (a cancel wakes it at once).
LISTEN_WAIT_S = 0.2


@dataclass(frozen=True, eq=False)
class _Run:
    """One run of an attempt in this process: its cancel flag and its stop signal.

    Told apart by identity, not by (agent, attempt): a claim that a database crash
    took back is made again under the same attempt number, and the run it cut off
    may still be under way here when the new one starts.
    """

    agent_id: uuid.UUID
    attempt: int
    cancelled: threading.Event
    signal: StopSignal


class AgentRunner:
    def __init__(
        self,
        *,
        repository: AgentStore,
        store: OutageTolerantStore,
        executor: Executor,
        events: EventBus,
        dispatcher: Dispatcher,
        settings: Settings,
        duties: Sequence[Callable[[], object]] = (),
    ) -> None:
        """`duties` run after each sweep (the LangGraph door's queue: runs whose turn
        has come are started there, with no worker waiting for them)."""
        # The heartbeat and the sweeper use the repository; an agent's own calls go
        # through `store`, which retries them through a database outage.
        self.repository = repository
        self.store = store
        self.executor = executor
        self.events = events
        self.dispatcher = dispatcher
        self.settings = settings
        # Each run its own entry: one that ends (superseded by a take-over, or cut off
        # by a crash that took its claim back) must not remove another's of the agent.
        self._running: set[_Run] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._shutting_down = threading.Event()  # from the first shutdown signal on
        self._threads: list[threading.Thread] = []
        self._database_failed_at = -math.inf  # time.monotonic() of the last outage seen
        self.duties = tuple(duties)
        self.sweeper = Sweeper(repository=repository, dispatcher=dispatcher, events=events,
                               settings=settings, last_outage=lambda: self._database_failed_at)
        # The cancel listener: whether it is subscribed, how often it (re)connected,
        # and when it last heard a cancel (time.monotonic()).
        self._listening = threading.Event()
        self._listener_connects = 0
        self._cancel_heard_at = -math.inf

    # --- one agent -------------------------------------------------------------------

    def run(self, agent_id: uuid.UUID, *, task_id: str | None = None,
            is_revoked: Callable[[], bool] = lambda: False) -> None:
        """Run the agent if this call may own it; a no-op for a duplicate delivery."""
        if self._shutting_down.is_set():
            # Celery can still hand over a message its consumer had in flight when the
            # shutdown began. Starting the agent would only hand it back (an attempt
            # spent for nothing); it goes back on the queue untouched instead.
            self._requeue(agent_id, task_id)
            return
        # The claim first: it is the common case, and its compare-and-set needs no
        # read before it. Only when it fails does the agent's status say why.
        agent = self.store.claim(agent_id, task_id=task_id, modes=self.executor.settled)
        if agent is not None:
            self.events.publish_steps(agent, (), status=True)  # RUNNING, off this thread
        else:
            current = self.store.get(agent_id)
            if current is None:
                log.warning("agent %s does not exist; dropping its task", agent_id)
                return
            if current.status is not AgentStatus.RUNNING:
                return  # ended (a late redelivery), or cancelled before it started
            agent = self._take_over(current, task_id)
            if agent is None:
                return  # alive elsewhere: a redelivery of a task still running
        cancelled = threading.Event()
        # cancel_local and the shutdown wake it; only a revoke has to be polled for.
        signal = StopSignal(cancelled.is_set, self._stopping.is_set, is_revoked, poll_s=REVOKE_POLL_S)
        run = _Run(agent.id, agent.attempt, cancelled, signal)
        with self._lock:
            self._running.add(run)
        token = current_agent_id.set(str(agent.id))
        log.info("running agent %s (attempt %s)", agent.id, agent.attempt)
        try:
            if remote_of(agent) is not None:  # a call of a remote delegate: no model to run
                ended = self.sweeper.delegation.remote.run(agent)
            else:
                ended = self.executor.run(agent, should_stop=signal, check_status=self._status_checks())
            if ended is not None:
                log.info("agent %s %s after %s steps", agent.id, ended.status.value, ended.step_count)
                self._ended(ended)
        finally:
            with self._lock:
                self._running.discard(run)
            current_agent_id.reset(token)
            if self._stopping.is_set() and not cancelled.is_set():
                # Shutting down past the grace period: hand the agent back now rather
                # than after the heartbeat goes stale, so another worker resumes it.
                self._hand_back(agent)

    def begin_shutdown(self, grace_s: float) -> None:
        """Let running agents finish for `grace_s`, then stop them and hand them back."""
        self._shutting_down.set()
        timer = threading.Timer(grace_s, self._stop_all)
        timer.daemon = True
        timer.start()

    def _stop_all(self) -> None:
        self._stopping.set()
        with self._lock:
            signals = [run.signal for run in self._running]
        for signal in signals:
            signal.wake()

    def _requeue(self, agent_id: uuid.UUID, task_id: str | None) -> None:
        try:
            self.dispatcher.enqueue(agent_id, task_id=task_id or str(agent_id),
                                    queue=self._queue_of(agent_id))
        except DependencyUnavailable as exc:  # the sweep queues it again
            log.warning("agent %s not started as the worker stops, nor queued again: %s",
                        agent_id, exc)
            return
        log.info("agent %s not started as the worker stops; queued again", agent_id)

    def _hand_back(self, agent: Agent) -> None:
        """Release the agent (not a lost worker: nothing is counted) and queue it again."""
        if not self.store.release(agent.id, agent.attempt):
            return  # it ended, or was cancelled or taken over, meanwhile
        try:
            self.dispatcher.enqueue(agent.id, task_id=f"{agent.id}:{agent.attempt + 1}",
                                    queue=queue_for(agent.model))
        except DependencyUnavailable as exc:
            log.warning("agent %s handed back; a sweep will queue it (%s)", agent.id, exc)
            return
        log.info("agent %s handed back for another worker (attempt %s)", agent.id, agent.attempt)

    def _take_over(self, current: Agent, task_id: str | None) -> Agent | None:
        """Supersede the agent's attempt if it is gone; FAILED once too many were lost.

        Whether it is gone is decided in SQL, by the compare-and-set: a heartbeat
        older than the staleness, or none (handed back, which costs nothing).
        """
        stale_before = utcnow() - timedelta(seconds=self.settings.heartbeat_stale_s)
        if current.heartbeat_at is not None and current.losses + 1 >= self.settings.max_attempts:
            self._give_up(current, stale_before)
            return None
        agent = self.store.take_over(
            current.id, attempt=current.attempt, stale_before=stale_before, task_id=task_id
        )
        if agent is not None:
            why = "a lost worker" if agent.losses > current.losses else "a hand-back"
            log.info("agent %s resumed by attempt %s after %s", agent.id, agent.attempt, why)
        return agent

    def _give_up(self, current: Agent, stale_before: datetime) -> None:
        """FAILED with `worker_lost`, if the attempt's heartbeat is stale (in the SQL)."""
        lost = current.losses + 1
        failed = replace(current.with_failed(
            f"the agent's worker was lost {lost} times (the limit is "
            f"{self.settings.max_attempts}); giving up",
            stop_reason=StopReason.WORKER_LOST,
        ), losses=lost)
        if self.store.transition(
            current.id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=current.attempt,
            heartbeat_before=stale_before, losses=lost, error=failed.error,
            stop_reason=failed.stop_reason, completed_at=failed.completed_at,
            now=failed.updated_at,
        ):
            self.events.publish_status(failed)  # the transition owed its webhook
            self._ended(failed)

    def _ended(self, agent: Agent) -> None:
        """A child's end wakes its caller once all its children have ended (the sweeper
        does, if this process dies first)."""
        if agent.is_terminal and agent.caller_id is not None:
            self.sweeper.delegation.child_ended(agent)

    def _status_checks(self) -> Callable[[], bool]:
        """For one attempt: whether to read its status from the database before the
        next iteration, in case both its cancel and its revoke were lost.

        Not while the cancel listener, still on the connection it had at the last
        look, has heard a cancel within STATUS_CHECK_S (cancels flow) or the last
        look is that recent; every iteration while it is disconnected.
        """
        last_look = time.monotonic()
        connects = self._listener_connects

        def due() -> bool:
            nonlocal last_look, connects
            now = time.monotonic()
            listening = self._listening.is_set() and self._listener_connects == connects
            if listening and min(now - last_look, now - self._cancel_heard_at) < STATUS_CHECK_S:
                return False
            last_look, connects = now, self._listener_connects
            return True

        return due

    def active(self) -> int:
        with self._lock:
            return len(self._running)

    def cancel_local(self, agent_id: uuid.UUID) -> None:
        """Stop every attempt of the agent running here, now."""
        with self._lock:
            runs = [run for run in self._running if run.agent_id == agent_id]
        for run in runs:
            run.cancelled.set()
            run.signal.wake()

    # --- background threads ----------------------------------------------------------

    def start_background(self, *, redis_client: Any | None = None, sweep: bool = True) -> None:
        self._spawn("jarvis-heartbeat", self._heartbeat_loop)
        if sweep:
            self._spawn("jarvis-sweeper", self._sweep_loop)
        if redis_client is not None:
            self._spawn("jarvis-cancel-listener", lambda: self._listen(redis_client))

    def stop_background(self) -> None:
        self._stop_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self.events.flush(2.0)  # events still queued for Redis go out before the exit

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self.settings.heartbeat_interval_s):
            with self._lock:
                owned = {(run.agent_id, run.attempt) for run in self._running}
            try:
                self.repository.heartbeat(owned)
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                self._failed("heartbeat", exc)

    def _sweep_loop(self) -> None:
        # The first sweep at once: a worker started after a restart sends again what the
        # last one handed back, if the message went with Redis, without an interval's wait.
        while True:
            for duty in (self.sweeper.sweep, *self.duties):
                try:
                    duty()
                except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                    self._failed("sweep", exc)
            if self._stopping.wait(self.settings.heartbeat_interval_s):
                return

    def _failed(self, what: str, exc: Exception) -> None:
        if is_database_outage(exc):
            self._database_failed_at = time.monotonic()
        log.warning("%s failed: %s", what, first_line(exc))

    def _queue_of(self, agent_id: uuid.UUID) -> str:
        """The queue of the agent's model (routing): read, as the sweeps that need it are rare."""
        agent = self.repository.get(agent_id)
        return queue_for(agent.model if agent is not None else None)

    def _listen(self, redis_client: Any) -> None:
        """Set the stop flag of an agent running here as soon as its cancel is published,
        and pass on the token listeners the API processes announce (events.tokens).

        A cancel published while the listener was not subscribed is never heard:
        after any (re)connection the running agents read their status once
        (`_status_checks`), and while it is down, before every iteration.
        """
        while not self._stopping.is_set():
            pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(CONTROL_CHANNEL)
                # redis-py reconnects and subscribes again by itself inside get_message:
                # its connect callback is how a gap shows.
                pubsub.connection.register_connect_callback(self._listener_connected)
                self._listener_connected(pubsub.connection)
                while not self._stopping.is_set():
                    raw = pubsub.get_message(timeout=LISTEN_WAIT_S)
                    if raw is None:
                        continue
                    message = decode(raw["channel"], raw["data"])
                    if message is not None and message.kind == "cancel":
                        self._cancel_heard_at = time.monotonic()
                        self.cancel_local(uuid.UUID(message.data["agent_id"]))
                    elif message is not None and message.kind == "tokens":
                        self.events.listener_heard(uuid.UUID(message.data["agent_id"]))
            except Exception as exc:  # noqa: BLE001 - Redis restarts; reconnect
                self._listening.clear()
                log.warning("cancel listener lost Redis (%s); reconnecting", exc)
                self._stopping.wait(1.0)
            finally:
                if pubsub.connection is not None:  # it goes back to the pool, to other users
                    pubsub.connection.deregister_connect_callback(self._listener_connected)
                with contextlib.suppress(Exception):  # closing a dead connection may fail
                    pubsub.close()

    def _listener_connected(self, _connection: Any) -> None:
        self._listener_connects += 1
        self._listening.set()
