"""A TCP relay in front of a remote agent (tests/support/remote_agents.py) that a test can
make refuse every connection, as an agent that is down, hold the answers to
`SendMessage` or cut them (the remote has the message; its sender does not know), or hold
`CancelTask` requests (the remote never has them; their sender waits)."""

from __future__ import annotations

import contextlib
import socket
import threading


class FlakyRelay:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.refusing = threading.Event()  # set: every connection is closed at once
        self.sends_answered = threading.Event()  # clear: SendMessage's answers wait
        self.sends_answered.set()
        self.sends_seen = 0  # requests that named SendMessage, so far
        self.send_answers_to_cut = 0  # this many SendMessage answers: the connection is cut
        self.holding_cancels = threading.Event()  # set: CancelTask requests go no further
        self.cancels_held = 0  # CancelTask requests held, so far
        self._released = threading.Event()  # set at close: held requests' connections end
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            sending = threading.Event()  # this connection carried a SendMessage
            threading.Thread(target=self._requests, args=(client, upstream, sending),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, sending),
                             daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket, sending: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if b'"SendMessage"' in data:
                    with self._lock:
                        self.sends_seen += 1
                    sending.set()
                if b'"CancelTask"' in data and self.holding_cancels.is_set():
                    with self._lock:
                        self.cancels_held += 1
                    self._released.wait(60)
                    break
                sink.sendall(data)
        _close(source, sink)

    def _answers(self, source: socket.socket, sink: socket.socket, sending: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if sending.is_set():
                    self.sends_answered.wait(60)
                    with self._lock:
                        cut, self.send_answers_to_cut = (self.send_answers_to_cut > 0,
                                                         max(0, self.send_answers_to_cut - 1))
                    if cut:
                        break  # the remote has the message; its sender hears nothing back
                sink.sendall(data)
        _close(source, sink)

    def close(self) -> None:
        self.listener.close()
        self.sends_answered.set()
        self._released.set()


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
