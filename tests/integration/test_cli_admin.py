"""Operator commands: db upgrade and users create, list, revoke and rotate, and their
one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from jarvis_agents.store.database import alembic_config
from tests.conftest import cli_env
from tests.support.api_server import wait_until

pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api

HEAD = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
# docs/api.md §1: a revoked or rotated key is refused within 5 s.
REFUSED_WITHIN_S = 5


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
    assert f"revision {HEAD}" in again.stdout
    created = jarvis("users", "create", "alice", DATABASE_URL=database_url)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("jrv_") and len(key) > 40
    from jarvis_agents.store import repository_for
    from jarvis_agents.store.database import make_engine

    repo = repository_for(make_engine(database_url))
    try:
        user = repo.users.by_api_key(key)
        assert user is not None and user.name == "alice"
        with repo.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT api_key_hash FROM users").scalar_one()
        assert key not in stored  # only the hash is kept
    finally:
        repo.engine.dispose()
    assert_one_line_error(jarvis("users", "create", "alice", DATABASE_URL=database_url), "already exists")


def test_users_are_listed_revoked_once_and_rotated(database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    assert jarvis("users", "create", "alice", **env).returncode == 0
    assert jarvis("users", "create", "bob", **env).returncode == 0
    revoked = jarvis("users", "revoke", "bob", **env)
    assert revoked.returncode == 0 and "bob" in revoked.stdout, revoked.stderr

    table = jarvis("users", "list", **env)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.strip().splitlines()
    assert header.split()[0] == "NAME" and "REVOKED" in header
    assert [row.split()[0] for row in rows] == ["alice", "bob"]
    assert rows[0].rstrip().endswith("no") and "yes" in rows[1]

    listed = json.loads(jarvis("users", "list", "--json", **env).stdout)["users"]
    assert [(u["name"], u["revoked_at"] is None) for u in listed] == [("alice", True), ("bob", False)]
    assert all(u["created_at"].endswith("Z") for u in listed)

    assert_one_line_error(jarvis("users", "revoke", "bob", **env), "already revoked")
    assert_one_line_error(jarvis("users", "revoke", "carol", **env), "no user named 'carol'")
    assert_one_line_error(jarvis("users", "rotate", "carol", **env), "no user named 'carol'")

    rotated = jarvis("users", "rotate", "bob", **env)  # a revoked user is let back in
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip().splitlines()[-1].startswith("jrv_")
    listed = json.loads(jarvis("users", "list", "--json", **env).stdout)["users"]
    assert [u["revoked_at"] for u in listed] == [None, None]


def test_a_revoked_or_rotated_key_is_refused_by_a_running_api_within_5_s(api_env, start_api) -> None:
    api = start_api(api_env)
    env = {"DATABASE_URL": api_env["DATABASE_URL"]}
    carol = jarvis("users", "create", "carol", **env).stdout.strip().splitlines()[-1]
    dave = jarvis("users", "create", "dave", **env).stdout.strip().splitlines()[-1]
    with api.client(carol) as as_carol, api.client(dave) as as_dave:
        # Each key has just been used: the API has its user at hand.
        assert as_carol.get("/api/v1/agents").status_code == 200
        assert as_dave.get("/api/v1/agents").status_code == 200

        assert jarvis("users", "revoke", "carol", **env).returncode == 0
        wait_until(lambda: as_carol.get("/api/v1/agents").status_code == 401,
                   timeout_s=REFUSED_WITHIN_S)
        refused = as_carol.get("/api/v1/agents")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"

        assert as_dave.get("/api/v1/agents").status_code == 200
        rotated = jarvis("users", "rotate", "dave", **env)
        new_key = rotated.stdout.strip().splitlines()[-1]
        with api.client(new_key) as with_new_key:
            assert with_new_key.get("/api/v1/agents").status_code == 200
        wait_until(lambda: as_dave.get("/api/v1/agents").status_code == 401,
                   timeout_s=REFUSED_WITHIN_S)


@pytest.mark.parametrize(
    ("args", "env", "text"),
    [
        (["users", "create", "bad name"], {}, "user name"),
        (["users", "create", ""], {}, "user name"),
        (["users", "create", "x" * 65], {}, "user name"),
        (["users", "create"], {}, "Missing argument"),
        (["users", "revoke"], {}, "Missing argument"),
        (["users", "rotate", "no such name"], {}, "user name"),
        (["users", "list"], {}, "jarvis-agents db upgrade"),
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
