"""The A2A use cases (README, A2A), over the agents' own (jarvis_agents/service.py).

SendMessage creates an agent whose goal is the message's text (the assistant named by
`metadata.assistant`, a follow-up in the thread its `contextId` names), or, with a
`taskId` of an INPUT_REQUIRED task, answers that task's approval. The message id is the
create's idempotency key: a client that repeats a message gets the same task. Errors are
the SDK's A2A errors; another user's task is TaskNotFoundError, as an unknown one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from jarvis_agents.a2a.push import PushNotifications
from jarvis_agents.a2a.tasks import STATUSES, parse_task_id, task_of
from jarvis_agents.errors import Conflict, NotFound, RateLimited, RequestError
from jarvis_agents.events import IDLE, Ended, Follower, StepEvent, Subscriber, Waiting
from jarvis_agents.lifecycle import Agent, AgentStatus, Step
from jarvis_agents.service import AgentService, CreateRequest
from jarvis_agents.store.a2a_push import PushConfigs
from jarvis_agents.store.a2a_tasks import TaskListing

ANSWERS = {"approve": True, "deny": False}
# The idempotency key of a message: its id, in a namespace of its own.
KEY_PREFIX = "a2a:"


class A2ATasks:
    """Tasks as the JSON-RPC methods see them, for one server."""

    def __init__(self, agents: AgentService, listing: TaskListing,
                 push: PushNotifications) -> None:
        self.agents = agents
        self.listing = listing
        self.push = push

    @classmethod
    def of(cls, agents: AgentService) -> A2ATasks:
        """The A2A use cases over `agents`, listing tasks and keeping push configs in its
        database: the door asks for them here instead of reaching into the store."""
        engine = agents.repository.engine
        check_url = agents.webhook_check if callable(agents.webhook_check) else None
        push = PushNotifications(PushConfigs(engine), secret=agents.settings.webhook_secret,
                                 check_url=check_url)
        return cls(agents, TaskListing(engine), push)

    # --- SendMessage --------------------------------------------------------------------

    def send(self, user_id: uuid.UUID, request: SendMessageRequest) -> Agent:
        """The task the message makes or answers (not waited for)."""
        message = request.message
        if message.task_id:
            return self._answer(user_id, message)
        goal = "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()
        if not goal:
            if any(p.WhichOneof("content") in ("raw", "url") for p in message.parts):
                raise ContentTypeNotSupportedError(
                    "this agent reads text parts (the goal); files are not supported")
            raise InvalidParamsError("the message has no text: its text parts are the goal")
        metadata = MessageToDict(message.metadata) if message.HasField("metadata") else {}
        if not metadata and request.HasField("metadata"):
            metadata = MessageToDict(request.metadata)
        assistant = metadata.get("assistant")
        if assistant is not None and not isinstance(assistant, str):
            raise InvalidParamsError("`metadata.assistant` is the name or id of an assistant")
        create = CreateRequest(goal=goal, assistant=assistant,
                               thread_id=self._thread(message.context_id))
        key = KEY_PREFIX + message.message_id if message.message_id else None
        configuration = request.configuration
        push = None
        if configuration.HasField("task_push_notification_config"):
            # Checked now, stored before a worker can take the task: no change is missed.
            config = configuration.task_push_notification_config
            self.push.checked(uuid.UUID(int=0), config)

            def push(agent: Agent) -> None:
                self.push.put(self.push.checked(agent.id, config))
        try:
            agent, _ = self.agents.create(user_id, create, idempotency_key=key,
                                          before_enqueue=push)
        except RateLimited:
            raise  # the door says how long to wait
        except RequestError as exc:
            raise InvalidParamsError(str(exc), data={"code": exc.code}) from None
        return agent

    def _thread(self, raw: str) -> uuid.UUID | None:
        if not raw:
            return None
        thread_id = parse_task_id(raw)
        if thread_id is None:
            # The spec lets a server refuse contexts it did not make; ours are thread ids.
            raise InvalidParamsError(
                f"contextId {raw[:80]!r} is not one of this server's: send none to start a "
                "new context, or the contextId of one of your tasks to follow it up")
        return thread_id

    def _answer(self, user_id: uuid.UUID, message: Message) -> Agent:
        """A message on a task: the answer to its approval, if it waits for one."""
        agent = self.agent(user_id, message.task_id)
        if message.context_id and message.context_id != str(agent.thread_id or agent.id):
            raise InvalidParamsError(
                f"task {agent.id} is in context {agent.thread_id}, not {message.context_id[:80]}")
        if agent.is_terminal:
            raise UnsupportedOperationError(
                f"task {agent.id} has ended ({agent.status.value}): send a new message in its "
                "context (its contextId, no taskId) to follow it up")
        waiting = agent.waiting_for or {}
        if agent.status is not AgentStatus.WAITING or "call_id" not in waiting:
            raise UnsupportedOperationError(
                f"task {agent.id} needs no input now (it is {agent.status.value})")
        approve, reason = approval_of(message)
        try:
            return self.agents.approve(user_id, agent.id, call_id=waiting["call_id"],
                                       approve=approve, reason=reason)
        except NotFound:
            raise TaskNotFoundError(f"no task with id {agent.id}") from None
        except RateLimited:
            raise
        except RequestError as exc:  # answered meanwhile (409)
            raise InvalidParamsError(str(exc), data={"code": exc.code}) from None

    # --- reading ------------------------------------------------------------------------

    def agent(self, user_id: uuid.UUID, raw_id: str) -> Agent:
        """The user's agent of that task id; TaskNotFoundError for any other."""
        agent_id = parse_task_id(raw_id)
        agent = self.agents.repository.get(agent_id, user_id=user_id) if agent_id else None
        if agent is None:
            raise TaskNotFoundError(f"no task with id {raw_id[:80]!r}")
        return agent

    def task(self, agent: Agent, *, history_length: int | None = None,
             steps: Sequence[Step | dict[str, Any]] | None = None) -> Task:
        """The agent as a Task, with its history: `steps` when the caller has all of them
        (a follower told them), else its steps read (unless none is asked)."""
        if steps is None:
            steps = self.agents.repository.steps_after(agent.id) if history_length != 0 else []
        return task_of(agent, steps, history_length=history_length)

    def get(self, user_id: uuid.UUID, raw_id: str, *, history_length: int | None) -> Task:
        if history_length is not None and history_length < 0:
            raise InvalidParamsError("historyLength must be 0 or more")
        return self.task(self.agent(user_id, raw_id), history_length=history_length)

    def list(self, user_id: uuid.UUID, request: ListTasksRequest) -> ListTasksResponse:
        size = request.page_size if request.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
        if not 1 <= size <= MAX_LIST_TASKS_PAGE_SIZE:
            raise InvalidParamsError(f"pageSize must be 1 to {MAX_LIST_TASKS_PAGE_SIZE}, not {size}")
        history = request.history_length if request.HasField("history_length") else 0
        if history < 0:
            raise InvalidParamsError("historyLength must be 0 or more")
        status = None
        if request.status != TaskState.TASK_STATE_UNSPECIFIED:
            status = STATUSES.get(request.status)
            if status is None:  # REJECTED, AUTH_REQUIRED: no agent is ever in them
                return ListTasksResponse()
        after = None
        if request.HasField("status_timestamp_after"):
            after = request.status_timestamp_after.ToDatetime(tzinfo=UTC)
        thread_id = parse_task_id(request.context_id) if request.context_id else None
        if request.context_id and thread_id is None:
            return ListTasksResponse()  # not a context of ours: none of its tasks are
        try:
            page = self.listing.page(
                user_id, limit=size, token=request.page_token or None, status=status,
                thread_id=thread_id, updated_after=after)
        except RequestError:
            raise InvalidParamsError("pageToken is not one this server gave: pass back "
                                     "nextPageToken unchanged") from None
        tasks = [self.task(agent, history_length=history) if history else task_of(agent)
                 for agent in page.agents]
        # pageSize is the size of this page, as the TCK reads it (README, A2A).
        return ListTasksResponse(tasks=tasks, next_page_token=page.next_token,
                                 page_size=len(tasks), total_size=page.total)

    # --- CancelTask ---------------------------------------------------------------------

    def cancel(self, user_id: uuid.UUID, raw_id: str) -> Task:
        agent = self.agent(user_id, raw_id)
        try:
            cancelled = self.agents.cancel(user_id, agent.id)
        except NotFound:
            raise TaskNotFoundError(f"no task with id {raw_id[:80]!r}") from None
        except Conflict as exc:
            raise TaskNotCancelableError(str(exc)) from None
        return self.task(cancelled)

    # --- waiting ------------------------------------------------------------------------

    def follow(self, user_id: uuid.UUID, agent: Agent, *, subscriber: Subscriber,
               tick_s: float, after: int = 0) -> Follower:
        """Its events from step `after` on (the event-following the SSE streams use)."""
        try:
            return self.agents.follow(user_id, agent.id, subscriber=subscriber, after=after,
                                      tick_s=tick_s)
        except NotFound:
            raise TaskNotFoundError(f"no task with id {agent.id}") from None


def settle(follower: Follower, *,
           still_wanted: Callable[[], bool]) -> list[dict[str, Any]] | None:
    """Wait until the followed agent ends or needs input: the steps told meanwhile (each
    step's event data), with the agent as it settled in `follower.agent`. None when the
    wait was given up (`still_wanted` said no on an idle tick, or the process is stopping)."""
    steps: list[dict[str, Any]] = []
    with follower:
        for told in follower:
            if isinstance(told, StepEvent):
                steps.append(told.data)
            # A wait on the agents it called is not input required: the wait goes on.
            elif isinstance(told, Ended) or (isinstance(told, Waiting) and not told.data.get("agent_ids")):
                return steps
            elif told is IDLE and not still_wanted():
                return None
    return None


def approval_of(message: Message) -> tuple[bool, str | None]:
    """The answer a message gives: a data part `{"approve": bool, "reason"?: str}`, or
    the text `approve` or `deny`."""
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            data = MessageToDict(part.data)
            if isinstance(data, dict) and isinstance(data.get("approve"), bool):
                reason = data.get("reason")
                return data["approve"], reason if isinstance(reason, str) else None
    text = " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text")
    answer = ANSWERS.get(text.strip().lower())
    if answer is None:
        raise InvalidParamsError(
            'the task waits for an approval: send a data part {"approve": true|false, '
            '"reason"?: str}, or the text approve or deny')
    return answer, None
