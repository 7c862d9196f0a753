"""One connection to one broker: the transport plus the receive and the send in progress.

Kafka counterpart: ``org.apache.kafka.common.network.KafkaChannel``: ready once the TCP connection is up, the
transport's TLS handshake is done (SSL, SASL_SSL) and the SASL authenticator has completed (SASL_*); until then
:meth:`prepare` drives the handshake and the authentication exchange. At most one send is in progress (``set_send`` raises
:class:`IllegalStateError` otherwise); a receive completes when a whole frame has been read; under receive
memory pressure the channel mutes itself (stops reading) until the pool has memory again.

Not thread-safe: I/O thread only.
"""

from __future__ import annotations

import enum
from typing import Any

from strom.common.errors import IllegalStateError
from strom.network.network_receive import NetworkReceive, NetworkSend
from strom.network.sasl_authenticator import SaslClientAuthenticator
from strom.network.transport import EVENT_READ, EVENT_WRITE, NONE_POOL, MemoryPool, Transport
from strom.protocol.connection import FrameDecoder

__all__ = ["KafkaChannel", "ChannelState", "ChannelMuteState"]


class ChannelState(enum.Enum):
    """Why a channel is not usable any more (Kafka's ``ChannelState.State``), reported with disconnects."""

    NOT_CONNECTED = "NOT_CONNECTED"
    READY = "READY"
    EXPIRED = "EXPIRED"
    FAILED_SEND = "FAILED_SEND"
    LOCAL_CLOSE = "LOCAL_CLOSE"
    CLOSED_BY_PEER = "CLOSED_BY_PEER"
    INVALID_RECEIVE = "INVALID_RECEIVE"
    AUTHENTICATION_FAILED = "AUTHENTICATION_FAILED"


class ChannelMuteState(enum.Enum):
    NOT_MUTED = "NOT_MUTED"
    MUTED = "MUTED"


class KafkaChannel:
    """A connection's channel (Kafka's ``KafkaChannel``). I/O thread only."""

    __slots__ = ("id", "transport", "max_receive_size", "memory_pool", "receive", "send", "mute_state",
                 "state", "remote_address", "_connected", "authenticator", "_auth_out", "_auth_receive",
                 "auth_error", "_decoder", "session_expires_ns")

    def __init__(self, id: Any, transport: Transport, max_receive_size: int = -1,
                 memory_pool: MemoryPool = NONE_POOL, remote_address: Any = None,
                 authenticator: SaslClientAuthenticator | None = None) -> None:
        self.id = id
        self.transport = transport
        self.max_receive_size = max_receive_size
        self.memory_pool = memory_pool
        self.receive: NetworkReceive | None = None
        self.send: NetworkSend | None = None
        self.mute_state = ChannelMuteState.NOT_MUTED
        self.state = ChannelState.NOT_CONNECTED
        self.remote_address = remote_address
        self._connected = False
        self.authenticator = authenticator
        self._auth_out: memoryview | None = None
        self._auth_receive: NetworkReceive | None = None
        self.auth_error: BaseException | None = None
        self._decoder = FrameDecoder(max_receive_size, memory_pool.try_allocate)
        # KIP-368: when the broker limits the SASL session, the time by which this connection must be replaced
        self.session_expires_ns: int | None = None

    # ------------------------------------------------------------------------------------ connect

    def finish_connect(self) -> bool:
        """Complete the TCP connect: stop watching for connect, start watching for reads."""
        if not self.transport.finish_connect():
            return False
        self._connected = True
        if not self.ready():
            return True  # prepare() sets the interest while it handshakes and authenticates
        self.state = ChannelState.READY
        ops = (EVENT_READ if self.mute_state is ChannelMuteState.NOT_MUTED else 0) | (
            EVENT_WRITE if self.send is not None else 0)
        self.transport.set_interest(ops)
        return True

    def mark_connected(self) -> None:
        """The socket connected immediately (no connect event will come)."""
        self.finish_connect()

    def is_connected(self) -> bool:
        return self._connected

    def ready(self) -> bool:
        """Connected, TLS handshake done and SASL authenticated (what applies to this channel)."""
        return self._connected and self.transport.ready() and (
            self.authenticator is None or self.authenticator.complete)

    def prepare(self) -> bool:
        """Drive the TLS handshake, then the SASL exchange, as far as the socket allows; ``True`` once ready.
        Raises ``SslAuthenticationError`` / ``SaslAuthenticationError`` on refusal, ``EOFError`` / ``OSError`` when
        the connection drops."""
        transport = self.transport
        if not transport.ready() and not transport.handshake():
            return False
        auth = self.authenticator
        while auth is not None and not auth.complete:
            if self._auth_out is None:
                data = auth.next_send()
                if data is not None:
                    self._auth_out = memoryview(data)
            while self._auth_out is not None:
                n = transport.write([self._auth_out])
                if n <= 0:
                    transport.set_interest(EVENT_WRITE)
                    return False
                rest = self._auth_out[n:]
                self._auth_out = rest if len(rest) else None
            receive = self._auth_receive
            if receive is None:
                receive = self._auth_receive = NetworkReceive(self.max_receive_size, self.id)
            receive.read_from(transport)
            if not receive.complete():
                transport.set_interest(EVENT_READ)
                return False
            self._auth_receive = None
            auth.receive(receive.payload())
        self.state = ChannelState.READY
        transport.set_interest((EVENT_READ if self.mute_state is ChannelMuteState.NOT_MUTED else 0)
                               | (EVENT_WRITE if self.send is not None else 0))
        return True

    # --------------------------------------------------------------------------------------- send

    def set_send(self, send: NetworkSend) -> None:
        if self.send is not None:
            raise IllegalStateError(
                "Attempt to begin a send operation with prior send operation still in progress, "
                f"connection id is {self.id}")
        self.send = send

    def write(self) -> NetworkSend | None:
        """Write the pending send; returns it once completely written. Raises ``OSError`` on failure."""
        send = self.send
        if send is None:
            return None
        send.write_to(self.transport)
        if send.completed():
            self.send = None
            if self.transport.interest() & EVENT_WRITE:
                self.transport.remove_interest(EVENT_WRITE)
            return send
        self.transport.add_interest(EVENT_WRITE)  # the rest goes when the socket is writable again
        return None

    def has_send(self) -> bool:
        return self.send is not None

    # --------------------------------------------------------------------------------------- read

    def read(self) -> NetworkReceive | None:
        """Read from the socket; a completed frame, or ``None`` (partial frame / no data)."""
        receive = self.receive
        if receive is None:
            receive = self.receive = NetworkReceive(self.max_receive_size, self.id, self.memory_pool, self._decoder)
        receive.read_from(self.transport)
        if receive.complete():
            self.receive = None
            return receive
        if receive.required_memory_amount_known() and not receive.memory_allocated() and self.is_in_mutable_state():
            self.mute()  # the pool is out of memory
        return None

    def has_bytes_buffered(self) -> bool:
        """Bytes read from the socket but not yet handed out (decrypted TLS data): readiness events miss them."""
        return self.transport.has_bytes_buffered()

    # ------------------------------------------------------------------------------------ muting

    def mute(self) -> None:
        if self.mute_state is ChannelMuteState.NOT_MUTED:
            if self._connected:
                self.transport.remove_interest(EVENT_READ)
            self.mute_state = ChannelMuteState.MUTED

    def maybe_unmute(self) -> bool:
        """Unmute; ``True`` if the channel is now unmuted."""
        if self.mute_state is ChannelMuteState.MUTED:
            if self._connected:
                self.transport.add_interest(EVENT_READ)
            self.mute_state = ChannelMuteState.NOT_MUTED
        return self.mute_state is ChannelMuteState.NOT_MUTED

    def is_muted(self) -> bool:
        return self.mute_state is ChannelMuteState.MUTED

    def is_in_mutable_state(self) -> bool:
        # A channel with a receive in progress but without memory must stop reading; one with nothing
        # in progress may always be muted.
        return self._connected

    # ------------------------------------------------------------------------------------- close

    def close(self) -> None:
        if self.receive is not None:
            self.receive.release()
            self.receive = None
        self.send = None
        self.transport.close()

    def __repr__(self) -> str:
        return f"KafkaChannel(id={self.id}, state={self.state.name}, muted={self.is_muted()})"
