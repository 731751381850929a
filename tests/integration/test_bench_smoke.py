"""The benchmark harness, run small: every scenario completes and reports its numbers.

Correctness only — `python -m bench --quick` uses tiny sizes, and nothing here looks at
how fast anything was (benchmarks are not timed tests; see BENCHMARKS.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis_agents.config import Settings
from tests.conftest import PG_ADMIN_URL, ROOT, cli_env

pytestmark = pytest.mark.integration


@pytest.fixture
def bench_redis(request: pytest.FixtureRequest) -> list[str]:
    """The harness starts a private redis-server when it can; else it uses a test database."""
    if shutil.which("redis-server"):
        return []
    return ["--redis-url", request.getfixturevalue("redis_url")]


@pytest.mark.timeout(120)
def test_quick_bench_runs_every_scenario_to_completion(
    tmp_path: Path, pg_server_url: str, bench_redis: list[str]
) -> None:
    report, raw = tmp_path / "BENCHMARKS.md", tmp_path / "results.json"
    env = cli_env(JARVIS_BENCH_PG=PG_ADMIN_URL, PATH=os.environ.get("PATH", ""))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--skip-peer",
            "--runs",
            "1",
            "--output",
            str(report),
            "--json",
            str(raw),
            "--log-dir",
            str(tmp_path / "logs"),
            *bench_redis,
        ],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(raw.read_text())

    overhead = results["overhead"]
    agents = overhead["sizes"]["agents"]
    # The throughput phase runs on 1 worker process and on one per core.
    workers = sorted({1, os.cpu_count() or 1})
    assert overhead["sizes"]["workers"] == workers
    assert sorted(int(n) for n in overhead["throughput"]) == workers
    for n, (run,) in overhead["throughput"].items():
        assert run["workers"] == int(n)
        assert run["completed"] == agents
        assert run["overhead_n"] == 4 * agents  # 4 iterations clocked per agent
        assert run["cpu_ms_per_agent_workers"] > 0
    throughput = overhead["throughput"][str(workers[-1])][0]
    (first,) = overhead["first_event"]
    assert first["completed"] == overhead["sizes"]["first_event_samples"]
    (create,) = overhead["create"]
    assert create["errors"] == 0 and create["n"] > 0

    concurrency = results["concurrency"]
    (io,) = concurrency["runs"]
    assert io["completed"] == concurrency["sizes"]["agents"]
    assert concurrency["setting"] == "default"
    assert concurrency["worker_concurrency"] == Settings.from_env({}).worker_concurrency

    fanout = results["fanout"]
    for shape in ("spread", "hot"):
        (run,) = fanout[shape]
        assert run["streams"] == fanout["sizes"]["subscribers"]
        assert run["events_received"] == run["events_expected"]
        assert run["kib_per_stream"] > 0
    (floor,) = fanout["floor"]  # the same streams fed by one plain writer process
    assert floor["streams"] == fanout["sizes"]["subscribers"]
    assert floor["events_received"] == floor["events_expected"]
    assert floor["short_sends"] == 0 and floor["send_loop_ms"] > 0

    numbers = [
        throughput["agents_per_s"],
        throughput["overhead_p99_ms"],
        first["p50_ms"],
        create["p99_ms"],
        io["makespan_s"],
        fanout["spread"][0]["p99_ms"],
    ]
    assert all(isinstance(n, float) and math.isfinite(n) and n > 0 for n in numbers)

    text = report.read_text()
    assert "## Targets (issue 7)" in text
    assert "Quick mode" in text
    for heading in (
        "## 1. Orchestration overhead",
        "## 2. I/O-bound concurrency",
        "## 3. SSE fan-out",
    ):
        assert heading in text
    assert "| metric | 1 worker process |" in text  # a column per number of worker processes
