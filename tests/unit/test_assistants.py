"""Assistants on the in-memory store: the default one, the use cases, and what an agent
created with one takes (README, Assistants)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest

from jarvis_agents.assistants import (
    DEFAULT_NAME,
    AssistantConfig,
    default_assistant,
    default_id,
)
from jarvis_agents.config import Settings
from jarvis_agents.dispatch import MemoryDispatcher
from jarvis_agents.errors import Conflict, NotFound, RequestError
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.lifecycle import AgentMode, AgentStatus, Step, StepType
from jarvis_agents.service import AgentService, CreateRequest, ForkRequest
from jarvis_agents.store.memory import MemoryStore

TOOLS = ["calculate", "get_time", "web_search"]
SETTINGS = Settings.from_env({"JARVIS_MODEL": "llama3.2", "JARVIS_MAX_STEPS": "7"})
ME, THEM = uuid.uuid4(), uuid.uuid4()
RESEARCHER = AssistantConfig(
    description="Finds things out.", model="qwen3", mode="react", tools=("WEB_SEARCH",),
    instructions="Cite your sources.", approve_tools=("*",), max_steps=12,
    output_schema={"type": "object"}, metadata={"team": "docs"},
)


class CountingStore(MemoryStore):
    """The memory store, counting the assistant reads an agent create makes."""

    def __init__(self) -> None:
        super().__init__()
        self.finds = 0
        find = self.assistants.find

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.finds += 1
            return find(*args, **kwargs)

        self.assistants.find = counted  # type: ignore[method-assign]


@pytest.fixture
def store() -> CountingStore:
    return CountingStore()


@pytest.fixture
def service(store: CountingStore) -> AgentService:
    return AgentService(repository=store, settings=SETTINGS, dispatcher=MemoryDispatcher(),
                        events=MemoryEventBus(), tool_names=TOOLS)


# --- the default assistant -----------------------------------------------------------


def test_every_user_has_the_default_assistant_listed_first_with_the_settings(service) -> None:
    service.assistants.create(ME, "researcher", RESEARCHER)
    listed = service.assistants.list(ME)
    assert [a.name for a in listed] == [DEFAULT_NAME, "researcher"]
    default = listed[0]
    assert (default.id, default.version) == (default_id(ME), 1)
    assert default.id == uuid.uuid5(uuid.UUID("9c4f2f6e-5d1b-4c1e-8d0a-3b7e6a1f2c45"), f"{ME}/agent")
    assert default_id(ME) != default_id(THEM)
    from jarvis_agents.assistants import assistant_json

    shown = assistant_json(default, SETTINGS)
    assert (shown["model"], shown["max_steps"], shown["mode"], shown["tools"],
            shown["delegates"], shown["instructions"]) == ("llama3.2", 7, "auto", None, [], None)


def test_the_default_assistant_is_found_by_name_and_by_id_without_a_read(service, store) -> None:
    assert service.assistants.resolve(ME, "agent") == default_assistant(ME)
    assert service.assistants.resolve(ME, str(default_id(ME))) == default_assistant(ME)
    assert store.finds == 0
    # Another user's default id is not mine.
    with pytest.raises(NotFound) as refused:
        service.assistants.resolve(ME, str(default_id(THEM)))
    assert refused.value.code == "assistant_not_found"


def test_the_default_assistant_can_be_neither_changed_nor_deleted(service) -> None:
    for attempt in (lambda: service.assistants.patch(ME, "agent", {"model": "x"}),
                    lambda: service.assistants.delete(ME, str(default_id(ME)))):
        with pytest.raises(Conflict) as refused:
            attempt()
        assert refused.value.code == "assistant_read_only"
        assert "create an assistant of your own" in str(refused.value)
    with pytest.raises(Conflict) as taken:
        service.assistants.create(ME, "agent", AssistantConfig())
    assert taken.value.code == "assistant_exists"
    assert [v.version for v in service.assistants.versions(ME, "agent")] == [1]


# --- create, patch, delete, versions -------------------------------------------------


def test_a_created_assistant_keeps_its_config_with_tool_names_as_listed(service) -> None:
    made = service.assistants.create(ME, "researcher", RESEARCHER)
    assert made.version == 1 and made.config.tools == ("web_search",)
    assert service.assistants.resolve(ME, "researcher") == made
    assert service.assistants.resolve(ME, str(made.id)) == made
    with pytest.raises(Conflict) as taken:
        service.assistants.create(ME, "researcher", AssistantConfig())
    assert taken.value.code == "assistant_exists"
    # Names are per user.
    assert service.assistants.create(THEM, "researcher", AssistantConfig()).user_id == THEM


@pytest.mark.parametrize(("config", "code", "says"), [
    (AssistantConfig(tools=("teleport",)), "unknown_tool", "unknown tool(s): teleport"),
    (AssistantConfig(approve_tools=("teleport",)), "unknown_tool", "teleport"),
    (AssistantConfig(max_steps=51), "invalid_request", "from 1 to 50, not 51"),
    (AssistantConfig(mode="fast"), "invalid_request", "`mode` must be one of"),
    (AssistantConfig(output_schema={"type": "nope"}), "invalid_output_schema", "not a valid"),
    (AssistantConfig(delegates=("nobody",)), "unknown_delegate", "unknown delegate(s): nobody"),
])
def test_a_bad_config_is_refused_saying_why(service, config, code, says) -> None:
    with pytest.raises(RequestError) as refused:
        service.assistants.create(ME, "helper", config)
    assert refused.value.code == code and says in str(refused.value)
    assert [a.name for a in service.assistants.list(ME)] == ["agent"]


def test_a_bad_name_is_refused(service) -> None:
    for name in ("Researcher", "", "a b", "x" * 65):
        with pytest.raises(RequestError, match="1-64 characters of a-z"):
            service.assistants.create(ME, name, AssistantConfig())


def test_delegates_are_my_assistants_or_the_default_one(service) -> None:
    service.assistants.create(ME, "researcher", AssistantConfig())
    service.assistants.create(THEM, "spy", AssistantConfig())
    boss = service.assistants.create(ME, "boss", AssistantConfig(
        delegates=("researcher", "agent", "researcher")))
    assert boss.config.delegates == ("researcher", "agent")
    with pytest.raises(RequestError, match="unknown delegate"):
        service.assistants.create(ME, "mole", AssistantConfig(delegates=("spy",)))


def test_a_patch_makes_a_new_version_and_earlier_ones_stay_readable(service) -> None:
    made = service.assistants.create(ME, "researcher", RESEARCHER)
    patched = service.assistants.patch(ME, "researcher", {"model": "llama3.3", "max_steps": None,
                                                          "tools": ["calculate"]})
    assert (patched.id, patched.version) == (made.id, 2)
    assert patched.config.model == "llama3.3" and patched.config.tools == ("calculate",)
    assert patched.config.max_steps is None  # reset: the settings' default again
    assert patched.config.instructions == "Cite your sources."  # not given: kept
    versions = service.assistants.versions(ME, str(made.id))
    assert [(v.version, v.config.model) for v in versions] == [(2, "llama3.3"), (1, "qwen3")]
    with pytest.raises(RequestError, match="unknown field"):
        service.assistants.patch(ME, "researcher", {"nickname": "r"})
    with pytest.raises(RequestError, match="unknown tool"):
        service.assistants.patch(ME, "researcher", {"tools": ["teleport"]})
    assert service.assistants.resolve(ME, "researcher").version == 2


def test_another_users_assistant_is_not_found_as_if_it_did_not_exist(service) -> None:
    theirs = service.assistants.create(THEM, "secret", RESEARCHER)
    for ref in ("secret", str(theirs.id), "nobody", str(uuid.uuid4()), "Not A Name!"):
        for attempt in (service.assistants.resolve, service.assistants.delete,
                        service.assistants.versions,
                        lambda user, ref: service.assistants.patch(user, ref, {"model": "x"})):
            with pytest.raises(NotFound) as refused:
                attempt(ME, ref)
            assert refused.value.code == "assistant_not_found"
    assert service.assistants.resolve(THEM, "secret").version == 1


def test_a_deleted_assistant_and_its_versions_are_gone(service) -> None:
    made = service.assistants.create(ME, "researcher", RESEARCHER)
    service.assistants.patch(ME, "researcher", {"model": "x"})
    service.assistants.delete(ME, "researcher")
    with pytest.raises(NotFound):
        service.assistants.resolve(ME, str(made.id))
    assert [a.name for a in service.assistants.list(ME)] == ["agent"]
    # The name is free again, for a new assistant at version 1.
    assert service.assistants.create(ME, "researcher", AssistantConfig()).version == 1


# --- agents made from assistants -----------------------------------------------------


def test_an_agent_takes_its_assistants_current_version(service, store) -> None:
    made = service.assistants.create(ME, "researcher", RESEARCHER)
    service.assistants.create(ME, "helper", AssistantConfig())
    service.assistants.patch(ME, "researcher", {"delegates": ["helper"]})
    store.finds = 0
    agent, _ = service.create(ME, CreateRequest(goal="Why is the sky blue?", assistant="researcher"))
    assert store.finds == 1  # one read of the assistant
    assert (agent.assistant_id, agent.assistant_version) == (made.id, 2)
    assert (agent.model, agent.mode, agent.tools, agent.approve_tools, agent.max_steps) == (
        "qwen3", AgentMode.REACT, ("web_search",), ("*",), 12)
    assert agent.output_schema == {"type": "object"}
    assert (agent.instructions, agent.delegates) == ("Cite your sources.", ("helper",))
    stored = store.get(agent.id)
    assert stored is not None and stored.assistant_id == made.id
    by_id, _ = service.create(ME, CreateRequest(goal="And why red at dusk?", assistant=str(made.id)))
    assert by_id.assistant_id == made.id


def test_fields_given_on_the_create_override_the_assistants(service) -> None:
    service.assistants.create(ME, "researcher", RESEARCHER)
    agent, _ = service.create(ME, CreateRequest(
        goal="x", assistant="researcher", model="llama3.3", max_steps=3, mode="native",
        tools=("Calculate",), approve_tools=("get_time",), output_schema={"type": "string"}))
    assert (agent.model, agent.max_steps, agent.mode, agent.tools, agent.approve_tools) == (
        "llama3.3", 3, AgentMode.NATIVE, ("calculate",), ("get_time",))
    assert agent.output_schema == {"type": "string"}
    assert agent.instructions == "Cite your sources."  # not a create field: the assistant's


def test_an_agent_without_an_assistant_is_the_default_ones_without_a_read(service, store) -> None:
    agent, _ = service.create(ME, CreateRequest(goal="What is 2 + 2?"))
    assert store.finds == 0
    assert (agent.assistant_id, agent.assistant_version) == (default_id(ME), 1)
    assert (agent.model, agent.max_steps, agent.tools, agent.instructions) == ("llama3.2", 7, None, None)
    named, _ = service.create(ME, CreateRequest(goal="What is 2 + 2?", assistant="agent"))
    assert store.finds == 0 and named.assistant_id == default_id(ME)


def test_an_unknown_or_another_users_assistant_creates_nothing(service, store) -> None:
    service.assistants.create(THEM, "secret", RESEARCHER)
    for ref in ("secret", "nobody"):
        with pytest.raises(NotFound) as refused:
            service.create(ME, CreateRequest(goal="x", assistant=ref))
        assert refused.value.code == "assistant_not_found"
    assert store.agents == {}


def test_the_fingerprint_says_the_assistant_only_when_given() -> None:
    old_body = {"goal": "x", "max_steps": None, "model": None, "tools": None,
                "webhook_url": None, "mode": None, "output_schema": None}
    before = hashlib.sha256(json.dumps(old_body, sort_keys=True).encode()).hexdigest()
    assert CreateRequest(goal="x").fingerprint() == before  # a repeat of an older body matches
    assert CreateRequest(goal="x", assistant="researcher").fingerprint() not in (
        before, CreateRequest(goal="x", assistant="writer").fingerprint())


def test_a_fork_keeps_the_originals_assistant(service, store) -> None:
    made = service.assistants.create(ME, "researcher", RESEARCHER)
    original, _ = service.create(ME, CreateRequest(goal="x", assistant="researcher"))
    store.steps[original.id] = [Step(1, 0, StepType.FINAL, "done")]
    store.agents[original.id] = original.__class__(**{
        **original.__dict__, "status": AgentStatus.COMPLETED, "final_answer": "done"})
    service.assistants.patch(ME, "researcher", {"instructions": "Be brief."})
    fork = service.fork(ME, original.id, ForkRequest(after_seq=0))
    assert (fork.assistant_id, fork.assistant_version) == (made.id, 1)
    assert (fork.instructions, fork.model) == ("Cite your sources.", "qwen3")
