"""`jarvis-agents schedules …`: agents on a clock, over the API (README, Schedules).

`add` takes the goal and a cron expression (5 fields, read in `--timezone`, default
this machine's zone); `list` shows each schedule's next due time on this machine's
clock; `pause` and `resume` are a PATCH of `enabled`; `rm` deletes.
"""

from __future__ import annotations

import uuid
from typing import Any

import click

from jarvis_agents.cli.client import API, JarvisClient
from jarvis_agents.errors import JarvisError

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")


class NotASchedule(JarvisError):
    """Raised when an argument given to `schedules` is not a schedule's id."""


class SchedulesClient(JarvisClient):
    """The API's schedules, beside what JarvisClient does with agents."""

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{API}/schedules", json=body)

    def schedules(self) -> list[dict[str, Any]]:
        return list(self._json("GET", f"{API}/schedules")["schedules"])

    def patch_schedule(self, schedule_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._json("PATCH", f"{API}/schedules/{_id(schedule_id)}", json=changes)

    def delete_schedule(self, schedule_id: str) -> None:
        self._json("DELETE", f"{API}/schedules/{_id(schedule_id)}")


def _id(value: str) -> str:
    """Refuse anything but a UUID before it reaches a URL path."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotASchedule(f"{value!r} is not a schedule's id (a UUID; `jarvis-agents "
                           "schedules list` shows them)") from None


def open_client() -> SchedulesClient:
    return SchedulesClient.from_env()


def machine_zone() -> str:
    """This machine's IANA zone (TZ, else /etc/localtime's), or UTC when it has no name."""
    import os
    from pathlib import Path

    if os.environ.get("TZ", "").strip(": "):
        return os.environ["TZ"].lstrip(":")
    link = Path("/etc/localtime")
    if link.is_symlink() and "zoneinfo/" in str(link.resolve()):
        return str(link.resolve()).split("zoneinfo/", 1)[1]
    return "UTC"


@click.group()
def schedules() -> None:
    """Agents on a clock: a cron expression in a time zone."""


@schedules.command("add")
@click.argument("goal")
@click.option("--cron", required=True, help="5 fields: minute hour day month weekday, "
              "such as '0 3 * * *' (every day at 03:00).")
@click.option("--timezone", "zone", default=None,
              help="The IANA zone the cron follows (default: this machine's).")
@click.option("--assistant", default=None, help="Take this assistant's configuration.")
@click.option("--model", default=None, help="The model (default: the assistant's or the server's).")
@click.option("--max-steps", type=int, default=None, help="ReACT iterations allowed.")
@click.option("--thread", type=click.Choice(["new", "same"]), default="new", show_default=True,
              help="same: each run is a follow-up in the schedule's thread.")
@click.option("--overlap", type=click.Choice(["skip", "allow"]), default="skip", show_default=True,
              help="skip: no run while the last one has not ended.")
@json_option
def add(goal: str, cron: str, zone: str | None, assistant: str | None, model: str | None,
        max_steps: int | None, thread: str, overlap: str, as_json: bool) -> None:
    """Schedule an agent with GOAL."""
    from jarvis_agents.cli.terminal import local_time

    body: dict[str, Any] = {"goal": goal, "cron": cron, "timezone": zone or machine_zone(),
                            "thread": thread, "overlap": overlap}
    given = {"assistant": assistant, "model": model, "max_steps": max_steps}
    body.update({name: value for name, value in given.items() if value is not None})
    made = open_client().create_schedule(body)
    if as_json:
        _print_json(made)
    else:
        click.echo(f"schedule {made['id']} ({made['cron']}, {made['timezone']}): next run "
                   f"{local_time(made['next_run_at'])}")


@schedules.command("list")
@json_option
def list_schedules(as_json: bool) -> None:
    """List your schedules: next run (on this machine's clock), last agent, skipped."""
    from jarvis_agents.cli.terminal import local_time, make_console, schedules_table

    found = open_client().schedules()
    if as_json:
        _print_json({"schedules": found})
        return
    schedules_table(make_console(), [
        {**s, "next_run_at": local_time(s["next_run_at"]) if s["enabled"] else "paused"}
        for s in found])


@schedules.command("pause")
@click.argument("schedule_id", metavar="ID")
def pause(schedule_id: str) -> None:
    """Stop a schedule firing until `resume`."""
    open_client().patch_schedule(schedule_id, {"enabled": False})
    click.echo(f"paused schedule {schedule_id}")


@schedules.command("resume")
@click.argument("schedule_id", metavar="ID")
def resume(schedule_id: str) -> None:
    """Fire a paused schedule again, from its next due time (missed ones do not fire)."""
    from jarvis_agents.cli.terminal import local_time

    resumed = open_client().patch_schedule(schedule_id, {"enabled": True})
    click.echo(f"resumed schedule {schedule_id}: next run {local_time(resumed['next_run_at'])}")


@schedules.command("rm")
@click.argument("schedule_id", metavar="ID")
def remove(schedule_id: str) -> None:
    """Delete a schedule (the agents it made keep its id)."""
    open_client().delete_schedule(schedule_id)
    click.echo(f"deleted schedule {schedule_id}")


def _print_json(value: Any) -> None:
    from jarvis_agents.cli.terminal import make_console, print_json

    print_json(make_console(), value)
