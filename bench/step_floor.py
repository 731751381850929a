"""The step floor of scenario 1: what one ReACT iteration costs when a loop does only what
the target names (a model call, one INSERT of its rows, one PUBLISH of their events),
measured on this machine in the same run as ours (see `step_floor`)."""

from __future__ import annotations

import json
from typing import Any

from bench import driver
from bench.stack import ModelServer, Stack
from bench.stats import latency_summary
from bench.step_overheads import model_turns

# The rows of one inline-tool iteration, as the bench model's agents write them.
_FLOOR_ROWS = (
    ("THINK", None, "I need to multiply the numbers first."),
    ("ACT", "calculate", "1234 * 902"),
    ("OBSERVE", "calculate", "1113068"),
)


def step_floor(stack: Stack, model: ModelServer, agents: int, tool_calls: int, r: int) -> dict:
    """The per-step overhead of a loop that does only what the target names.

    One agent at a time, from the harness: ask the model server for a reply (a kept-
    alive `http.client` connection, unstreamed), then persist the iteration's three rows
    in one durable INSERT (autocommit, the same table and indexes), publish their three
    events in one Redis PUBLISH round trip, and ask for the next reply. No guard, no
    parsing beyond the JSON, no prompt, no tool, no threads. Clocked as ours is: the
    model server's arrival of request k − the end of its reply k−1 (iterations 1 to
    `tool_calls`). Its waits are ours (the model server, PostgreSQL's commit, Redis),
    so it pays what this machine charges for them, wake-ups of idle cores included.
    Also `_built`, as `_first_events` gives it, for its persist + publish.
    """
    import http.client
    from urllib.parse import urlsplit

    from sqlalchemy import text

    from jarvis_agents.events import AGENT_CHANNEL, step_event
    from jarvis_agents.lifecycle import Step, StepType, utcnow

    with stack.engine.connect() as conn:  # any agent row will do for the foreign key
        agent_id = conn.execute(
            text("SELECT id FROM agents ORDER BY created_at LIMIT 1 OFFSET :r"), {"r": r}
        ).scalar_one()
    insert = (
        "INSERT INTO agent_steps (agent_id, seq, step, type, tool, content, created_at, "
        "duration_ms, attempt) VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, 1)"] * 3)
    )
    channel = AGENT_CHANNEL.format(agent_id)
    url = urlsplit(model.url)
    chat = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    raw = stack.engine.raw_connection()
    tags = [f"floor{r}-{i}" for i in range(agents)]
    written: list[tuple[str, int, float]] = []  # (agent, its last seq, its rows built)
    model.calls(clear=True)
    try:
        # On psycopg2's connection: set on SQLAlchemy's proxy around it, the attribute
        # did nothing, and the floor's INSERTs ran in one transaction that never
        # committed (a floor without the commit's WAL flush, until this was found).
        raw.dbapi_connection.autocommit = True
        with raw.cursor() as cursor:
            cursor.execute("DELETE FROM agent_steps WHERE agent_id = %s", (str(agent_id),))
            seq = 0
            for tag in tags:
                messages = [{"role": "user", "content": driver.goal(tag)}]
                for k in range(tool_calls + 1):
                    body = json.dumps({"model": "llama3.2", "messages": messages, "stream": False})
                    chat.request("POST", "/api/chat", body=body,
                                 headers={"Content-Type": "application/json"})
                    reply = json.loads(chat.getresponse().read())["message"]["content"]
                    if k == tool_calls:
                        break
                    now = utcnow()
                    steps = [  # one agent row holds them all: iterations numbered throughout
                        Step(seq + i + 1, seq // 3, StepType(kind), content, tool=tool,
                             created_at=now, duration_ms=0)
                        for i, (kind, tool, content) in enumerate(_FLOOR_ROWS)
                    ]
                    seq += len(steps)
                    written.append((str(agent_id), seq, now.timestamp()))
                    cursor.execute(insert, [
                        value for s in steps
                        for value in (str(agent_id), s.seq, s.step, s.type.value, s.tool,
                                      s.content, s.created_at, s.duration_ms)
                    ])
                    pipeline = stack.redis.pipeline(transaction=False)
                    for s in steps:
                        pipeline.publish(channel, json.dumps(step_event(agent_id, s)))
                    pipeline.execute()
                    messages += [{"role": "assistant", "content": reply},
                                 {"role": "user", "content": "OBSERVATION: 1113068"}]
            _check_committed(stack, agent_id, seq)
            cursor.execute("DELETE FROM agent_steps WHERE agent_id = %s", (str(agent_id),))
    finally:
        raw.close()
        chat.close()
    turns = model_turns(model.calls(clear=True))
    samples = [
        turns[tag][k][0] - turns[tag][k - 1][1]
        for tag in tags
        for k in range(1, tool_calls + 1)
        if k in turns[tag] and k - 1 in turns[tag]
    ]
    return {**latency_summary(samples), "_built": written}


def _check_committed(stack: Stack, agent_id: Any, rows: int) -> None:
    """Fail unless another connection sees the floor's `rows` rows: its INSERTs committed."""
    from sqlalchemy import text

    with stack.engine.connect() as conn:
        seen = conn.execute(
            text("SELECT count(*) FROM agent_steps WHERE agent_id = :id"), {"id": agent_id}
        ).scalar_one()
    if seen != rows:
        raise RuntimeError(f"the step floor's INSERTs did not commit: {seen} of {rows} rows seen")
