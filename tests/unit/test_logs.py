"""Log lines carry the agent id; JSON lines parse."""

from __future__ import annotations

import json
import logging

from jarvis_agents.logs import AgentIdFilter, JsonFormatter, current_agent_id


def record(message: str) -> logging.LogRecord:
    rec = logging.LogRecord("jarvis_agents.executor", logging.INFO, __file__, 1, message, (), None)
    AgentIdFilter().filter(rec)
    return rec


def test_json_lines_carry_the_agent_id() -> None:
    token = current_agent_id.set("0f8e5c1a-0000-4000-8000-000000000001")
    try:
        line = JsonFormatter().format(record("planning step 2"))
    finally:
        current_agent_id.reset(token)
    entry = json.loads(line)
    assert entry["agent_id"] == "0f8e5c1a-0000-4000-8000-000000000001"
    assert entry["message"] == "planning step 2" and entry["level"] == "INFO"


def test_outside_an_agent_the_id_is_null() -> None:
    assert json.loads(JsonFormatter().format(record("hub connected")))["agent_id"] is None
