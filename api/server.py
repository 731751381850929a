"""`jarvis-agents api`: the API under gunicorn with one gevent worker.

Why gevent: an SSE stream holds its connection for minutes while doing nothing,
and a thread per stream (Werkzeug, gthread) tops out long before a thousand.
Greenlets cost kilobytes, so one process holds thousands of streams; psycopg2 and
redis-py yield to the loop while they wait (psycopg2 through psycogreen's wait
callback). The same worker class runs in production through `api.gunicorn_conf`.
"""

from __future__ import annotations

import gc
import html
import json
import logging
import re
import socket
import sys
from typing import Any

from gunicorn import util
from gunicorn.app.base import BaseApplication
from gunicorn.workers.ggevent import GeventWorker
from psycogreen.gevent import patch_psycopg

from jarvis_agents.components import check_dependencies, check_port, freeze_start_up_objects
from jarvis_agents.config import Settings
from jarvis_agents.logs import configure_logging

WORKER_CLASS = "api.server.JarvisWorker"


def options(bind: str) -> dict[str, Any]:
    """The gunicorn settings, shared with `api.gunicorn_conf` for production."""
    return {
        "bind": [bind],
        "worker_class": WORKER_CLASS,
        # One process: with the clients, PostgreSQL and Redis on the same cores, two
        # workers answered creates slower and spent more CPU per create (BENCHMARKS.md,
        # notes). Each worker would also hold its own database pool and event hub.
        "workers": 1,
        "worker_connections": 2000,
        # An SSE stream is a long request: no worker timeout may kill it.
        "timeout": 0,
        "graceful_timeout": 10,
        "keepalive": 5,
        "backlog": 2048,
        "limit_request_line": 8190,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "warning",
        "post_worker_init": ready,
        "worker_exit": close_app,
        # gunicorn ≥ 25.1 opens a control socket at one fixed path per user, which
        # several API processes on one machine would fight over.
        "control_socket_disable": True,
    }


def serve(settings: Settings, *, host: str, port: int) -> None:
    """Run the API in the foreground until Ctrl-C or SIGTERM."""
    # Libraries' warnings; our own notes too (hub reconnects, hang-ups that cancel).
    configure_logging(json_lines=settings.log_json, level=logging.WARNING)
    for name in ("api", "jarvis_agents"):
        logging.getLogger(name).setLevel(logging.INFO)
    check_dependencies(settings)
    check_port(host, port)
    display_host = f"[{host}]" if ":" in host else host
    bind = f"{display_host}:{port}"

    def build() -> Any:
        from api import create_app

        return create_app(settings)

    JarvisApplication(build, {**options(bind), "jarvis_url": f"http://{bind}"}).run()


class JarvisApplication(BaseApplication):
    """gunicorn driven from code: its settings, our app factory."""

    def __init__(self, factory: Any, settings: dict[str, Any]) -> None:
        self.factory = factory
        self.settings_ = dict(settings)
        self.url = self.settings_.pop("jarvis_url")
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.settings_.items():
            if key in self.cfg.settings:  # older gunicorns lack some settings
                self.cfg.set(key, value)
        self.cfg.set("proc_name", "jarvis-agents-api")
        self.cfg.jarvis_url = self.url  # type: ignore[attr-defined]

    def load(self) -> Any:
        # Called in the worker, after gevent has patched the standard library.
        return self.factory()


class JarvisWorker(GeventWorker):
    """gunicorn's gevent worker, plus TCP_NODELAY, green psycopg2 and JSON errors."""

    def patch(self) -> None:
        import warnings

        from gevent.monkey import MonkeyPatchWarning

        with warnings.catch_warnings():
            # ssl was imported by the master (click, httpx); we use no TLS before the fork.
            warnings.simplefilter("ignore", MonkeyPatchWarning)
            super().patch()
        # psycopg2 waits on the gevent loop instead of blocking the process.
        patch_psycopg()

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        # Nagle's algorithm holds small writes (an SSE event, a small JSON answer)
        # for ~40 ms waiting for the client's delayed ACK. gunicorn sets it on the
        # listening socket, which Linux passes on; other systems may not.
        if client.family in (socket.AF_INET, socket.AF_INET6):
            try:
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        super().handle(listener, client, addr)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """The errors gunicorn answers itself go out in the contract's JSON, not its HTML page.

        A request gunicorn cannot parse (a malformed request line, an unknown HTTP
        version, a URL or a header over its limits, too many headers, a bad header
        name, a transfer coding it does not support) never reaches the app, and no
        setting changes the page gunicorn answers it with (as of gunicorn 27).
        gunicorn still decides, here as ever, the status, the log line and the
        closing; only the page it writes is caught (`ErrorPage`) and sent as JSON.
        Each kind is sent for real by tests/integration/test_api_errors.py.
        """
        page = ErrorPage(client)
        super().handle_error(req, page, addr, exc)
        try:
            util.write_nonblock(client, page.as_json())
        except Exception as error:  # noqa: BLE001 - as gunicorn: the client may be gone
            self.log.debug("Failed to send error message: %s", error)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        import gevent

        # Open streams would hold the graceful shutdown for its whole timeout.
        gevent.spawn(_end_streams, self)


def ready(worker: Any) -> None:
    """gunicorn hook: the app is loaded and the socket bound."""
    from api.sse import server_frames_chunks

    context = _context(worker)
    if context is not None:
        # How this worker frames a streamed body, from its settings (api.sse).
        context.server_chunks = server_frames_chunks(
            getattr(worker.cfg, "protocol", "http"), tls=worker.cfg.is_ssl)
    freeze_start_up_objects()
    announce(worker)


def announce(worker: Any) -> None:
    """gunicorn hook: the app is loaded and the socket bound — say so (tests wait for it)."""
    url = getattr(worker.cfg, "jarvis_url", None)
    if url is None:
        host, port = worker.sockets[0].getsockname()[:2]
        url = f"http://{host}:{port}"
    print(f"API listening on {url}", flush=True)


def close_app(server: Any, worker: Any) -> None:
    """gunicorn hook: the worker is exiting."""
    gc.unfreeze()  # see freeze_start_up_objects
    context = _context(worker)
    if context is not None:
        context.close()


def _end_streams(worker: Any) -> None:
    context = _context(worker)
    if context is not None:
        context.end_streams()


def _context(worker: Any) -> Any:
    app = getattr(worker, "wsgi", None)
    return getattr(app, "extensions", {}).get("jarvis")


class ErrorPage:
    """The client's socket as gunicorn's error writer sees it: what it writes is kept,
    for `as_json` to send instead; everything else is the socket's."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.written = b""

    def gettimeout(self) -> float:
        return 0.0  # nothing to switch: the page is only kept

    def sendall(self, data: bytes) -> None:
        self.written += data

    def send(self, data: bytes) -> int:
        self.written += data
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def as_json(self) -> bytes:
        """The page as the contract's JSON error, its status kept; the page as it was
        if it is not an HTTP response (never so far)."""
        from api.errors import HTTP_ERRORS, snake_case  # in the worker: Flask after gevent

        head, _, body = self.written.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        match = re.fullmatch(r"HTTP/1\.[01] (\d{3}) (.*)", status_line)
        if match is None:
            return self.written
        status_int, reason = int(match[1]), match[2]
        # The page's detail, such as "Invalid HTTP Version 'HTTP/9.9'", after its heading.
        detail = re.search(rb"</h1>(.*)</body>", body, re.DOTALL)
        mesg = html.unescape(detail[1].decode("latin-1")).strip() if detail else ""
        code, sentence = HTTP_ERRORS.get(status_int, (snake_case(reason) or "bad_request", reason))
        message = f"{sentence} ({mesg})" if mesg else sentence
        answer = json.dumps({"error": {"code": code, "message": message}}).encode()
        return (
            f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(answer)}\r\n\r\n"
        ).encode("latin-1") + answer


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `jarvis-agents api` instead")
