"""A2A push notifications (README, A2A): the four config methods with the `a2a-sdk`
client, and each task's end pushed through the webhook outbox with the config's token."""

from __future__ import annotations

import json
import threading

import pytest
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import TaskNotFoundError

from jarvis_agents.demo.server import plain_answer
from tests.support.a2a_client import A2A, message
from tests.support.webhook_receiver import WebhookReceiver

pytest_plugins = ["tests.support.api_fixtures"]
pytestmark = pytest.mark.integration

TOKEN = "the-receivers-own-token"


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    # The receiver listens on loopback, which webhooks may reach only when allowed.
    return {"JARVIS_WEBHOOK_SECRET": "s3cret", "JARVIS_WEBHOOK_ALLOW_PRIVATE": "1"}


def _pushed(received) -> dict:
    return json.loads(received.body)["statusUpdate"]


def test_a_config_given_with_the_message_pushes_the_tasks_end(stack):
    with WebhookReceiver() as receiver, A2A(stack.api.url, stack.api.user()) as a2a:
        request = SendMessageRequest(message=message("hello"), configuration=SendMessageConfiguration(
            return_immediately=True, task_push_notification_config=TaskPushNotificationConfig(
                url=receiver.url, token=TOKEN)))
        task = a2a.run(a2a.blocking.send_message(request).__anext__()).task
        (push,) = receiver.wait_for(1, timeout_s=30)
        assert push.header("X-A2A-Notification-Token") == TOKEN
        update = _pushed(push)
        assert (update["taskId"], update["status"]["state"]) == (task.id, "TASK_STATE_COMPLETED")
        assert update["contextId"] == task.context_id


def test_the_four_config_methods_and_a_push_per_config(stack):
    answer = threading.Event()  # the model answers once the configs are set

    def held(request: dict) -> str:
        answer.wait(30)
        return plain_answer(request)

    stack.fake.responder = held
    with WebhookReceiver() as receiver, A2A(stack.api.url, stack.api.user()) as a2a:
        task = a2a.send(message("hello"), return_immediately=True)
        made = a2a.run(a2a.blocking.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="mine", url=receiver.url,
                                       token=TOKEN)))
        assert (made.id, made.task_id, made.token) == ("mine", task.id, TOKEN)
        got = a2a.run(a2a.blocking.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="mine")))
        assert got.url == receiver.url
        listed = a2a.run(a2a.blocking.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)))
        assert [c.id for c in listed.configs] == ["mine"]
        a2a.run(a2a.blocking.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="mine")))
        with pytest.raises(TaskNotFoundError):
            a2a.run(a2a.blocking.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="mine")))
        with A2A(stack.api.url, stack.api.user()) as other, pytest.raises(TaskNotFoundError):
            other.run(other.blocking.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)))

        second = a2a.send(message("again"), return_immediately=True)
        for config_id in ("a", "b"):
            a2a.run(a2a.blocking.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=second.id, id=config_id,
                                           url=f"{receiver.url}/{config_id}", token=config_id)))
        answer.set()
        pushes = receiver.wait_for(2, timeout_s=30)
        assert sorted(p.header("X-A2A-Notification-Token") for p in pushes) == ["a", "b"]
        assert {_pushed(p)["taskId"] for p in pushes} == {second.id}
