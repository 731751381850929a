"""The worker side: take an agent off the queue, own it, run it, keep it alive.

One AgentRunner lives in each worker process. Besides running agents it keeps
three small threads: a heartbeat that marks this process's agents alive (the model
call cannot block it), a listener for cancellations published on Redis, and a
sweeper that re-enqueues agents whose worker died (stale heartbeat) and agents
whose enqueue failed while the broker was down.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.events import CONTROL_CHANNEL, EventBus, decode
from jarvis_agents.executor import Executor
from jarvis_agents.lifecycle import AgentStatus, StopReason, utcnow
from jarvis_agents.llm.base import StopSignal
from jarvis_agents.logs import current_agent_id
from jarvis_agents.service import Dispatcher
from jarvis_agents.store.repository import Repository

log = logging.getLogger(__name__)

# How often a waiting model call still looks at the one stop condition that cannot
# wake it, a Celery revoke (a set in the worker). A revoke always follows the cancel
# published on Redis, which wakes the call at once; this only bounds the fallback.
REVOKE_POLL_S = 1.0


class AgentRunner:
    def __init__(
        self,
        *,
        repository: Repository,
        executor: Executor,
        events: EventBus,
        dispatcher: Dispatcher,
        settings: Settings,
    ) -> None:
        self.repository = repository
        self.executor = executor
        self.events = events
        self.dispatcher = dispatcher
        self.settings = settings
        self._running: dict[uuid.UUID, tuple[int, threading.Event, StopSignal]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- one agent -------------------------------------------------------------------

    def run(self, agent_id: uuid.UUID, *, task_id: str | None = None,
            is_revoked: Callable[[], bool] = lambda: False) -> None:
        """Run the agent if this call may own it; a no-op for a duplicate delivery."""
        # The claim first: it is the common case, and its compare-and-set needs no
        # read before it. Only when it fails does the agent's status say why.
        agent = self.repository.claim(agent_id, task_id=task_id)
        if agent is not None:
            self.events.publish_steps(agent, (), status=True)  # RUNNING, off this thread
        else:
            current = self.repository.get(agent_id)
            if current is None:
                log.warning("agent %s does not exist; dropping its task", agent_id)
                return
            if current.status is not AgentStatus.RUNNING:
                return  # ended (a late redelivery), or cancelled before it started
            agent = self._take_over(current.id, current.attempt, task_id)
            if agent is None:
                return  # alive elsewhere: a redelivery of a task still running
        flag = threading.Event()
        # cancel_local and the shutdown wake it; only a revoke has to be polled for.
        signal = StopSignal(flag.is_set, self._stopping.is_set, is_revoked, poll_s=REVOKE_POLL_S)
        with self._lock:
            self._running[agent.id] = (agent.attempt, flag, signal)
        token = current_agent_id.set(str(agent.id))
        log.info("running agent %s (attempt %s)", agent.id, agent.attempt)
        try:
            ended = self.executor.run(agent, should_stop=signal)
            if ended is not None:
                log.info("agent %s %s after %s steps", agent.id, ended.status.value, ended.step_count)
        finally:
            with self._lock:
                self._running.pop(agent.id, None)
            current_agent_id.reset(token)
            if self._stopping.is_set() and not flag.is_set():
                # Shutting down past the grace period: hand the agent back now rather
                # than after the heartbeat goes stale, so another worker resumes it.
                self.repository.release(agent.id, agent.attempt)

    def begin_shutdown(self, grace_s: float) -> None:
        """Let running agents finish for `grace_s`, then stop them and hand them back."""
        timer = threading.Timer(grace_s, self._stop_all)
        timer.daemon = True
        timer.start()

    def _stop_all(self) -> None:
        self._stopping.set()
        with self._lock:
            signals = [signal for _, _, signal in self._running.values()]
        for signal in signals:
            signal.wake()

    def _take_over(self, agent_id: uuid.UUID, attempt: int, task_id: str | None) -> Any:
        stale_before = utcnow() - timedelta(seconds=self.settings.heartbeat_stale_s)
        if attempt >= self.settings.max_attempts:
            current = self.repository.get(agent_id)
            if current is None or current.heartbeat_at and current.heartbeat_at >= stale_before:
                return None
            failed = current.with_failed(
                f"the agent's worker was lost {attempt} times (the limit is "
                f"{self.settings.max_attempts}); giving up",
                stop_reason=StopReason.WORKER_LOST,
            )
            if self.repository.transition(
                agent_id, AgentStatus.RUNNING, AgentStatus.FAILED, attempt=attempt,
                error=failed.error, stop_reason=failed.stop_reason,
                completed_at=failed.completed_at, now=failed.updated_at,
            ):
                self.events.publish_status(failed)  # the transition owed its webhook
            return None
        agent = self.repository.take_over(
            agent_id, attempt=attempt, stale_before=stale_before, task_id=task_id
        )
        if agent is not None:
            log.info("agent %s resumed by attempt %s", agent_id, agent.attempt)
        return agent

    def active(self) -> int:
        with self._lock:
            return len(self._running)

    def cancel_local(self, agent_id: uuid.UUID) -> None:
        with self._lock:
            entry = self._running.get(agent_id)
        if entry is not None:
            _, flag, signal = entry
            flag.set()
            signal.wake()

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
                owned = [(agent_id, attempt) for agent_id, (attempt, _, _) in self._running.items()]
            try:
                self.repository.heartbeat(owned)
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                log.warning("heartbeat failed: %s", exc)

    def _sweep_loop(self) -> None:
        while not self._stopping.wait(self.settings.heartbeat_interval_s):
            try:
                self.sweep()
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                log.warning("sweep failed: %s", exc)

    def sweep(self) -> int:
        """Re-enqueue agents whose worker died or whose enqueue was lost; returns how many."""
        count = 0
        stale_before = utcnow() - timedelta(seconds=self.settings.heartbeat_stale_s)
        for agent in self.repository.stale_running(stale_before):
            with self._lock:
                if agent.id in self._running:
                    continue
            log.warning("agent %s lost its worker (attempt %s); re-enqueueing", agent.id, agent.attempt)
            self.dispatcher.enqueue(agent.id, task_id=f"{agent.id}:{agent.attempt + 1}")
            count += 1
        for agent in self.repository.unqueued_pending():
            task_id = str(agent.id)
            if self.repository.mark_enqueued(agent.id, task_id):
                self.dispatcher.enqueue(agent.id, task_id=task_id)
                count += 1
        # A message prefetched by a worker that was then killed is gone with it (agent
        # runs have no unacked bookkeeping in Redis: workers.broker). Re-enqueue PENDING
        # agents that have waited long; the claim's compare-and-set makes duplicates no-ops.
        pending_before = utcnow() - timedelta(seconds=self.settings.pending_requeue_s)
        for agent in self.repository.stale_pending(pending_before):
            if self.repository.touch_pending(agent):
                log.warning("agent %s waited %s s in the queue; re-enqueueing",
                            agent.id, self.settings.pending_requeue_s)
                self.dispatcher.enqueue(agent.id, task_id=str(agent.id))
                count += 1
        return count

    def _listen(self, redis_client: Any) -> None:
        """Set the stop flag of an agent running here as soon as its cancel is published."""
        while not self._stopping.is_set():
            pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(CONTROL_CHANNEL)
                while not self._stopping.is_set():
                    raw = pubsub.get_message(timeout=1.0)
                    if raw is None:
                        continue
                    message = decode(raw["channel"], raw["data"])
                    if message is not None and message.kind == "cancel":
                        self.cancel_local(uuid.UUID(message.data["agent_id"]))
            except Exception as exc:  # noqa: BLE001 - Redis restarts; reconnect
                log.warning("cancel listener lost Redis (%s); reconnecting", exc)
                self._stopping.wait(1.0)
            finally:
                with contextlib.suppress(Exception):  # closing a dead connection may fail
                    pubsub.close()
