"""`jarvis-agents delete ID`: delete an ended agent, or with `--thread` a whole thread, over
the API (README, Deleting and retention). Deleted is deleted: there is no undo."""

from __future__ import annotations

import uuid

import click

from jarvis_agents.cli.client import API, JarvisClient
from jarvis_agents.errors import RequestError


class DeletingClient(JarvisClient):
    """The API's deletions, beside what JarvisClient does with agents."""

    def purge(self, agent_id: str) -> None:
        """Delete an ended agent; ApiError 409 while it is active (cancel it first)."""
        self._json("DELETE", f"{API}/agents/{_uuid(agent_id, 'an agent')}",
                   params={"purge": "true"}, agent_id=agent_id)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every agent of a thread; ApiError 409 while one of them is active."""
        self._json("DELETE", f"{API}/threads/{_uuid(thread_id, 'a thread')}")


def _uuid(value: str, what: str) -> str:
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise RequestError(f"{value!r} is not {what} id (expected a UUID such as 3f2c8a4e-…)",
                           code="invalid_id") from None


@click.command()
@click.argument("agent_id", metavar="ID")
@click.option("--thread", "whole_thread", is_flag=True,
              help="ID is a thread's: delete every agent of it.")
def delete(agent_id: str, whole_thread: bool) -> None:
    """Delete an ended agent with its steps and events (cancel an active one first)."""
    client = DeletingClient.from_env()
    if whole_thread:
        client.delete_thread(agent_id)
        click.echo(f"deleted thread {agent_id} and every agent of it")
    else:
        client.purge(agent_id)
        click.echo(f"deleted agent {agent_id}")
