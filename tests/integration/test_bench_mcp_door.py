"""`python -m bench.mcp_door`, run small: every side completes every call and the report
names the targets of both MCP doors. Correctness only: nothing here looks at how fast anything was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import PG_ADMIN_URL, ROOT, cli_env, missing

pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.mark.timeout(300)
def test_the_mcp_bench_compares_both_doors_and_reports_its_targets(pg_server_url: str) -> None:
    if shutil.which("redis-server") is None:
        missing("redis-server", "the bench starts a Redis of its own")
    env = cli_env(JARVIS_BENCH_PG=PG_ADMIN_URL, PATH=os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bench.mcp_door", "--runs", "1", "--calls", "3", "--callers", "8",
         "--per-caller", "1"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    for door in ("the API's `/mcp`", "`jarvis-agents mcp` itself"):
        assert (f"| MCP `tools/call` at {door}, one at a time, ≤ 1.3× REST create + `?wait=` "
                "(p50) |") in report
        assert f"concurrent callers at {door}: MCP agents/s ≥ 0.8× REST's |" in report
    assert "Calls that failed (not counted): [{'rest': 0, 'api': 0, 'mcp': 0}]" in report
    assert "load average before the run" in report
