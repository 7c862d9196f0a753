"""An asyncio connection from this broker to another one, for inter-broker requests.

Kafka counterpart: the ``NetworkClient`` a broker keeps per peer (``ControllerChannelManager``'s request-send
threads, ``ReplicaFetcherBlockingSend``, ``BrokerToControllerChannelManager``). Requests go out one at a time,
in order; a failure closes the connection and the next request reconnects. The framing is the sans-I/O
``KafkaConnection``. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from strom.common.errors import KafkaConnectionError, ProtocolError
from strom.protocol.connection import KafkaConnection

__all__ = ["BrokerChannel"]

log = logging.getLogger("strom.server")


class BrokerChannel:
    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn: KafkaConnection | None = None
        self._lock = asyncio.Lock()

    def retarget(self, host: str, port: int) -> None:
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self.close()

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float | None = None) -> Any:
        """Send one request and return its decoded response; raises KafkaConnectionError on any failure."""
        async with self._lock:
            try:
                return await asyncio.wait_for(self._round_trip(api_key, version, body),
                                              self.timeout_s if timeout_s is None else timeout_s)
            except (OSError, TimeoutError, ProtocolError, asyncio.IncompleteReadError, KafkaConnectionError) as e:
                self.close()
                raise KafkaConnectionError(f"request to broker {self.host}:{self.port} failed: {e!r}") from None

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            self._conn = KafkaConnection("client", client_id=self.client_id)
        assert self._reader is not None and self._writer is not None and self._conn is not None
        _cid, data = self._conn.send_request(api_key, version, body)
        self._writer.write(data)
        await self._writer.drain()
        while True:
            chunk = await self._reader.read(1 << 20)
            if not chunk:
                raise KafkaConnectionError("connection closed by the peer")
            done = self._conn.receive_bytes(chunk)
            if done:
                return done[0][3]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._conn = None
