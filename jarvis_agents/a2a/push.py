"""A2A push notification configs (README, A2A): set, read, list and delete a task's.

A config's URL is checked as a webhook's is (private and loopback addresses refused
unless the operator allows them), here and again at each delivery. Deliveries are the
webhook outbox's (store/a2a_push.py), signed with JARVIS_WEBHOOK_SECRET like every
webhook: without a secret, push notifications are not supported.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import Agent
from jarvis_agents.store.a2a_push import PushConfig, PushConfigs

MAX_ID_CHARS = 256


class PushNotifications:
    def __init__(self, configs: PushConfigs, *, secret: str | None,
                 check_url: Callable[[str], None] | None) -> None:
        self.configs = configs
        self.secret = secret
        self.check_url = check_url

    def checked(self, agent_id: uuid.UUID, config: TaskPushNotificationConfig) -> PushConfig:
        """The config as it is stored, its URL checked; a new id where it has none."""
        if not self.secret:
            raise PushNotificationNotSupportedError(
                "push notifications are signed and sent as webhooks: the server needs "
                "JARVIS_WEBHOOK_SECRET (README, Webhooks)")
        if not config.url:
            raise InvalidParamsError("a push notification config needs a `url`")
        if len(config.id) > MAX_ID_CHARS:
            raise InvalidParamsError(f"a config's id is at most {MAX_ID_CHARS} characters")
        if self.check_url is not None:
            try:
                self.check_url(config.url)
            except RequestError as exc:
                raise InvalidParamsError(str(exc), data={"code": exc.code}) from None
        auth = config.authentication if config.HasField("authentication") else None
        return PushConfig(agent_id=agent_id, id=config.id or str(uuid.uuid4()), url=config.url,
                          token=config.token or None,
                          auth_scheme=auth.scheme or None if auth else None,
                          auth_credentials=auth.credentials or None if auth else None)

    def put(self, checked: PushConfig) -> TaskPushNotificationConfig:
        return as_proto(self.configs.put(checked))

    def get(self, agent: Agent, config_id: str) -> TaskPushNotificationConfig:
        found = self.configs.get(agent.id, config_id)
        if found is None:
            raise TaskNotFoundError(
                f"task {agent.id} has no push notification config {config_id[:80]!r}")
        return as_proto(found)

    def list(self, agent: Agent) -> list[TaskPushNotificationConfig]:
        return [as_proto(config) for config in self.configs.of_agent(agent.id)]

    def delete(self, agent: Agent, config_id: str) -> None:
        if not self.configs.delete(agent.id, config_id):
            raise TaskNotFoundError(
                f"task {agent.id} has no push notification config {config_id[:80]!r}")


def as_proto(config: PushConfig) -> TaskPushNotificationConfig:
    proto = TaskPushNotificationConfig(id=config.id, task_id=str(config.agent_id), url=config.url,
                                       token=config.token or "")
    if config.auth_scheme:
        proto.authentication.CopyFrom(AuthenticationInfo(
            scheme=config.auth_scheme, credentials=config.auth_credentials or ""))
    return proto
