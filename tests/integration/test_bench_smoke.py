"""The benchmark harness, run small: one scenario end to end, every scenario's report.

Correctness only, in seconds: one scenario run by `python -m bench --quick` (the whole
system started, driven and reported), and the report written from the results of a
quick run of every scenario; nothing here looks at how fast anything was (benchmarks
are not timed tests; see BENCHMARKS.md). Every scenario at once, small:
`python -m bench --quick --skip-peer --runs 1` (about three minutes).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ollama
import pytest

from bench.model_server import fetch_calls
from bench.processes import free_port
from jarvis_agents.config import Settings
from jarvis_agents.llm.base import ChatMessage, ChatRequest
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.react.prompt import STOP_SEQUENCES
from tests.conftest import PG_ADMIN_URL, ROOT, cli_env, missing

pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.fixture
def bench_redis(request: pytest.FixtureRequest) -> list[str]:
    """The harness starts a private redis-server when it can; else it uses a test database."""
    if shutil.which("redis-server"):
        return []
    return ["--redis-url", request.getfixturevalue("redis_url")]


@pytest.mark.timeout(120)
def test_a_scenario_runs_end_to_end_and_is_reported(
    tmp_path: Path, pg_server_url: str, bench_redis: list[str]
) -> None:
    """`python -m bench --quick --scenario concurrency`: the harness starts the whole
    system (its database, Redis, the model server, the API, a worker), drives scenario 2
    through its client processes, and writes the results and the report."""
    report, raw = tmp_path / "BENCHMARKS.md", tmp_path / "results.json"
    env = cli_env(JARVIS_BENCH_PG=PG_ADMIN_URL, PATH=os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--scenario", "concurrency", "--runs", "1",
         "--output", str(report), "--json", str(raw), "--log-dir", str(tmp_path / "logs"),
         *bench_redis],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(raw.read_text())
    assert results["meta"]["scenarios"] == ["concurrency"] and results["meta"]["quick"]
    concurrency = results["concurrency"]
    (io,) = concurrency["runs"]
    assert io["completed"] == io["agents"] == concurrency["sizes"]["agents"]
    assert concurrency["setting"] == "default"
    assert concurrency["worker_concurrency"] == Settings.from_env({}).worker_concurrency
    assert isinstance(io["makespan_s"], float) and math.isfinite(io["makespan_s"])
    assert io["makespan_s"] > 0
    text = report.read_text()
    assert "## 2. I/O-bound concurrency" in text and "## 3." not in text


# Every scenario's results from one `python -m bench --quick --skip-peer --runs 1` on this
# tree; write it again with `--json` when a scenario changes what it reports.
QUICK_RESULTS = ROOT / "tests" / "support" / "bench_quick_results.json"


def test_the_report_renders_every_scenario_of_a_quick_run() -> None:
    """The report code on the results of a run of every scenario: each scenario's section
    and its targets come out, with the run's figures in them."""
    from bench import report
    from bench.targets import targets

    results = json.loads(QUICK_RESULTS.read_text())
    text = report.render(results, notes="kept by hand")
    for heading in (
        "## 1. Orchestration overhead", "## 2. I/O-bound concurrency", "## 3. SSE fan-out",
        "## 5. Webhooks", "## 6. Routing by model", "## 7. Scale on one worker process",
        "## 8. Live tokens", "## 9. MCP tool calls",
    ):
        assert text.count(heading) == 1, heading
    assert "Quick mode" in text and "Native tool calling" in text
    assert report.kept_notes(text) == "kept by hand"
    rows = targets(results)
    assert len(rows) >= 15 and all(verdict for _, _, verdict in rows)
    (io,) = results["concurrency"]["runs"]
    assert f"{io['makespan_s']:.2f} s" in text


def peak_in_flight(calls: list[tuple]) -> int:
    """The most calls the model server held at one moment, from its clocks."""
    edges = sorted([(arrived, 1) for *_, arrived, _ in calls] + [(ended, -1) for *_, ended in calls])
    peak = now = 0
    for _, change in edges:  # at a tie, an end counts before an arrival
        now += change
        peak = max(peak, now)
    return peak


@pytest.fixture
def bench_model() -> Iterator[str]:
    """`python -m bench.model_server` with 0.5 s of latency and 2 tool calls."""
    port = free_port()
    args = ["-m", "bench.model_server", "--port", str(port), "--latency", "0.5", "--tool-calls", "2"]
    server = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and "listening" in server.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        assert server.wait(10) == 0


@pytest.mark.timeout(30)
def test_bench_model_server_scripts_the_worker_client_and_clocks_each_call(
    bench_model: str,
) -> None:
    with OllamaChatModel(host=bench_model) as model:
        assert model.has_model("llama3.2")

        def agent(tag: str) -> list[str]:
            messages = [ChatMessage("system", "s"), ChatMessage("user", f"[bench {tag}] go")]
            replies: list[str] = []
            for _ in range(3):
                reply = model.complete(
                    ChatRequest(messages, model="llama3.2", stop=STOP_SEQUENCES),
                    deadline=time.monotonic() + 10, should_stop=lambda: False).content
                replies.append(reply)
                messages += [ChatMessage("assistant", reply), ChatMessage("user", "OBSERVATION: 1")]
            return replies

        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(agent, [f"a{i}" for i in range(50)]))
    for replies in results:
        assert [r.splitlines()[1] for r in replies[:2]] == ["ACTION: calculate"] * 2
        assert "FINAL_ANSWER: 1113068" in replies[2]
    calls = fetch_calls(bench_model, clear=True)
    assert sorted((tag, turn) for tag, turn, _, _ in calls) == sorted(
        (f"a{i}", turn) for i in range(50) for turn in range(3)
    )
    # The server waits out the calls' latency together, not one after another: by its
    # own clocks, half the agents' calls or more were in flight at one moment.
    assert peak_in_flight(calls) >= 25
    assert fetch_calls(bench_model) == []

    # The non-streamed reply, as another client asks for it.
    reply = ollama.Client(host=bench_model).chat(
        model="llama3.2", messages=[{"role": "user", "content": "hi"}], stream=False
    )
    assert "ACTION: calculate" in reply.message.content


@pytest.mark.timeout(180)
def test_tree_ab_runs_agents_in_turns_and_reports_every_ratio(pg_server_url: str) -> None:
    """`python -m bench.tree_ab . --profile`: this tree against itself, two workers
    taking turns, and their profiles compared function by function."""
    if shutil.which("redis-server") is None:
        missing("redis-server", "bench.tree_ab starts a redis-server of its own")
    env = cli_env(JARVIS_BENCH_PG=PG_ADMIN_URL, PATH=os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bench.tree_ab", ".", "--pairs", "6", "--profile"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "**" in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| step gap, wall (mean of an agent's 3)", "| step gap, agent thread CPU",
        "| agent run, wall", "| agent run, process CPU",
    ]
    for row in rows:  # the ratios are numbers a reader can use
        ratio = float(row.split("**")[1])
        assert math.isfinite(ratio) and ratio > 0, row
    # Both sides ran the same code under cProfile: per agent, about as many calls each.
    found = re.search(r"Under cProfile, per agent: ([\d,]+) calls .* in this tree, ([\d,]+) and",
                      done.stdout)
    assert found is not None, done.stdout[-3000:]
    mine, theirs = (int(count.replace(",", "")) for count in found.groups())
    assert mine > 1000 and 0.9 < mine / theirs < 1.1, found.group(0)


def test_stack_ab_runs_two_whole_systems_in_turns_and_reports_every_ratio() -> None:
    """`python -m bench.stack_ab .`: this tree's API and worker against themselves, agents
    streamed one at a time by each in turn, clocked as `make bench` clocks them."""
    if shutil.which("redis-server") is None:
        missing("redis-server", "bench.stack_ab starts a redis-server per side")
    env = cli_env(JARVIS_BENCH_PG=PG_ADMIN_URL, PATH=os.environ.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bench.stack_ab", ".", "--pairs", "2", "--agents", "2"],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=170,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "**" in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| per-step overhead p50", "| per-step overhead p99", "| create → first event p50",
    ]
    for row in rows:  # both sides measured something, and the ratio is a number
        mine, theirs, ratio = (float(cell.strip("* ")) for cell in row.split(" | ")[1:4])
        assert mine > 0 and theirs > 0 and math.isfinite(ratio) and ratio > 0, row
