"""Rows and the domain: an Agent or a Step as the database holds it, and back.

On read, what every implementation must hand back alike: tools and approve_tools as
tuples, waited_ms 0 when NULL, timestamps timezone-aware, JSON columns parsed (a raw
psycopg2 cursor hands back text). Also the list cursor, which is a row's position.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import literal_column

from jarvis_agents.errors import RequestError
from jarvis_agents.lifecycle import Agent, AgentMode, AgentStatus, Step, StepType, StopReason, Usage
from jarvis_agents.store.models import AS_READ, AgentRow, as_utc

# What every read of a step selects.
STEP_COLUMNS = ("seq", "step", "type", "tool", "content", "created_at", "duration_ms",
                "call_id", "input_tokens", "output_tokens")
# What every read of an agent selects: its columns, with step_count and usage as read.
AGENT_READ = tuple(
    literal_column(AS_READ[column.name]).label(column.name) if column.name in AS_READ else column
    for column in AgentRow.__table__.c
)

def agent_values(agent: Agent) -> dict[str, Any]:
    return {
        "id": agent.id, "user_id": agent.user_id, "goal": agent.goal,
        "status": agent.status.value, "model": agent.model, "max_steps": agent.max_steps,
        "step_count": agent.step_count, "final_answer": agent.final_answer,
        "error": agent.error,
        "stop_reason": agent.stop_reason.value if agent.stop_reason else None,
        "tools": list(agent.tools) if agent.tools is not None else None,
        "webhook_url": agent.webhook_url, "created_at": agent.created_at,
        "updated_at": agent.updated_at or agent.created_at, "started_at": agent.started_at,
        "completed_at": agent.completed_at, "attempt": agent.attempt, "losses": agent.losses,
        "task_id": agent.task_id,
        "heartbeat_at": agent.heartbeat_at, "idempotency_key": agent.idempotency_key,
        "request_hash": agent.request_hash,
        "approve_tools": list(agent.approve_tools) if agent.approve_tools is not None else None,
        "waiting_for": agent.waiting_for, "approval": agent.approval,
        "waited_ms": agent.waited_ms, "mode": agent.mode.value,
        "input_tokens": agent.usage.input_tokens, "output_tokens": agent.usage.output_tokens,
        "model_calls": agent.usage.model_calls, "output_schema": agent.output_schema,
        "output": agent.output,
        # Threads and forks (store/threads.py): a thread's id is its first agent's.
        "thread_id": agent.thread_id or agent.id, "parent_id": agent.parent_id,
        "forked_from_id": agent.forked_from_id, "forked_from_seq": agent.forked_from_seq,
        "context": agent.context, "traceparent": agent.traceparent,
        "assistant_id": agent.assistant_id, "assistant_version": agent.assistant_version,
        "instructions": agent.instructions,
        "delegates": list(agent.delegates) if agent.delegates is not None else None,
        "caller_id": agent.caller_id, "caller_call_id": agent.caller_call_id,
        "root_id": agent.root_id, "depth": agent.depth,
        "descendants_input_tokens": agent.descendants_usage.input_tokens,
        "descendants_output_tokens": agent.descendants_usage.output_tokens,
        "descendants_model_calls": agent.descendants_usage.model_calls,
        "schedule_id": agent.schedule_id, "scheduled_for": agent.scheduled_for,
    }


def agent_from_row(row: Mapping[str, Any]) -> Agent:
    return Agent(
        id=row["id"], user_id=row["user_id"], goal=row["goal"],
        model=row["model"], max_steps=row["max_steps"], status=AgentStatus(row["status"]),
        step_count=row["step_count"], final_answer=row["final_answer"], error=row["error"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        tools=tuple(row["tools"]) if row["tools"] is not None else None,
        webhook_url=row["webhook_url"], created_at=as_utc(row["created_at"]),
        updated_at=as_utc(row["updated_at"]), started_at=as_utc(row["started_at"]),
        completed_at=as_utc(row["completed_at"]), attempt=row["attempt"],
        losses=row["losses"], task_id=row["task_id"], heartbeat_at=as_utc(row["heartbeat_at"]),
        idempotency_key=row["idempotency_key"], request_hash=row["request_hash"],
        approve_tools=tuple(row["approve_tools"]) if row["approve_tools"] is not None else None,
        waiting_for=_json(row["waiting_for"]), approval=_json(row["approval"]),
        waited_ms=row["waited_ms"] or 0,
        mode=AgentMode(row["mode"]),
        usage=Usage(int(row["input_tokens"]), int(row["output_tokens"]), int(row["model_calls"])),
        output_schema=row["output_schema"], output=row["output"],
        thread_id=row.get("thread_id"), parent_id=row.get("parent_id"),
        forked_from_id=row.get("forked_from_id"), forked_from_seq=row.get("forked_from_seq"),
        context=row.get("context"),
        traceparent=row["traceparent"],
        assistant_id=row["assistant_id"], assistant_version=row["assistant_version"],
        instructions=row["instructions"],
        delegates=tuple(_json(row["delegates"])) if row["delegates"] is not None else None,
        caller_id=row["caller_id"], caller_call_id=row["caller_call_id"],
        root_id=row["root_id"], depth=row["depth"] or 0,
        descendants_usage=Usage(int(row["descendants_input_tokens"] or 0),
                                int(row["descendants_output_tokens"] or 0),
                                int(row["descendants_model_calls"] or 0)),
        schedule_id=row["schedule_id"], scheduled_for=as_utc(row["scheduled_for"]),
    )


def _json(value: Any) -> Any:
    """A JSON column as read: a raw psycopg2 cursor (store/postgres.py) hands back text."""
    return json.loads(value) if isinstance(value, str) else value


def step_values(agent_id: uuid.UUID, attempt: int, steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "agent_id": agent_id, "seq": s.seq, "step": s.step, "type": s.type.value,
            "tool": s.tool, "content": s.content, "created_at": s.created_at,
            "duration_ms": s.duration_ms, "attempt": attempt, "call_id": s.call_id,
            "input_tokens": s.usage.input_tokens if s.usage else None,
            "output_tokens": s.usage.output_tokens if s.usage else None,
        }
        for s in steps
    ]


def step_from_row(row: Mapping[str, Any]) -> Step:
    return Step(
        seq=row["seq"], step=row["step"], type=StepType(row["type"]), tool=row["tool"],
        content=row["content"], created_at=as_utc(row["created_at"]),
        duration_ms=row["duration_ms"], call_id=row["call_id"],
        usage=None if row["input_tokens"] is None else Usage(
            row["input_tokens"], row["output_tokens"] or 0, 1),
    )


def encode_cursor(agent: Agent) -> str:
    raw = json.dumps([agent.created_at.isoformat(), str(agent.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# `encode_cursor` writes ~110 characters. Past this, a cursor is not one of ours,
# and nothing of its length reaches the JSON parser (whose nesting depth it bounds).
MAX_CURSOR_CHARS = 256


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Parse a cursor from `encode_cursor`; anything else is a RequestError."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, agent_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        return (when if when.tzinfo else when.replace(tzinfo=UTC)), uuid.UUID(agent_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise RequestError("the cursor is malformed; pass back `next_cursor` unchanged",
                           code="invalid_cursor") from None
