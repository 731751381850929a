"""An agent's trace context, and the spans of the worker's parts (docs/api.md §10).

The wrappers are given a tracer of their own, on an in-memory exporter: nothing here
configures the process's tracing, which stays off as in every other unit test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jarvis_agents import tracing
from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError, ModelNotFound
from jarvis_agents.events import MemoryEventBus
from jarvis_agents.executor import Executor, Limits
from jarvis_agents.lifecycle import Agent, AgentStatus
from jarvis_agents.llm.base import ChatReply, Usage
from jarvis_agents.llm.router import split_model
from jarvis_agents.llm.scripted import ScriptedChatModel
from jarvis_agents.store.memory import MemoryStore
from jarvis_agents.tools.builtin.calculate import CalculateTool
from jarvis_agents.tools.registry import ToolRegistry
from jarvis_agents.trace_context import new_traceparent, parse_traceparent, trace_id_of
from tests.conftest import ROOT

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
CALC_SCRIPT = ["THOUGHT: compute\nACTION: calculate\nINPUT: 6 * 7", "THOUGHT: done\nFINAL_ANSWER: 42"]


# --- the trace context -----------------------------------------------------------------


@pytest.mark.parametrize("header, expected", [
    (f"00-{TRACE}-{SPAN}-01", f"00-{TRACE}-{SPAN}-01"),
    (f"00-{TRACE}-{SPAN}-00", f"00-{TRACE}-{SPAN}-00"),  # the caller's sampling is kept
    (f"  00-{TRACE}-{SPAN}-01 ", f"00-{TRACE}-{SPAN}-01"),
    (f"01-{TRACE}-{SPAN}-01-later-fields", f"00-{TRACE}-{SPAN}-01"),  # a later version
    (f"00-{TRACE}-{SPAN}-01-extra", None),  # version 00 has four fields
    (f"ff-{TRACE}-{SPAN}-01", None),
    (f"00-{TRACE.upper()}-{SPAN}-01", None),
    (f"00-{'0' * 32}-{SPAN}-01", None),
    (f"00-{TRACE}-{'0' * 16}-01", None),
    (f"00-{TRACE[:-1]}-{SPAN}-01", None),
    ("", None), (None, None), ("garbage", None),
])
def test_a_traceparent_header_is_read_as_w3c_says(header: str | None, expected: str | None) -> None:
    assert parse_traceparent(header) == expected


def test_a_new_agent_starts_a_sampled_trace_of_its_own_or_joins_the_given_one() -> None:
    own = [Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3) for _ in range(2)]
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", a.traceparent or "") for a in own)
    assert own[0].trace_id != own[1].trace_id
    assert own[0].to_json()["trace_id"] == trace_id_of(own[0].traceparent or "")
    joined = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3,
                       traceparent=f"00-{TRACE}-{SPAN}-01")
    assert joined.to_json()["trace_id"] == TRACE
    assert parse_traceparent(new_traceparent()) is not None


def test_an_agent_older_than_its_traceparent_has_its_ids_hex_as_trace_id() -> None:
    agent = Agent(id=uuid.uuid4(), user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    assert agent.to_json()["trace_id"] == agent.id.hex


def test_tracing_is_on_only_with_an_otlp_endpoint(tmp_path: Path) -> None:
    base = {"JARVIS_DATA_DIR": str(tmp_path)}
    assert Settings.from_env(base).otel_traces_url is None
    assert Settings.from_env({**base, "OTEL_EXPORTER_OTLP_ENDPOINT": " "}).otel_traces_url is None
    on = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert Settings.from_env(on).otel_traces_url == "http://collector:4318/v1/traces"
    traces = {**on, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/otlp"}
    assert Settings.from_env(traces).otel_traces_url == "https://traces.example/otlp"
    assert Settings.from_env({**on, "OTEL_SDK_DISABLED": "true"}).otel_traces_url is None
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        Settings.from_env({**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})


def test_off_the_engine_is_not_wrapped_and_tracing_loads_no_opentelemetry() -> None:
    # A fresh interpreter: what a worker without OTEL_EXPORTER_OTLP_ENDPOINT runs.
    # redis-py 8 imports OpenTelemetry's metrics API itself when it is installed (its
    # own metrics are off by default): only what is loaded beyond that counts.
    script = (
        "import json, sys, uuid\n"
        "import redis\n"
        "before = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "from jarvis_agents import components, executor, runner, tracing\n"
        "from jarvis_agents.lifecycle import Agent\n"
        "agent = Agent.new(user_id=uuid.uuid4(), goal='g', model='m', max_steps=1)\n"
        "things = [object(), object(), object()]\n"
        "same = [tracing.traced_executor(things[0]) is things[0],\n"
        "        tracing.traced_model(things[1], provider_of=None) is things[1],\n"
        "        tracing.traced_tools(things[2]) is things[2],\n"
        "        tracing.iteration(agent, 0) is tracing.iteration(agent, 1)]\n"
        "after = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "print(json.dumps([same, sorted(after - before)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True,
                          capture_output=True, text=True, timeout=60)
    same, loaded = json.loads(done.stdout.splitlines()[-1])
    assert same == [True, True, True, True]
    assert loaded == []


# --- the worker's spans ----------------------------------------------------------------


@pytest.fixture
def exported() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[ToolRegistry]:
    registry = ToolRegistry([CalculateTool()], settings=Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)}))
    yield registry
    registry.close()


def traced_executor(tracer: Tracer, model: ScriptedChatModel, tools: ToolRegistry,
                    store: MemoryStore) -> tracing.TracedExecutor:
    executor = Executor(
        store=store, model=tracing.TracedChatModel(model, tracer, provider_of=split_model),
        tools=tracing.TracedTools(tools, tracer), events=MemoryEventBus(),  # type: ignore[arg-type]
        limits=Limits(step_timeout_s=5, total_timeout_s=30),
    )
    return tracing.TracedExecutor(executor, tracer)


def started(store: MemoryStore) -> Agent:
    agent = Agent.new(user_id=uuid.uuid4(), goal="6 * 7?", model="openai/gpt-test", max_steps=5,
                      traceparent=f"00-{TRACE}-{SPAN}-01")
    return store.add(agent.with_running(attempt=1))


def named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def test_an_attempt_its_model_calls_and_its_tool_call_are_spans_of_the_agents_trace(
    exported, tools,
) -> None:
    tracer, exporter = exported
    usage = Usage(input_tokens=120, output_tokens=9)
    model = ScriptedChatModel([ChatReply(reply, model="gpt-test-0613", usage=usage) for reply in CALC_SCRIPT])
    store = MemoryStore()
    ended = traced_executor(tracer, model, tools, store).run(started(store))
    assert ended is not None and ended.status is AgentStatus.COMPLETED

    spans = exporter.get_finished_spans()
    attempt = named(spans, "invoke_agent")
    assert f"{attempt.context.trace_id:032x}" == TRACE
    assert attempt.parent is not None and f"{attempt.parent.span_id:016x}" == SPAN
    assert attempt.attributes["gen_ai.agent.id"] == str(ended.id)
    assert attempt.attributes["jarvis.agent.status"] == "COMPLETED"
    calls = [s for s in spans if s.name == "chat gpt-test"]
    assert len(calls) == 2
    for call in calls:
        assert call.kind is SpanKind.CLIENT
        assert call.parent is not None and call.parent.span_id == attempt.context.span_id
        assert dict(call.attributes or {}) == {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.system": "openai", "gen_ai.request.model": "gpt-test",
            "gen_ai.response.model": "gpt-test-0613",
            "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 9,
        }
    tool = named(spans, "execute_tool calculate")
    assert tool.attributes == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculate"}
    assert tool.status.status_code is StatusCode.UNSET


def test_a_failed_model_call_and_a_failed_tool_call_say_so(exported, tools) -> None:
    tracer, exporter = exported
    model = ScriptedChatModel(["THOUGHT: t\nACTION: nosuchtool\nINPUT: x", ModelNotFound("no such model")])
    store = MemoryStore()
    ended = traced_executor(tracer, model, tools, store).run(started(store))
    assert ended is not None and ended.status is AgentStatus.FAILED

    spans = exporter.get_finished_spans()
    tool = named(spans, "execute_tool nosuchtool")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes["error.type"] == "unknown_tool"
    failed = [s for s in spans if s.name == "chat gpt-test"][-1]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "ModelNotFound"
    assert named(spans, "invoke_agent").attributes["jarvis.agent.status"] == "FAILED"


def test_a_resumed_attempt_continues_the_agents_trace_and_links_the_task_that_ran_it(
    exported, tools,
) -> None:
    # A sweeper's enqueue carries no trace of the agent: its task span is another trace.
    tracer, exporter = exported
    store = MemoryStore()
    with tracer.start_as_current_span("run/jarvis.run_agent") as task:
        traced_executor(tracer, ScriptedChatModel(CALC_SCRIPT), tools, store).run(started(store))
    attempt = named(exporter.get_finished_spans(), "invoke_agent")
    assert f"{attempt.context.trace_id:032x}" == TRACE
    assert attempt.parent is not None and f"{attempt.parent.span_id:016x}" == SPAN
    assert [link.context.span_id for link in attempt.links] == [task.get_span_context().span_id]


def test_an_attempt_whose_task_carried_the_agents_trace_is_the_tasks_child(exported, tools) -> None:
    tracer, exporter = exported
    store = MemoryStore()
    agent = started(store)
    stored = TraceContextTextMapPropagator().extract({"traceparent": agent.traceparent})
    with tracer.start_as_current_span("run/jarvis.run_agent", context=stored) as task:
        traced_executor(tracer, ScriptedChatModel(CALC_SCRIPT), tools, store).run(agent)
    attempt = named(exporter.get_finished_spans(), "invoke_agent")
    assert attempt.parent is not None and attempt.parent.span_id == task.get_span_context().span_id
    assert list(attempt.links) == []
