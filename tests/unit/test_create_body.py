"""What a person reads when the API refuses a create body: sentences that say what to
send, never a regular expression or pydantic's wording."""

from __future__ import annotations

import json
import re

import pytest
from flask import Flask

from api import params
from api.schemas import CREATE_FIELDS, CreateAgent
from jarvis_agents.errors import RequestError

REFUSED = [
    ({"goal": " \t\n "}, "the goal must not be blank"),
    ({"goal": ""}, "the goal must not be blank"),
    ({"goal": "x" * 4001}, "the goal must be at most 4000 characters, not 4001"),
    ({"goal": 42}, "the goal must be text of 1 to 4000 characters, not 42"),
    ({"max_steps": 3}, 'the goal is missing: send a JSON object such as {"goal": "What is 2 + 2?"}'),
    ({"goal": "a\u0000b"}, "the goal must not contain NUL characters"),
    ({"goal": "\ud800"}, "the goal must be valid Unicode text (no lone surrogates)"),
    ({"goal": "x", "max_steps": 0}, "`max_steps` must be a whole number from 1 to 50, not 0"),
    ({"goal": "x", "max_steps": 51}, "`max_steps` must be a whole number from 1 to 50, not 51"),
    ({"goal": "x", "max_steps": "5"}, '`max_steps` must be a whole number from 1 to 50, not "5"'),
    ({"goal": "x", "max_steps": 5.0}, "`max_steps` must be a whole number from 1 to 50, not 5.0"),
    ({"goal": "x", "max_steps": True}, "`max_steps` must be a whole number from 1 to 50, not true"),
    ({"goal": "x", "model": " "}, "`model` must not contain spaces"),
    ({"goal": "x", "model": ""}, "`model` must be a model's name without spaces"),
    ({"goal": "x", "model": "openai/"}, "`model` names no model after 'openai/', such as"),
    ({"goal": "x", "model": "ollama/"}, "`model` names no model after 'ollama/', such as"),
    ({"goal": "x", "tools": "calculate"}, '`tools` must be a list of tool names, such as ["calculate"]'),
    ({"goal": "x", "tools": [""]}, "tool name #1 in `tools` must be the name of a tool"),
    ({"goal": "x", "tools": ["calculate", 7]}, "tool name #2 in `tools` must be the name of a tool"),
    ({"goal": "x", "tools": ["calculate"] * 21}, "`tools` may name at most 20 tools, not 21"),
    ({"goal": "x", "webhook_url": "ftp://example.com/"}, "`webhook_url` must be an http(s) URL"),
    ({"goal": "x", "webhook_url": 5}, "`webhook_url` must be an http(s) URL, not 5"),
    ({"goal": "x", "mode": "fast"}, '`mode` must be one of "auto", "native" or "react", not "fast"'),
    ({"goal": "x", "output_schema": "object"}, '`output_schema` must be a JSON Schema object, such as'),
    ({"goal": "x", "output_schema": {"type": "nope"}},
     "`output_schema` is not a valid JSON Schema (Draft 2020-12) at `type`: 'nope' is not"),
    ({"goal": "x", "output_schema": {"description": "x" * 17000}},
     "`output_schema` is 17019 bytes; at most 16384 (16 KiB) are accepted"),
    # What PostgreSQL cannot store is a 400, not a 500 (found by Schemathesis).
    ({"goal": "x", "output_schema": {"properties": {"a\u0000": {}}}},
     "`output_schema` must not contain NUL characters"),
    ({"goal": "x", "priority": "high"}, "unknown field `priority` (a create takes goal, max_steps"),
]


@pytest.fixture
def app() -> Flask:
    return Flask(__name__)


def refusal(app: Flask, body: object) -> str:
    raw = json.dumps(body)  # json.dumps writes a lone surrogate as \ud800, as a client would
    with (app.test_request_context("/api/v1/agents", method="POST", data=raw,
                                   content_type="application/json"),
          pytest.raises(RequestError) as refused):
        params.create_request()
    assert refused.value.code == "invalid_request"
    return str(refused.value)


@pytest.mark.parametrize(("body", "said"), REFUSED, ids=[said[:40] for _, said in REFUSED])
def test_each_refusal_is_a_sentence_that_says_what_to_send(app: Flask, body: object, said: str) -> None:
    message = refusal(app, body)
    assert message.startswith(said), message
    assert not re.search(r"[\^$\\]|\[\^|should|input|pattern|valid integer|Value error", message), message


def test_several_problems_are_said_together(app: Flask) -> None:
    message = refusal(app, {"goal": "", "max_steps": 0})
    assert message == "the goal must not be blank; `max_steps` must be a whole number from 1 to 50, not 0"


def test_every_field_of_the_body_has_its_words() -> None:
    assert set(CREATE_FIELDS) == set(CreateAgent.model_fields)
