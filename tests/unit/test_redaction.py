"""Secrets kept out of what the system shows: no URL at all where anyone may read, and
no password or query string in a repr."""

from __future__ import annotations

import pytest

from jarvis_agents.redaction import redacted_url, without_urls


@pytest.mark.parametrize(("text", "shown"), [
    ("cannot reach http://ada:pw@mcp.example.com/mcp?token=secret: refused",
     "cannot reach <url>: refused"),
    ('connection to "postgresql+psycopg2://root:pw@db:5432/jarvis?sslmode=require" failed',
     'connection to "<url>" failed'),
    ("Error connecting to redis://:pw@cache:6379/0.", "Error connecting to <url>."),
    ("dsn root:pw@db:5432/jarvis refused", "dsn db:5432/jarvis refused"),
    ("GET /mcp?token=secret&x=1 answered 401", "GET /mcp answered 401"),
    ("connection refused", "connection refused"),
    ("no answer within 3 s", "no answer within 3 s"),
])
def test_what_anyone_may_read_keeps_no_url_credential_or_query(text: str, shown: str) -> None:
    assert without_urls(text) == shown


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql+psycopg2://root:pw@db:5432/jarvis", "postgresql+psycopg2://root:***@db:5432/jarvis"),
    ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
    ("https://mcp.example.com/mcp?token=secret#frag", "https://mcp.example.com/mcp?***"),
    ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
    ("sqlite:////var/lib/jarvis/jarvis.db", "sqlite:////var/lib/jarvis/jarvis.db"),
    ("http://[::1", "***"),  # not even a URL: shown as nothing
])
def test_a_repr_keeps_where_but_not_the_password_or_the_query(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_an_unreachable_redis_is_named_without_its_password(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import socket

    import pytest

    from jarvis_agents.components import check_dependencies
    from jarvis_agents.config import Settings
    from jarvis_agents.errors import DependencyUnavailable
    from jarvis_agents.store.database import upgrade

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = Settings.from_env({
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "REDIS_URL": f"redis://:s3cret@127.0.0.1:{port}/0",
    })
    upgrade(settings.database_url)
    with pytest.raises(DependencyUnavailable) as refused:
        check_dependencies(settings)
    assert "s3cret" not in str(refused.value)
    assert f"redis://:***@127.0.0.1:{port}/0" in str(refused.value)
