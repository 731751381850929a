"""Assistants in the store on real SQLite and PostgreSQL: found by id or name with their
current version, scoped to their user, versions kept, PATCHes that race numbered one
after the other, and a user's deletion taking them along (README, Assistants)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import delete, text

from jarvis_agents.assistants import Assistant, AssistantConfig
from jarvis_agents.errors import Conflict
from jarvis_agents.lifecycle import utcnow
from jarvis_agents.store import repository_for
from jarvis_agents.store.database import alembic_config, make_engine, upgrade
from jarvis_agents.store.models import UserRow
from jarvis_agents.store.repository import Repository

pytestmark = pytest.mark.integration

CONFIG = AssistantConfig(description="Finds things out.", model="qwen3", tools=("web_search",),
                         output_schema={"type": "object"}, metadata={"team": "docs", "n": [1, 2]},
                         max_steps=12, delegates=("agent",))


def made(user_id: uuid.UUID, name: str, config: AssistantConfig = CONFIG) -> Assistant:
    now = utcnow()
    return Assistant(uuid.uuid4(), user_id, name, 1, config, now, now)


def test_an_assistant_reads_back_by_id_and_name_for_its_user_only(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    bob, _ = repository.users.create("bob")
    mine = made(alice.id, "researcher")
    repository.assistants.insert(mine)
    assert repository.assistants.find(alice.id, assistant_id=mine.id) == mine
    assert repository.assistants.find(alice.id, name="researcher") == mine
    assert repository.assistants.find(bob.id, assistant_id=mine.id) is None
    assert repository.assistants.find(bob.id, name="researcher") is None
    with pytest.raises(Conflict) as taken:
        repository.assistants.insert(made(alice.id, "researcher"))
    assert taken.value.code == "assistant_exists"
    repository.assistants.insert(made(bob.id, "researcher", AssistantConfig()))  # names are per user
    repository.assistants.insert(made(alice.id, "boss", AssistantConfig()))
    assert [a.name for a in repository.assistants.of_user(alice.id)] == ["boss", "researcher"]


def test_versions_are_kept_and_the_latest_is_current(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    bob, _ = repository.users.create("bob")
    first = made(alice.id, "researcher")
    repository.assistants.insert(first)
    second = repository.assistants.add_version(alice.id, first.id, AssistantConfig(model="llama3.3"),
                                               now=utcnow())
    assert second is not None and second.version == 2 and second.config.model == "llama3.3"
    assert repository.assistants.find(alice.id, name="researcher") == second
    assert repository.assistants.add_version(bob.id, first.id, AssistantConfig(), now=utcnow()) is None
    versions = repository.assistants.versions(alice.id, first.id)
    assert [(v.version, v.config) for v in versions] == [(2, AssistantConfig(model="llama3.3")),
                                                        (1, CONFIG)]
    assert repository.assistants.versions(bob.id, first.id) == []
    assert not repository.assistants.delete(bob.id, first.id)
    assert repository.assistants.delete(alice.id, first.id)
    assert repository.assistants.find(alice.id, assistant_id=first.id) is None
    assert repository.assistants.versions(alice.id, first.id) == []


def test_a_users_deletion_takes_their_assistants_along(repository: Repository) -> None:
    alice, _ = repository.users.create("alice")
    mine = made(alice.id, "researcher")
    repository.assistants.insert(mine)
    with repository.engine.begin() as conn:
        conn.execute(delete(UserRow.__table__).where(UserRow.__table__.c.id == alice.id))
        left = conn.execute(text("SELECT count(*) FROM assistant_versions")).scalar_one()
    assert left == 0 and repository.assistants.find(alice.id, assistant_id=mine.id) is None


def test_patches_at_once_make_one_version_each(pg_url: str) -> None:
    repository = repository_for(make_engine(pg_url))
    try:
        alice, _ = repository.users.create("alice")
        first = made(alice.id, "researcher")
        repository.assistants.insert(first)
        barrier = threading.Barrier(8)

        def patch(n: int) -> None:
            barrier.wait()
            repository.assistants.add_version(
                alice.id, first.id, AssistantConfig(max_steps=n + 1), now=utcnow())

        threads = [threading.Thread(target=patch, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        versions = repository.assistants.versions(alice.id, first.id)
        assert [v.version for v in versions] == list(range(9, 0, -1))
        assert sorted(v.config.max_steps for v in versions[:-1]) == list(range(1, 9))
        assert repository.assistants.find(alice.id, assistant_id=first.id).version == 9  # type: ignore[union-attr]
    finally:
        repository.engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_migration_goes_down_and_up_again(backend: str, tmp_path: Path) -> None:
    from contextlib import nullcontext

    from tests.conftest import new_pg_database

    place = nullcontext(f"sqlite:///{tmp_path / 'db.sqlite'}") if backend == "sqlite" else new_pg_database()
    with place as url:
        upgrade(url)
        engine, config = make_engine(url), alembic_config(url)
        try:
            def migrate(move, target: str) -> None:  # type: ignore[no-untyped-def]
                with engine.begin() as conn:
                    config.attributes["connection"] = conn
                    move(config, target)

            migrate(command.downgrade, "0013")
            with engine.connect() as conn:
                tables = conn.execute(text(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'assistants'"
                    if backend == "postgresql" else
                    "SELECT count(*) FROM sqlite_master WHERE name = 'assistants'")).scalar_one()
            assert tables == 0
            migrate(command.upgrade, "head")
            repository = repository_for(engine)
            alice, _ = repository.users.create("alice")
            repository.assistants.insert(made(alice.id, "researcher"))
            assert repository.assistants.find(alice.id, name="researcher") is not None
        finally:
            engine.dispose()
