"""The `jarvis-agents` command: its group, its one-line errors and the operator commands.

Every failure a user can cause or fix is one line on stderr and a non-zero exit,
never a traceback. The client commands are in `agents`, the user commands in `users`.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from jarvis_agents.cli.agents import CLIENT_COMMANDS
from jarvis_agents.cli.assistants import assistants
from jarvis_agents.cli.deleting import delete
from jarvis_agents.cli.demo import demo_model
from jarvis_agents.cli.schedules import schedules
from jarvis_agents.cli.users import users
from jarvis_agents.config import DEFAULT_WORKER_CONCURRENCY, Settings
from jarvis_agents.errors import JarvisError


def fail(message: str, *, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class Cli(click.Group):
    """A click group whose errors are one line, whatever raised them."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            sys.exit(2)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            fail(f"{exc.format_message()}{hint}", code=2)
        except click.Abort:
            # click's word for a Ctrl-C (or an end of input) in a command: it has already
            # ended the line; stopping is what the user asked for, not an error.
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), code=exc.exit_code)
        except JarvisError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            click.echo("", err=True)
            sys.exit(130)


def load_settings() -> Settings:
    return Settings.from_env()


@click.group(cls=Cli, no_args_is_help=True)
@click.version_option(package_name="jarvis-agents", prog_name="jarvis-agents")
def main() -> None:
    """jarvis-agents: ReACT agents on a task queue."""


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="API port (default: $PORT or 8000).")
def up(port: int | None) -> None:
    """Run the whole system on this machine: database, Redis, worker, API and dashboard."""
    from jarvis_agents.cli.local_stack import LocalStack

    settings = load_settings()
    sys.exit(LocalStack(settings, port or settings.port, echo=click.echo).run())


@main.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply database migrations (safe to run again)."""
    from jarvis_agents.store.database import upgrade

    settings = load_settings()
    revision = upgrade(settings.database_url)
    click.echo(f"database is at revision {revision}")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: $PORT or 8000).")
def api(host: str, port: int | None) -> None:
    """Run the HTTP API alone."""
    from api.server import serve

    settings = load_settings()
    port = port or settings.port
    # The port it serves on: `/mcp` goes to the MCP server on the port after it, unless
    # JARVIS_MCP_PORT or JARVIS_MCP_URL say otherwise (as `jarvis-agents up` starts it).
    serve(settings.with_overrides(port=port), host=host, port=port)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port (default: $JARVIS_MCP_PORT, or the API's port + 1: 8001).")
def mcp(host: str, port: int | None) -> None:
    """Run the MCP server alone: your assistants as tools, at /mcp."""
    from mcp_server.server import serve

    settings = load_settings()
    serve(settings, host=host, port=port or settings.mcp_server_port)


@main.command()
@click.option("--concurrency", type=click.IntRange(1, 10000), default=None,
              help="Agents run at once by this process "
              f"(default: $JARVIS_WORKER_CONCURRENCY or {DEFAULT_WORKER_CONCURRENCY}).")
@click.option("--models", default=None, metavar="A,B",
              help="Take only agents of these models (their names as the agent JSON gives "
              "them); without it, every model's.")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(concurrency: int | None, models: str | None, loglevel: str) -> None:
    """Run one Celery worker process."""
    from jarvis_agents.routing import parse_models
    from workers.main import run_worker

    chosen = parse_models(models)
    if chosen == ():
        raise click.UsageError("--models names no model; give names separated by commas")
    sys.exit(run_worker(load_settings(), concurrency=concurrency, loglevel=loglevel, models=chosen))


@main.command("ping-worker")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 120), default=5.0,
              show_default=True, help="Seconds to wait for an answer.")
def ping_worker(timeout_s: float) -> None:
    """Exit 0 if a worker on this machine answers a ping over the broker (a health check)."""
    import socket

    from workers.probe import ping_host_workers

    host = socket.gethostname()
    answered = ping_host_workers(load_settings(), timeout_s=timeout_s, host=host)
    if not answered:
        fail(f"no worker on {host} answered a ping within {timeout_s:g} s")
    click.echo(f"{answered[0]}: pong")


main.add_command(users)
main.add_command(delete)
main.add_command(assistants)
main.add_command(schedules)
main.add_command(demo_model)
for command in CLIENT_COMMANDS:
    main.add_command(command)
