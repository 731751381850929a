"""A person in the loop from the command line: `approve ID`, and `run` asking in a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from jarvis_agents.errors import JarvisError

if TYPE_CHECKING:
    from jarvis_agents.cli.client import JarvisClient


class NotWaiting(JarvisError):
    """Raised when `approve` names an agent that waits for no approval."""


def call_text(waiting: dict[str, Any]) -> str:
    """`calculate("6*7")`: the call as the person is asked about it."""
    return f"{waiting.get('tool')}({json.dumps(waiting.get('input'), ensure_ascii=False)})"


@click.command()
@click.argument("agent_id", metavar="ID")
@click.option("--deny", is_flag=True, help="Refuse the call: the model goes on without it.")
@click.option("--input", "tool_input", default=None, metavar="TEXT",
              help="Run the tool on this input instead of the model's.")
@click.option("--reason", default=None, metavar="TEXT",
              help="Why; a denial's observation is `denied: <reason>`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def approve(agent_id: str, deny: bool, tool_input: str | None, reason: str | None,
            as_json: bool) -> None:
    """Answer the tool call a WAITING agent waits on: approve it (the default) or --deny it."""
    from jarvis_agents.cli.agents import open_client
    from jarvis_agents.cli.terminal import make_console, print_json

    if deny and tool_input is not None:
        raise click.UsageError("--input goes with an approval, not with --deny")
    client = open_client()
    agent = client.get(agent_id)
    waiting = agent.get("waiting_for")
    if agent.get("status") != "WAITING" or not waiting or waiting.get("kind") == "agents":
        raise NotWaiting(f"agent {agent['id']} is {agent.get('status')}, not waiting for an approval")
    answered = client.approve(agent_id, waiting["call_id"], approve=not deny,
                              tool_input=tool_input, reason=reason)
    if as_json:
        print_json(make_console(), answered)
        return
    shown = call_text({**waiting, "input": tool_input if tool_input is not None else waiting["input"]})
    click.echo(f"{'denied' if deny else 'approved'} {shown} for agent {answered['id']}")


def asker(client: JarvisClient, agent_id: str) -> Callable[[dict[str, Any]], None] | None:
    """For `run` attached to a terminal: ask `approve calculate("6*7")? [y/N]` and send the
    answer. None elsewhere: the agent waits for `jarvis-agents approve ID`."""
    if not sys.stdin.isatty():
        def tell(waiting: dict[str, Any]) -> None:
            click.echo(f"waiting for an approval of {call_text(waiting)}: "
                       f"jarvis-agents approve {agent_id} [--deny]", err=True)
        return tell

    def ask(waiting: dict[str, Any]) -> None:
        from jarvis_agents.cli.client import ApiError

        try:
            approved = click.confirm(f"approve {call_text(waiting)}?", default=False, err=True)
        except click.Abort:  # Ctrl-C at the question: as anywhere in `run`, it cancels
            raise KeyboardInterrupt from None
        try:
            client.approve(agent_id, str(waiting.get("call_id")), approve=approved,
                           reason=None if approved else "the user said no")
        except ApiError as exc:
            if exc.status != 409:
                raise
            click.echo(f"not answered: {exc.message}", err=True)  # answered elsewhere meanwhile

    return ask
