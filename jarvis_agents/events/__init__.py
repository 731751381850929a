"""Agent events: publish, subscribe, replay and follow.

- `messages`: the channels, `Message`, `step_event` (the one builder of a step's
  event JSON), `status_event`, `encode` / `decode`;
- `bus`: the `EventBus` interface (publish and subscribe);
- `redis_bus` and `memory`: the Redis bus and the in-memory bus, side by side;
- `hub`: one Redis pub/sub connection per process, fanned out to subscriptions;
- `subscription`: what a subscriber reads, whichever bus delivers it;
- `follow`: subscribe, replay from the store, relay live, repair gaps, end;
- `tokens`: live tokens, batched and published only while somebody listens.
"""

from jarvis_agents.events.bus import EventBus, Subscriber
from jarvis_agents.events.follow import (
    IDLE,
    Ended,
    Follower,
    StepEvent,
    StepSource,
    TokenEvent,
    Waiting,
    follow,
    is_terminal_status,
)
from jarvis_agents.events.hub import EventHub, ended_agents
from jarvis_agents.events.memory import MemoryEventBus
from jarvis_agents.events.messages import (
    AGENT_CHANNEL,
    CONTROL_CHANNEL,
    USER_CHANNEL,
    Message,
    decode,
    encode,
    status_event,
    step_event,
    waiting_event,
)
from jarvis_agents.events.redis_bus import RedisEventBus
from jarvis_agents.events.subscription import CLOSED, RESYNC, Signal, Subscription
from jarvis_agents.events.tokens import (
    TOKEN_LISTENERS,
    Listen,
    ReplyTokens,
    TokenBatcher,
    TokenListeners,
    token_event,
)

__all__ = [
    "AGENT_CHANNEL", "CLOSED", "CONTROL_CHANNEL", "IDLE", "RESYNC", "TOKEN_LISTENERS",
    "USER_CHANNEL", "Ended", "EventBus", "EventHub", "Follower", "Listen", "MemoryEventBus", "Message",
    "RedisEventBus", "ReplyTokens", "Signal", "StepEvent", "StepSource", "Subscriber",
    "Subscription", "TokenBatcher", "TokenEvent", "TokenListeners", "Waiting", "decode", "encode",
    "ended_agents", "follow", "is_terminal_status", "status_event", "step_event", "token_event",
    "waiting_event",
]
