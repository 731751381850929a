"""`jarvis-agents demo-model`: a model server to try the system with, no model needed.

It serves `jarvis_agents.demo` (Ollama's API, the OpenAI one beside it) where OLLAMA_HOST
says, as `ollama serve` does: by default Ollama's own address, where `jarvis-agents up`
finds it with nothing set (README, Quick start).
"""

from __future__ import annotations

import signal
import time
from urllib.parse import urlsplit

import click

from jarvis_agents.config import DEFAULT_OLLAMA_HOST, Settings

OLLAMA_PORT = 11434  # an OLLAMA_HOST without a port means Ollama's


@click.command("demo-model")
@click.option("--host", default=None, help="Interface to listen on (default: OLLAMA_HOST's host, "
              "else 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help=f"Port (default: OLLAMA_HOST's, else {OLLAMA_PORT}; 0: any free one).")
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="A model name it answers to (repeat for several; default: llama3.2, "
                   "JARVIS_MODEL's default).")
@click.option("--latency", type=click.FloatRange(0, 60), default=0.3, show_default=True,
              help="Seconds it thinks before each reply.")
@click.option("--chunk-delay", type=click.FloatRange(0, 10), default=0.05, show_default=True,
              help="Seconds between the pieces of a reply, as a model writes them.")
def demo_model(host: str | None, port: int | None, models: tuple[str, ...], latency: float,
               chunk_delay: float) -> None:
    """Serve a demo model, to try jarvis-agents without a model server: it does the
    README's examples (arithmetic with calculate, the time in a city with getTime), in
    native and text mode. Ctrl-C stops it."""
    from jarvis_agents.demo import demo_server

    said = urlsplit(Settings.from_env().ollama_host)
    server = demo_server(host=host or said.hostname or "127.0.0.1",
                         port=port if port is not None else said.port or OLLAMA_PORT,
                         models=models or ("llama3.2",), latency_s=latency,
                         chunk_delay_s=chunk_delay)
    try:
        server.start()
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {server.host}:{server.port}: {exc.strerror or exc} (is Ollama "
            "running there? Give both this and `jarvis-agents up` another OLLAMA_HOST, e.g. "
            "OLLAMA_HOST=127.0.0.1:11435)") from None
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it as Ctrl-C does
    found = "nothing to set" if server.url == DEFAULT_OLLAMA_HOST else f"OLLAMA_HOST={server.url}"
    click.echo(f"demo model server (Ollama's API) at {server.url}, model "
               f"{', '.join(server.models)}: it does arithmetic and tells the time in a city")
    click.echo(f"for `jarvis-agents up`: {found}; Ctrl-C stops it")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
