"""Tracing end to end (docs/api.md §10): a real API and a real worker export to a local OTLP
collector, and one agent is one trace — the create, the queue, each iteration, each
model call and each tool call. Without OTEL_EXPORTER_OTLP_ENDPOINT the agent JSON
still has its trace_id, and a create's traceparent still names it."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from tests.support.api_server import CALC_SCRIPT, wait_until
from tests.support.fake_ollama import FakeOllama
from tests.support.otlp_collector import OtlpCollector, ReceivedSpan

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api, shared_api

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as running:
        yield running


def traced(env: dict[str, str], collector: OtlpCollector) -> dict[str, str]:
    # Batches leave every 100 ms instead of every 5 s: the test waits less.
    return {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def test_the_collector_decodes_what_the_real_exporter_sends(collector):
    provider = TracerProvider(resource=Resource.create({"service.name": "probe"}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{collector.url}/v1/traces")))
    tracer = provider.get_tracer("probe")
    with (tracer.start_as_current_span("outer", kind=SpanKind.SERVER) as outer,
          tracer.start_as_current_span("inner", attributes={"n": 3, "s": "x", "ok": True})):
        pass
    provider.shutdown()

    spans = collector.wait_for(lambda spans: len(spans) == 2)
    inner, received_outer = sorted(spans, key=lambda s: s.name)
    context = outer.get_span_context()
    assert received_outer.trace_id == f"{context.trace_id:032x}"
    assert received_outer.span_id == f"{context.span_id:016x}"
    assert (received_outer.kind, received_outer.service, received_outer.parent_id) == ("SERVER", "probe", "")
    assert inner.parent_id == received_outer.span_id and inner.trace_id == received_outer.trace_id
    assert inner.attributes == {"n": 3, "s": "x", "ok": True}


def test_the_collector_takes_otlp_json_with_hex_ids(collector):
    body = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "probe"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": CALLER_TRACE, "spanId": CALLER_SPAN, "parentSpanId": "", "name": "json",
            "kind": 3, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}}],
        }]}],
    }]}
    answer = httpx.post(f"{collector.url}/v1/traces", json=body)
    assert answer.status_code == 200, answer.text
    (span,) = collector.spans
    assert (span.trace_id, span.span_id, span.parent_id) == (CALLER_TRACE, CALLER_SPAN, "")
    assert (span.name, span.kind, span.service) == ("json", "CLIENT", "probe")
    assert span.attributes == {"gen_ai.usage.input_tokens": 12}
    assert httpx.post(f"{collector.url}/v1/traces", content=b"x",
                      headers={"Content-Type": "text/plain"}).status_code == 415


def test_one_agent_is_one_trace_from_the_create_to_its_tool_call(
    api_env, start_api, start_worker, fake_ollama, collector,
):
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    env = traced(api_env, collector)
    api = start_api(env)
    start_worker(env)
    with api.client(api.user()) as http:
        created = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"},
                            headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
        assert created.status_code == 202, created.text
        agent = created.json()
        assert agent["trace_id"] == CALLER_TRACE  # the caller's trace is honoured
        done = http.get(created.headers["Location"], params={"wait": 20}).json()
        assert done["status"] == "COMPLETED", done
        assert done["trace_id"] == CALLER_TRACE

    model = agent["model"]

    def complete(spans: list[ReceivedSpan]) -> bool:
        names = [s.name for s in spans if s.trace_id == CALLER_TRACE]
        return names.count(f"chat {model}") == 2 and "invoke_agent" in names \
            and "execute_tool calculate" in names and "POST /api/v1/agents" in names

    spans = [s for s in collector.wait_for(complete) if s.trace_id == CALLER_TRACE]
    by_id = {s.span_id: s for s in spans}

    def one(name: str) -> ReceivedSpan:
        found = [s for s in spans if s.name == name]
        assert len(found) == 1, (name, [s.name for s in spans])
        return found[0]

    def parent(span: ReceivedSpan) -> ReceivedSpan:
        return by_id[span.parent_id]

    create = one("POST /api/v1/agents")
    assert (create.service, create.kind, create.parent_id) == ("jarvis-agents-api", "SERVER", CALLER_SPAN)
    enqueue = one("apply_async/jarvis.run_agent")
    assert (enqueue.service, enqueue.kind, parent(enqueue)) == ("jarvis-agents-api", "PRODUCER", create)
    task = one("run/jarvis.run_agent")
    assert (task.service, task.kind, parent(task)) == ("jarvis-agents-worker", "CONSUMER", enqueue)
    attempt = one("invoke_agent")
    assert parent(attempt) == task
    assert attempt.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attempt.attributes["gen_ai.agent.id"] == agent["id"]
    assert attempt.attributes["jarvis.agent.status"] == "COMPLETED"

    iterations = sorted((s for s in spans if s.name == "iteration"), key=lambda s: s.attributes["jarvis.step"])
    assert [s.attributes["jarvis.step"] for s in iterations] == [0, 1]
    assert all(parent(s) == attempt for s in iterations)
    calls = [s for s in spans if s.name == f"chat {model}"]
    assert sorted(parent(s).attributes["jarvis.step"] for s in calls) == [0, 1]
    for call in calls:
        assert call.kind == "CLIENT"
        assert call.attributes["gen_ai.operation.name"] == "chat"
        assert call.attributes["gen_ai.provider.name"] == "ollama"
        assert call.attributes["gen_ai.request.model"] == model
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
    tool = one("execute_tool calculate")
    assert parent(tool) == iterations[0]
    assert tool.attributes["gen_ai.tool.name"] == "calculate"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"


def test_a_create_without_traceparent_starts_the_trace_its_json_names(
    api_env, start_api, collector,
):
    api = start_api(traced(api_env, collector))  # no worker: the create's own spans
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "a trace of its own"}).json()
    trace_id = agent["trace_id"]
    spans = collector.wait_for(
        lambda spans: any(s.trace_id == trace_id and s.name.startswith("apply_async/") for s in spans))
    create = next(s for s in spans if s.trace_id == trace_id and s.name == "POST /api/v1/agents")
    assert create.parent_id == ""  # the root of the agent's trace


def test_without_tracing_the_agent_json_still_has_its_trace_id(shared_api):
    api = shared_api()
    with api.client(api.user()) as http:
        joined = http.post("/api/v1/agents", json={"goal": "joins a trace"},
                           headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}).json()
        assert joined["trace_id"] == CALLER_TRACE
        assert http.get(f"/api/v1/agents/{joined['id']}").json()["trace_id"] == CALLER_TRACE
        own = [
            http.post("/api/v1/agents", json={"goal": "a trace of its own"}, headers=headers).json()
            for headers in ({}, {"traceparent": "not-a-trace-context"},
                            {"traceparent": f"00-{'0' * 32}-{CALLER_SPAN}-01"})
        ]
    ids = [agent["trace_id"] for agent in own]
    assert all(re.fullmatch("[0-9a-f]{32}", trace_id) for trace_id in ids)
    assert len({*ids, CALLER_TRACE}) == 4  # each a new trace: a bad header is ignored


def test_an_agent_resumed_after_its_worker_died_goes_on_in_its_trace(
    api_env, start_api, start_worker, fake_ollama, collector,
):
    # The sweeper's enqueue carries no trace of the agent: the resumed attempt finds it
    # in the agent's row, and links the task that ran it.
    fake_ollama.responder = FakeOllama.by_turn(CALC_SCRIPT)
    fake_ollama.latency_s = 1.0
    env = {**traced(api_env, collector), "JARVIS_HEARTBEAT_STALE": "3"}
    api = start_api(env)
    first = start_worker(env)
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?"},
                          headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}).json()
        steps = f"/api/v1/agents/{agent['id']}/steps"
        wait_until(lambda: len(http.get(steps).json()["steps"]) >= 3)
        first.signal(signal.SIGKILL)  # mid-way through its second model call
        first.proc.wait(10)
        fake_ollama.latency_s = 0.0  # the kill is behind it: the resumed calls need not be slow
        start_worker(env)
        done = http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 40}).json()
    assert done["status"] == "COMPLETED", done

    def resumed(spans: list[ReceivedSpan]) -> bool:
        return any(s.name == "invoke_agent" and s.attributes.get("jarvis.agent.attempt") == 2
                   and s.attributes.get("jarvis.agent.status") == "COMPLETED" for s in spans)

    spans = collector.wait_for(resumed)
    create = next(s for s in spans if s.name == "POST /api/v1/agents" and s.trace_id == CALLER_TRACE)
    attempt = next(s for s in spans if s.name == "invoke_agent" and s.attributes["jarvis.agent.attempt"] == 2)
    assert (attempt.trace_id, attempt.parent_id) == (CALLER_TRACE, create.span_id)
    (task_trace, task_span), = attempt.links
    task = next(s for s in spans if s.span_id == task_span)
    assert task.name == "run/jarvis.run_agent" and task_trace != CALLER_TRACE
    iterations = [s for s in spans if s.name == "iteration" and s.parent_id == attempt.span_id]
    assert [s.attributes["jarvis.step"] for s in iterations] == [1]
    assert any(s.name.startswith("chat ") and s.parent_id == iterations[0].span_id for s in spans)
