"""An agent's W3C trace context (`traceparent`): made at create, kept on the agent's row.

Every agent belongs to one trace, whether or not traces are exported (docs/api.md §10):
its `trace_id` is in the agent JSON, and each attempt of a worker, however late and
wherever it resumes, continues that trace from the stored `traceparent`. This module
needs no OpenTelemetry: with tracing off, a create costs one random number here.
"""

from __future__ import annotations

import random
import re

# As OpenTelemetry's TraceContextTextMapPropagator reads the header, so an agent joins
# the same trace whether the API traces or not: lower-case hex, version ff refused,
# version 00 with nothing after its four fields, later versions may append fields.
_TRACEPARENT = re.compile(
    r"^\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*$"
)
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# A new trace is sampled: a worker that exports spans while the API does not (or did
# not when the agent was created) still records the agent's iterations.
SAMPLED = "01"


def new_traceparent() -> str:
    """A traceparent that starts a new trace: random trace and parent ids, sampled."""
    # Ids as OpenTelemetry's RandomIdGenerator makes them; an all-zero id is invalid.
    trace_id = random.getrandbits(128) or 1
    span_id = random.getrandbits(64) or 1
    return f"00-{trace_id:032x}-{span_id:016x}-{SAMPLED}"


def parse_traceparent(header: str | None) -> str | None:
    """The trace context a request's `traceparent` header carries, as a version-00
    traceparent; None when there is no header or it is not a valid one (W3C: a
    malformed header is ignored, and the request starts a new trace)."""
    if not header:
        return None
    match = _TRACEPARENT.match(header)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return f"00-{trace_id}-{span_id}-{flags}"


def trace_id_of(traceparent: str) -> str:
    """The 32 hex digits of the trace a traceparent belongs to."""
    return traceparent[3:35]
