"""The shape of the house: the core (`jarvis_agents`) loads no door.

Importing every core module, in a fresh interpreter, loads neither the web (Flask,
Werkzeug, gevent), nor the queue (Celery, kombu), nor the outer layer
(`jarvis_agents.cli`, `api`, `workers`, `mcp_server`); and no core module imports one
anywhere, not even inside a function. The MCP door, an asyncio process, loads neither
the API nor what it runs on.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import jarvis_agents
from tests.conftest import ROOT

DOORS = ("flask", "werkzeug", "gevent", "celery", "kombu", "api", "workers", "mcp_server",
         "jarvis_agents.cli")
# Alembic's env.py runs a migration when imported; the CLI is the outer layer itself.
NOT_CORE = ("jarvis_agents.cli", "jarvis_agents.store.migrations")


def core_modules() -> list[str]:
    return [
        module.name
        for module in pkgutil.walk_packages(jarvis_agents.__path__, "jarvis_agents.")
        if not module.name.startswith(NOT_CORE)
    ]


def loaded_after_importing(modules: list[str]) -> set[str]:
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True,
                          capture_output=True, text=True, timeout=60)
    return set(json.loads(done.stdout.splitlines()[-1]))


def doors_in(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(m == door or m.startswith(f"{door}.") for door in DOORS))


def test_the_core_modules_are_found() -> None:
    found = core_modules()
    for name in ("jarvis_agents.executor", "jarvis_agents.service", "jarvis_agents.runner",
                 "jarvis_agents.store", "jarvis_agents.components", "jarvis_agents.lifecycle"):
        assert name in found
    assert not any(name.startswith("jarvis_agents.cli") for name in found)


def test_importing_the_core_loads_no_web_no_queue_and_no_cli() -> None:
    assert doors_in(loaded_after_importing(core_modules())) == []


def test_no_core_module_imports_a_door_even_inside_a_function() -> None:
    """An import inside a function escapes the check above until the function runs (the
    API's process may load gevent, but the core must not reach for it)."""
    import ast

    core = ROOT / "jarvis_agents"
    found = []
    for path in sorted(core.rglob("*.py")):
        if ".".join(("jarvis_agents", *path.relative_to(core).with_suffix("").parts)).startswith(NOT_CORE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                      for name in names if doors_in({name})]
    assert found == []


def test_the_check_sees_a_door_when_one_is_loaded() -> None:
    # The same check on the CLI, which does load click's doors: the test above can fail.
    assert "jarvis_agents.cli" in doors_in(loaded_after_importing(["jarvis_agents.cli"]))


def test_the_mcp_door_loads_neither_the_api_nor_gevent() -> None:
    """`mcp_server` → `jarvis_agents`, as `api` and `workers`: it never reaches into the API,
    nor loads Flask or gevent, whose patching an asyncio server cannot share a process with."""
    loaded = loaded_after_importing(["mcp_server.app", "mcp_server.server", "mcp_server.wiring"])
    assert "mcp_server.app" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in {"api", "flask", "werkzeug", "gevent"}) == []


def test_the_event_room_reads_no_database_and_the_web_stream_no_store() -> None:
    """`jarvis_agents.events` takes the store as an argument; the API's SSE module frames
    what `follow` tells and imports nothing of the store or SQL."""
    import ast

    for path in [*sorted((ROOT / "jarvis_agents" / "events").glob("*.py")),
                 ROOT / "api" / "streaming.py", ROOT / "api" / "sse.py"]:
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
        assert not {m for m in imported if m.startswith(("sqlalchemy", "jarvis_agents.store"))}, path
