"""A ChatModel decorator for the cluster: the per-model cap, and each call's figures.

Around any ChatModel (the router, in a worker): a call to a capped model first waits
for a slot (`model_slots.ModelSlots`); the wait moves the call's deadline by as long,
so it never counts as a step timeout. Each call's time (the wait not included), its
wait, and its tokens go into the figures the API reports (`cluster_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from jarvis_agents.cluster_metrics import ClusterMetrics
from jarvis_agents.llm.base import Capabilities, ChatModel, ChatReply, ChatRequest, OnDelta
from jarvis_agents.model_slots import ModelSlots


class GovernedModel:
    """`inner`, with `slots`' caps (None: no cap) and calls counted into `metrics`."""

    def __init__(self, inner: ChatModel, *, slots: ModelSlots | None, metrics: ClusterMetrics) -> None:
        self.inner = inner
        self.slots = slots
        self.metrics = metrics

    def complete(
        self,
        request: ChatRequest,
        *,
        deadline: float,
        should_stop: Callable[[], bool],
        on_delta: OnDelta | None = None,
    ) -> ChatReply:
        model = request.model
        capped = self.slots is not None and self.slots.cap(model) is not None
        slot: Any = (self.slots.slot(model, should_stop=should_stop)  # type: ignore[union-attr]
                     if capped else nullcontext(0.0))
        with slot as waited_s:
            if capped:
                self.metrics.observe("jarvis_model_wait_seconds", model, seconds=waited_s)
            began = time.monotonic()
            reply = self.inner.complete(request, deadline=deadline + waited_s,
                                        should_stop=should_stop, on_delta=on_delta)
        self.metrics.observe("jarvis_planning_seconds", model, seconds=time.monotonic() - began)
        if reply.usage is not None:
            self.metrics.inc("jarvis_model_tokens", model, "input", amount=reply.usage.input_tokens)
            self.metrics.inc("jarvis_model_tokens", model, "output", amount=reply.usage.output_tokens)
        return reply

    def capabilities(
        self, model: str, *, deadline: float, should_stop: Callable[[], bool]
    ) -> Capabilities:
        return self.inner.capabilities(model, deadline=deadline, should_stop=should_stop)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
