"""An agent as an A2A task (README, A2A): states, artifact, history, and what a message
on an INPUT_REQUIRED task answers."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from a2a.types.a2a_pb2 import Message, Part, TaskState
from a2a.utils.errors import InvalidParamsError
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from jarvis_agents.a2a.service import approval_of
from jarvis_agents.a2a.tasks import push_body, task_of
from jarvis_agents.lifecycle import Agent, AgentStatus, Step, StepType


def agent(**changes) -> Agent:
    made = Agent.new(user_id=uuid.uuid4(), goal="What is 6 * 7?", model="m", max_steps=5)
    return replace(made, **changes)


STEPS = [Step(1, 0, StepType.THINK, "think"), Step(2, 0, StepType.ACT, "6 * 7", tool="calculate"),
         Step(3, 0, StepType.OBSERVE, "42", tool="calculate"), Step(4, 1, StepType.FINAL, "42")]


@pytest.mark.parametrize(("status", "state"), [
    (AgentStatus.PENDING, TaskState.TASK_STATE_SUBMITTED),
    (AgentStatus.RUNNING, TaskState.TASK_STATE_WORKING),
    (AgentStatus.WAITING, TaskState.TASK_STATE_INPUT_REQUIRED),
    (AgentStatus.COMPLETED, TaskState.TASK_STATE_COMPLETED),
    (AgentStatus.FAILED, TaskState.TASK_STATE_FAILED),
    (AgentStatus.CANCELLED, TaskState.TASK_STATE_CANCELED),
])
def test_each_status_is_its_task_state(status, state):
    assert task_of(agent(status=status)).status.state == state


def test_a_completed_task_has_the_answer_and_its_output_as_its_artifact():
    done = agent(status=AgentStatus.COMPLETED, final_answer='{"n": 42}', output={"n": 42},
                 output_schema={"type": "object"})
    (artifact,) = task_of(done).artifacts
    assert artifact.parts[0].text == '{"n": 42}'
    assert MessageToDict(artifact.parts[1].data) == {"output": {"n": 42}}
    assert not task_of(agent(status=AgentStatus.RUNNING)).artifacts


def test_the_history_is_the_goal_then_the_steps_and_history_length_keeps_the_last():
    task = task_of(agent(), STEPS)
    assert [m.parts[0].text for m in task.history] == ["What is 6 * 7?", "think", "6 * 7", "42", "42"]
    assert MessageToDict(task.history[2].metadata) == {"seq": 2, "step": 0, "type": "ACT",
                                                        "tool": "calculate"}
    assert [m.parts[0].text for m in task_of(agent(), STEPS, history_length=2).history] == ["42", "42"]
    assert list(task_of(agent(), STEPS, history_length=0).history) == []


def test_a_waiting_task_names_the_call_and_a_failed_one_says_why():
    waiting = task_of(agent(status=AgentStatus.WAITING, waiting_for={
        "call_id": "c1", "tool": "calculate", "input": "6 * 7"}))
    assert "calculate" in waiting.status.message.parts[0].text
    assert MessageToDict(waiting.status.message.parts[1].data)["call_id"] == "c1"
    failed = task_of(agent(status=AgentStatus.FAILED, error="the model is gone"))
    assert failed.status.message.parts[0].text == "the model is gone"


def test_a_push_is_the_status_as_a_stream_response():
    body = push_body(agent(status=AgentStatus.COMPLETED, final_answer="42"))
    assert '"statusUpdate"' in body and '"TASK_STATE_COMPLETED"' in body


def _message(*parts: Part) -> Message:
    return Message(message_id="m", parts=list(parts))


def test_an_approval_is_a_data_part_or_the_word():
    data = Part(data=ParseDict({"approve": False, "reason": "no"}, struct_pb2.Value()))
    assert approval_of(_message(data)) == (False, "no")
    assert approval_of(_message(Part(text=" Approve "))) == (True, None)
    assert approval_of(_message(Part(text="deny"))) == (False, None)
    with pytest.raises(InvalidParamsError):
        approval_of(_message(Part(text="perhaps")))
