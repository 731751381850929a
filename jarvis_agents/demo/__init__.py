"""The model server of jarvis-agents' own tests and demos: a real HTTP server (the
standard library's http.server) that speaks Ollama's API and the OpenAI one, saying what
a script says. The test suite's model server (tests/support/fake_ollama.py) is this one,
scripted per test.

- `server`: ModelServer, the server on a thread, saying what its responder says;
- `handler`: its HTTP side; `ollama_api`, `openai_api`: the two wire formats;
- `replies`: what a scripted model says (a Turn) and how it is streamed in pieces.
"""
