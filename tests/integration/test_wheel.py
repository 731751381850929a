"""What ships is what was tested: the wheel, built from what the Dockerfile copies, installed
into a clean virtualenv (not editable) by the pip that `python -m venv` gives, not upgraded
(it must resolve the dependencies as they are written), then run from there — the
migrations, a worker and the API — on the tests' PostgreSQL, Redis and model server: a
native agent and a text one complete, and every asset the dashboard and the operator page
reference is served.

The installed processes run outside the checkout, so nothing of it is on their path.

The dependencies' wheels are kept in the test virtualenv's `wheelhouse/` (pip's own cache
keeps nothing here: the registry's responses reach this machine without their cache
headers). The install takes them from there alone when it can; when it cannot (a fresh
virtualenv, as in CI, or a dependency changed) the same pip first resolves the
dependencies from the registry into it. Without the registry then, this skips locally
and fails in CI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from tests.conftest import (
    ROOT,
    Process,
    cli_env,
    free_port,
    held_redis_db,
    missing,
    new_pg_database,
    stop_all,
)
from tests.support.api_server import CALC_SCRIPT, wait_until
from tests.support.dockerfile import build_stage_copies
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_replies import FakeToolCall, Turn

# Building and installing take a minute or two on a loaded machine (the registry's pages).
pytestmark = [pytest.mark.integration, pytest.mark.long, pytest.mark.timeout(600)]

PACKAGES = ("jarvis_agents", "workers", "api", "mcp_server")
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"  # the test virtualenv's: `make clean` empties it
TOOL_MODEL, TEXT_MODEL = "tool-model", "text-model"  # the second lacks the tools capability
NATIVE = [
    Turn(tool_calls=(FakeToolCall("calculate", {"expression": "1234 * 902"}),)),
    Turn(text="1113068"),
]
# What pip says when it cannot reach the registry (as opposed to a resolution that fails).
# (Its "WARNING: Location … is ignored" lines are this machine's extra indexes, left out.)
OFFLINE = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
           "Network is unreachable", "ConnectTimeoutError")


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    build_output: str  # what building the wheel printed

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def run(args: list[str | Path], *, doing: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, check=False,
                          capture_output=True, text=True, timeout=540)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        if any(sign in output for sign in OFFLINE):
            missing("The package registry", f"{doing}: {output.strip().splitlines()[-1]}")
        said = [line for line in output.splitlines() if not line.startswith("WARNING: Location ")]
        pytest.fail(f"{doing} failed ({done.returncode}):\n" + "\n".join(said[-60:]))
    return output


def tracked(*paths: str) -> list[str]:
    """The files git has under `paths`: a fresh clone's, whatever else lies in this tree."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, check=True,
                                capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        missing("A git checkout", str(exc))
    return [name for name in listed.split("\0") if name]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    # The build context as the image's build stage copies it; a fresh directory each time,
    # as a build's leftovers (setuptools' build/) would go into the next wheel.
    source = work / "source"
    for name in tracked(*build_stage_copies()):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    # Built with the pip `make up` uses (upgraded), which shows the build backend's warnings.
    build_output = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--wheel-dir", work / "dist", source], doing="building the wheel", cwd=work)
    (wheel,) = (work / "dist").glob("jarvis_agents-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv], doing="making a virtualenv", cwd=work)
    install(venv / "bin" / "pip", wheel, cwd=work)
    return Installed(venv, wheel, build_output)


def install(pip: Path, wheel: Path, *, cwd: Path) -> None:
    """`pip install wheel` with its dependencies, from the wheelhouse when it has them all."""
    offline = [pip, "install", "--quiet", "--no-compile", "--no-index", "--find-links", WHEELHOUSE, wheel]
    if WHEELHOUSE.is_dir() and subprocess.run(offline, cwd=cwd, check=False, capture_output=True,
                                              timeout=540).returncode == 0:
        return
    version = run([pip, "--version"], doing="pip --version", cwd=cwd).split(" from")[0]
    run([pip, "wheel", "--quiet", "--wheel-dir", WHEELHOUSE, "--find-links", WHEELHOUSE, wheel],
        doing=f"resolving the dependencies from the registry with {version}", cwd=cwd)
    for ours in WHEELHOUSE.glob("jarvis_agents-*.whl"):  # the wheel under test is never cached
        ours.unlink()
    run(offline, doing=f"installing the wheel with {version}", cwd=cwd)


def test_the_wheel_holds_every_file_of_the_packages_and_builds_without_a_warning(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        shipped = {name for name in wheel.namelist() if ".dist-info/" not in name}
        licenses = {name.split(".dist-info/licenses/")[-1] for name in wheel.namelist()
                    if ".dist-info/licenses/" in name}
    assert shipped == set(tracked(*PACKAGES))  # prompts, migrations, the pages' assets: all
    assert licenses == {"LICENSE", "api/static/vendor/uplot/LICENSE"}
    assert "Warning" not in installed.build_output, installed.build_output
    assert "deprecat" not in installed.build_output.lower(), installed.build_output


@pytest.fixture
def model_server() -> Iterator[FakeOllama]:
    native, text = FakeOllama.by_turn(NATIVE), FakeOllama.by_turn(CALC_SCRIPT)

    def respond(request: dict[str, Any]) -> str | Turn:
        return (native if request["model"].startswith(TOOL_MODEL) else text)(request)

    with FakeOllama(responder=respond, models=[TOOL_MODEL, TEXT_MODEL],
                    capabilities={TOOL_MODEL: ["completion", "tools"]}) as server:
        yield server


def page_assets(http: httpx.Client, page: str) -> dict[str, bytes]:
    """Every asset `page` references, and every module its scripts import, as served."""
    html = http.get(page)
    assert html.status_code == 200, page
    todo = re.findall(r'(?:href|src)="(/static/[^"]+)"', html.text)
    served: dict[str, bytes] = {}
    while todo:
        path = todo.pop()
        if path in served:
            continue
        asset = http.get(path)
        assert asset.status_code == 200, f"{page} references {path}: {asset.status_code}"
        served[path] = asset.content
        if path.endswith(".js"):
            todo += [urljoin(path, module) for module in
                     re.findall(r'(?:from|import)\s*"(\.{1,2}/[^"]+)"', asset.text)]
    return served


def test_the_installed_package_runs_agents_and_serves_its_pages(
    installed: Installed, model_server: FakeOllama, redis_dbs_lock: None, tmp_path: Path
) -> None:
    place = tmp_path / "elsewhere"  # not the checkout: `python -m` would import from it
    place.mkdir()
    where = ("import api, jarvis_agents, mcp_server as m, workers as w; "
             "print(api.__file__, jarvis_agents.__file__, m.__file__, w.__file__)")
    imported = run([installed.bin / "python", "-c", where], doing="importing the packages", cwd=place)
    assert all(path.startswith(str(installed.venv)) for path in imported.split()), imported
    jarvis = str(installed.bin / "jarvis-agents")
    with new_pg_database(migrated=False) as database_url, held_redis_db() as redis_url:
        env = cli_env(DATABASE_URL=database_url, REDIS_URL=redis_url, OLLAMA_HOST=model_server.url,
                      JARVIS_MODEL=TOOL_MODEL, JARVIS_DATA_DIR=str(tmp_path / "data"))
        env.pop("PYTHONPATH", None)
        run([jarvis, "db", "upgrade"], doing="the installed migrations", cwd=place, env=env)
        key = run([jarvis, "users", "create", "wheel"], doing="a user", cwd=place, env=env).splitlines()[-1]
        port = free_port()
        processes = [
            Process([jarvis, "worker", "--concurrency", "4"], env, tmp_path / "worker.log", cwd=place),
            Process([jarvis, "api", "--port", str(port)], env, tmp_path / "api.log", cwd=place),
        ]
        try:
            processes[0].wait_for("ready.", timeout_s=90)
            processes[1].wait_for("API listening on", timeout_s=60)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                              headers={"Authorization": f"Bearer {key}"}) as http:
                check_agents(http, model_server, processes[0])
                dashboard = page_assets(http, "/")
                operator = page_assets(http, "/operator")
        finally:
            stop_all(processes)
    assert "/static/dashboard.js" in dashboard and "/static/vendor/uplot/uPlot.iife.min.js" in operator
    for path, body in {**dashboard, **operator}.items():
        assert body == (ROOT / "api" / path.removeprefix("/")).read_bytes(), path


def check_agents(http: httpx.Client, model_server: FakeOllama, worker: Process) -> None:
    """A tool-capable model's agent runs in native mode, the other's in the text protocol;
    each reads its system prompt from a file the wheel must carry."""
    ids = {model: http.post("/api/v1/agents", json={"goal": "What is 1234 * 902?", "model": model})
           .json()["id"] for model in (TOOL_MODEL, TEXT_MODEL)}

    def ended() -> dict[str, Any] | None:
        agents = {model: http.get(f"/api/v1/agents/{i}").json() for model, i in ids.items()}
        return agents if all(a["status"] not in ("PENDING", "RUNNING") for a in agents.values()) else None

    try:
        agents = wait_until(ended, timeout_s=90)
    except AssertionError:
        raise AssertionError(f"the agents did not end; the worker's log:\n{worker.output()[-3000:]}") from None
    for model, mode in ((TOOL_MODEL, "native"), (TEXT_MODEL, "react")):
        agent = agents[model]
        assert (agent["status"], agent["mode"], agent["final_answer"]) == ("COMPLETED", mode, "1113068"), agent
    first_native = next(r for r in model_server.requests if r["model"].startswith(TOOL_MODEL))
    prompt = (ROOT / "jarvis_agents" / "native" / "system_prompt.txt").read_text("utf-8")
    assert first_native["messages"][0] == {"role": "system", "content": prompt}
