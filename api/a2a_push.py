"""The four push notification config methods (README, A2A)."""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig,
)
from flask import Response

from api.a2a_rpc import RequestId, result, tasks
from api.auth import current_user


def create(request_id: RequestId, params: TaskPushNotificationConfig) -> Response:
    a2a = tasks()
    agent = a2a.agent(current_user().id, params.task_id)
    return result(request_id, a2a.push.put(a2a.push.checked(agent.id, params)))


def get(request_id: RequestId, params: GetTaskPushNotificationConfigRequest) -> Response:
    a2a = tasks()
    return result(request_id, a2a.push.get(a2a.agent(current_user().id, params.task_id), params.id))


def list_configs(request_id: RequestId, params: ListTaskPushNotificationConfigsRequest) -> Response:
    a2a = tasks()
    configs = a2a.push.list(a2a.agent(current_user().id, params.task_id))
    return result(request_id, ListTaskPushNotificationConfigsResponse(configs=configs))


def delete(request_id: RequestId, params: DeleteTaskPushNotificationConfigRequest) -> Response:
    a2a = tasks()
    a2a.push.delete(a2a.agent(current_user().id, params.task_id), params.id)
    return result(request_id, None)


METHODS: dict[str, tuple[type[Any], Any]] = {
    "CreateTaskPushNotificationConfig": (TaskPushNotificationConfig, create),
    "GetTaskPushNotificationConfig": (GetTaskPushNotificationConfigRequest, get),
    "ListTaskPushNotificationConfigs": (ListTaskPushNotificationConfigsRequest, list_configs),
    "DeleteTaskPushNotificationConfig": (DeleteTaskPushNotificationConfigRequest, delete),
}
