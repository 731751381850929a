"""Per-model caps on calls in flight across every worker (`JARVIS_MODEL_CONCURRENCY`, docs/api.md §10).

A fair, crash-safe semaphore per capped model, in Redis. A call takes a ticket (INCR)
and waits in a sorted set in ticket order; slots go to the head of that queue, so calls
over the cap start in the order they asked, across all processes. A slot or a ticket
belongs to its process (the token is `<owner>/<n>`), and a process keeps a key of its
own alive with a short TTL: when the process dies the key expires and its slots and
tickets are dropped by the next grant, so a crash frees its slots within OWNER_TTL_S.

All the bookkeeping is one Lua script (atomic): enter (take a ticket), leave (give the
slot or ticket back), or just look; each then grants free slots to the head of the queue,
dropping dead owners' slots first when none is free.

A process keeps the slots of its calls that ended in a pool of its own while nobody waits
for one: its next call takes one from the pool without asking Redis, so a cap that never
binds costs no round trip per call. The slots stay counted in Redis as this process's, so
the cap holds across the cluster as before; they die with the process's lease. The
process's thread looks at the model's queue every POLL_S while it holds or uses slots: as
soon as a call anywhere waits (or the process's own calls wait), it gives its idle slots
back and its calls take their slots through Redis, in ticket order, until the queue is
empty again. Idle slots also go back after IDLE_S unused. So a waiting call waits at most
POLL_S longer than it would without pools, and only a call that arrives in that window
may take an idle slot ahead of it. The slots of calls that ended while others wait go
back from the process's thread, many in one script call, within POLL_S.

A wait never fails for the cap and is no step timeout (the caller moves its deadline by
the wait); a cancellation or a shutdown wakes it at once and gives the ticket back.
Redis out of reach: the wait goes on until it answers again; a Redis that restarted empty
gets the waiting tokens again (at the back of the queue) within RECHECK_S.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from jarvis_agents.errors import Cancelled
from jarvis_agents.llm.base import StopSignal

log = logging.getLogger(__name__)

POLL_S = 0.05
IDLE_S = 2.0  # an idle slot in a process's pool goes back after this long unused
RECHECK_S = 1.0  # how often the waiting tokens are checked against what Redis holds
OWNER_TTL_S = 10.0
KEY = "jarvis:slots:"  # + model + ":queue" | ":holders" | ":seq"; + "owner:" + owner

# KEYS: queue (token -> ticket), holders (set of tokens), seq. ARGV: op, cap, owner key
# prefix, token, the caller's owner, then for "leave" the tokens that leave, and for "look"
# now and then its waiting tokens. Returns, for "enter", whether the token holds a slot;
# for "look", the number of tickets still waiting, then (if the token argument is not
# empty) the caller's tokens that hold a slot; for "leave", nothing. Dead owners' slots are looked for only when no
# slot is free and a call waits: then they matter, and the holders are at most `cap`.
_SCRIPT = """
local queue, holders, seq = KEYS[1], KEYS[2], KEYS[3]
local op, cap, prefix, token, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local function alive(t)
  return redis.call('EXISTS', prefix .. string.match(t, '^[^/]+')) == 1
end
local function grant()
  while redis.call('SCARD', holders) < cap do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return end
    redis.call('ZREM', queue, head)
    if alive(head) then redis.call('SADD', holders, head) end
  end
end
if op == 'enter' then
  -- A free slot and nobody waiting: the common case, in three commands.
  if redis.call('ZCARD', queue) == 0 and redis.call('SCARD', holders) < cap then
    redis.call('SADD', holders, token)
    return 1
  end
  redis.call('ZADD', queue, redis.call('INCR', seq), token)
elseif op == 'look' then
  -- Waiting tokens Redis lost (a restart) or dropped (their owner's key had lapsed).
  for i = 6, #ARGV do
    local t = ARGV[i]
    if not redis.call('ZSCORE', queue, t) and redis.call('SISMEMBER', holders, t) == 0 then
      redis.call('ZADD', queue, redis.call('INCR', seq), t)
    end
  end
elseif op == 'leave' then
  for i = 6, #ARGV do
    redis.call('SREM', holders, ARGV[i])
    redis.call('ZREM', queue, ARGV[i])
  end
end
grant()
if redis.call('SCARD', holders) >= cap and redis.call('ZCARD', queue) > 0 then
  for _, t in ipairs(redis.call('SMEMBERS', holders)) do
    if not alive(t) then redis.call('SREM', holders, t) end
  end
  grant()
end
if op == 'enter' then return redis.call('SISMEMBER', holders, token) end
if op == 'leave' then return {} end
local mine = {redis.call('ZCARD', queue)}
if token == '' then return mine end  -- the count alone: nothing of this process's changed
for _, t in ipairs(redis.call('SMEMBERS', holders)) do
  if string.sub(t, 1, #owner + 1) == owner .. '/' then table.insert(mine, t) end
end
return mine
"""


@dataclass
class _Waiter:
    model: str
    token: str
    event: threading.Event = field(default_factory=threading.Event)
    entered: bool = False
    granted: bool = False


class ModelSlots:
    """This process's side of the per-model semaphores."""

    def __init__(
        self, redis_client: Any, caps: Mapping[str, int], *, poll_s: float = POLL_S,
        owner_ttl_s: float = OWNER_TTL_S, idle_s: float = IDLE_S,
    ) -> None:
        self.redis = redis_client
        self.caps = dict(caps)
        self.poll_s = poll_s
        self.owner_ttl_s = owner_ttl_s
        self.idle_s = idle_s
        self.owner = uuid.uuid4().hex
        self._script = redis_client.register_script(_SCRIPT)
        self._numbers = itertools.count()
        self._waiting: dict[str, _Waiter] = {}  # by token
        self._live: dict[str, str] = {}  # token -> model of the calls in slot() now
        self._leaving: dict[str, list[str]] = {}  # by model: slots to give back, by the loop
        self._pool: dict[str, list[str]] = {}  # by model: idle slots this process keeps
        self._contended: set[str] = set()  # models whose calls wait (here or elsewhere)
        self._used_at: dict[str, float] = {}  # by model: when its pool was last used
        self._napping = False  # the loop sleeps until the lease is due (nothing in a slot)
        self._lock = threading.Lock()
        self._wake = threading.Event()  # a waiter arrived: look now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed_at = -float("inf")
        self._checked_at = -float("inf")

    def cap(self, model: str) -> int | None:
        return self.caps.get(model)

    def start(self) -> None:
        self._renew()
        self._thread = threading.Thread(target=self._loop, name="jarvis-model-slots", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            with self._lock:
                for model, tokens in self._pool.items():
                    self._leaving.setdefault(model, []).extend(tokens)
                self._pool.clear()
            self._give_back()
            self.redis.delete(KEY + "owner:" + self.owner)  # its slots are free at once
        except Exception as exc:  # noqa: BLE001 - it expires anyway
            log.warning("could not release this process's model slots: %s", exc)

    @contextmanager
    def slot(self, model: str, *, should_stop: Callable[[], bool]) -> Iterator[float]:
        """Hold one of `model`'s slots while the block runs; yields how long it waited.

        Raises Cancelled if `should_stop` turns true while it waits.
        """
        cap = self.caps.get(model)
        if cap is None:
            yield 0.0
            return
        began = time.monotonic()
        with self._lock:
            idle = self._pool.get(model) if model not in self._contended else None
            if idle:  # a slot this process holds already: no round trip
                waiter = _Waiter(model, idle.pop(), entered=True, granted=True)
                self._used_at[model] = began
            else:
                waiter = _Waiter(model, f"{self.owner}/{next(self._numbers)}")
            self._live[waiter.token] = model
        try:
            if not waiter.granted:
                self._enter(waiter, cap)
            if not waiter.granted:
                # From now on the loop looks for its slot (and enters it, if Redis failed).
                with self._lock:
                    self._waiting[waiter.token] = waiter
                    self._contended.add(model)  # the slots of calls that end go back
                self._wake.set()
                self._await(waiter, should_stop)
        except BaseException:
            self._leave(waiter)
            raise
        try:
            yield time.monotonic() - began
        finally:
            self._leave(waiter)

    # --- the waiting side ----------------------------------------------------------

    def _enter(self, waiter: _Waiter, cap: int) -> None:
        try:
            granted = self._run("enter", waiter.model, cap, waiter.token)
        except Exception as exc:  # noqa: BLE001 - the loop enters it when Redis is back
            log.warning("model slots: Redis did not answer (%s); waiting", exc)
            return
        waiter.entered = True
        if granted:
            waiter.granted = True
            waiter.event.set()

    def _await(self, waiter: _Waiter, should_stop: Callable[[], bool]) -> None:
        poll_s = should_stop.poll_s if isinstance(should_stop, StopSignal) else 0.1
        waking = should_stop.waking(waiter.event.set) if isinstance(should_stop, StopSignal) else None
        with waking if waking is not None else nullcontext():
            while not waiter.granted:
                if should_stop():
                    raise Cancelled("the agent was cancelled while waiting for a model slot")
                waiter.event.wait(poll_s)
                waiter.event.clear()

    def _leave(self, waiter: _Waiter) -> None:
        with self._lock:
            self._waiting.pop(waiter.token, None)
            self._live.pop(waiter.token, None)
            if waiter.granted and waiter.model not in self._contended and not self._stop.is_set():
                # Nobody waits: kept for this process's next call (the loop gives it back
                # when someone waits, or after IDLE_S unused).
                self._pool.setdefault(waiter.model, []).append(waiter.token)
                self._used_at[waiter.model] = time.monotonic()
            elif waiter.entered:
                # Given back by the loop, several in one script call, within POLL_S: the
                # caller goes on without a round trip.
                self._leaving.setdefault(waiter.model, []).append(waiter.token)
            # Now if a waiter here may want the slot, or the loop sleeps for long.
            wake = waiter.entered and (self._napping or any(
                not w.granted for w in self._waiting.values()))
        if wake:
            self._wake.set()

    # --- the process's thread ------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._give_back()
                if time.monotonic() - self._renewed_at >= self.owner_ttl_s / 3:
                    self._renew()
                self._look()
                self._give_back()  # the idle slots the look found wanted elsewhere
            except Exception as exc:  # noqa: BLE001 - Redis restarts; the next round tries
                log.warning("model slots: %s", exc)
            with self._lock:
                # Every POLL_S while calls are in a slot (their slots go back in batches),
                # wait, or idle slots are kept; else until the lease needs renewing or a
                # call wakes it.
                self._napping = not self._live and not self._leaving and not any(
                    self._pool.values())
            self._wake.wait(self.owner_ttl_s / 3 if self._napping else self.poll_s)
            self._wake.clear()
            self._napping = False

    def _give_back(self) -> None:
        """Give back the slots and tickets of the calls that left; kept for the next round
        if Redis does not answer (the owner's lease frees them in the end anyway)."""
        with self._lock:
            leaving, self._leaving = self._leaving, {}
        for model, tokens in leaving.items():
            try:
                self._run("leave", model, self.caps[model], "", *tokens)
            except Exception:
                with self._lock:
                    self._leaving.setdefault(model, []).extend(tokens)
                raise

    def _look(self) -> None:
        with self._lock:
            waiting = [w for w in self._waiting.values() if not w.granted]
            # Models whose calls wait, run, or whose idle slots are kept: whether anyone
            # waits decides where their slots go.
            models = ({w.model for w in waiting} | set(self._live.values()) | self._contended
                      | {m for m, tokens in self._pool.items() if tokens})
        for waiter in [w for w in waiting if not w.entered]:
            self._enter(waiter, self.caps[waiter.model])
        # Every RECHECK_S, the waiting tokens go along, to be queued again if Redis lost them.
        recheck = time.monotonic() - self._checked_at >= RECHECK_S
        if recheck:
            self._checked_at = time.monotonic()
        for model in models:
            tokens = [w.token for w in waiting if w.entered and w.model == model]
            # Which slots are this process's matters only to its waiters, and now and then
            # to its idle slots (Redis may have lost them); else the count of tickets will do.
            full = recheck or bool(tokens)
            queued, *mine = self._run("look", model, self.caps[model], "1" if full else "",
                                      *(tokens if recheck else ()))
            if full:
                self._grant(model, mine)
            self._tend(model, int(queued), set(mine) if full else None)

    def _tend(self, model: str, queued: int, mine: set[str] | None) -> None:
        """Give the idle slots back if anyone waits for one, or they went unused for
        IDLE_S; and those Redis no longer counts as this process's (a restart)."""
        with self._lock:
            if queued or any(w.model == model and not w.granted for w in self._waiting.values()):
                self._contended.add(model)
            else:
                self._contended.discard(model)
            idle = self._pool.get(model, [])
            unused = time.monotonic() - self._used_at.get(model, 0.0) >= self.idle_s
            if model in self._contended or unused:
                back, self._pool[model] = idle, []
            elif mine is None:
                back = []
            else:
                # A slot Redis lost would let a call run over the cap: not used again.
                back = [t for t in idle if t not in mine]
                self._pool[model] = [t for t in idle if t in mine]
        if back:
            with self._lock:  # the loop's next round gives them back
                self._leaving.setdefault(model, []).extend(back)

    def _renew(self) -> None:
        self.redis.set(KEY + "owner:" + self.owner, "1", px=int(self.owner_ttl_s * 1000))
        self._renewed_at = time.monotonic()

    def _run(self, op: str, model: str, cap: int, token: str, *waiting: str) -> Any:
        keys = [f"{KEY}{model}:queue", f"{KEY}{model}:holders", f"{KEY}{model}:seq"]
        found = self._script(keys=keys, args=[op, cap, KEY + "owner:", token, self.owner, *waiting])
        if op == "enter":
            return bool(found)
        return [t.decode() if isinstance(t, bytes) else t for t in found]  # the count: an int

    def _grant(self, model: str, holders: list[str]) -> None:
        """Wake the waiters whose slot came; give back the slots of calls already gone
        (a ticket taken again by a recheck that crossed its call's leave)."""
        with self._lock:
            granted = [self._waiting[t] for t in holders if t in self._waiting]
            idle = set(self._pool.get(model, ()))
            orphans = [t for t in holders if t not in self._live and t not in idle]
        for waiter in granted:
            if not waiter.granted:
                waiter.granted = True
                waiter.event.set()
        if orphans:
            self._run("leave", model, self.caps[model], "", *orphans)
