"""Operator commands: db upgrade and users create, and their one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env


def jarvis(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis_agents.cli", *args], env=cli_env(**env),
                          check=False, capture_output=True, text=True, timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.stderr


def test_db_upgrade_is_idempotent_and_users_create_prints_the_key_last(tmp_path: Path, database_url: str) -> None:
    first = jarvis("db", "upgrade", DATABASE_URL=database_url)
    again = jarvis("db", "upgrade", DATABASE_URL=database_url)
    assert first.returncode == again.returncode == 0
    assert "0003" in again.stdout
    created = jarvis("users", "create", "alice", DATABASE_URL=database_url)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("jrv_") and len(key) > 40
    from jarvis_agents.store.database import make_engine
    from jarvis_agents.store.repository import Repository

    repo = Repository(make_engine(database_url))
    try:
        user = repo.user_by_api_key(key)
        assert user is not None and user.name == "alice"
        with repo.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT api_key_hash FROM users").scalar_one()
        assert key not in stored  # only the hash is kept
    finally:
        repo.engine.dispose()
    assert_one_line_error(jarvis("users", "create", "alice", DATABASE_URL=database_url), "already exists")


@pytest.mark.parametrize(
    ("args", "env", "text"),
    [
        (["users", "create", "bad name"], {}, "user name"),
        (["users", "create", ""], {}, "user name"),
        (["users", "create", "x" * 65], {}, "user name"),
        (["users", "create"], {}, "Missing argument"),
        (["db", "upgrade"], {"DATABASE_URL": "nonsense"}, "DATABASE_URL"),
        (["db", "upgrade"], {"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL"),
        (["db", "upgrade"], {"JARVIS_STEP_TIMEOUT": "soon"}, "JARVIS_STEP_TIMEOUT"),
        (["db", "upgrade"], {"REDIS_URL": "localhost"}, "REDIS_URL"),
        (["db", "upgrade"], {"OLLAMA_HOST": "ftp://x"}, "OLLAMA_HOST"),
        (["db", "upgrade"], {"DATABASE_URL": "postgresql+psycopg2://root@127.0.0.1:1/x"}, "cannot reach the database"),
        (["nosuchcommand"], {}, "No such command"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(tmp_path: Path, args: list[str], env: dict[str, str], text: str) -> None:
    env.setdefault("JARVIS_DATA_DIR", str(tmp_path))
    assert_one_line_error(jarvis(*args, **env), text)


def test_users_create_before_migrations_says_what_to_do(tmp_path: Path) -> None:
    assert_one_line_error(jarvis("users", "create", "bob", JARVIS_DATA_DIR=str(tmp_path)),
                          "jarvis-agents db upgrade")
