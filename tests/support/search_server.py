"""A DuckDuckGo look-alike for the `search` tool: a real HTTP server that records the
searches it is asked and answers each with `{"Answer": "42 is the answer"}`, once its
`open` Event is set (it is at first; clear it to hold the answers back).

    with SearchServer() as search:
        env = {"JARVIS_SEARCH_BACKEND": "duckduckgo", "JARVIS_DUCKDUCKGO_URL": search.url}
        ...
        assert len(search.queries) == 1
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

ANSWER = json.dumps({"Answer": "42 is the answer"}).encode()


class SearchServer:
    """Counts the searches it answers; `open` holds its answers back while clear."""

    def __init__(self) -> None:
        self.queries: list[str] = []  # the path of each request, in arrival order
        self.open = threading.Event()
        self.open.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.queries.append(self.path)
                owner.open.wait(60)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.open.set()  # no request left held: server_close() waits for their threads
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
