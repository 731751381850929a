"""A2A push notification configs in SQL (README, A2A), and the deliveries they owe.

A task's configs are rows of `a2a_push_configs`. A status change that owes a webhook (to
WAITING, or to an end: store/outbox.py) owes, in its own transaction, one delivery per
config of its agent: a row of the webhook outbox whose body is the change as the spec's
StreamResponse, whose headers carry the config's token and credentials, and which the
webhook dispatchers send, check against private addresses, and retry like any other.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, delete, insert, select

from jarvis_agents.a2a.tasks import push_body
from jarvis_agents.lifecycle import Agent, utcnow
from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.models import A2APushConfigRow

configs = A2APushConfigRow.__table__

TOKEN_HEADER = "X-A2A-Notification-Token"

# An agent's configs, read in the transaction of its change (here and store/postgres.py).
CONFIGS_OF = Prebuilt(
    select(configs.c.id, configs.c.url, configs.c.token, configs.c.auth_scheme,
           configs.c.auth_credentials)
    .where(configs.c.agent_id == bindparam("agent_id", type_=configs.c.agent_id.type))
    .order_by(configs.c.created_at, configs.c.id)
)
# store/postgres.py's one-statement change holds only for an agent with no configs (they are owed).
NO_CONFIGS_SQL = "NOT EXISTS (SELECT 1 FROM a2a_push_configs WHERE agent_id = %(id)s)"


@dataclass(frozen=True)
class PushConfig:
    agent_id: uuid.UUID
    id: str
    url: str
    token: str | None = None
    auth_scheme: str | None = None
    auth_credentials: str | None = None


def push_headers(config: dict[str, Any]) -> str | None:
    """The headers of its own a push to `config` sends, as JSON text."""
    headers = {}
    if config.get("token"):
        headers[TOKEN_HEADER] = config["token"]
    if config.get("auth_scheme"):
        headers["Authorization"] = f"{config['auth_scheme']} {config.get('auth_credentials') or ''}".strip()
    return json.dumps(headers) if headers else None


def owed_pushes(agent: Agent, event: str, config_rows: list[dict[str, Any]], *,
                now: datetime) -> list[dict[str, Any]]:
    """The outbox's OWE values (store/outbox.py) of a push per config: `event` as the
    outbox names it, the body the change as the spec's StreamResponse."""
    if not config_rows:
        return []
    body = push_body(agent)
    return [{"id": uuid.uuid4(), "agent_id": agent.id, "user_id": agent.user_id, "event": event,
             "url": row["url"], "payload": body, "headers": push_headers(row), "now": now}
            for row in config_rows]


class PushConfigs:
    """The configs, over the repository's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def put(self, config: PushConfig) -> PushConfig:
        """Add the config, or replace the task's config of the same id."""
        with self.engine.begin() as conn:
            conn.execute(delete(configs).where(configs.c.agent_id == config.agent_id,
                                               configs.c.id == config.id))
            conn.execute(insert(configs).values(
                agent_id=config.agent_id, id=config.id, url=config.url, token=config.token,
                auth_scheme=config.auth_scheme, auth_credentials=config.auth_credentials,
                created_at=utcnow()))
        return config

    def of_agent(self, agent_id: uuid.UUID) -> list[PushConfig]:
        with self.engine.connect() as conn:
            rows = conn.execute(CONFIGS_OF.statement, {"agent_id": agent_id}).mappings().all()
        return [PushConfig(agent_id=agent_id, **row) for row in rows]

    def get(self, agent_id: uuid.UUID, config_id: str) -> PushConfig | None:
        return next((c for c in self.of_agent(agent_id) if c.id == config_id), None)

    def delete(self, agent_id: uuid.UUID, config_id: str) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(delete(configs).where(
                configs.c.agent_id == agent_id, configs.c.id == config_id)).rowcount == 1
