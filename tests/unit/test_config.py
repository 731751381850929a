"""Settings: defaults, and one clear error naming the variable for each bad value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jarvis_agents.config import DEFAULT_MODEL, DEFAULT_WORKER_CONCURRENCY, Settings
from jarvis_agents.errors import ConfigError


def test_defaults_use_an_embedded_sqlite_file(tmp_path: Path) -> None:
    settings = Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path / 'jarvis.db'}"
    assert settings.redis_url is None
    assert settings.ollama_host == "http://127.0.0.1:11434"
    assert settings.model == DEFAULT_MODEL
    assert (settings.max_steps, settings.step_timeout_s, settings.tool_timeout_s) == (10, 30, 10)
    assert (settings.total_timeout_s, settings.max_active_per_user, settings.port) == (120, 20, 8000)
    assert settings.max_streams_per_user == 100


def test_one_worker_process_runs_1000_agents_at_once_by_default() -> None:
    # Idle agents block on a socket or a queue: 1,000 slow agents fit in one process.
    assert Settings.from_env({}).worker_concurrency == DEFAULT_WORKER_CONCURRENCY == 1000
    assert Settings.from_env({"JARVIS_WORKER_CONCURRENCY": "50"}).worker_concurrency == 50


def test_values_are_read() -> None:
    settings = Settings.from_env({
        "DATABASE_URL": "postgresql+psycopg2://u@db/x", "REDIS_URL": "redis://r:6379/1",
        "OLLAMA_HOST": "ollama:11434", "JARVIS_MODEL": "qwen2.5", "JARVIS_MAX_STEPS": "7",
        "JARVIS_STEP_TIMEOUT": "2.5", "PORT": "9000",
    })
    assert settings.redis_url == "redis://r:6379/1"
    assert settings.ollama_host == "http://ollama:11434"
    assert (settings.model, settings.max_steps, settings.step_timeout_s, settings.port) == (
        "qwen2.5", 7, 2.5, 9000)


def test_the_mcp_server_listens_next_to_the_api_unless_told_where() -> None:
    assert Settings.from_env({}).mcp_server_port == 8001
    assert Settings.from_env({"PORT": "9000"}).mcp_server_port == 9001
    assert Settings.from_env({"PORT": "9000", "JARVIS_MCP_PORT": "7000"}).mcp_server_port == 7000


def test_the_openai_compatible_server_is_read() -> None:
    assert (Settings.from_env({}).provider, Settings.from_env({}).openai_base_url) == ("ollama", None)
    settings = Settings.from_env({"JARVIS_PROVIDER": "OpenAI", "OPENAI_API_KEY": "sk-x",
                                  "OPENAI_BASE_URL": "http://vllm:8000/v1/"})
    assert (settings.provider, settings.openai_base_url, settings.openai_api_key) == (
        "openai", "http://vllm:8000/v1", "sk-x")


def test_a_model_reply_is_capped_in_tokens_asked_and_characters_kept() -> None:
    assert (Settings.from_env({}).max_reply_tokens, Settings.from_env({}).max_reply_chars) == (
        4096, 65536)
    settings = Settings.from_env({"JARVIS_MAX_REPLY_TOKENS": "512", "JARVIS_MAX_REPLY_CHARS": "20000"})
    assert (settings.max_reply_tokens, settings.max_reply_chars) == (512, 20000)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_url_without_a_driver_means_psycopg2(scheme: str) -> None:
    # How platforms hand the URL out; SQLAlchemy alone would reach for psycopg 3.
    url = Settings.from_env({"DATABASE_URL": f"{scheme}://u:p@db:5432/x"}).database_url
    assert url == "postgresql+psycopg2://u:p@db:5432/x"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "not a url"),
        ("DATABASE_URL", "mysql://root@localhost/x"),
        ("DATABASE_URL", "postgresql+asyncpg://root@localhost/x"),
        ("REDIS_URL", "http://localhost:6379"),
        ("REDIS_URL", "redis://:port-is-not-a-number:x"),
        ("OLLAMA_HOST", "ftp://x"),
        ("JARVIS_STEP_TIMEOUT", "abc"),
        ("JARVIS_TOOL_TIMEOUT", "-1"),
        ("JARVIS_TOTAL_TIMEOUT", "nan"),
        ("JARVIS_MAX_STEPS", "ten"),
        ("JARVIS_MAX_STEPS", "0"),
        ("JARVIS_MAX_ACTIVE_PER_USER", "1.5"),
        ("JARVIS_MAX_STREAMS_PER_USER", "0"),
        ("JARVIS_MAX_STREAMS_PER_USER", "many"),
        ("JARVIS_WORKER_CONCURRENCY", "0"),
        ("PORT", "70000"),
        ("JARVIS_MCP_PORT", "0"),
        ("JARVIS_MCP_PORT", "mcp"),
        ("JARVIS_MCP_URL", "mcp:8001/mcp"),
        ("JARVIS_WEBHOOK_ALLOW_PRIVATE", "maybe"),
        ("JARVIS_PROVIDER", "anthropic"),
        ("OPENAI_BASE_URL", "localhost:8000/v1"),
        ("JARVIS_APPROVAL_TIMEOUT", "a day"),
        ("JARVIS_WEBHOOK_LEASE", "0"),
        ("JARVIS_MODEL_IDLE", "-600"),
        ("JARVIS_WEBHOOK_RETRY_DELAYS", "1,,5"),
        ("JARVIS_WEBHOOK_RETRY_DELAYS", "1,-5"),
        ("JARVIS_MAX_REPLY_TOKENS", "0"),
        ("JARVIS_MAX_REPLY_TOKENS", "lots"),
        ("JARVIS_MAX_REPLY_CHARS", "10"),
        ("JARVIS_RETENTION", "90 days"),
        ("JARVIS_RETENTION", "0d"),
        ("JARVIS_RETENTION", "1.5h"),
        ("JARVIS_RETENTION", "-3s"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    message = str(info.value)
    assert name in message and "\n" not in message


@pytest.mark.parametrize(("raw", "seconds"), [
    ("90d", 90 * 86400.0), ("12h", 43200.0), ("30m", 1800.0), ("300s", 300.0), (" 7D ", 604800.0),
    ("", None),
])
def test_retention_is_a_duration_and_unset_keeps_for_ever(raw: str, seconds: float | None) -> None:
    assert Settings.from_env({"JARVIS_RETENTION": raw}).retention_s == seconds
    assert Settings.from_env({}).retention_s is None


@pytest.mark.parametrize(("interval", "stale"), [("5", "5"), ("10", "3")])
def test_a_heartbeat_stale_before_its_next_beat_is_refused(interval: str, stale: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"JARVIS_HEARTBEAT_INTERVAL": interval, "JARVIS_HEARTBEAT_STALE": stale})
    assert "JARVIS_HEARTBEAT_STALE" in str(info.value) and "JARVIS_HEARTBEAT_INTERVAL" in str(info.value)
    settings = Settings.from_env({"JARVIS_HEARTBEAT_INTERVAL": "1", "JARVIS_HEARTBEAT_STALE": "4"})
    assert settings.outage_budget_s == 3  # writes retried until about when it would go stale


def test_approvals_are_read() -> None:
    assert (Settings.from_env({}).approve_tools, Settings.from_env({}).approval_timeout_s) == ((), 86400)
    settings = Settings.from_env({"JARVIS_APPROVE_TOOLS": " calculate, ,search ",
                                  "JARVIS_APPROVAL_TIMEOUT": "60"})
    assert settings.approve_tools == ("calculate", "search") and settings.approval_timeout_s == 60


def test_webhook_timing_keeps_the_contracts_schedule_unless_a_test_shortens_it() -> None:
    # docs/api.md §2: the first retry within 10 s, at least 5 tries over at least 5 minutes.
    default = Settings.from_env({})
    assert default.webhook_retry_delays_s == (5, 30, 60, 120, 300)
    assert default.webhook_lease_s == 20
    short = Settings.from_env({"JARVIS_WEBHOOK_RETRY_DELAYS": "0.5, 30", "JARVIS_WEBHOOK_LEASE": "3"})
    assert (short.webhook_retry_delays_s, short.webhook_lease_s) == ((0.5, 30.0), 3.0)


def test_a_model_is_idle_after_the_contracts_ten_minutes_unless_a_test_shortens_it() -> None:
    assert Settings.from_env({}).model_idle_s == 600
    assert Settings.from_env({"JARVIS_MODEL_IDLE": "6"}).model_idle_s == 6


def test_a_repr_hides_every_secret_and_keeps_the_rest(tmp_path: Path) -> None:
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {
        "remote": {"url": "https://mcp.example.com/mcp?token=mcp-s3cret",
                   "headers": {"Authorization": "Bearer header-s3cret"}},
        "local": {"command": "srv", "args": ["--token", "arg-s3cret"],
                  "env": {"API_TOKEN": "env-s3cret"}},
    }}))
    settings = Settings.from_env({
        "DATABASE_URL": "postgresql://root:db-s3cret@db:5432/jarvis",
        "REDIS_URL": "redis://:redis-s3cret@cache:6379/0",
        "OPENAI_BASE_URL": "https://llm.example.com/v1", "OPENAI_API_KEY": "sk-s3cret",
        "JARVIS_WEBHOOK_SECRET": "hook-s3cret", "JARVIS_MCP_CONFIG": str(mcp),
    })
    shown = repr(settings)
    assert "s3cret" not in shown, shown
    assert "'postgresql+psycopg2://root:***@db:5432/jarvis'" in shown
    assert "redis_url='redis://:***@cache:6379/0'" in shown
    assert "openai_api_key='***'" in shown and "webhook_secret='***'" in shown
    assert "url='https://mcp.example.com/mcp?***'" in shown and "name='local'" in shown
    assert "max_active_per_user=20" in shown and "openai_base_url='https://llm.example.com/v1'" in shown
    assert repr(Settings.from_env({"JARVIS_DATA_DIR": str(tmp_path)})).count("***") == 0
