"""The webhook dispatcher: in every worker process, sends the deliveries that are due.

A delivery is a row the agent's status change committed with its body (store/outbox.py).
A thread claims due rows every PERIOD_S, or as soon as the senders have started what
it claimed before and half of them are free: up to MAX_CLAIM at once while the
receivers answer fast, as many as the senders can try well within the lease when they
do not; each claim leases its rows for LEASE_S. A try still waiting after half its lease
is handed back untried rather than sent late (it could race the next claim). A sender
makes one try — over within the sender's try deadline, however the receiver trickles —,
records its outcome and, for a failure, when the next try is due: RETRY_DELAYS_S after
the try. After the last try of that schedule the delivery is dead, and never tried
again; so is one whose last try's worker died (the claim that finds its lease run out
marks it). A worker killed mid-try leaves its rows leased: another worker's dispatcher
takes them LEASE_S + PERIOD_S later at the most (README, Webhooks). Delivery is at least
once: a receiver drops repeats by `webhook-id`, which every try of a delivery shares.

One user cannot hold every sender (README, Webhooks): a user has at most PER_USER tries
under way in a worker, the users with tries waiting are served in turns
(webhooks/turns.py), and a claim takes the users' due rows in turns too, leaving out
those who already have PER_USER tries waiting here.

Every try sends the same bytes: the body made with the change that owed the delivery.
Only the `webhook-timestamp` and the Standard Webhooks signature over it are new per try.

Per batch of claimed deliveries the database sees two statements, not two per delivery:
the claim, and one record of those delivered (made before the next claim; a failure is
recorded at once, with its schedule).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from jarvis_agents.config import WEBHOOK_LEASE_S, WEBHOOK_RETRY_DELAYS_S, Settings
from jarvis_agents.lifecycle import utcnow
from jarvis_agents.store.outbox import Delivery, webhook_body
from jarvis_agents.store.repository import Repository
from jarvis_agents.webhooks.addresses import Resolver, system_resolver
from jarvis_agents.webhooks.sender import WebhookSender
from jarvis_agents.webhooks.signing import Signer
from jarvis_agents.webhooks.turns import Turns

log = logging.getLogger(__name__)

# The wait before each retry, and how long a claimed try is its claimer's (config.py:
# JARVIS_WEBHOOK_RETRY_DELAYS and JARVIS_WEBHOOK_LEASE, which only tests change).
RETRY_DELAYS_S = WEBHOOK_RETRY_DELAYS_S
LEASE_S = WEBHOOK_LEASE_S
# How often an idle dispatcher looks for due deliveries.
PERIOD_S = 1.0
SENDERS = 16
# The most tries of one user under way in a worker at once: half its senders, so that
# one user's slow or dead receivers leave the other half to everyone else's.
PER_USER = SENDERS // 2
# The most one claim takes: with receivers that answer at once, a busy worker claims
# every due delivery in one statement and records them delivered in one (each costs
# the worker much the same CPU, whatever its size).
MAX_CLAIM = 64

# A claimed try: its delivery, the body it sends, when it was claimed (time.monotonic()).
Claimed = tuple[Delivery, bytes, float]


def retry_at(attempt: int, now: datetime, *,
             delays_s: tuple[float, ...] = RETRY_DELAYS_S) -> datetime | None:
    """When the try after try number `attempt` (from 1) is due; None when none is left."""
    if attempt > len(delays_s):
        return None
    return now + timedelta(seconds=delays_s[attempt - 1])


class WebhookDispatcher:
    """Claims due webhook deliveries and sends them, a few at a time, users in turns."""

    def __init__(
        self, *, repository: Repository, signer: Signer, sender: WebhookSender,
        senders: int = SENDERS, per_user: int = PER_USER, period_s: float = PERIOD_S,
        lease_s: float = LEASE_S, retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        clock: Callable[[], datetime] = utcnow, outcomes: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.repository = repository
        # Counts each try's outcome (jarvis_webhook_deliveries_total): delivered, failed
        # (to be tried again) or dead (never to be tried again).
        self.outcomes = outcomes
        self.store = repository.outbox
        self.signer = signer
        self.sender = sender
        self.senders = senders
        self.period_s = period_s
        self.lease_s = lease_s
        self.retry_delays_s = retry_delays_s
        self.clock = clock
        self._lock = threading.Lock()  # guards what follows
        self._for_senders = threading.Condition(self._lock)
        self._for_claimer = threading.Condition(self._lock)
        self._waiting: Turns[uuid.UUID | None, Claimed] = Turns(per_user)  # claimed, by user
        self._delivered: list[uuid.UUID] = []  # delivered, not yet recorded (see flush)
        self._idle = senders  # senders not in a try
        self._try_s = 0.0  # how long the recent tries took (a moving average)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_settings(
        cls, repository: Repository, settings: Settings, *,
        resolver: Resolver = system_resolver, verify: ssl.SSLContext | None = None,
        outcomes: Callable[[str], None] = lambda _: None,
    ) -> WebhookDispatcher | None:
        """The dispatcher of this deployment; None without JARVIS_WEBHOOK_SECRET (nothing
        could be signed: what is owed waits for a worker that has the secret)."""
        if not settings.webhook_secret:
            return None
        sender = WebhookSender(allow_private=settings.webhook_allow_private, resolver=resolver,
                               verify=verify, senders=SENDERS)
        return cls(repository=repository, signer=Signer(settings.webhook_secret), sender=sender,
                   lease_s=settings.webhook_lease_s,
                   retry_delays_s=settings.webhook_retry_delays_s, outcomes=outcomes)

    @property
    def tries(self) -> int:
        """How many tries a delivery gets: the first, then one after each retry delay."""
        return 1 + len(self.retry_delays_s)

    # --- tries ------------------------------------------------------------------------

    def claim(
        self, limit: int, *, busy_users: Collection[uuid.UUID | None] = (),
    ) -> list[tuple[Delivery, bytes]]:
        """Claim up to `limit` due deliveries, none of `busy_users`', each with the body
        its try sends. Those whose last try's lease ran out are dead now, not tried."""
        due = self.store.claim_due(now=self.clock(), lease_s=self.lease_s, limit=limit,
                                   tries=self.tries,
                                   busy_users=[u for u in busy_users if u is not None])
        for delivery in due:
            if delivery.dead:
                self.outcomes("dead")
                log.error("webhook %s (%s) of agent %s is dead: its last try (%s) never "
                          "reported back", delivery.id, delivery.event, delivery.agent_id,
                          delivery.attempt)
        live = [delivery for delivery in due if not delivery.dead]
        # A row owed by an earlier release has no body yet: its agent as it is now.
        unbuilt = [d.agent_id for d in live if d.payload is None]
        agents = {agent.id: agent for agent in self.repository.get_many(unbuilt)} if unbuilt else {}
        tries = []
        for delivery in live:
            if delivery.payload is not None:
                tries.append((delivery, delivery.payload.encode()))
            elif (agent := agents.get(delivery.agent_id)) is not None:
                tries.append((delivery, webhook_body(agent).encode()))
            # else: the agent was deleted, and its deliveries with it (ON DELETE CASCADE)
        return tries

    def deliver(self, delivery: Delivery, body: bytes) -> bool:
        """Make one try of a claimed delivery; True when it was delivered (recorded by
        `flush`), else the failure and the next try (or its death) are recorded now."""
        began = self.clock()
        headers = self.signer.headers(
            delivery_id=delivery.id, event=delivery.event, agent_id=delivery.agent_id,
            body=body, now=began,
        )
        if delivery.headers:  # an A2A push's token and credentials (store/a2a_push.py)
            headers.update(json.loads(delivery.headers))
        outcome = self.sender.post(delivery.url, body, headers)
        if outcome.delivered:
            with self._lock:
                self._delivered.append(delivery.id)
            self.outcomes("delivered")
            return True
        now = self.clock()
        error = outcome.error or "failed"
        retry = retry_at(delivery.attempt, now, delays_s=self.retry_delays_s)
        recorded = self.store.failed(
            delivery, payload=body.decode(), error=error, began=began,
            took_ms=round(outcome.seconds * 1000), now=now, retry_at=retry)
        if retry is not None:
            self.outcomes("failed")
            if recorded:
                log.warning("webhook %s (%s) of agent %s, try %s failed (%s); next in %s s",
                            delivery.id, delivery.event, delivery.agent_id, delivery.attempt,
                            error, self.retry_delays_s[delivery.attempt - 1])
        elif recorded:  # else its lease ran out first, and a claim found it dead
            self.outcomes("dead")
            log.error("webhook %s (%s) of agent %s is dead after %s tries; last: %s",
                      delivery.id, delivery.event, delivery.agent_id, delivery.attempt, error)
        return False

    def flush(self) -> None:
        """Record the deliveries made since the last flush, in one statement."""
        with self._lock:
            done, self._delivered = self._delivered, []
        if done:
            try:
                self.store.delivered(done, now=self.clock())
            except Exception:
                with self._lock:  # the next flush tries again
                    self._delivered.extend(done)
                raise

    def send_due(self) -> int:
        """Claim what is due and try each, in this thread; how many were tried (tests, tools)."""
        tries = self.claim(self.senders)
        for delivery, body in tries:
            self.deliver(delivery, body)
        self.flush()
        return len(tries)

    # --- in a worker process ---------------------------------------------------------

    def start(self) -> None:
        """Start the claiming thread and the senders (daemons: a try cut short is retried)."""
        self._spawn("jarvis-webhooks", self._claim_loop)
        for number in range(self.senders):
            self._spawn(f"jarvis-webhook-sender-{number}", self._send_loop)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop claiming; tries under way get `timeout_s` to end (their lease covers the
        rest), and those still waiting for a sender are handed back untried."""
        self._stopping.set()
        with self._lock:
            self._for_senders.notify_all()
            self._for_claimer.notify_all()
        until = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))
        with self._lock:
            waiting = self._waiting.drain()
        try:
            for delivery, _, _ in waiting:
                self.store.release(delivery, now=self.clock())
            self.flush()
        except Exception as exc:  # noqa: BLE001 - their leases bring them back; unrecorded: sent again
            log.warning("could not hand back or record webhooks: %s", exc)
        self.sender.close()

    @property
    def threads(self) -> list[threading.Thread]:
        """The claiming thread and the senders, once started (bench.outbox_drain reads their CPU)."""
        return list(self._threads)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _claim_loop(self) -> None:
        batch = max(1, self.senders // 2)
        passed_over: set[uuid.UUID | None] | None = None  # see below
        while not self._stopping.is_set():
            with self._lock:
                # Claim once what was claimed before can all be started and half the
                # senders are free, not for each sender as it frees up: each claim costs
                # a claim and a record whatever its size. After a claim that found less
                # than it asked for, only once a user it passed over has room again:
                # nothing else was due. Whoever is idle after a period gets claimed for anyway.
                deadline = time.monotonic() + self.period_s
                while not self._stopping.is_set():
                    if (not self._waiting.startable() and self._idle >= batch and (
                            passed_over is None
                            or not passed_over <= set(self._waiting.full()))):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._for_claimer.wait(left)
                if self._waiting.startable() or self._idle == 0 or self._stopping.is_set():
                    continue
                limit = self._claim_limit()
                busy = self._waiting.full()
            try:
                self.flush()
                tries = self.claim(limit, busy_users=busy)
            except Exception as exc:  # noqa: BLE001 - the database is away; the next period retries
                log.warning("could not claim due webhooks: %s", exc)
                tries, busy = [], []
            claimed = time.monotonic()
            with self._lock:
                for delivery, body in tries:
                    self._waiting.put(delivery.user_id, (delivery, body, claimed))
                self._for_senders.notify(len(tries))
            passed_over = set(busy) if len(tries) < limit else None

    def _claim_limit(self) -> int:
        """How many to claim: as many as the senders can try within a quarter of the lease
        at the pace of the recent tries (MAX_CLAIM when receivers answer at once), and
        never fewer than the idle senders. Called with the lock held."""
        pace = int(self.senders * self.lease_s / 4 / max(self._try_s, 0.001))
        return max(self._idle, min(MAX_CLAIM, pace))

    def _send_loop(self) -> None:
        batch = max(1, self.senders // 2)
        while True:
            with self._lock:
                found = None
                while not self._stopping.is_set() and (found := self._waiting.take()) is None:
                    self._for_senders.wait()
                if found is None:  # stopping: stop() hands back what still waits
                    return
                self._idle -= 1
            user, (delivery, body, claimed) = found
            began = time.monotonic()
            tried = False
            try:
                if self._stopping.is_set() or began - claimed > self.lease_s / 2:
                    # Stopping, or waited so long (receivers slower than the pace the
                    # claim counted on) that the try could outlive its lease and race
                    # another dispatcher's: handed back, due at once, not counted.
                    self.store.release(delivery, now=self.clock())
                else:
                    tried = True
                    self.deliver(delivery, body)
            except Exception as exc:  # noqa: BLE001 - the lease brings the try back
                log.warning("webhook %s of agent %s: the try broke off: %s",
                            delivery.id, delivery.agent_id, exc)
            finally:
                with self._lock:
                    self._waiting.done(user)
                    self._idle += 1
                    if tried:
                        self._try_s += (time.monotonic() - began - self._try_s) / 8
                    if not self._waiting.startable() and self._idle >= batch:
                        self._for_claimer.notify()
