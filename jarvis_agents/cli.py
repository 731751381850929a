"""The `jarvis-agents` command: operator commands and the client side of the API.

Every failure a user can cause or fix is one line on stderr and a non-zero exit,
never a traceback.
"""

from __future__ import annotations

import re
import sys
from typing import Any, NoReturn

import click

from jarvis_agents.config import Settings
from jarvis_agents.errors import JarvisError

USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


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
            fail("aborted", code=130)
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


# --- operator commands -------------------------------------------------------------


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="API port (default: $PORT or 8000).")
def up(port: int | None) -> None:
    """Run the whole system on this machine: database, Redis, worker, API and dashboard."""
    from jarvis_agents.local_stack import LocalStack

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


@main.group()
def users() -> None:
    """User accounts and their API keys."""


@users.command("create")
@click.argument("name")
def users_create(name: str) -> None:
    """Create a user; prints its API key (shown once) as the last line."""
    if not USER_NAME.match(name):
        fail(
            "a user name is 1-64 characters: letters, digits, and . _ @ - "
            "(starting with a letter or digit)",
            code=2,
        )
    from jarvis_agents.store import open_repository

    settings = load_settings()
    repository = open_repository(settings)
    try:
        user, api_key = repository.create_user(name)
    finally:
        repository.engine.dispose()
    click.echo(f"created user {user.name} ({user.id}); its API key, shown only once:")
    click.echo(api_key)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: $PORT or 8000).")
def api(host: str, port: int | None) -> None:
    """Run the HTTP API alone."""
    from api.server import serve

    settings = load_settings()
    serve(settings, host=host, port=port or settings.port)


@main.command()
@click.option("--concurrency", type=click.IntRange(1, 10000), default=None,
              help="Agents run at once by this process (default: $JARVIS_WORKER_CONCURRENCY or 100).")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(concurrency: int | None, loglevel: str) -> None:
    """Run one Celery worker process."""
    from workers.main import run_worker

    run_worker(load_settings(), concurrency=concurrency, loglevel=loglevel)


if __name__ == "__main__":  # pragma: no cover
    main()
