"""The workers' health checks as docker-compose.yml and the Kubernetes manifests write them,
run against a worker started as they start it: each passes while the worker runs, again
after its supervisor has restarted its Celery process (a new pid, so a new node name), and
fails once it has stopped. The services' addresses are the tests'; HOSTNAME is this
machine's name, as a container's runtime sets it to the container's."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, Process, _descendants, cli_env
from tests.support.api_server import wait_until
from tests.support.kustomize import containers, render
from workers.probe import host_pattern

pytestmark = [pytest.mark.integration, pytest.mark.long]

DEPLOY = ROOT / "deploy" / "kubernetes"
PROBE_TIMEOUT_S = 60  # well over the probe's own wait (5 s) and a loaded machine's start-up


@dataclass(frozen=True)
class Check:
    where: str
    worker: tuple[str, ...]  # the worker's command
    probe: tuple[str, ...]  # the health check's command, as the runtime runs it


def compose_argv(test: str | list[str]) -> tuple[str, ...]:
    """A Compose health check's `test` as the argv Docker runs, `$$` unescaped. Any other
    `$` would be interpolated by Compose from the host's environment: refused here, as the
    test could not say what it becomes."""
    form, *words = ["CMD-SHELL", test] if isinstance(test, str) else test
    assert form in ("CMD", "CMD-SHELL"), f"a health check of the form {form}"
    assert not any("$" in word.replace("$$", "") for word in words), f"Compose interpolates {words}"
    words = [word.replace("$$", "$") for word in words]
    return tuple(words) if form == "CMD" else ("/bin/sh", "-c", *words)


def compose_checks() -> list[Check]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return [Check(f"docker-compose.yml: {name}", tuple(service["command"]),
                  compose_argv(service["healthcheck"]["test"]))
            for name, service in services.items()
            if service.get("command", [None, None])[:2] == ["jarvis-agents", "worker"]]


def kubernetes_checks() -> list[Check]:
    """The worker Deployments of `kubectl apply -k deploy/kubernetes` and of the example
    overlay; an exec probe runs its command as it is (no shell, no `$(VAR)` expansion)."""
    found: dict[tuple[Any, ...], Check] = {}
    for tree in (DEPLOY, DEPLOY / "overlays" / "example"):
        for obj in render(tree):
            if obj["kind"] != "Deployment":
                continue
            for container in containers(obj):
                command = (*container.get("command", []), *container.get("args", []))
                if command[:2] != ("jarvis-agents", "worker"):
                    continue
                for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if kind in container:
                        probe = tuple(container[kind]["exec"]["command"])
                        assert not any("$(" in word for word in probe), probe
                        found.setdefault((command, probe), Check(
                            f"{tree.relative_to(ROOT)}: {obj['metadata']['name']} {kind}",
                            command, probe))
    return list(found.values())


def distinct(checks: list[Check]) -> list[Check]:
    """One check per worker command and probe: the same pair in two manifests runs once,
    named after both."""
    merged: dict[tuple[tuple[str, ...], tuple[str, ...]], Check] = {}
    for check in checks:
        seen = merged.get((check.worker, check.probe))
        where = f"{seen.where} + {check.where}" if seen else check.where
        merged[(check.worker, check.probe)] = Check(where, check.worker, check.probe)
    return list(merged.values())


CHECKS = distinct(compose_checks() + kubernetes_checks())


def test_every_worker_has_its_check() -> None:
    """Compose's worker, and the default, llama3.2 and example qwen2.5 Deployments."""
    assert len(compose_checks()) == 1
    assert sorted(c.worker for c in kubernetes_checks()) == [
        ("jarvis-agents", "worker"), ("jarvis-agents", "worker", "--models", "llama3.2"),
        ("jarvis-agents", "worker", "--models", "qwen2.5")]


def run_probe(check: Check, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(check.probe, env=env, cwd=ROOT, check=False, capture_output=True,
                          text=True, timeout=PROBE_TIMEOUT_S)


def celery_child(worker: Process) -> int:
    """The pid of the Celery process `jarvis-agents worker` supervises."""
    (child,) = _descendants(worker.proc.pid)
    return child


@pytest.mark.parametrize("check", CHECKS, ids=[c.where for c in CHECKS])
def test_the_check_passes_while_the_worker_runs_and_fails_once_it_stopped(
    check: Check, pg_url: str, redis_url: str, tmp_path: Path, started_processes: list[Process]
) -> None:
    env = cli_env(
        DATABASE_URL=pg_url, REDIS_URL=redis_url, OLLAMA_HOST="http://127.0.0.1:9",
        HOSTNAME=socket.gethostname(),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    worker = Process(list(check.worker), env, tmp_path / "worker.log")
    started_processes.append(worker)
    worker.wait_for("ready.", timeout_s=60)

    first = run_probe(check, env)
    assert first.returncode == 0, first.stdout + first.stderr

    # The supervisor starts the Celery process again: another pid, the check still passes.
    os.kill(celery_child(worker), signal.SIGKILL)
    worker.wait_for("restarting in", timeout_s=30)
    wait_until(lambda: worker.output().count("ready.") == 2, timeout_s=60)
    again = run_probe(check, env)
    assert again.returncode == 0, again.stdout + again.stderr
    if check.probe[:2] == ("jarvis-agents", "ping-worker"):
        assert first.stdout != again.stdout, "the node that answered is the restarted one"

    worker.stop()
    stopped = run_probe(check, env)
    assert stopped.returncode != 0, stopped.stdout
    assert "no worker on" in stopped.stderr


def test_a_host_s_pattern_takes_none_of_another_host_s_workers() -> None:
    pattern = host_pattern("web-1")
    assert re.match(pattern, "celery@web-1-4711")
    assert not re.match(pattern, "celery@web-1-2-4711")  # the host web-1-2's
    assert not re.match(pattern, "celery@web-1-4711.old")
    assert not re.match(host_pattern("a.b"), "celery@axb-1")  # a dot is a dot
