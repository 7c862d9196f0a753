"""A blocking one-connection client that sends hand-built requests (broker tests, fuzzing, the CLI's probes)."""

from __future__ import annotations

import socket
from typing import Any

from strom.protocol.connection import KafkaConnection

__all__ = ["RawClient"]


class RawClient:
    """Send a request object, get the decoded response object. Not thread-safe."""

    def __init__(self, bootstrap: str, client_id: str = "strom-raw", timeout: float = 30.0,
                 source_host: str | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        # ``source_host``: connect from this local address (e.g. 127.0.0.2, so a broker sees another client IP)
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout,
                                             source_address=(source_host, 0) if source_host else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = KafkaConnection("client", client_id=client_id)
        self._pending: list[Any] = []

    def send(self, api_key: int, version: int, body: Any, expect_response: bool = True) -> int:
        cid, data = self.conn.send_request(api_key, version, body, expect_response=expect_response)
        self.sock.sendall(data)
        return cid

    def receive(self) -> Any:
        while not self._pending:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            self._pending.extend(self.conn.receive_bytes(chunk))
        return self._pending.pop(0)[3]

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (recv returns EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
