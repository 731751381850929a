"""The client commands: the API over HTTP, as `JARVIS_URL` and `JARVIS_API_KEY` say.

`run` and `watch` follow an agent's events live; the others print the API's answers
as tables for people or, with `--json`, as JSON for programs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jarvis_agents.cli.approvals import approve
from jarvis_agents.errors import JarvisError

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

    from jarvis_agents.cli.client import CreateOptions, JarvisClient


STATUSES = ("PENDING", "RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED")
# Exit codes of `run` and `watch`: like a shell, 130 for an interrupted (cancelled) agent.
EXIT_CODES = {"COMPLETED": 0, "FAILED": 1, "CANCELLED": 130}
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
tokens_option = click.option(
    "--tokens/--no-tokens", default=None,
    help="Show the model's replies as they are written (default: on a terminal, without --json).")


def open_client() -> JarvisClient:
    from jarvis_agents.cli.client import JarvisClient

    return JarvisClient.from_env()


@click.command()
@click.argument("goal")
@click.option("--detach", is_flag=True, help="Print the new agent's id and return at once.")
@json_option
@click.option("--max-steps", type=click.IntRange(1, 50), default=None, help="ReACT iterations at most.")
@click.option("--model", default=None,
              help="NAME, ollama/NAME or openai/NAME (default: the server's JARVIS_MODEL).")
@click.option("--mode", type=click.Choice(["auto", "native", "react"]), default=None,
              help="Native tool calling, the text protocol, or auto (the default): native "
                   "where the model supports it.")
@click.option("--output-schema", "output_schema", metavar="JSON|@FILE", default=None,
              callback=lambda ctx, param, value: read_schema(value),
              help="A JSON Schema the answer must match (the parsed answer is the agent's `output`).")
@click.option("--tool", "tools", multiple=True, metavar="NAME",
              help="Allow only this tool (repeat for several; see `jarvis-agents tools`).")
@click.option("--approve-tool", "approve_tools", multiple=True, metavar="NAME",
              help="Calls of this tool wait for your approval (repeat for several; * for all).")
@click.option("--thread", "thread_id", metavar="ID", default=None,
              help="A follow-up in this thread (its first agent's id): the model sees its "
                   "earlier goals and answers.")
@click.option("--continue", "continue_", is_flag=True,
              help="A follow-up in the thread of your latest agent.")
@click.option("--assistant", metavar="NAME", default=None,
              help="Take this assistant's configuration (see `jarvis-agents assistants list`); "
                   "the options above win over it.")
@tokens_option
def run(goal: str, detach: bool, as_json: bool, max_steps: int | None, model: str | None,
        mode: str | None, output_schema: dict[str, Any] | None, tools: tuple[str, ...],
        approve_tools: tuple[str, ...], thread_id: str | None, continue_: bool,
        assistant: str | None, tokens: bool | None) -> None:
    """Start an agent on GOAL and show its steps live; Ctrl-C cancels it.

    When it waits for an approval, a terminal asks for it; elsewhere, answer with
    `jarvis-agents approve ID`. Exits 0 when it completes, 1 when it fails, 130 when
    it is cancelled.
    """
    from jarvis_agents.cli.approvals import asker
    from jarvis_agents.cli.terminal import make_console, print_json

    if thread_id is not None and continue_:
        raise click.UsageError("give --thread ID or --continue, not both")
    client = open_client()
    if continue_:
        latest = client.list(limit=1)["agents"]
        if not latest:
            raise click.UsageError("--continue: you have no agent yet whose thread to continue")
        thread_id = latest[0]["thread_id"]
    options: CreateOptions = {"max_steps": max_steps, "model": model, "tools": list(tools) or None,
                              "approve_tools": list(approve_tools) or None, "thread_id": thread_id,
                              "mode": mode, "output_schema": output_schema, "assistant": assistant}
    console = make_console()
    if detach:
        agent = client.create(goal, **options)
        if as_json:
            print_json(console, agent)
        else:
            console.out(agent["id"])
        return
    started = time.monotonic()
    live = wants_tokens(tokens, console, as_json=as_json)
    agent_id, stream = client.stream_create(goal, tokens=live, **options)
    header = f"agent {agent_id}" + (f" (thread {thread_id})" if thread_id else "")
    try:
        status = follow(client, agent_id, stream, as_json=as_json, started=started,
                        header=header, rejoin=True, tokens=live,
                        on_waiting=None if as_json else asker(client, agent_id))
    except KeyboardInterrupt:
        stream.close()
        cancel_quietly(client, agent_id)
        click.echo(f"cancelled agent {agent_id}", err=True)
        sys.exit(130)
    sys.exit(EXIT_CODES.get(status, 1))


@click.command()
@click.argument("agent_id", metavar="ID")
@click.option("--after", "after_seq", type=click.IntRange(0), required=True, metavar="SEQ",
              help="Copy steps 1..SEQ (0, or the last seq of an iteration; see `steps ID`).")
@click.option("--goal", default=None, help="A new goal (default: the original's).")
@click.option("--model", default=None, help="Another model (default: the original's).")
@click.option("--max-steps", type=click.IntRange(1, 50), default=None, help="ReACT iterations at most.")
@click.option("--mode", type=click.Choice(["auto", "native", "react"]), default=None,
              help="How the model is asked to use tools (default: the original's).")
@click.option("--detach", is_flag=True, help="Print the new agent's id and return at once.")
@json_option
@tokens_option
def fork(agent_id: str, after_seq: int, goal: str | None, model: str | None,
         max_steps: int | None, mode: str | None, detach: bool, as_json: bool,
         tokens: bool | None) -> None:
    """Re-run an ended agent from step SEQ: a new agent starts from copies of its steps
    1..SEQ and goes on live; Ctrl-C cancels it. Exits like `run`."""
    from jarvis_agents.cli.terminal import make_console, print_json

    client = open_client()
    agent = client.fork(agent_id, after_seq=after_seq, goal=goal, model=model,
                        max_steps=max_steps, mode=mode)
    if detach:
        if as_json:
            print_json(make_console(), agent)
        else:
            click.echo(agent["id"])
        return
    new_id = agent["id"]
    live = wants_tokens(tokens, make_console(), as_json=as_json)
    try:
        status = follow(client, new_id, client.events(new_id, tokens=live), as_json=as_json,
                        started=time.monotonic(), tokens=live,
                        header=f"agent {new_id}, forked from {agent_id} after step {after_seq}")
    except KeyboardInterrupt:
        cancel_quietly(client, new_id)
        click.echo(f"cancelled agent {new_id}", err=True)
        sys.exit(130)
    sys.exit(EXIT_CODES.get(status, 1))


@click.command()
@click.argument("agent_id", metavar="ID")
@json_option
@tokens_option
def watch(agent_id: str, as_json: bool, tokens: bool | None) -> None:
    """Follow an agent's steps live until it ends (Ctrl-C stops watching, not the agent).

    Exits 0 when it completes, 1 when it fails, 130 when it is cancelled.
    """
    from jarvis_agents.cli.terminal import make_console

    client = open_client()
    client.get(agent_id)  # an unknown id is one clear error before any output
    live = wants_tokens(tokens, make_console(), as_json=as_json)
    events = client.events(agent_id, tokens=live)
    status = follow(client, agent_id, events, as_json=as_json, started=None,
                    header=f"watching agent {agent_id} (Ctrl-C stops watching; the agent goes on)",
                    tokens=live)
    sys.exit(EXIT_CODES.get(status, 1))


def read_schema(value: str | None) -> Any:
    """--output-schema: JSON text, or @FILE to read it from a file; the API checks the schema."""
    if value is None:
        return None
    try:
        text = Path(value[1:]).read_text("utf-8") if value.startswith("@") else value
        return json.loads(text)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value[1:]}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc})") from None


def wants_tokens(flag: bool | None, console: Any, *, as_json: bool) -> bool:
    """--tokens/--no-tokens as given, else on for a person at a terminal."""
    if flag is not None:
        return flag
    return bool(console.is_terminal) and not as_json


def follow(client: JarvisClient, agent_id: str, events: Iterator[ServerSentEvent], *, as_json: bool,
           started: float | None, header: str, rejoin: bool = False, tokens: bool = False,
           on_waiting: Callable[[dict[str, Any]], None] | None = None) -> str:
    """Print an agent's events until `done`; returns its final status.

    With `rejoin`, a stream that breaks off (the streamed create) is continued from the
    agent's own event stream after the last seq seen, so no step is lost or repeated.
    `on_waiting` is called with a `waiting` event's data (to ask for the approval).
    """
    from jarvis_agents.cli.client import ApiUnreachable
    from jarvis_agents.cli.terminal import LiveRenderer, make_console, print_json

    console = make_console()
    renderer = None if as_json else LiveRenderer(console, started=started)
    if renderer is not None:
        renderer.header(header)
    last_seq: str | None = None
    done: dict[str, Any] | None = None
    try:
        while done is None:
            try:
                for event in events:
                    try:
                        data = event.json()
                    except ValueError:  # not ours to interpret: pass it on as text
                        data = {"data": event.data}
                    if not isinstance(data, dict):
                        data = {"data": data}
                    if event.id:
                        last_seq = event.id
                    if renderer is None:
                        print_json(console, {"event": event.event, **data})
                    else:
                        renderer.event(event.event, data)
                    if event.event == "done":
                        done = data
                        break
                    # A wait on the agents it called (no call to approve) is only shown.
                    if event.event == "waiting" and on_waiting is not None and not data.get("agent_ids"):
                        if renderer is not None:
                            renderer.stop()  # no spinner over the question
                        on_waiting(data)
                else:
                    raise ApiUnreachable(f"the event stream of agent {agent_id} ended before the agent did")
            except ApiUnreachable:
                if not rejoin:
                    raise
            if done is None:
                rejoin = False  # client.events() does its own reconnecting
                events = client.events(agent_id, last_event_id=last_seq, tokens=tokens)
    finally:
        if renderer is not None:
            renderer.close()  # on Ctrl-C, a reply cut mid-way gets its line ended
    status = str(done.get("status", "FAILED"))
    if renderer is not None:
        try:
            agent = client.get(agent_id)
        except JarvisError:
            agent = None
        renderer.finish(status, done.get("stop_reason"), agent)
    return status


def cancel_quietly(client: JarvisClient, agent_id: str) -> None:
    """Cancel after Ctrl-C; an agent that has just ended needs nothing."""
    from jarvis_agents.cli.client import ApiError

    try:
        client.cancel(agent_id)
    except ApiError as exc:
        if exc.status != 409:
            raise


@click.command("list")
@click.option("--status", type=click.Choice(STATUSES, case_sensitive=False), default=None,
              help="Only agents in this status.")
@click.option("--limit", type=click.IntRange(1, 100), default=None, help="At most this many (1-100).")
@click.option("--cursor", default=None, help="Continue from a previous page's next_cursor.")
@click.option("--thread", "thread_id", metavar="ID", default=None, help="Only this thread's agents.")
@json_option
def list_agents(status: str | None, limit: int | None, cursor: str | None, thread_id: str | None,
                as_json: bool) -> None:
    """List your agents, newest first."""
    from jarvis_agents.cli.terminal import agents_table, make_console, print_json

    page = open_client().list(status=status.upper() if status else None, limit=limit, cursor=cursor,
                              thread_id=thread_id)
    console = make_console()
    if as_json:
        print_json(console, page)
        return
    if not page["agents"]:
        click.echo("no agents" + (f" with status {status.upper()}" if status else ""), err=True)
        return
    agents_table(console, page["agents"])
    if page.get("next_cursor"):
        click.echo(f"more: jarvis-agents list --cursor {page['next_cursor']}", err=True)


@click.command()
@click.argument("agent_id", metavar="ID")
@json_option
def show(agent_id: str, as_json: bool) -> None:
    """Show one agent: status, answer or error, timings."""
    from jarvis_agents.cli.terminal import agent_details, make_console, print_json

    client = open_client()
    agent = client.get(agent_id)
    console = make_console()
    if as_json:
        print_json(console, agent)
    else:
        # The agents it called (README, Agents that call agents).
        agent_details(console, agent, children=client.list(caller_id=agent["id"], limit=100)["agents"])


@click.command()
@click.argument("agent_id", metavar="ID")
@click.option("--after", type=click.IntRange(0), default=None, help="Only steps after this seq.")
@json_option
def steps(agent_id: str, after: int | None, as_json: bool) -> None:
    """Show an agent's steps so far, in order."""
    from jarvis_agents.cli.terminal import make_console, print_json, steps_list

    client = open_client()
    found = client.steps(agent_id, after=after)
    console = make_console()
    if as_json:
        print_json(console, {"steps": found})
    elif not found:
        click.echo(no_steps(client.get(agent_id), after=after), err=True)
    else:
        steps_list(console, found)


def no_steps(agent: dict[str, Any], *, after: int | None) -> str:
    """Why `steps` shows nothing: none yet, none after SEQ, or none ever (it ended first)."""
    from jarvis_agents.cli.client import TERMINAL_STATUSES

    if after:
        return f"no steps after {after}" + ("" if agent["status"] in TERMINAL_STATUSES else " yet")
    if agent["status"] == "CANCELLED":
        return "no steps: the agent was cancelled before its first step"
    if agent["status"] == "FAILED":
        return f"no steps: the agent failed before its first step ({agent.get('error')})"
    return "no steps yet"


@click.command()
@click.argument("agent_id", metavar="ID")
@json_option
def cancel(agent_id: str, as_json: bool) -> None:
    """Cancel a PENDING, RUNNING or WAITING agent."""
    from jarvis_agents.cli.terminal import make_console, print_json

    agent = open_client().cancel(agent_id)
    if as_json:
        print_json(make_console(), agent)
    else:
        click.echo(f"cancelled agent {agent['id']}")


@click.command()
@json_option
def tools(as_json: bool) -> None:
    """List the tools an agent may use."""
    from jarvis_agents.cli.terminal import make_console, print_json, tools_table

    found = open_client().tools()
    console = make_console()
    if as_json:
        print_json(console, {"tools": found})
    else:
        tools_table(console, found)


CLIENT_COMMANDS = (run, fork, watch, list_agents, show, steps, cancel, tools, approve)
