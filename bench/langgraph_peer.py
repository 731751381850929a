"""Scenario 4 — the peer: LangGraph's Agent Server (`langgraph dev`), same machine, same run.

The server runs from `bench/.peer-venv` (created here from `bench/peer/requirements.txt`
when missing: never in the project's venv) with the graph of `bench/peer/graph.py`: a
model node and a tool node in a loop, the model a fake chat model that waits the same
latency and asks for the same `calculate` calls as our bench model. Runs are created
the way a client would, `POST /runs` (`on_completion: keep`), by the same 8 client
processes as ours; completion is polled with `POST /threads/count` (idle threads), and
the makespan runs from the first create sent to the last run's `updated_at` (set when
it ended). Settings: its defaults, and its best ones (more jobs per worker, the
blocking-call detector off, warnings-only logs).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from bench.clients import Reply, post_concurrently
from bench.processes import Process, StartupError, free_port
from bench.stats import latency_summary

PEER_DIR = Path(__file__).resolve().parent / "peer"
VENV = Path(__file__).resolve().parent / ".peer-venv"
JSON = {"Content-Type": "application/json"}


class PeerUnavailable(RuntimeError):
    """Raised when the peer cannot be installed or started here; the reason is reported."""


def ensure_venv(log: Any = print) -> Path:
    """The peer's virtualenv, created and filled from requirements.txt if missing."""
    langgraph = VENV / "bin" / "langgraph"
    if langgraph.exists():
        return langgraph
    log(f"  installing the peer into {VENV} (pip install -r bench/peer/requirements.txt)")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(VENV)],
        [str(VENV / "bin" / "pip"), "install", "--quiet", "-r", str(PEER_DIR / "requirements.txt")],
    ]
    for step in steps:
        done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise PeerUnavailable(f"`{' '.join(step[-4:])}` failed: {' / '.join(tail)}")
    return langgraph


def versions() -> dict[str, str]:
    python = VENV / "bin" / "python"
    code = (
        "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version"
        " for d in m.distributions() if d.metadata['Name'].lower().startswith('langgraph')"
        " or d.metadata['Name'].lower() == 'langchain-core'}))"
    )
    done = subprocess.run(
        [str(python), "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


@dataclass(frozen=True)
class PeerSetting:
    name: str
    jobs_per_worker: int | None  # None: the CLI's default
    best: bool = False  # --allow-blocking, LOG_LEVEL=WARNING

    def describe(self) -> str:
        jobs = (
            f"--n-jobs-per-worker {self.jobs_per_worker}"
            if self.jobs_per_worker
            else "default jobs per worker (1 in this version)"
        )
        extras = ", --allow-blocking, LOG_LEVEL=WARNING" if self.best else ""
        return jobs + extras


@dataclass
class PeerServer:
    setting: PeerSetting
    log_dir: Path
    process: Process | None = None
    url: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> Self:
        langgraph = ensure_venv()
        port = free_port()
        args = [
            str(langgraph),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        if self.setting.jobs_per_worker:
            args += ["--n-jobs-per-worker", str(self.setting.jobs_per_worker)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))}
        env.update(
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGSMITH_TRACING="false",
            PYTHONUNBUFFERED="1",
            **self.extra_env,
        )
        if self.setting.best:
            args.append("--allow-blocking")
            env["LOG_LEVEL"] = "WARNING"
        # `langgraph dev` keeps its in-memory store in ./.langgraph_api and reloads it at
        # start; a stale one (hundreds of MB after a few runs) slows every operation and
        # its flush loop. Each server gets a fresh copy of the graph and an empty store.
        workdir = self.log_dir / f"peer-{self.setting.name}"
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(PEER_DIR, workdir, ignore=shutil.ignore_patterns(".langgraph_api"))
        self.process = Process(
            f"peer-{self.setting.name}", args, env=env, log_dir=self.log_dir, cwd=workdir
        )
        self.url = f"http://127.0.0.1:{port}"
        self._wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop()

    def _wait_ready(self, timeout_s: float = 120) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.proc.poll() is not None:
                raise PeerUnavailable(f"`langgraph dev` exited: {self.process.output()[-1500:]}")
            try:
                if self._call("GET", "/ok")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise StartupError(f"`langgraph dev` not ready in {timeout_s:g} s: {self.process.log_path}")

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", int(self.url.rsplit(":", 1)[1]), timeout=60)
        try:
            conn.request(
                method, path, body=json.dumps(body) if body is not None else None, headers=JSON
            )
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    # --- the scenarios ---------------------------------------------------------------

    def finished_threads(self) -> int:
        return sum(
            self._call("POST", "/threads/count", {"status": s})[1] for s in ("idle", "error")
        )

    def run_many(
        self, n: int, *, latency_s: float, tool_calls: int, clients: int, timeout_s: float
    ) -> dict[str, Any]:
        """Create n runs from `clients` processes at once; wait for all; time it."""
        before = self.finished_threads()
        bodies = [
            [_run_body(f"peer {c}-{i}", latency_s, tool_calls) for i in range(c, n, clients)]
            for c in range(clients)
        ]
        cpu0 = self.process.cpu_s() if self.process else 0.0
        replies = post_concurrently(self.url, "/runs", headers=[JSON] * clients, bodies=bodies)
        bad = [r for r in replies if r.status != 200]
        if bad:
            raise RuntimeError(
                f"peer: {len(bad)} creates failed, e.g. {bad[0].status} {bad[0].body}"
            )
        started = min(r.sent_at for r in replies)
        deadline = time.monotonic() + timeout_s
        while self.finished_threads() - before < n and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu1 = self.process.cpu_s() if self.process else 0.0
        runs = [
            self._call("GET", f"/threads/{r.body['thread_id']}/runs/{r.body['run_id']}")[1]
            for r in replies
        ]
        succeeded = [run for run in runs if run and run["status"] == "success"]
        ended = max(datetime.fromisoformat(run["updated_at"]).timestamp() for run in succeeded)
        makespan = ended - started
        # Untimed: forget these threads, so the next batch meets an in-memory store as
        # small as a fresh server's (some of its operations scan every run it holds).
        for reply in replies:
            self._call("DELETE", f"/threads/{reply.body['thread_id']}")
        return {
            "runs": n,
            "succeeded": len(succeeded),
            "makespan_s": makespan,
            "runs_per_s": len(succeeded) / makespan,
            "model_steps_per_s": len(succeeded) * (tool_calls + 1) / makespan,
            "cpu_ms_per_run": (cpu1 - cpu0) * 1000 / n,
            **{f"create_{k}": v for k, v in _latencies(replies).items()},
        }

    def first_event(self, samples: int) -> dict[str, float]:
        """`POST /runs/stream`: request sent → first `updates` event (the model node's reply)."""
        port = int(self.url.rsplit(":", 1)[1])
        times = []
        for i in range(samples):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.loads(_run_body(f"peer stream {i}", 0.0, 3))
            body["stream_mode"] = ["updates"]
            began = time.perf_counter()
            conn.request("POST", "/runs/stream", body=json.dumps(body), headers=JSON)
            response = conn.getresponse()
            first = None
            while line := response.readline():
                if first is None and line.startswith(b"event: updates"):
                    first = time.perf_counter() - began
            conn.close()
            if first is None:
                raise RuntimeError("peer: the stream had no `updates` event")
            times.append(first)
        return latency_summary(times)


def _run_body(content: str, latency_s: float, tool_calls: int) -> bytes:
    return json.dumps(
        {
            "assistant_id": "react",
            "input": {"messages": [{"role": "user", "content": content}]},
            "config": {"configurable": {"latency_s": latency_s, "tool_calls": tool_calls}},
            "on_completion": "keep",
        }
    ).encode()


def _latencies(replies: list[Reply]) -> dict[str, float]:
    return latency_summary([r.latency_s for r in replies])


# --- scenario 4 as a whole -----------------------------------------------------------------

DEFAULT = PeerSetting("default", None)
BEST_100 = PeerSetting("best-100", 100, best=True)
BEST_200 = PeerSetting("best-200", 200, best=True)


@dataclass(frozen=True)
class PeerSizes:
    agents: int = 500  # scenario 1's
    tool_calls: int = 3
    io_agents: int = 200  # scenario 2's
    io_latency_s: float = 2.0
    io_default_agents: int = 10  # one run at a time: 10 × 4 s already says it
    first_event_samples: int = 5
    clients: int = 8
    timeout_s: float = 300.0


class PeerBench:
    """The peer's three servers, up for the whole invocation, so that each of its runs can
    follow the matching run of ours: the two are measured under the same machine load."""

    def __init__(self, log_dir: Path, *, sizes: PeerSizes, log: Any = print) -> None:
        self.log_dir = log_dir
        self.sizes = sizes
        self.log = log
        self.servers: dict[str, PeerServer] = {}
        self._exit = ExitStack()
        self.results: dict[str, Any] = {
            "settings": {s.name: s.describe() for s in (DEFAULT, BEST_100, BEST_200)},
            "throughput": {},
            "io": {},
            "first_event": {},
        }

    def __enter__(self) -> Self:
        ensure_venv(self.log)
        try:
            for setting in (DEFAULT, BEST_100, BEST_200):
                server = PeerServer(setting, self.log_dir)
                self.servers[setting.name] = self._exit.enter_context(server)
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()

    def scenario1(self, r: int) -> None:
        """One run of scenario 1 at the default and the best setting, and first events."""
        for name in (DEFAULT.name, BEST_100.name):
            m = self.servers[name].run_many(
                self.sizes.agents,
                latency_s=0.0,
                tool_calls=self.sizes.tool_calls,
                clients=self.sizes.clients,
                timeout_s=self.sizes.timeout_s,
            )
            self.results["throughput"].setdefault(name, []).append(m)
            self.log(
                f"  peer ({name}), run {r + 1}: {m['runs_per_s']:.1f} runs/s, "
                f"create p50 {m['create_p50_ms']:.1f} ms"
            )
        fe = self.servers[DEFAULT.name].first_event(self.sizes.first_event_samples)
        self.results["first_event"].setdefault(DEFAULT.name, []).append(fe)
        self.log(f"  peer ({DEFAULT.name}), run {r + 1}: first event p50 {fe['p50_ms']:.0f} ms")

    def scenario2(self, r: int) -> None:
        """One run of scenario 2 at each best setting."""
        for name in (BEST_100.name, BEST_200.name):
            self._io(name, r, self.sizes.io_agents)

    def scenario2_default(self) -> None:
        """Its default runs one run at a time: a few runs already show it."""
        self._io(DEFAULT.name, 0, self.sizes.io_default_agents)

    def _io(self, name: str, r: int, n: int) -> None:
        m = self.servers[name].run_many(
            n,
            latency_s=self.sizes.io_latency_s,
            tool_calls=1,
            clients=self.sizes.clients,
            timeout_s=max(self.sizes.timeout_s, n * 2 * self.sizes.io_latency_s * 1.5),
        )
        m["vs_ideal"] = m["makespan_s"] / (2 * self.sizes.io_latency_s)
        self.results["io"].setdefault(name, []).append(m)
        self.log(f"  peer ({name}), I/O-bound run {r + 1}: {n} runs in {m['makespan_s']:.2f} s")
