"""A forward proxy that only tunnels (HTTP CONNECT), as corporate proxies do for HTTPS:
it reads the CONNECT request, opens the connection it names, answers 200, then copies
bytes both ways until either side closes. It records each CONNECT request line."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ConnectProxy:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.tunnels: list[str] = []  # "CONNECT host:port HTTP/1.1", one per tunnel
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                data = client.recv(4096)
                if not data:
                    return
                head += data
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, authority, _ = request_line.split(" ", 2)
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.tunnels.append(request_line)
            host, _, port = authority.rpartition(":")
            try:
                upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            with upstream:
                upstream.settimeout(None)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
                back.start()
                _copy(client, upstream)
                back.join(5)

    def close(self) -> None:
        self.listener.close()


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@contextmanager
def connect_proxy() -> Iterator[ConnectProxy]:
    proxy = ConnectProxy()
    try:
        yield proxy
    finally:
        proxy.close()
