"""One `tools/call`: create the agent, follow it to its end, cancel it if the caller goes.

The core is synchronous (SQLAlchemy, redis-py): its calls run in threads. A follow
(`AgentService.follow`) holds its thread while it waits for the agent's events, so the
follows have a capacity of their own (`MAX_FOLLOWS`), apart from anyio's default
threads that the creates and cancels use. Each step the follower tells becomes a
progress notification (when the caller gave a progress token): at least one per ReACT
iteration. Nothing bounds the call's time but its agent's: the agent ends by itself at
its total timeout at the latest, and the transport keeps the connection alive meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import ObjectSendStream

from jarvis_agents.errors import Conflict, DependencyUnavailable
from jarvis_agents.events import Ended, StepEvent, Waiting
from jarvis_agents.lifecycle import Agent
from jarvis_agents.service import AgentService, CreateRequest

log = logging.getLogger(__name__)

MAX_FOLLOWS: Final = 2000  # calls in flight at once in one process
TICK_S: Final = 0.5  # how soon a follow whose caller has gone notices it

Told = StepEvent | Waiting
Progress = Callable[[float, str], Awaitable[None]]


class AgentCalls:
    """Runs tool calls as agents through the core's service."""

    def __init__(self, service: AgentService, *, max_follows: int = MAX_FOLLOWS) -> None:
        self.service = service
        self.follows = anyio.CapacityLimiter(max_follows)

    async def run(self, user_id: uuid.UUID, request: CreateRequest, *, progress: Progress) -> Agent:
        """The agent once it has ended. A cancelled call (the caller cancelled or went away)
        cancels its agent before the cancellation goes on."""
        agent, _ = await anyio.to_thread.run_sync(self.service.create, user_id, request)
        try:
            await self._follow(agent, progress)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._cancel, user_id, agent.id)
            raise
        return await anyio.to_thread.run_sync(self.service.get, user_id, agent.id)

    async def _follow(self, agent: Agent, progress: Progress) -> None:
        """Until the agent has ended, with a progress notification for each step told."""
        send, receive = anyio.create_memory_object_stream[Told](math.inf)
        stop = threading.Event()
        ended: list[Ended] = []

        async def follow() -> None:
            async with send:
                ended.extend(await anyio.to_thread.run_sync(
                    self._follow_in_thread, agent, send, stop, limiter=self.follows,
                    abandon_on_cancel=True))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                last = 0.0
                async with receive:
                    async for told in receive:
                        last, message = _progress_of(told, last)
                        await _tell(progress, last, message)
        finally:
            stop.set()  # an abandoned follow ends at its next tick
        if not ended:
            # The process is stopping (the hub closed): the caller cannot have its answer here.
            raise DependencyUnavailable(
                f"the MCP server is stopping; agent {agent.id} goes on: ask again, or see it "
                f"at /api/v1/agents/{agent.id}")

    def _follow_in_thread(self, agent: Agent, send: ObjectSendStream[Told],
                          stop: threading.Event) -> list[Ended]:
        with self.service.follow(agent.user_id, agent.id, subscriber=self.service.events,
                                 after=0, tick_s=TICK_S) as follower:
            for told in follower:
                if stop.is_set():
                    return []
                if isinstance(told, StepEvent | Waiting):
                    anyio.from_thread.run_sync(send.send_nowait, told)
                elif isinstance(told, Ended):
                    return [told]
        return []

    def _cancel(self, user_id: uuid.UUID, agent_id: uuid.UUID) -> None:
        try:
            self.service.cancel(user_id, agent_id)
            log.info("agent %s cancelled: its MCP call was cancelled or dropped", agent_id)
        except Conflict:
            pass  # it had ended meanwhile
        except Exception as exc:  # noqa: BLE001 - the caller has gone; nobody to tell but the log
            log.warning("could not cancel agent %s after its MCP call ended: %s", agent_id, exc)


async def _tell(progress: Progress, value: float, message: str) -> None:
    try:
        await progress(value, message)
    except Exception as exc:  # noqa: BLE001 - a notification lost is no reason to stop the call
        log.debug("a progress notification was not sent: %s", exc)


def _progress_of(told: Told, last: float) -> tuple[float, str]:
    """A progress notification's value and message. The value only grows, as MCP asks:
    a step's seq, and half a step more for a wait after it."""
    data = told.data
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
