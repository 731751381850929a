"""`jarvis-agents users …`: the operator's commands for users and their API keys.

They work on the database directly (DATABASE_URL), not through the API. A new key
is printed once, as the last line on stdout, for scripts to take with `tail -n 1`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from jarvis_agents.config import Settings

if TYPE_CHECKING:
    from jarvis_agents.store.users import Users

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


@click.group()
def users() -> None:
    """User accounts and their API keys."""


@contextmanager
def open_users() -> Iterator[Users]:
    from jarvis_agents.store import open_repository

    repository = open_repository(Settings.from_env())
    try:
        yield repository.users
    finally:
        repository.engine.dispose()


def valid_name(_ctx: click.Context, _param: click.Parameter, name: str) -> str:
    if not USER_NAME.match(name):
        raise click.BadParameter(
            "a user name is 1-64 characters: letters, digits, and . _ @ - "
            "(starting with a letter or digit)"
        )
    return name


name_argument = click.argument("name", callback=valid_name)


@users.command("create")
@name_argument
def users_create(name: str) -> None:
    """Create a user; prints its API key (shown once) as the last line."""
    with open_users() as found:
        user, api_key = found.create(name)
    click.echo(f"created user {user.name} ({user.id}); its API key, shown only once:")
    click.echo(api_key)


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def users_list(as_json: bool) -> None:
    """List the users, oldest first, and whether each is revoked."""
    from jarvis_agents.cli.terminal import make_console, print_json, users_table

    with open_users() as found:
        every = [user.to_json() for user in found.all()]
    console = make_console()
    if as_json:
        print_json(console, {"users": every})
    elif not every:
        click.echo("no users yet; create one with `jarvis-agents users create NAME`", err=True)
    else:
        users_table(console, every)


@users.command("revoke")
@name_argument
def users_revoke(name: str) -> None:
    """Refuse NAME's API key from now on (within 5 s); `rotate` gives a new one."""
    with open_users() as found:
        found.revoke(name)
    click.echo(f"revoked user {name}: its API key is refused from now on")


@users.command("rotate")
@name_argument
def users_rotate(name: str) -> None:
    """Give NAME a new API key (printed last); the old one stops working within 5 s.

    A revoked user is let back in with the new key.
    """
    with open_users() as found:
        user, api_key = found.rotate(name)
    click.echo(f"new API key of user {user.name}, shown only once; the old one no longer works:")
    click.echo(api_key)


@users.command("delete")
@name_argument
def users_delete(name: str) -> None:
    """Delete NAME with everything they own: their ended agents (with steps, webhooks and
    events), assistants and schedules. Refused while they have an agent pending, running
    or waiting: cancel those first."""
    from jarvis_agents.deleting import Deleting
    from jarvis_agents.errors import Conflict, NotFound
    from jarvis_agents.store import open_repository

    repository = open_repository(Settings.from_env())
    try:
        user = repository.users.by_name(name)
        if user is None:
            raise NotFound(f"there is no user named {name!r}")
        deleted = Deleting(repository).delete_agents_of_user(user.id)
        if not repository.deletions.delete_user(user.id):
            raise Conflict(f"user {name!r} started an agent meanwhile; cancel it and run "
                           "`users delete` again", code="user_has_active_agents")
    finally:
        repository.engine.dispose()
    click.echo(f"deleted user {name} with {deleted.agents} agents and {deleted.steps} steps")
