"""ScriptedChatModel: the fake every unit test of the engine stands on."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from jarvis_agents.errors import Cancelled, ModelNotFound, ModelUnavailable, StepTimeout
from jarvis_agents.llm.base import ChatMessage, ChatModel, ChatRequest
from jarvis_agents.llm.scripted import ScriptedChatModel, ScriptExhausted, by_turn

USER = ChatMessage("user", "What is 2+2?")
HOUR = 3600.0  # a delay nothing sits out: only a cancel or the deadline ends it in time


def ask(
    model: ChatModel,
    messages: Sequence[ChatMessage] = (USER,),
    *,
    timeout_s: float = 5.0,
    should_stop: threading.Event | None = None,
) -> str:
    stop_flag = should_stop or threading.Event()
    return model.complete(
        ChatRequest(messages, model="test-model", stop=["OBSERVATION:"]),
        deadline=time.monotonic() + timeout_s,
        should_stop=stop_flag.is_set,
    ).content


def test_replies_are_played_in_order_and_calls_recorded() -> None:
    model = ScriptedChatModel(["first", "second"])
    assert ask(model) == "first"
    assert ask(model, [USER, ChatMessage("assistant", "first")]) == "second"
    assert model.call_count == 2
    assert model.calls[1] == [USER, ChatMessage("assistant", "first")]
    assert model.models == ["test-model", "test-model"]
    assert model.stops[0] == ("OBSERVATION:",)


def test_an_exception_in_the_script_is_raised_in_its_turn() -> None:
    model = ScriptedChatModel([ModelUnavailable("server down"), "recovered"])
    with pytest.raises(ModelUnavailable, match="server down"):
        ask(model)
    assert ask(model) == "recovered"


def test_running_out_of_replies_is_a_clear_test_failure() -> None:
    model = ScriptedChatModel(["only"])
    ask(model)
    with pytest.raises(ScriptExhausted, match=r"has 1 replies but was asked for reply #2"):
        ask(model)
    assert issubclass(ScriptExhausted, AssertionError)


def test_a_callable_responder_sees_the_conversation() -> None:
    model = ScriptedChatModel(lambda messages: f"{len(messages)} messages")
    assert ask(model, [ChatMessage("system", "be brief"), USER]) == "2 messages"


def test_a_responder_may_return_an_exception_to_raise() -> None:
    model = ScriptedChatModel(lambda messages: ModelNotFound("nope"))
    with pytest.raises(ModelNotFound, match="ollama pull nope"):
        ask(model)


def test_by_turn_picks_the_reply_from_the_number_of_assistant_messages() -> None:
    model = ScriptedChatModel(by_turn(["act", "final"]))
    # Asked out of order, as a resumed agent would: the conversation decides.
    resumed = [USER, ChatMessage("assistant", "act"), ChatMessage("user", "OBSERVATION: 4")]
    assert ask(model, resumed) == "final"
    assert ask(model, [USER]) == "act"
    with pytest.raises(ScriptExhausted, match="turn 3"):
        ask(model, [*resumed, ChatMessage("assistant", "final")])


def test_by_turn_serves_concurrent_agents_from_one_script() -> None:
    model = ScriptedChatModel(by_turn(["act", "final"]), delay_s=0.01)

    def agent(_: int) -> list[str]:
        first = ask(model, [USER])
        return [first, ask(model, [USER, ChatMessage("assistant", first)])]

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(agent, range(50)))
    assert results == [["act", "final"]] * 50
    assert model.call_count == 100


def test_cancellation_interrupts_the_delay() -> None:
    model = ScriptedChatModel(["never seen"], delay_s=HOUR)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(Cancelled):  # an hour's delay in an hour's step: only the cancel ends it
        ask(model, timeout_s=HOUR, should_stop=cancel)


def test_the_deadline_interrupts_the_delay_with_step_timeout() -> None:
    model = ScriptedChatModel(["never seen"], delay_s=HOUR)
    with pytest.raises(StepTimeout, match=r"step timeout \(0.2 s\)"):
        ask(model, timeout_s=0.2)


def test_an_already_cancelled_agent_gets_no_reply() -> None:
    model = ScriptedChatModel(["unused"])
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        ask(model, should_stop=cancel)


def test_a_delay_may_be_drawn_per_call() -> None:
    delays = iter([0.0, HOUR])
    model = ScriptedChatModel(["fast", "slow"], delay_s=lambda: next(delays))
    assert ask(model) == "fast"
    with pytest.raises(StepTimeout):  # its own delay, an hour, outlasts its step
        ask(model, timeout_s=0.2)
