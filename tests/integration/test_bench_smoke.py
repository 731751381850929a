"""The benchmark harness, run small: every scenario completes and reports its numbers.

Correctness only — `python -m bench --quick` uses tiny sizes, and nothing here looks at
how fast anything was (benchmarks are not timed tests; see BENCHMARKS.md).
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

pytestmark = pytest.mark.integration


@pytest.fixture
def bench_redis(request: pytest.FixtureRequest) -> list[str]:
    """The harness starts a private redis-server when it can; else it uses a test database."""
    if shutil.which("redis-server"):
        return []
    return ["--redis-url", request.getfixturevalue("redis_url")]


@pytest.mark.timeout(360)  # nine scenarios, ~150 s on a quiet machine
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
        timeout=330,
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
    # The same in native tool calling, on 1 worker process: 4 iterations each too.
    (native,) = overhead["throughput_native"]
    assert native["completed"] == agents and native["overhead_n"] == 4 * agents
    assert "Native tool calling" in report.read_text()
    throughput = overhead["throughput"][str(workers[-1])][0]
    (first,) = overhead["first_event"]
    assert first["completed"] == overhead["sizes"]["first_event_samples"]
    (create,) = overhead["create"]
    assert create["errors"] == 0 and create["n"] > 0
    # The floors: the same clients against a minimal Flask view (on our server and on a
    # threaded one), and a bare ReACT loop.
    (create_floor,) = overhead["create_floor"]
    (threaded_floor,) = overhead["create_floor_threaded"]
    assert create_floor["errors"] == 0 == threaded_floor["errors"]
    assert create_floor["n"] == threaded_floor["n"] == create["n"]
    # The same clients paced, against ours and the floors.
    (paced,) = overhead["create_paced"]
    (paced_floor,) = overhead["create_floor_paced"]
    (paced_threaded,) = overhead["create_floor_threaded_paced"]
    assert paced["errors"] == 0 == paced_floor["errors"] == paced_threaded["errors"]
    clients = create["n"] // overhead["sizes"]["creates_per_client"]
    assert paced["n"] == paced_floor["n"] == paced_threaded["n"]
    assert paced["n"] == clients * overhead["sizes"]["paced_creates_per_client"]
    (step_floor,) = overhead["step_floor"]
    sizes = overhead["sizes"]  # every middle iteration of every floor agent clocked
    assert step_floor["n"] == sizes["step_floor_agents"] * sizes["tool_calls"]
    # Persist + publish alone: every middle iteration's event seen, ours and the floor's.
    assert first["persist_n"] == sizes["first_event_samples"] * sizes["tool_calls"]
    assert step_floor["persist_n"] == step_floor["n"]

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

    hooks = results["webhooks"]  # a webhook on every agent, and none, in turn
    (hooked,) = hooks["runs"]
    assert hooked["delivered"] == hooks["sizes"]["agents"]
    assert hooked["try_floor_ms"] > 0 and hooked["webhooks_workers_cpu_ms_per_agent"] > 0

    scale = results["scale"]  # agents on one worker process at its defaults
    assert scale["worker_concurrency"] == Settings.from_env({}).worker_concurrency
    for n, (run,) in scale["by_agents"].items():
        assert run["completed"] == int(n)
        assert run["worker_cpu_s"] > 0 and run["peak_rss_mib"] > 0  # too short to see in flight

    routing = results["routing"]  # a worker for every model, and one --models worker capped
    (routed,) = routing["runs"]
    assert routed["completed"] == routing["sizes"]["agents"]

    tokens = results["tokens"]  # subscribers with ?tokens=1, models writing through the batcher
    (live,) = tokens["runs"]
    assert live["streams"] == tokens["sizes"]["subscribers"]
    assert live["tokens_written"] > 0 and live["batches_published"] > 0
    assert live["events_received"] == live["events_expected"]
    assert live["complete_streams"] == live["streams"]

    mcp = results["mcp"]  # the same registry call, a built-in and a stdio MCP server's no-op
    (rows,) = mcp["rounds"]
    assert sorted((row["tool"], row["mode"]) for row in rows) == sorted(
        (tool, mode) for tool in ("built-in calculate", "MCP no-op (stdio)")
        for mode in ("sequential", "8 threads")
    )

    numbers = [
        *(row["ms_per_call"] for row in rows),
        live["p99_ms"],
        live["api_cpu_us_per_token"],
        hooked["ratio"],
        hooked["cpu_ratio"],
        routed["ratio"],
        routed["cpu_ratio"],
        hooked["delivery_p50_ms"],
        throughput["agents_per_s"],
        throughput["overhead_p99_ms"],
        first["p50_ms"],
        create["p99_ms"],
        create_floor["p99_ms"],
        paced["p99_ms"],
        paced_floor["p99_ms"],
        threaded_floor["p99_ms"],
        paced_threaded["p99_ms"],
        step_floor["p50_ms"],
        first["persist_p50_ms"],
        step_floor["persist_p50_ms"],
        io["makespan_s"],
        scale["by_agents"][str(scale["sizes"]["agents"][0])][0]["makespan_s"],
        fanout["spread"][0]["p99_ms"],
    ]
    assert all(isinstance(n, float) and math.isfinite(n) and n > 0 for n in numbers)
    # The report is written from these results; its wording is the harness's own business.
    assert report.stat().st_size > 0


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
    assert all(finished - arrived >= 0.5 for _, _, arrived, finished in calls)
    # The server waits out the calls' latency together, not one after another.
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
