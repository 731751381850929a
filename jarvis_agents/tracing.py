"""Tracing with OpenTelemetry: each agent is one trace, from its create to its last tool call.

Off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (`Settings.otel_traces_url`). Off, nothing
here imports OpenTelemetry, no wrapper is put around the engine's parts, and the one
hook inside the loop (`iteration`) hands back a shared no-op context manager: the
agent's trace context is still made and kept (trace_context.py), and that is all.

On (`configure`, called by each door as it starts), the spans of one agent are:

    POST /api/v1/agents                     the API (Flask instrumentation, api/)
      apply_async/jarvis.run_agent          the enqueue (workers/tracing.py)
        run/jarvis.run_agent                the worker's task (Celery instrumentation)
          invoke_agent                      one attempt at the agent (TracedExecutor)
            iteration                       one ReACT iteration (`iteration`)
              chat {model}                  its model call (TracedChatModel)
              execute_tool {tool}           its tool call (TracedTools)

An attempt's parent is the task's span when the message carried the agent's trace (the
create's enqueue does), else the trace context stored with the agent, linked to the
task's span: a sweeper's or a hand-back's enqueue starts no trace of its own for the
agent, and a resumed agent stays one trace. Attributes follow the GenAI semantic
conventions (gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model,
gen_ai.usage.input_tokens and output_tokens, gen_ai.tool.name).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jarvis_agents.config import Settings
from jarvis_agents.errors import ModelError
from jarvis_agents.llm.base import ChatModel, ChatReply, ChatRequest
from jarvis_agents.trace_context import parse_traceparent

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from jarvis_agents.executor import Executor
    from jarvis_agents.lifecycle import Agent
    from jarvis_agents.tools.registry import ToolRegistry, ToolResult

log = logging.getLogger(__name__)

TRACER_NAME = "jarvis_agents"
# GenAI semantic conventions (development status; names as of semconv 1.37+). The
# provider is also given under its earlier name, which many backends still read.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
ERROR_TYPE = "error.type"

_tracer: Tracer | None = None
_provider: Any = None  # the SDK's TracerProvider once configured
_NO_SPAN = contextlib.nullcontext()


def configure(settings: Settings, *, service: str) -> bool:
    """Export this process's spans over OTLP/HTTP if `settings` says so; whether it does.

    Spans go to `settings.otel_traces_url`; OpenTelemetry reads its other variables
    itself (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_BSP_*); `service` is the
    service name unless OTEL_SERVICE_NAME gives one. Once per process: a second call
    (another app in the same process) keeps the first provider.
    """
    global _tracer, _provider
    if not settings.otel_traces_url:
        return False
    if _tracer is not None:
        return True
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: service}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otel_traces_url)))
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = trace.get_tracer(TRACER_NAME)
    log.info("tracing on: spans go to %s as %s", settings.otel_traces_url,
             resource.attributes.get(SERVICE_NAME))
    return True


def enabled() -> bool:
    return _tracer is not None


def flush(timeout_s: float = 5.0) -> None:
    """Send the spans still batched (a process about to exit, a test about to look)."""
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))


# --- the create ----------------------------------------------------------------------


def create_traceparent(header: str | None) -> str | None:
    """The trace context a new agent keeps: the current span's (the create request's,
    which honoured its `traceparent` header) when tracing is on, else the header's
    own; None when neither has one (the agent starts a trace of its own)."""
    if _tracer is not None:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    return parse_traceparent(header)


# --- the worker ----------------------------------------------------------------------


def iteration(agent: Agent, step: int) -> contextlib.AbstractContextManager[Any]:
    """The span of one ReACT iteration (a no-op with tracing off)."""
    if _tracer is None:
        return _NO_SPAN
    return _tracer.start_as_current_span(
        "iteration", attributes={AGENT_ID: str(agent.id), "jarvis.step": step})


class TracedExecutor:
    """An Executor whose every attempt at an agent is an `invoke_agent` span in the
    agent's trace."""

    def __init__(self, inner: Executor, tracer: Tracer) -> None:
        self._inner = inner
        self._tracer = tracer

    def run(self, agent: Agent, **options: Any) -> Agent | None:
        with self._attempt(agent) as span:
            ended = self._inner.run(agent, **options)
            # None: cancelled, taken over, or stopped by a shutdown meanwhile.
            span.set_attribute("jarvis.agent.status", ended.status.value if ended else "stopped")
            return ended

    @contextlib.contextmanager
    def _attempt(self, agent: Agent) -> Iterator[Span]:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = None
        links: list[trace.Link] = []
        current = trace.get_current_span().get_span_context()
        if agent.traceparent:
            stored = TraceContextTextMapPropagator().extract({"traceparent": agent.traceparent})
            if trace.get_current_span(stored).get_span_context().trace_id != current.trace_id:
                parent = stored  # the task's message did not carry the agent's trace
                links = [trace.Link(current)] if current.is_valid else []
        attributes = {
            OPERATION: "invoke_agent", AGENT_ID: str(agent.id), AGENT_NAME: "jarvis",
            REQUEST_MODEL: agent.model, "jarvis.agent.attempt": agent.attempt,
        }
        with self._tracer.start_as_current_span(
            "invoke_agent", context=parent, links=links, attributes=attributes,
        ) as span:
            yield span

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedChatModel:
    """A ChatModel whose every call is a `chat {model}` span (GenAI conventions)."""

    def __init__(self, inner: ChatModel, tracer: Tracer, *, provider_of: Callable[[str], tuple[str, str]]) -> None:
        self._inner = inner
        self._tracer = tracer
        self._provider_of = provider_of

    def complete(self, request: ChatRequest, **options: Any) -> ChatReply:
        # The options (deadline, should_stop, on_delta …) pass through as they are.
        from opentelemetry.trace import SpanKind

        try:
            provider, name = self._provider_of(request.model)
        except ModelError:
            provider, name = "unknown", request.model  # the call itself says why
        attributes = {OPERATION: "chat", PROVIDER: provider, SYSTEM: provider, REQUEST_MODEL: name}
        with self._tracer.start_as_current_span(
            f"chat {name}", kind=SpanKind.CLIENT, attributes=attributes,
        ) as span:
            try:
                reply = self._inner.complete(request, **options)
            except Exception as exc:
                span.set_attribute(ERROR_TYPE, type(exc).__name__)
                raise
            span.set_attribute(RESPONSE_MODEL, reply.model)
            if reply.usage is not None:
                span.set_attribute(INPUT_TOKENS, reply.usage.input_tokens)
                span.set_attribute(OUTPUT_TOKENS, reply.usage.output_tokens)
            return reply

    def capabilities(self, model: str, **options: Any) -> Any:
        return self._inner.capabilities(model, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedTools:
    """A ToolRegistry whose every call is an `execute_tool {tool}` span."""

    def __init__(self, inner: ToolRegistry, tracer: Tracer) -> None:
        self._inner = inner
        self._tracer = tracer

    def subset(self, names: Iterable[str] | None) -> TracedTools:
        return TracedTools(self._inner.subset(names), self._tracer)

    def plus(self, extra: Any) -> TracedTools:
        return TracedTools(self._inner.plus(extra), self._tracer)

    def call_text(self, name: str, tool_input: str, **options: Any) -> ToolResult:
        with self._span(name) as span:
            return _ended(span, self._inner.call_text(name, tool_input, **options))

    def call(self, name: str, arguments: Mapping[str, Any], **options: Any) -> ToolResult:
        with self._span(name) as span:
            return _ended(span, self._inner.call(name, arguments, **options))

    def _span(self, name: str) -> contextlib.AbstractContextManager[Span]:
        tool = self._inner.get(name)
        shown = tool.name if tool is not None else name
        return self._tracer.start_as_current_span(
            f"execute_tool {shown}", attributes={OPERATION: "execute_tool", TOOL_NAME: shown})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _ended(span: Span, result: ToolResult) -> ToolResult:
    if not result.ok:
        from opentelemetry.trace import Status, StatusCode

        # The model is told and goes on; the span says the call failed.
        span.set_attribute(ERROR_TYPE, "tool_error" if result.tool else "unknown_tool")
        span.set_status(Status(StatusCode.ERROR, result.content.splitlines()[0][:200]
                               if result.content else None))
    return result


# --- wrapping the worker's parts (no-ops with tracing off) -----------------------------


def traced_executor(executor: Executor) -> Executor:
    return executor if _tracer is None else TracedExecutor(executor, _tracer)  # type: ignore[return-value]


def traced_model(model: ChatModel, *, provider_of: Callable[[str], tuple[str, str]]) -> ChatModel:
    return model if _tracer is None else TracedChatModel(model, _tracer, provider_of=provider_of)  # type: ignore[return-value]


def traced_tools(tools: ToolRegistry) -> ToolRegistry:
    return tools if _tracer is None else TracedTools(tools, _tracer)  # type: ignore[return-value]
