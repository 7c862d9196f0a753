"""An asyncio connection from this broker to another one, for inter-broker requests.

Kafka counterpart: the ``NetworkClient`` a broker keeps per peer (``ControllerChannelManager``'s request-send
threads, ``ReplicaFetcherBlockingSend``, ``BrokerToControllerChannelManager``). Requests go out one at a time,
in order; a failure closes the connection and the next request reconnects. The framing is the sans-I/O
``KafkaConnection``. With an :class:`InterBrokerSecurity` the connection is TLS and/or authenticates with SASL
(SaslHandshake + SaslAuthenticate, the client authenticator the clients use) before its first request, and is
made again before the broker's session lifetime (KIP-368) runs out. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from typing import TYPE_CHECKING, Any

from strom.common.errors import KafkaConnectionError, ProtocolError
from strom.network.sasl_authenticator import SaslClientAuthenticator
from strom.protocol.connection import KafkaConnection
from strom.security.sasl import AuthenticationError

if TYPE_CHECKING:
    from strom.server.metadata_cache import MetadataCache
    from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["BrokerChannel", "BrokerChannels"]

log = logging.getLogger("strom.server")


class BrokerChannel:
    def __init__(self, host: str, port: int, client_id: str, *, timeout_s: float = 30.0,
                 security: InterBrokerSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._reconnect_at: float | None = None  # the SASL session's re-authentication time (loop clock)
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
            except AuthenticationError as e:
                self.close()
                log.error("inter-broker connection to %s:%d: %s", self.host, self.port, e)
                raise KafkaConnectionError(f"authentication with broker {self.host}:{self.port} failed: {e}") \
                    from None
            except ssl.SSLError as e:  # the peer's certificate refused, or ours
                self.close()
                log.error("inter-broker TLS connection to %s:%d failed: %s", self.host, self.port, e)
                raise KafkaConnectionError(f"TLS with broker {self.host}:{self.port} failed: {e}") from None
            except (OSError, TimeoutError, ProtocolError, asyncio.IncompleteReadError, KafkaConnectionError) as e:
                self.close()
                raise KafkaConnectionError(f"request to broker {self.host}:{self.port} failed: {e!r}") from None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        sec = self.security
        ctx = sec.ssl_context if sec is not None else None
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, ssl=ctx)
        self._reconnect_at = None
        if sec is not None and sec.uses_sasl:
            auth = SaslClientAuthenticator(sec.new_sasl_client(), self.client_id, f"{self.host}:{self.port}")
            while not auth.complete:
                data = auth.next_send()
                if data:
                    self._writer.write(data)
                    await self._writer.drain()
                size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                auth.receive(memoryview(await self._reader.readexactly(size)))
            if auth.session_lifetime_ms > 0:  # reconnect (and so re-authenticate) a little before it ends
                self._reconnect_at = loop.time() + auth.session_lifetime_ms * 0.85 / 1000
        self._conn = KafkaConnection("client", client_id=self.client_id)

    async def _round_trip(self, api_key: int, version: int, body: Any) -> Any:
        if self._reconnect_at is not None and asyncio.get_running_loop().time() >= self._reconnect_at:
            self.close()
        if self._writer is None or self._writer.is_closing():
            await self._connect()
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
        self._reconnect_at = None


class BrokerChannels:
    """One :class:`BrokerChannel` per peer broker, found by node id in this broker's metadata on ``listener`` (the
    inter-broker listener); a peer that moved to another address is reconnected there. Event loop only."""

    def __init__(self, metadata: MetadataCache, listener: str | None, client_id: str, *, timeout_s: float = 30.0,
                 security: InterBrokerSecurity | None = None) -> None:
        self.metadata = metadata
        self.listener = listener
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._channels: dict[int, BrokerChannel] = {}

    def get(self, node_id: int) -> BrokerChannel | None:
        """The channel to ``node_id``; None when the metadata knows no such broker (or no such listener of it)."""
        broker = self.metadata.broker(node_id)
        ep = broker.endpoint(self.listener) if broker is not None else None
        if ep is None:
            return None
        ch = self._channels.get(node_id)
        if ch is None:
            ch = self._channels[node_id] = BrokerChannel(ep[0], ep[1], self.client_id, timeout_s=self.timeout_s,
                                                         security=self.security)
        else:
            ch.retarget(ep[0], ep[1])
        return ch

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
