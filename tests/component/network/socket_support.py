"""Real-socket helpers: a tiny threaded TCP server and a Selector event collector."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from strom.network.selector import Selector


class TinyServer:
    """Listens on 127.0.0.1; every accepted connection runs ``handler(sock)`` in its own thread."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.address = ("127.0.0.1", self.port)
        self.accepted: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except (OSError, EOFError):
            pass

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for conn in self.accepted:
            try:
                conn.close()
            except OSError:
                pass


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", read_exact(sock, 4))[0]
    return read_exact(sock, size)


class Events:
    """Everything a Selector reported over several polls."""

    def __init__(self, selector: Selector) -> None:
        self.selector = selector
        self.sends: list[Any] = []
        self.receives: list[tuple[Any, bytes]] = []
        self.connected: list[Any] = []
        self.disconnected: dict[Any, Any] = {}
        self.receives_per_poll: list[int] = []

    def poll(self, timeout_ms: int = 20) -> None:
        s = self.selector
        s.poll(timeout_ms)
        self.sends.extend(s.completed_sends)
        self.receives.extend((r.source, bytes(r.payload())) for r in s.completed_receives)
        self.receives_per_poll.append(len(s.completed_receives))
        self.connected.extend(s.connected)
        self.disconnected.update(s.disconnected)

    def until(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached before the deadline")
            self.poll()
