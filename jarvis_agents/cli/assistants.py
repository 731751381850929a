"""`jarvis-agents assistants …`: saved agent configurations, over the API (README, Assistants).

`create` and `edit` read a JSON or YAML file (`-`: standard input). `edit` sends what
changed as a PATCH, which makes a new version; without a file, on a terminal, it opens
$EDITOR on the current configuration as YAML, and a field deleted there goes back to
its default.
"""

from __future__ import annotations

import json
import re
import sys
from typing import IO, Any

import click
import yaml

from jarvis_agents.cli.client import API, JarvisClient
from jarvis_agents.errors import JarvisError

REF = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# What a version holds, as `edit` shows it; the other fields of an assistant's JSON
# (its id, name, version and times) are not the user's to change.
EDITABLE = ("description", "model", "mode", "tools", "instructions", "approve_tools",
            "output_schema", "max_steps", "delegates", "metadata")
READ_ONLY = ("assistant_id", "name", "version", "created_at", "updated_at")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")


class NotAnAssistant(JarvisError):
    """Raised when a file or an argument given to `assistants` names or holds no assistant."""


class AssistantsClient(JarvisClient):
    """The API's assistants, beside what JarvisClient does with agents."""

    def create_assistant(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{API}/assistants", json=body)

    def assistants(self) -> list[dict[str, Any]]:
        return list(self._json("GET", f"{API}/assistants")["assistants"])

    def assistant(self, ref: str) -> dict[str, Any]:
        return self._json("GET", f"{API}/assistants/{_ref(ref)}")

    def patch_assistant(self, ref: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._json("PATCH", f"{API}/assistants/{_ref(ref)}", json=changes)

    def delete_assistant(self, ref: str) -> None:
        self._json("DELETE", f"{API}/assistants/{_ref(ref)}")


def _ref(value: str) -> str:
    """Refuse anything but an id or a name before it reaches a URL path."""
    if not REF.match(value):
        raise NotAnAssistant(f"{value!r} is not an assistant's id or name "
                             "(a-z, 0-9, _ and -, such as researcher)")
    return value


def open_client() -> AssistantsClient:
    return AssistantsClient.from_env()


@click.group()
def assistants() -> None:
    """Saved agent configurations: `run --assistant NAME` starts an agent of one."""


@assistants.command("create")
@click.argument("source", metavar="FILE", type=click.File("r", encoding="utf-8"))
@json_option
def create(source: IO[str], as_json: bool) -> None:
    """Create an assistant from FILE (JSON or YAML; - reads standard input): its `name`
    and any of description, model, mode, tools, instructions, approve_tools,
    output_schema, max_steps, delegates, metadata."""
    made = open_client().create_assistant(read_config(source.read(), source.name))
    if as_json:
        _print_json(made)
    else:
        click.echo(f"created assistant {made['name']} ({made['assistant_id']}), version 1")


@assistants.command("list")
@json_option
def list_assistants(as_json: bool) -> None:
    """List your assistants: the default `agent` first, then yours by name."""
    from jarvis_agents.cli.terminal import assistants_table, make_console

    found = open_client().assistants()
    if as_json:
        _print_json({"assistants": found})
    else:
        assistants_table(make_console(), found)


@assistants.command("show")
@click.argument("ref", metavar="ID|NAME")
@json_option
def show(ref: str, as_json: bool) -> None:
    """Show one assistant as of its current version."""
    from jarvis_agents.cli.terminal import local_time

    found = open_client().assistant(ref)
    if as_json:
        _print_json(found)
        return
    lines = [("name", found["name"]), ("id", found["assistant_id"]),
             ("version", found["version"]), ("updated_at", local_time(found["updated_at"])),
             *((name, found[name]) for name in EDITABLE)]
    for name, value in lines:
        if value is None or value in ("", [], {}):
            continue
        shown = value if isinstance(value, str | int) else json.dumps(value, ensure_ascii=False)
        click.echo(f"{name + ':':<15}" + str(shown).replace("\n", "\n" + " " * 15))


@assistants.command("edit")
@click.argument("ref", metavar="ID|NAME")
@click.argument("source", metavar="[FILE]", required=False, type=click.File("r", encoding="utf-8"))
@json_option
def edit(ref: str, source: IO[str] | None, as_json: bool) -> None:
    """Make a new version of an assistant: the fields FILE gives (JSON or YAML; -
    reads standard input), or, without FILE, what you change in $EDITOR."""
    client = open_client()
    current = client.assistant(ref)
    shown = {name: current[name] for name in EDITABLE}
    if source is not None:
        given = read_config(source.read(), source.name)
    else:
        if not sys.stdin.isatty():
            raise click.UsageError("give a FILE (or - for standard input): there is no "
                                   "terminal to edit the assistant in")
        text = click.edit(editable_yaml(current), extension=".yaml", require_save=True)
        if text is None:
            click.echo(f"no changes; assistant {current['name']} stays at version "
                       f"{current['version']}", err=True)
            return
        given = read_config(text, "the edited text")
        given.update({name: None for name in shown if name not in given})  # deleted: reset
    changes = {name: value for name, value in given.items()
               if not (name in READ_ONLY and value == current[name])
               and (name not in shown or shown[name] != value)}
    if not changes:
        click.echo(f"no changes; assistant {current['name']} stays at version "
                   f"{current['version']}", err=True)
        return
    patched = client.patch_assistant(current["assistant_id"], changes)
    if as_json:
        _print_json(patched)
    else:
        click.echo(f"assistant {patched['name']} is at version {patched['version']} "
                   f"(changed: {', '.join(sorted(changes))})")


@assistants.command("rm")
@click.argument("ref", metavar="ID|NAME")
def remove(ref: str) -> None:
    """Delete an assistant and its versions (agents made from it keep its id)."""
    open_client().delete_assistant(ref)
    click.echo(f"deleted assistant {ref}")


def read_config(text: str, where: str) -> dict[str, Any]:
    """A JSON or YAML object, as JSON would carry it; NotAnAssistant saying what is wrong."""
    try:
        if text.lstrip().startswith("{"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise NotAnAssistant(f"{where} is not valid JSON (line {exc.lineno}, column "
                             f"{exc.colno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise NotAnAssistant(f"{where} is not valid YAML ({at}{problem})") from None
    if not isinstance(data, dict):
        raise NotAnAssistant(f"{where} must hold an object of an assistant's fields, such as "
                             "`name: researcher`, not "
                             f"{'nothing' if data is None else type(data).__name__}")
    # YAML's dates and the like travel as text, as JSON has no such types.
    return json.loads(json.dumps(data, default=str))


class _Dumper(yaml.SafeDumper):
    """Writes text of several lines (instructions) as a block, as a person writes it."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def editable_yaml(assistant: dict[str, Any]) -> str:
    """The assistant's configuration as YAML to edit, what it is said first as comments."""
    head = (f"# Assistant {assistant['name']}, version {assistant['version']}: save to make "
            f"version {assistant['version'] + 1}.\n"
            "# A field deleted goes back to its default (the server's settings).\n")
    fields = {name: assistant[name] for name in EDITABLE}
    return head + yaml.dump(fields, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def _print_json(value: Any) -> None:
    from jarvis_agents.cli.terminal import make_console, print_json

    print_json(make_console(), value)
