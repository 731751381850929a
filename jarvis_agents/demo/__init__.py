"""A model server to try jarvis-agents without one: `jarvis-agents demo-model`.

A real HTTP server (the standard library's http.server) that speaks Ollama's API and the
OpenAI one well enough for the system: the demo model answers the README's example goals
with the built-in tools, in native and text mode. The test suite's model server
(tests/support/fake_ollama.py) is this one, scripted per test.

- `server`: ModelServer, the server on a thread, saying what its responder says;
- `handler`: its HTTP side; `ollama_api`, `openai_api`: the two wire formats;
- `replies`: what a scripted model says (a Turn) and how it is streamed in pieces;
- `answers`: the demo model's responder.
"""

from __future__ import annotations

from collections.abc import Iterable

from jarvis_agents.demo.answers import answer
from jarvis_agents.demo.server import ModelServer, Responder

# The demo model calls tools natively when asked in `auto` mode, as llama3.2 does.
DEMO_CAPABILITIES = ("completion", "tools")


def demo_server(responder: Responder = answer, *, host: str = "127.0.0.1", port: int = 0,
                models: Iterable[str] = ("llama3.2",), latency_s: float = 0.0,
                chunk_delay_s: float = 0.0) -> ModelServer:
    """A server of the demo model (not started): tools in native mode, any goal it knows."""
    return ModelServer(host=host, port=port, responder=responder, models=models,
                       latency_s=latency_s, chunk_delay_s=chunk_delay_s,
                       default_capabilities=DEMO_CAPABILITIES)


__all__ = ["DEMO_CAPABILITIES", "ModelServer", "answer", "demo_server"]
