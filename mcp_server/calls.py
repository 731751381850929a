"""One `tools/call`: create the agent, follow it to its end, cancel it if the caller goes.

The core is synchronous (SQLAlchemy, redis-py): a call's create, follow
(`AgentService.follow`) and last read run in a thread, which the follow holds while it
waits for the agent's events; those threads have a capacity of their own
(`MAX_FOLLOWS`), apart from anyio's default threads that the cancels use. Each step the follower tells becomes a
progress notification (when the caller gave a progress token): at least one per ReACT
iteration. Nothing bounds the call's time but its agent's: the agent ends by itself at
its total timeout at the latest, and the transport keeps the connection alive meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import ObjectSendStream

from jarvis_agents.errors import Conflict, DependencyUnavailable
from jarvis_agents.events import (
    AGENT_CHANNEL,
    CLOSED,
    Ended,
    Message,
    StepEvent,
    Waiting,
    is_terminal_status,
)
from jarvis_agents.lifecycle import Agent
from jarvis_agents.service import AgentService, CreateRequest

log = logging.getLogger(__name__)

MAX_FOLLOWS: Final = 2000  # calls in flight at once in one process
TICK_S: Final = 0.5  # how soon a follow whose caller has gone notices it
RECHECK_S: Final = 5.0  # how often a wait reads its agent again, in case a status was lost

Told = StepEvent | Waiting
Progress = Callable[[float, str], Awaitable[None]]


class AgentCalls:
    """Runs tool calls as agents through the core's service."""

    def __init__(self, service: AgentService, *, max_follows: int = MAX_FOLLOWS) -> None:
        self.service = service
        self.follows = anyio.CapacityLimiter(max_follows)

    async def run(self, user_id: uuid.UUID, request: CreateRequest, *,
                  progress: Progress | None) -> Agent:
        """The agent once it has ended. A cancelled call (the caller cancelled or went away)
        cancels its agent before the cancellation goes on.

        The create, the follow and the last read run in one thread, one after the other:
        each hand-over between the event loop and a thread is a wake-up, which a busy
        machine makes slow. The steps come back to the loop only for `progress`.
        """
        call = _Call(user_id, request)
        try:
            if progress is None:
                return await self._in_thread(call, None)
            return await self._with_progress(call, progress)
        except anyio.get_cancelled_exc_class():
            call.stop.set()
            if call.agent is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._cancel, call)
            raise

    async def _with_progress(self, call: _Call, progress: Progress) -> Agent:
        send, receive = anyio.create_memory_object_stream[Told](math.inf)
        ended: list[Agent] = []

        async def follow() -> None:
            async with send:
                ended.append(await self._in_thread(call, send))

        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            last = 0.0
            async with receive:
                async for told in receive:
                    last, message = _progress_of(told, last)
                    await _tell(progress, last, message)
        return ended[0]

    async def _in_thread(self, call: _Call, send: ObjectSendStream[Told] | None) -> Agent:
        try:
            return await anyio.to_thread.run_sync(self._run, call, send, limiter=self.follows,
                                                  abandon_on_cancel=True)
        finally:
            call.stop.set()  # an abandoned thread ends at its follow's next tick

    def _run(self, call: _Call, send: ObjectSendStream[Told] | None) -> Agent:
        agent, _ = self.service.create(call.user_id, call.request)
        call.agent = agent
        if call.stop.is_set():  # cancelled while it was being created
            self._cancel(call)
            return agent
        if send is None:
            return self._until_ended(agent, call.stop)
        with self.service.follow(agent.user_id, agent.id, subscriber=self.service.events,
                                 after=0, tick_s=TICK_S) as follower:
            for told in follower:
                if call.stop.is_set():
                    return agent
                if isinstance(told, StepEvent | Waiting) and send is not None:
                    anyio.from_thread.run_sync(send.send_nowait, told)
                elif isinstance(told, Ended):
                    return self.service.get(agent.user_id, agent.id)
        raise _stopping(agent)

    def _until_ended(self, agent: Agent, stop: threading.Event) -> Agent:
        """The agent once it has ended, without its steps: woken by its status messages,
        read again after a terminal one, and every RECHECK_S in case one was lost."""
        with self.service.events.subscribe(AGENT_CHANNEL.format(agent.id)) as subscription:
            agent = self.service.get(agent.user_id, agent.id)  # subscribed first: none missed
            next_read = time.monotonic() + RECHECK_S
            while not agent.is_terminal and not stop.is_set():
                item = subscription.get(TICK_S)
                if item is CLOSED:
                    raise _stopping(agent)
                if isinstance(item, Message) and not is_terminal_status(item):
                    continue  # a step, or RUNNING: nothing to answer yet
                if item is None and time.monotonic() < next_read:
                    continue  # a tick: the caller may have gone
                agent = self.service.get(agent.user_id, agent.id)
                next_read = time.monotonic() + RECHECK_S
        return agent

    def _cancel(self, call: _Call) -> None:
        agent_id = call.agent.id if call.agent is not None else None
        if agent_id is None:
            return
        try:
            self.service.cancel(call.user_id, agent_id)
            log.info("agent %s cancelled: its MCP call was cancelled or dropped", agent_id)
        except Conflict:
            pass  # it had ended meanwhile
        except Exception as exc:  # noqa: BLE001 - the caller has gone; nobody to tell but the log
            log.warning("could not cancel agent %s after its MCP call ended: %s", agent_id, exc)


def _stopping(agent: Agent) -> DependencyUnavailable:
    """The process is stopping (the hub closed): the caller cannot have its answer here."""
    return DependencyUnavailable(
        f"the MCP server is stopping; agent {agent.id} goes on: ask again, or see it at "
        f"/api/v1/agents/{agent.id}")


class _Call:
    """One call: what it asks, its agent once created, and whether its caller has gone."""

    def __init__(self, user_id: uuid.UUID, request: CreateRequest) -> None:
        self.user_id = user_id
        self.request = request
        self.agent: Agent | None = None
        self.stop = threading.Event()


async def _tell(progress: Progress, value: float, message: str) -> None:
    try:
        await progress(value, message)
    except Exception as exc:  # noqa: BLE001 - a notification lost is no reason to stop the call
        log.debug("a progress notification was not sent: %s", exc)


def _progress_of(told: Told, last: float) -> tuple[float, str]:
    """A progress notification's value and message. The value only grows, as MCP asks:
    a step's seq, and half a step more for a wait after it."""
    data = told.data
    if isinstance(told, Waiting) and data.get("agent_ids"):
        return last + 0.5, f"waiting on the {len(data['agent_ids'])} agent(s) it called"
    if isinstance(told, Waiting):
        return last + 0.5, (
            f"waiting for a person to approve the call {data['call_id']} of {data['tool']} "
            f"(POST /api/v1/agents/{data['agent_id']}/approval)")
    what = {"think": "thinking", "act": f"calling {data.get('tool')}",
            "observe": f"{data.get('tool')} answered", "final": "answering",
            "error": "correcting an error"}.get(told.name, told.name)
    step = data.get("step")
    iteration = step + 1 if isinstance(step, int) else step  # steps count from 0
    return float(told.seq), f"iteration {iteration}: {what}"
