"""Child processes of the harness, and what /proc says about them (CPU, memory).

Every server the benchmark drives runs as its own process group, started here and
stopped here by its process id; its output goes to a log file kept for diagnosis.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class StartupError(RuntimeError):
    """Raised when a server the benchmark needs did not come up."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    """A server started by the harness, in its own session so it can be stopped whole."""

    def __init__(
        self,
        name: str,
        args: list[str],
        *,
        env: dict[str, str],
        log_dir: Path,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        restart = 1
        while self.log_path.exists():  # a restarted server gets a log of its own
            restart += 1
            self.log_path = log_dir / f"{name}-{restart}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            env=env,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, *, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if self.proc.poll() is not None:
                raise StartupError(
                    f"{self.name} exited with code {self.proc.returncode} before it said "
                    f"{text!r}; see {self.log_path}:\n{self.output()[-2000:]}"
                )
            time.sleep(0.05)
        raise StartupError(
            f"{self.name} did not say {text!r} within {timeout_s:g} s; see {self.log_path}"
        )

    def stop(self, *, timeout_s: float = 20.0) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the group we created: the process and its children
        except ProcessLookupError:
            pass

    # --- what the kernel says about it -----------------------------------------------

    def tree(self) -> list[int]:
        """This process and all its descendants (the worker supervisor has a child)."""
        return process_tree(self.pid)

    def cpu_s(self) -> float:
        """User + system CPU seconds used so far by the whole tree."""
        return sum(cpu_seconds(pid) for pid in self.tree())


def process_tree(pid: int) -> list[int]:
    found = [pid]
    for child in children(pid):
        found.extend(process_tree(child))
    return found


def children(pid: int) -> list[int]:
    pids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            pids.extend(int(p) for p in text.split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return pids


def cpu_seconds(pid: int) -> float:
    try:
        fields = _stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # After the command name: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds of a forking server: the process whose child `pid` is, its reaped
    children (cutime, cstime) and its live children, together.

    What PostgreSQL has spent: the postmaster's live backends and background
    processes plus every backend that has exited since it started. Summing only
    the live backends of one database went down whenever a pooled connection
    closed between two samples (negative CPU per agent).
    """
    try:
        parent = int(_stat(pid)[1])
        live_s = sum(cpu_seconds(child) for child in children(parent))
        # utime, stime, cutime, cstime: fields 14-17 (1-based), read after the
        # children, so that one exiting meanwhile is counted in cutime.
        fields = _stat(parent)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return live_s + sum(int(v) for v in fields[11:15]) / CLOCK_TICKS


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state first, then ppid)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (from /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLOCK_TICKS
