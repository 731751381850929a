"""Following one agent: the one place that knows how an agent's stream is told.

`follow` subscribes FIRST, then reads the agent and its steps after the caller's
position from the store, so that nothing published from then on is missed. Its
iteration replays those steps, then relays live ones, skipping any seq already
told. A seq that jumps ahead, a RESYNC (the bus may have lost messages), or a
terminal status makes it read the store for what it has not told: a lost publish
never loses a step. While the bus cannot deliver (`Subscription.connected` is
False) it polls the store. After the last step comes `Ended` (the agent's final
status) and the iteration stops.

While live messages flow it reads the store only for those reasons. A terminal
status whose publish was lost is the bus's business: the hub's status check
(`events.hub.ended_agents`) hands it to the subscription like a published one.

The follower's `agent` is the agent as it last read it: after `Ended`, as it ended;
after a `Waiting` it read, as it waits. A caller that answers with the agent once it has
settled (A2A's blocking SendMessage) takes it from there instead of reading it again.

The caller (the API's SSE stream, a test) turns what it yields into its own
format, and uses `IDLE` — nothing to tell for a tick — to look for a hang-up or
send a keepalive. It may lend a writer (`writer=`, see `api.sse.SocketWriter`)
that the hub hands the next live steps to while this waits; the writer's
`last_seq` says which it took.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self, TypeVar

from jarvis_agents.errors import NotFound
from jarvis_agents.events.bus import Subscriber
from jarvis_agents.events.messages import AGENT_CHANNEL, Message, step_event, waiting_event
from jarvis_agents.events.subscription import CLOSED, RESYNC, Signal
from jarvis_agents.events.tokens import Listen
from jarvis_agents.lifecycle import TERMINAL, Agent, AgentStatus, Step, StopReason

log = logging.getLogger(__name__)

IDLE: Final = Signal("idle")  # nothing to tell this tick
POLL_S = 1.0  # how often the store is read while the bus cannot deliver
TICK_S = 0.5  # the longest wait for a message before IDLE

T = TypeVar("T")


class StepSource(Protocol):
    """The store as `follow` reads it (the Repository and the in-memory store)."""

    def agent_with_steps(self, agent_id: uuid.UUID, *, after: int = 0,
                         user_id: uuid.UUID | None = None) -> tuple[Agent | None, list[Step]]: ...

    def steps_after(self, agent_id: uuid.UUID, seq: int = 0) -> list[Step]: ...


class LentWriter(Protocol):
    """Takes live steps while the follower waits (see `Subscription.get`)."""

    last_seq: int  # set before each wait, the last seq it wrote after it

    def __call__(self, message: Message) -> bool: ...


@dataclass(frozen=True)
class StepEvent:
    """A step to tell: its seq, event name (`think` …) and data (docs/api.md §4)."""

    seq: int
    name: str
    data: dict[str, Any]
    message: Message | None = None  # the published message it came from, if live

    @classmethod
    def of_step(cls, agent_id: uuid.UUID, step: Step) -> StepEvent:
        return cls(step.seq, step.type.value.lower(), step_event(agent_id, step))

    @classmethod
    def of_message(cls, message: Message) -> StepEvent | None:
        """A published step; None if it has no usable `seq`."""
        try:
            seq = int(message.data["seq"])
        except (KeyError, TypeError, ValueError, OverflowError):  # Infinity parses as JSON
            return None
        return cls(seq, str(message.data.get("type", "")).lower(), message.data, message)


@dataclass(frozen=True)
class TokenEvent:
    """Live text of a reply being written (docs/api.md §6): data `{"agent_id", "step", "delta"}`."""

    data: dict[str, Any]
    message: Message  # the published message (its SSE frame is encoded once)


@dataclass(frozen=True)
class Ended:
    """The agent has ended and every step has been told."""

    agent_id: uuid.UUID
    status: AgentStatus
    stop_reason: StopReason | None

    @property
    def cancelled(self) -> bool:
        return self.status is AgentStatus.CANCELLED

    def summary(self) -> dict[str, Any]:
        """The data of `cancelled` and `done` (docs/api.md §4)."""
        return {
            "agent_id": str(self.agent_id),
            "status": self.status.value,
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
        }


@dataclass(frozen=True)
class Waiting:
    """The agent waits for a person to approve a tool call: the data of `waiting`."""

    data: dict[str, Any]


Told = StepEvent | TokenEvent | Waiting | Ended | Signal


def is_terminal_status(message: Message) -> bool:
    return message.kind == "status" and message.data.get("status") in {s.value for s in TERMINAL}


def follow(
    bus: Subscriber, store: StepSource, agent_id: uuid.UUID, *, after: int = 0,
    user_id: uuid.UUID | None = None, tick_s: float = TICK_S, poll_s: float = POLL_S,
    writer: Callable[[], LentWriter | None] | None = None, tokens: bool = False,
) -> Follower:
    """Subscribe to the agent, then read it and its steps after `after`; iterate the result.

    Raises NotFound when there is no such agent (of `user_id`, if given), having
    left the channel again. `writer` is called once the replay has been told. With
    `tokens` the follower registers as a token listener (closing it leaves) and
    yields the live TokenEvents too.
    """
    return Follower(bus, store, agent_id, after=after, user_id=user_id, tick_s=tick_s,
                    poll_s=poll_s, writer=writer, tokens=tokens)


class Follower:
    """One follower of one agent: iterate it once; close it (or use `with`) when done."""

    def __init__(
        self, bus: Subscriber, store: StepSource, agent_id: uuid.UUID, *, after: int,
        user_id: uuid.UUID | None, tick_s: float, poll_s: float,
        writer: Callable[[], LentWriter | None] | None, tokens: bool = False,
    ) -> None:
        self.store = store
        self.agent_id = agent_id
        self.last_seq = after
        self.tick_s = tick_s
        self.poll_s = poll_s
        self._lend = writer
        self.finished = False  # Ended has been yielded
        self._told_wait: tuple[object, ...] | None = None  # the wait `waiting` was told for
        self.subscription = bus.subscribe(AGENT_CHANNEL.format(agent_id))
        try:
            agent, self._backlog = store.agent_with_steps(agent_id, after=after, user_id=user_id)
            if agent is None:
                raise NotFound(f"no agent with id {agent_id}")
            self.agent = agent
        except BaseException:
            self.subscription.close()
            raise
        # After the subscription is heard: every token published from here on reaches it.
        self.tokens: Listen | None = None
        if tokens and not agent.is_terminal:
            self.tokens = bus.listen_tokens(agent_id)

    def close(self) -> None:
        self.subscription.close()
        tokens, self.tokens = self.tokens, None
        if tokens is not None:
            tokens.close()
        self._lend = None  # often a method of the caller, which holds this: no cycle left

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Told]:
        try:
            yield from self._steps(self._backlog)
            self._backlog = []
            yield from self._waiting(self.agent)  # to one who joins while it waits
            if self.agent.is_terminal:
                yield from self._finish(read=False)  # read ended, with its steps, as it joined
                return
            yield from self._live()
        finally:
            self.close()

    def _live(self) -> Iterator[Told]:
        lend, self._lend = self._lend, None  # asked once; and no reference cycle kept
        writer = lend() if lend is not None else None
        next_poll = time.monotonic() + self.poll_s
        # Followers opened together would wake together on every tick; a random first
        # wait spreads their ticks (and the callers' hang-up checks) out.
        wait_s = random.uniform(0, self.tick_s)
        while True:
            if writer is not None:
                writer.last_seq = self.last_seq
            item = self.subscription.get(wait_s, writer=writer)
            wait_s = self.tick_s
            if writer is not None:
                self.last_seq = writer.last_seq  # what the hub wrote meanwhile
            if item is CLOSED:
                return  # the process is stopping; a client resumes from its last seq
            now = time.monotonic()
            told: list[StepEvent | TokenEvent | Waiting] = []
            terminal = read_ended = False
            if isinstance(item, Message):
                if item.kind == "token":
                    if self.tokens is not None:
                        told = [TokenEvent(item.data, item)]
                elif item.kind == "step":
                    told = self._relay(item)
                elif is_terminal_status(item):
                    terminal = True
                elif item.kind == "status" and item.data.get("status") == AgentStatus.WAITING.value:
                    agent, steps = self._read(self._reread) or (None, [])
                    told = [*self._steps(steps), *self._waiting(agent)]
            elif item is RESYNC or (now >= next_poll and not self.subscription.connected):
                # Messages were missed, or none can arrive: the store has everything.
                told, terminal = self._catch_up()
                read_ended = terminal
                next_poll = now + self.poll_s
            yield from told
            if terminal:
                yield from self._finish(read=not read_ended)
                return
            if not told:
                yield IDLE

    def _relay(self, message: Message) -> list[StepEvent]:
        event = StepEvent.of_message(message)
        if event is None or event.seq <= self.last_seq:
            return []  # unusable, or already told (replayed from the store, or a duplicate)
        if event.seq > self.last_seq + 1:
            # A gap: some publish was lost. The store has everything up to `seq`.
            return self._steps(self._read(self._steps_after) or [])
        self.last_seq = event.seq
        return [event]

    def _catch_up(self) -> tuple[list[StepEvent | Waiting], bool]:
        """The steps not told yet, a wait not told yet (its publish may be the one lost),
        and whether the agent has ended."""
        agent, steps = self._read(self._reread) or (None, [])
        return [*self._steps(steps), *self._waiting(agent)], agent is not None and agent.is_terminal

    def _finish(self, *, read: bool = True) -> Iterator[Told]:
        # Re-read after the terminal status, as a step's publish may have been lost; not
        # when the agent was just read ended: its last steps were written with its end.
        if read:
            yield from self._steps(self._reread()[1])
        self.finished = True
        yield Ended(self.agent_id, self.agent.status, self.agent.stop_reason)

    def _waiting(self, agent: Agent | None) -> list[Waiting]:
        """`waiting` (docs/api.md §4), if the agent waits for an approval, once per wait: a
        WAITING publish heard as it joins is also read as it joins (a client asks once)."""
        if agent is None or agent.status is not AgentStatus.WAITING or not agent.waiting_for:
            return []
        wait = (agent.waiting_for.get("call_id"), agent.updated_at)  # updated_at: its `since`
        if wait == self._told_wait:
            return []
        self._told_wait = wait
        return [Waiting(waiting_event(agent))]

    def _steps(self, steps: list[Step]) -> list[StepEvent]:
        told = []
        for step in steps:
            if step.seq > self.last_seq:
                self.last_seq = step.seq
                told.append(StepEvent.of_step(self.agent_id, step))
        return told

    def _reread(self) -> tuple[Agent | None, list[Step]]:
        """The agent and the steps not told yet, in one read; the agent kept as `agent`
        when it is still there."""
        agent, steps = self.store.agent_with_steps(self.agent_id, after=self.last_seq)
        if agent is not None:
            self.agent = agent
        return agent, steps

    def _steps_after(self) -> list[Step]:
        return self.store.steps_after(self.agent_id, self.last_seq)

    def _read(self, read: Callable[[], T]) -> T | None:
        """A store read that may fail mid-stream: log it and try again later."""
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - the next check tries again
            log.warning("following agent %s: could not read the store: %s", self.agent_id, exc)
            return None
