"""Settings: read from the environment once, validated, then passed explicitly."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from jarvis_agents.durations import duration_s
from jarvis_agents.env_values import flag, seconds, seconds_list, whole_number
from jarvis_agents.errors import ConfigError
from jarvis_agents.redaction import HIDDEN, redacted_url
from jarvis_agents.remote_agents import RemoteAgent, load_a2a_agents
from jarvis_agents.tools.mcp.config import McpServerConfig, load_mcp_config

DEFAULT_MODEL = "llama3.2"  # 3B, tool-capable, ~2 GB: runs on a laptop CPU.
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
PROVIDERS = ("ollama", "openai")  # a model's provider: its prefix, or JARVIS_PROVIDER
# What one model reply may be (README, Models): the tokens a request asks for at most,
# and the characters kept of a reply that goes on regardless.
DEFAULT_MAX_REPLY_TOKENS = 4096
DEFAULT_MAX_REPLY_CHARS = 65536
# Agents one worker process runs at once, as threads. A waiting agent blocks on a
# socket or a queue, so an idle thread costs little memory (BENCHMARKS.md, scale on one
# worker process): one process keeps a thousand slow agents in flight at once, where a
# smaller pool would run them in waves.
DEFAULT_WORKER_CONCURRENCY = 1000
# Webhook timing (webhooks/dispatcher.py). The waits before each retry: the first within
# 10 s, 6 tries over 8 min 35 s in all, then the delivery is dead (README, Webhooks).
# How long a claimed try is its claimer's: longer than a try that takes all of its
# deadline (webhooks/sender.py, TRY_DEADLINE_S = 10 s for connect, send and the answer's
# head together). Only tests shorten them.
WEBHOOK_RETRY_DELAYS_S: tuple[float, ...] = (5, 30, 60, 120, 300)
WEBHOOK_LEASE_S = 20.0
# A model that has had nothing PENDING or RUNNING this long has no queue, consumer or
# state left in any worker, and no series in /metrics (routing.py). Only tests shorten it.
MODEL_IDLE_S = 600.0
SECRET_FIELDS = frozenset({"webhook_secret", "openai_api_key"})  # hidden in a repr


def default_data_dir(env: Mapping[str, str]) -> Path:
    """Where the embedded database, Redis and the saved API key live."""
    if env.get("JARVIS_DATA_DIR"):
        return Path(env["JARVIS_DATA_DIR"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "jarvis-agents"


@dataclass(frozen=True)
class Settings:
    """Everything the system can be configured with; see docs/api.md §1 and the README."""

    database_url: str
    redis_url: str | None
    data_dir: Path
    ollama_host: str = DEFAULT_OLLAMA_HOST
    model: str = DEFAULT_MODEL
    provider: str = "ollama"
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    max_steps: int = 10
    step_timeout_s: float = 30.0
    tool_timeout_s: float = 10.0
    total_timeout_s: float = 120.0
    max_active_per_user: int = 20
    max_streams_per_user: int = 100
    max_schedules_per_user: int = 100
    port: int = 8000
    # JARVIS_MCP_PORT: the MCP server's (`jarvis-agents mcp`); None: the API's port + 1.
    mcp_port: int | None = None
    mcp_url: str | None = None  # JARVIS_MCP_URL: where the API forwards /mcp (api/mcp_proxy.py)
    model_retries: int = 3
    max_reply_tokens: int = DEFAULT_MAX_REPLY_TOKENS
    max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS
    max_attempts: int = 3
    heartbeat_interval_s: float = 5.0
    heartbeat_stale_s: float = 30.0
    pending_requeue_s: float = 60.0
    shutdown_grace_s: float = 20.0
    worker_metrics_port: int | None = None
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY
    tool_output_max_chars: int = 4000
    # What a thread's earlier goals and answers may take of an agent's prompt (threads.py).
    context_chars: int = 16000
    webhook_secret: str | None = None
    webhook_allow_private: bool = False
    webhook_retry_delays_s: tuple[float, ...] = WEBHOOK_RETRY_DELAYS_S
    webhook_lease_s: float = WEBHOOK_LEASE_S
    weather_geocoding_url: str = "https://geocoding-api.open-meteo.com/v1/search"
    weather_forecast_url: str = "https://api.open-meteo.com/v1/forecast"
    search_backend: str = "duckduckgo"
    searxng_url: str | None = None
    duckduckgo_url: str = "https://api.duckduckgo.com/"
    log_json: bool | None = None
    # Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT
    # + /v1/traces; None (tracing off) unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    # (jarvis_agents/tracing.py). The exporter reads its other OTEL_* variables itself.
    otel_traces_url: str | None = None
    mcp_servers: tuple[McpServerConfig, ...] = ()  # from the JARVIS_MCP_CONFIG file
    approve_tools: tuple[str, ...] = ()  # JARVIS_APPROVE_TOOLS: names, or "*" for all
    approval_timeout_s: float = 86400.0
    # JARVIS_MAX_DELEGATION_DEPTH: the deepest a child agent may be (a client's is at 0).
    max_delegation_depth: int = 3
    a2a_agents: tuple[RemoteAgent, ...] = ()  # JARVIS_A2A_AGENTS: remote delegates
    # JARVIS_MODEL_CONCURRENCY: (model, calls at once across all workers) pairs
    model_concurrency: tuple[tuple[str, int], ...] = ()
    model_idle_s: float = MODEL_IDLE_S  # JARVIS_MODEL_IDLE, for tests only
    retention_s: float | None = None  # JARVIS_RETENTION; None keeps ended agents forever

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build and validate settings; a bad value is a ConfigError naming the variable."""
        env = os.environ if env is None else env
        data_dir = default_data_dir(env)
        database_url = _database_url(env.get("DATABASE_URL") or f"sqlite:///{data_dir / 'jarvis.db'}")
        redis_url = env.get("REDIS_URL") or None
        if redis_url is not None:
            _check_url("REDIS_URL", redis_url, schemes={"redis", "rediss", "unix"})
        ollama_host = env.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST
        if "://" not in ollama_host:  # the ollama client accepts "host:port" too
            ollama_host = f"http://{ollama_host}"
        _check_url("OLLAMA_HOST", ollama_host, schemes={"http", "https"})
        provider = (env.get("JARVIS_PROVIDER") or "ollama").strip().lower()
        if provider not in PROVIDERS:
            raise ConfigError(
                f"JARVIS_PROVIDER must be 'ollama' or 'openai', not {env['JARVIS_PROVIDER']!r}")
        openai_base_url = env.get("OPENAI_BASE_URL") or None
        if openai_base_url:
            _check_url("OPENAI_BASE_URL", openai_base_url, schemes={"http", "https"})
        searxng_url = env.get("JARVIS_SEARXNG_URL") or None
        if searxng_url:
            _check_url("JARVIS_SEARXNG_URL", searxng_url, schemes={"http", "https"})
        search_backend = env.get("JARVIS_SEARCH_BACKEND") or ("searxng" if searxng_url else "duckduckgo")
        if search_backend not in {"searxng", "duckduckgo"}:
            raise ConfigError(
                f"JARVIS_SEARCH_BACKEND must be 'searxng' or 'duckduckgo', not {search_backend!r}"
            )
        heartbeat_interval_s = seconds(env, "JARVIS_HEARTBEAT_INTERVAL", 5.0)
        heartbeat_stale_s = seconds(env, "JARVIS_HEARTBEAT_STALE", 30.0)
        if heartbeat_stale_s <= heartbeat_interval_s:
            # A heartbeat older than one interval is simply the next one not due yet:
            # every live agent would be taken over as if its worker had died.
            raise ConfigError(
                f"JARVIS_HEARTBEAT_STALE ({heartbeat_stale_s:g} s) must be longer than "
                f"JARVIS_HEARTBEAT_INTERVAL ({heartbeat_interval_s:g} s); several intervals, "
                "so that a late heartbeat or a short database outage is not taken for a lost worker"
            )
        return cls(
            database_url=database_url,
            redis_url=redis_url,
            data_dir=data_dir,
            ollama_host=ollama_host.rstrip("/"),
            model=env.get("JARVIS_MODEL") or DEFAULT_MODEL,
            provider=provider,
            openai_base_url=openai_base_url.rstrip("/") if openai_base_url else None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            max_steps=whole_number(env, "JARVIS_MAX_STEPS", 10, low=1, high=50),
            step_timeout_s=seconds(env, "JARVIS_STEP_TIMEOUT", 30.0),
            tool_timeout_s=seconds(env, "JARVIS_TOOL_TIMEOUT", 10.0),
            total_timeout_s=seconds(env, "JARVIS_TOTAL_TIMEOUT", 120.0),
            max_active_per_user=whole_number(env, "JARVIS_MAX_ACTIVE_PER_USER", 20, low=1),
            max_streams_per_user=whole_number(env, "JARVIS_MAX_STREAMS_PER_USER", 100, low=1),
            max_schedules_per_user=whole_number(env, "JARVIS_MAX_SCHEDULES_PER_USER", 100, low=0),
            port=whole_number(env, "PORT", 8000, low=1, high=65535),
            mcp_port=whole_number(env, "JARVIS_MCP_PORT", 0, low=1, high=65535) or None,
            mcp_url=_url(env, "JARVIS_MCP_URL", "") if env.get("JARVIS_MCP_URL") else None,
            model_retries=whole_number(env, "JARVIS_MODEL_RETRIES", 3, low=1, high=20),
            max_reply_tokens=whole_number(env, "JARVIS_MAX_REPLY_TOKENS", DEFAULT_MAX_REPLY_TOKENS,
                                  low=1, high=1_000_000),
            max_reply_chars=whole_number(env, "JARVIS_MAX_REPLY_CHARS", DEFAULT_MAX_REPLY_CHARS,
                                 low=1000, high=10_000_000),
            max_attempts=whole_number(env, "JARVIS_MAX_ATTEMPTS", 3, low=1, high=100),
            heartbeat_interval_s=heartbeat_interval_s,
            heartbeat_stale_s=heartbeat_stale_s,
            pending_requeue_s=seconds(env, "JARVIS_PENDING_REQUEUE", 60.0),
            shutdown_grace_s=seconds(env, "JARVIS_SHUTDOWN_GRACE", 20.0),
            worker_metrics_port=whole_number(env, "JARVIS_WORKER_METRICS_PORT", 0, low=0, high=65535) or None,
            worker_concurrency=whole_number(
                env, "JARVIS_WORKER_CONCURRENCY", DEFAULT_WORKER_CONCURRENCY, low=1, high=10000
            ),
            tool_output_max_chars=whole_number(env, "JARVIS_TOOL_OUTPUT_MAX_CHARS", 4000, low=100),
            context_chars=whole_number(env, "JARVIS_CONTEXT_CHARS", 16000, low=500),
            webhook_secret=_webhook_secret(env.get("JARVIS_WEBHOOK_SECRET") or None),
            webhook_allow_private=flag(env, "JARVIS_WEBHOOK_ALLOW_PRIVATE", False),
            webhook_retry_delays_s=seconds_list(
                env, "JARVIS_WEBHOOK_RETRY_DELAYS", WEBHOOK_RETRY_DELAYS_S),
            webhook_lease_s=seconds(env, "JARVIS_WEBHOOK_LEASE", WEBHOOK_LEASE_S),
            weather_geocoding_url=_url(
                env, "JARVIS_WEATHER_GEOCODING_URL", "https://geocoding-api.open-meteo.com/v1/search"
            ),
            weather_forecast_url=_url(
                env, "JARVIS_WEATHER_FORECAST_URL", "https://api.open-meteo.com/v1/forecast"
            ),
            search_backend=search_backend,
            searxng_url=searxng_url,
            duckduckgo_url=_url(env, "JARVIS_DUCKDUCKGO_URL", "https://api.duckduckgo.com/"),
            log_json=flag(env, "JARVIS_LOG_JSON", None) if env.get("JARVIS_LOG_JSON") else None,
            otel_traces_url=_otel_traces_url(env),
            mcp_servers=load_mcp_config(env.get("JARVIS_MCP_CONFIG") or None, env),
            approve_tools=tuple(
                name.strip() for name in (env.get("JARVIS_APPROVE_TOOLS") or "").split(",")
                if name.strip()
            ),
            approval_timeout_s=seconds(env, "JARVIS_APPROVAL_TIMEOUT", 86400.0),
            max_delegation_depth=whole_number(env, "JARVIS_MAX_DELEGATION_DEPTH", 3, low=0),
            a2a_agents=load_a2a_agents(env.get("JARVIS_A2A_AGENTS") or None),
            model_concurrency=_model_caps(env.get("JARVIS_MODEL_CONCURRENCY") or ""),
            model_idle_s=seconds(env, "JARVIS_MODEL_IDLE", MODEL_IDLE_S),
            retention_s=duration_s("JARVIS_RETENTION", env.get("JARVIS_RETENTION")),
        )

    def __repr__(self) -> str:
        """Every field, with the secrets hidden: settings end up in logs and tracebacks."""
        shown = ", ".join(f"{f.name}={_shown(f.name, getattr(self, f.name))!r}" for f in fields(self))
        return f"Settings({shown})"

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with some fields replaced (tests, command-line flags)."""
        return replace(self, **changes)

    @property
    def mcp_server_port(self) -> int:
        """Where `jarvis-agents mcp` listens: JARVIS_MCP_PORT, else the API's port + 1."""
        return self.mcp_port or (self.port + 1 if self.port < 65535 else self.port - 1)

    def require_redis_url(self) -> str:
        """REDIS_URL, or a ConfigError saying how to provide one."""
        if not self.redis_url:
            raise ConfigError(
                "REDIS_URL is not set; point it at Redis (redis://host:6379/0) "
                "or use `jarvis-agents up`, which starts one"
            )
        return self.redis_url

    @property
    def outage_budget_s(self) -> float:
        """How long a worker retries a database write in place before it gives the
        attempt up: until about when its last heartbeat would go stale, after which
        another worker may take the agent over."""
        return self.heartbeat_stale_s - self.heartbeat_interval_s

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _shown(name: str, value: object) -> object:
    """A field as a repr shows it: secrets hidden, URLs without password or query string,
    MCP servers' URLs too (their headers and env are never shown)."""
    if name in SECRET_FIELDS and value:
        return HIDDEN
    if isinstance(value, str) and "://" in value:
        return redacted_url(value)
    if name == "mcp_servers":
        return tuple(replace(server, url=redacted_url(server.url)) if server.url else server
                     for server in value)  # type: ignore[attr-defined]
    return value


def _database_url(value: str) -> str:
    """The URL checked, with a PostgreSQL URL that names no driver pointed at psycopg2.

    `postgresql://` (and Heroku's `postgres://`) is how most platforms hand the URL out;
    SQLAlchemy would load psycopg 3 for it, which is not installed, and fail with a
    traceback. psycopg2 is the driver we ship, so the plain scheme means it.
    """
    # Imported here: client commands read settings too and need not load SQLAlchemy.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if value.startswith(("postgresql://", "postgres://")):
        value = "postgresql+psycopg2://" + value.split("://", 1)[1]
    try:
        url = make_url(value)
    except ArgumentError:
        raise ConfigError(
            f"DATABASE_URL is not a valid SQLAlchemy URL: {value!r} "
            "(expected e.g. postgresql+psycopg2://user@host/db or sqlite:///path.db)"
        ) from None
    if url.get_backend_name() not in {"postgresql", "sqlite"}:
        raise ConfigError(
            f"DATABASE_URL must point at PostgreSQL or SQLite, not {url.get_backend_name()!r}"
        )
    if url.get_backend_name() == "postgresql" and url.get_driver_name() != "psycopg2":
        raise ConfigError(
            f"DATABASE_URL names the driver {url.get_driver_name()!r}; "
            "PostgreSQL is reached with psycopg2 (postgresql+psycopg2://… or postgresql://…)"
        )
    return value


def _check_url(name: str, value: str, *, schemes: set[str]) -> None:
    parts = urlsplit(value)
    if parts.scheme not in schemes or (parts.scheme != "unix" and not parts.hostname):
        allowed = ", ".join(sorted(f"{s}://" for s in schemes))
        raise ConfigError(f"{name} is not a valid URL: {value!r} (expected {allowed}…)")
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"{name} has an invalid port: {value!r}") from None


def _webhook_secret(value: str | None) -> str | None:
    """The secret, checked: one that starts `whsec_` (Standard Webhooks' format) must go on
    with base64 of the key, which is what webhook-signature is then keyed with."""
    if value is not None and value.startswith("whsec_"):
        rest = value.removeprefix("whsec_")
        try:
            key = base64.b64decode(rest + "=" * (-len(rest) % 4), validate=True)
        except binascii.Error:
            key = b""
        if not key:
            raise ConfigError(
                "JARVIS_WEBHOOK_SECRET starts with whsec_ but the rest is not the key in "
                "base64; give a whsec_ secret as issued, or a plain secret without the prefix"
            )
    return value


def _otel_traces_url(env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL, as OpenTelemetry derives it; None without
    OTEL_EXPORTER_OTLP_ENDPOINT or with OTEL_SDK_DISABLED=true."""
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not base or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    _check_url("OTEL_EXPORTER_OTLP_ENDPOINT", base, schemes={"http", "https"})
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        _check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces, schemes={"http", "https"})
        return traces
    return f"{base.rstrip('/')}/v1/traces"


def _model_caps(raw: str) -> tuple[tuple[str, int], ...]:
    """`MODEL=N,…` (JARVIS_MODEL_CONCURRENCY) as (model, N) pairs; a model's name may hold `=`
    no more than a comma, so each pair splits at its last `=`."""
    caps: dict[str, int] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        model, equals, number = item.rpartition("=")
        if not equals or not model.strip() or not number.strip().isdigit() or int(number) < 1:
            raise ConfigError(
                f"JARVIS_MODEL_CONCURRENCY must be MODEL=N pairs separated by commas, N at "
                f"least 1 (e.g. llama3.2=2,openai/gpt-4o=20), not {raw!r}")
        caps[model.strip()] = int(number)
    return tuple(caps.items())


def _url(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name) or default
    _check_url(name, value, schemes={"http", "https"})
    return value
