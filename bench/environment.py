"""What the numbers were measured on: the machine and the versions of everything."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

PACKAGES = (
    "celery",
    "kombu",
    "redis",
    "flask",
    "werkzeug",
    "gunicorn",
    "gevent",
    "sqlalchemy",
    "psycopg2-binary",
    "ollama",
    "httpx",
)


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in cpuinfo.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cpu": model,
        "cores": str(os.cpu_count()),
        "ram": f"{mem_kib / 2**20:.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python speed": (
            f"{python_speed():.1f} M iterations/s of a fixed pure-Python loop (best of 5), "
            "to compare runs on different machines: the per-agent CPU figures scale with it"
        ),
    }


def python_speed(n: int = 1_000_000) -> float:
    """Millions of iterations per second of a dict-and-arithmetic loop, best of 5."""

    def loop() -> int:
        seen: dict[int, int] = {}
        total = 0
        for i in range(n):
            seen[i & 255] = i
            total += len(seen)
        return total

    best = min(_timed(loop) for _ in range(5))
    return n / best / 1e6


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def load_average() -> str:
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name if name != "redis" else "redis-py"] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["jarvis-agents"] = importlib.metadata.version("jarvis-agents")
    return found
