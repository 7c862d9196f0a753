"""Non-blocking multi-connection I/O for the clients: Kafka's ``Selector`` over Python's ``selectors``.

Kafka counterpart: ``org.apache.kafka.common.network.Selector`` (2.4 form, SPEC §10.5-10.8). One call to
:meth:`Selector.poll` completes connections, writes pending sends (partial writes continue in later polls),
reads whole size-prefixed frames (partial reads are reassembled across polls; several frames read at once are
*staged* and handed out one per channel per poll, in order), closes the least recently used connection idle for
longer than ``connections.max.idle.ms`` and reports what happened in :attr:`completed_sends`,
:attr:`completed_receives`, :attr:`connected` and :attr:`disconnected` (id → :class:`ChannelState`).

Sockets are non-blocking with ``TCP_NODELAY`` and ``SO_KEEPALIVE``; ``SO_SNDBUF``/``SO_RCVBUF`` are set unless
``-1`` (use the OS default). A send handed to :meth:`send` is first tried at the start of the next poll, so a
request usually leaves without waiting for a writability event (Kafka waits for ``OP_WRITE``; the order of
events is the same). :meth:`wakeup` (a ``socketpair``) interrupts a blocked poll.

Every poll, completed send and receive, connection and close is recorded in Kafka's selector metrics
(:class:`~strom.network.selector_metrics.SelectorMetrics`, into the owner's registry when one is given).

Threading: I/O thread only, except :meth:`wakeup`, which any thread may call.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import selectors
import socket
from collections import OrderedDict, deque
from typing import Any

from strom.common.errors import IllegalStateError
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import Metrics
from strom.network.channel_builder import PLAINTEXT_CHANNELS, ClientChannelBuilder
from strom.network.errors import InvalidReceiveError
from strom.network.kafka_channel import ChannelState, KafkaChannel
from strom.network.network_receive import UNLIMITED, NetworkReceive, NetworkSend
from strom.network.selector_metrics import SelectorMetrics
from strom.network.transport import EVENT_READ, EVENT_WRITE, NONE_POOL, MemoryPool
from strom.security.sasl import AuthenticationError

__all__ = ["Selector", "IdleExpiryManager", "USE_DEFAULT_BUFFER_SIZE", "NO_IDLE_TIMEOUT_MS"]

log = logging.getLogger(__name__)

USE_DEFAULT_BUFFER_SIZE = -1
NO_IDLE_TIMEOUT_MS = -1
_MAX_SELECT_MS = 24 * 3600 * 1000


class IdleExpiryManager:
    """Least-recently-used order of connections with their last activity time (Kafka's
    ``Selector.IdleExpiryManager``). I/O thread only."""

    __slots__ = ("_lru", "max_idle_ns", "_next_check_ns")

    def __init__(self, max_idle_ms: int, now_ns: int) -> None:
        self._lru: OrderedDict[Any, int] = OrderedDict()
        self.max_idle_ns = max_idle_ms * 1_000_000
        self._next_check_ns = now_ns + self.max_idle_ns

    def update(self, connection_id: Any, now_ns: int) -> None:
        lru = self._lru
        lru[connection_id] = now_ns
        lru.move_to_end(connection_id)

    def poll_expired_connection(self, now_ns: int) -> Any:
        """The id of the oldest connection if it has been idle too long, else ``None``."""
        if now_ns < self._next_check_ns or not self._lru:
            return None
        connection_id, last = next(iter(self._lru.items()))
        if now_ns > last + self.max_idle_ns:
            return connection_id
        self._next_check_ns = last + self.max_idle_ns
        return None

    def remove(self, connection_id: Any) -> None:
        self._lru.pop(connection_id, None)


class Selector:
    """Kafka's ``Selector``: many non-blocking connections, one ``poll`` at a time. I/O thread only
    (``wakeup`` is thread-safe)."""

    def __init__(self, connection_max_idle_ms: int = NO_IDLE_TIMEOUT_MS, time: Time = SYSTEM_TIME, *,
                 max_receive_size: int = UNLIMITED, memory_pool: MemoryPool = NONE_POOL,
                 log_context: str = "", metrics: Metrics | None = None, metric_grp_prefix: str = "client",
                 channel_builder: ClientChannelBuilder = PLAINTEXT_CHANNELS) -> None:
        self._time = time
        self._channel_builder = channel_builder
        self._sel = selectors.DefaultSelector()
        self._max_receive_size = max_receive_size
        self._memory_pool = memory_pool
        self._log_context = log_context
        self._channels: dict[Any, KafkaChannel] = {}
        self._closing: dict[Any, tuple[KafkaChannel, ChannelState]] = {}
        self._explicitly_muted: set[KafkaChannel] = set()
        self._sessions: dict[Any, KafkaChannel] = {}  # channels with a limited SASL session (KIP-368)
        self._staged: dict[KafkaChannel, deque[NetworkReceive]] = {}
        self._immediately_connected: list[KafkaChannel] = []
        self._pending_writes: list[KafkaChannel] = []
        self._failed_sends: list[Any] = []
        self.completed_sends: list[NetworkSend] = []
        self.completed_receives: list[NetworkReceive] = []
        self.connected: list[Any] = []
        self.disconnected: dict[Any, ChannelState] = {}
        # Why connections in ``disconnected`` failed authentication (TLS or SASL), for this poll.
        self.authentication_errors: dict[Any, BaseException] = {}
        self._out_of_memory = False
        self._idle = (IdleExpiryManager(connection_max_idle_ms, time.nanoseconds())
                      if connection_max_idle_ms != NO_IDLE_TIMEOUT_MS else None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, EVENT_READ, None)
        self._wakeup_pending = False
        self._closed = False
        # Kafka's SelectorMetrics (a private registry when the owner passes none).
        self.sensors = SelectorMetrics(metrics if metrics is not None else Metrics(time=time), metric_grp_prefix,
                                       self.connection_count)
        self._now_ms = time.milliseconds()

    # ------------------------------------------------------------------------------------- connect

    def connect(self, id: Any, address: tuple[Any, ...], send_buffer_size: int = USE_DEFAULT_BUFFER_SIZE,
                receive_buffer_size: int = USE_DEFAULT_BUFFER_SIZE, family: int = socket.AF_INET,
                host: str | None = None) -> None:
        """Begin a non-blocking connection to ``address`` (already resolved) for ``id``.

        Raises :class:`IllegalStateError` if ``id`` has a connection and ``OSError`` if the connect fails at
        once; otherwise the outcome shows up in :attr:`connected` / :attr:`disconnected` of a later poll.
        """
        if id in self._channels or id in self._closing:
            raise IllegalStateError(f"There is already a connection for id {id}")
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if send_buffer_size != USE_DEFAULT_BUFFER_SIZE:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_size)
            if receive_buffer_size != USE_DEFAULT_BUFFER_SIZE:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_size)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = sock.connect_ex(address)
            if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                raise OSError(err, f"Connection to {address} failed: {os.strerror(err)}")
        except OSError:
            sock.close()
            raise
        channel = KafkaChannel(id, None, self._max_receive_size, self._memory_pool, address)  # type: ignore[arg-type]
        try:
            channel.transport, channel.authenticator = self._channel_builder.build(
                id, sock, self._sel, EVENT_WRITE, channel, host if host is not None else str(address[0]))
        except Exception:
            sock.close()
            raise
        self._channels[id] = channel
        if self._idle is not None:
            self._idle.update(id, self._time.nanoseconds())
        if err == 0:
            log.debug("%sImmediately connected to node %s", self._log_context, id)
            channel.transport.set_interest(0)
            self._immediately_connected.append(channel)

    # ---------------------------------------------------------------------------------------- send

    def send(self, send: NetworkSend) -> None:
        """Queue ``send`` on its destination's channel; it is written during the following polls."""
        connection_id = send.destination
        channel = self._channels.get(connection_id)
        if channel is None:
            if connection_id in self._closing:
                self._failed_sends.append(connection_id)  # reported as disconnected by the next poll
                return
            raise IllegalStateError(
                f"Attempt to retrieve channel for which there is no connection. Connection id {connection_id} "
                f"existing connections {list(self._channels)}")
        try:
            channel.set_send(send)
        except Exception:
            channel.state = ChannelState.FAILED_SEND
            self._failed_sends.append(connection_id)
            self._close_channel(channel, notify=False)
            raise
        if channel.ready():
            self._pending_writes.append(channel)

    # ---------------------------------------------------------------------------------------- poll

    def _clear(self) -> None:
        self.completed_sends = []
        self.completed_receives = []
        self.connected = []
        self.disconnected = {}
        if self.authentication_errors:
            self.authentication_errors = {}
        if self._failed_sends:
            for connection_id in self._failed_sends:
                self.disconnected[connection_id] = ChannelState.FAILED_SEND
            self._failed_sends = []

    def poll(self, timeout_ms: int) -> None:
        """Do whatever I/O can be done, waiting at most ``timeout_ms`` (0 = do not block) for some."""
        if timeout_ms < 0:
            raise ValueError("timeout should be >= 0")
        self._clear()
        if self._staged or self._immediately_connected or self._closing:
            timeout_ms = 0
        if self._out_of_memory and not self._memory_pool.is_out_of_memory():
            log.debug("%sNo longer low on memory - unmuting incoming sockets", self._log_context)
            for channel in self._channels.values():
                if channel.is_in_mutable_state() and channel not in self._explicitly_muted:
                    channel.maybe_unmute()
            self._out_of_memory = False
        time = self._time
        self._now_ms = time.milliseconds()
        if self._pending_writes:
            pending, self._pending_writes = self._pending_writes, []
            now_ns = time.nanoseconds()
            for channel in pending:
                if self._channels.get(channel.id) is channel and channel.send is not None:
                    self._poll_channel(channel, EVENT_WRITE, False, now_ns)
            if self.completed_sends or self.disconnected:
                timeout_ms = 0
        start = time.nanoseconds()
        events = self._sel.select(min(timeout_ms, _MAX_SELECT_MS) / 1000.0 if timeout_ms > 0 else 0)
        end_select = time.nanoseconds()
        for key, mask in events:
            channel = key.data
            if channel is None:
                self._drain_wakeup()
            else:
                self._poll_channel(channel, mask, False, end_select)
        if self._immediately_connected:
            immediate, self._immediately_connected = self._immediately_connected, []
            for channel in immediate:
                if self._channels.get(channel.id) is channel:
                    self._poll_channel(channel, 0, True, end_select)
        self._maybe_close_oldest_connection(end_select)
        self._add_to_completed_receives()
        self.sensors.record_select(end_select - start, time.nanoseconds() - end_select, self._now_ms)

    def _poll_channel(self, channel: KafkaChannel, mask: int, immediately_connected: bool, now_ns: int) -> None:
        if self._idle is not None:
            self._idle.update(channel.id, now_ns)
        try:
            if immediately_connected or not channel.is_connected():
                if not channel.finish_connect():
                    return
                self.connected.append(channel.id)
                self.sensors.record_connection_created(self._now_ms)
                log.debug("%sCreated socket to node %s", self._log_context, channel.id)
                if channel.send is not None:
                    mask |= EVENT_WRITE
            if not channel.ready():
                if not channel.prepare():
                    return
                auth = channel.authenticator
                if auth is not None and auth.session_lifetime_ms > 0:
                    # KIP-368: replace the connection at 85-95 % of the session the broker granted (Kafka's
                    # clients re-authenticate at that point; reconnecting authenticates afresh).
                    channel.session_expires_ns = now_ns + int(
                        auth.session_lifetime_ms * 1_000_000 * random.uniform(0.85, 0.95))
                    self._sessions[channel.id] = channel
                if channel.send is not None:
                    mask |= EVENT_WRITE
                mask |= EVENT_READ  # the broker may have answered already
            if mask & EVENT_READ and channel not in self._staged and channel not in self._explicitly_muted:
                self._attempt_read(channel)
            if mask & EVENT_WRITE and channel.send is not None:
                send = channel.write()
                if send is not None:
                    self.completed_sends.append(send)
                    self.sensors.record_completed_send(channel.id, send.size, self._now_ms)
        except AuthenticationError as e:
            log.error("%sAuthentication with node %s failed: %s", self._log_context, channel.id, e)
            channel.auth_error = e
            self.authentication_errors[channel.id] = e
            self._close_with(channel, ChannelState.AUTHENTICATION_FAILED)
        except EOFError:
            self._close_with(channel, ChannelState.CLOSED_BY_PEER if channel.is_connected()
                             else ChannelState.NOT_CONNECTED)
        except InvalidReceiveError as e:
            log.warning("%sInvalid receive from node %s: %s", self._log_context, channel.id, e)
            self._close_with(channel, ChannelState.INVALID_RECEIVE)
        except OSError as e:
            state = ChannelState.NOT_CONNECTED if not channel.is_connected() else ChannelState.CLOSED_BY_PEER
            log.debug("%sConnection with node %s disconnected: %s", self._log_context, channel.id, e)
            self._close_with(channel, state)

    def _attempt_read(self, channel: KafkaChannel) -> None:
        while True:
            receive = channel.read()
            if receive is None:
                break
            staged = self._staged.get(channel)
            if staged is None:
                staged = self._staged[channel] = deque()
            staged.append(receive)
        if channel.is_muted():
            self._out_of_memory = True

    def _add_to_completed_receives(self) -> None:
        if self._staged:
            for channel in list(self._staged):
                if channel in self._explicitly_muted:
                    continue
                staged = self._staged[channel]
                receive = staged.popleft()
                self.completed_receives.append(receive)
                self.sensors.record_completed_receive(channel.id, receive.size(), self._now_ms)
                if not staged:
                    del self._staged[channel]
        if self._closing:
            for connection_id, (channel, state) in list(self._closing.items()):
                if channel not in self._staged:
                    del self._closing[connection_id]
                    self.disconnected[connection_id] = state

    def _close_with(self, channel: KafkaChannel, state: ChannelState) -> None:
        """Close after an error; the disconnect is reported once staged receives have been delivered."""
        channel.state = state
        self._close_channel(channel, notify=True, keep_staged=True)

    def _close_channel(self, channel: KafkaChannel, notify: bool, keep_staged: bool = False) -> None:
        connection_id = channel.id
        if self._channels.get(connection_id) is channel:
            del self._channels[connection_id]
        if self._sessions.get(connection_id) is channel:
            del self._sessions[connection_id]
        self._explicitly_muted.discard(channel)
        # A channel that connected and failed (authentication) in the same poll is not reported as connected:
        # the network client would otherwise process the disconnect first and then mark the node connected.
        if connection_id in self.connected:
            self.connected.remove(connection_id)
        if self._idle is not None:
            self._idle.remove(connection_id)
        try:
            channel.close()
        except Exception:  # pragma: no cover - closing never matters more than the cause
            log.debug("%sError closing channel %s", self._log_context, connection_id, exc_info=True)
        self.sensors.record_connection_closed(self._now_ms)
        if not keep_staged:
            self._staged.pop(channel, None)
        if notify:
            if channel in self._staged:
                self._closing[connection_id] = (channel, channel.state)
            else:
                self.disconnected[connection_id] = channel.state

    def _maybe_close_oldest_connection(self, now_ns: int) -> None:
        if self._idle is None:
            return
        connection_id = self._idle.poll_expired_connection(now_ns)
        if connection_id is None:
            return
        channel = self._channels.get(connection_id)
        if channel is None:
            self._idle.remove(connection_id)
            return
        log.debug("%sAbout to close the idle connection from %s due to being idle for %d millis",
                  self._log_context, connection_id, self._idle.max_idle_ns // 1_000_000)
        channel.state = ChannelState.EXPIRED
        self._close_channel(channel, notify=True)

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        # Cleared after draining: a wakeup written meanwhile stays in the socket (a spurious wakeup at worst);
        # one skipped because the flag was still set is seen by the loop iteration this poll returns to.
        self._wakeup_pending = False

    # ----------------------------------------------------------------------------------- control

    def wakeup(self) -> None:
        """Interrupt a blocked :meth:`poll` (thread-safe). Like Java's ``Selector.wakeup``, calls between two
        polls have the effect of one: only the first writes to the wakeup socket."""
        if self._wakeup_pending:
            return
        self._wakeup_pending = True
        try:
            self._wake_w.send(b"\x01")
        except (BlockingIOError, InterruptedError):
            pass  # the pipe is full: a wakeup is pending anyway
        except OSError:
            pass  # closed

    def mute(self, connection_id: Any) -> None:
        channel = self._channel_or_fail(connection_id)
        self._explicitly_muted.add(channel)
        channel.mute()

    def unmute(self, connection_id: Any) -> None:
        channel = self._channel_or_fail(connection_id)
        self._explicitly_muted.discard(channel)
        channel.maybe_unmute()

    def mute_all(self) -> None:
        for connection_id in list(self._channels):
            self.mute(connection_id)

    def unmute_all(self) -> None:
        for connection_id in list(self._channels):
            self.unmute(connection_id)

    def _channel_or_fail(self, connection_id: Any) -> KafkaChannel:
        channel = self._channels.get(connection_id)
        if channel is None:
            raise IllegalStateError(
                f"Attempt to retrieve channel for which there is no open connection. Connection id "
                f"{connection_id} existing connections {list(self._channels)}")
        return channel

    def close_connection(self, connection_id: Any) -> None:
        """Kafka's ``close(String id)``: close at once, drop staged receives, no disconnect notification."""
        channel = self._channels.get(connection_id)
        if channel is not None:
            channel.state = ChannelState.LOCAL_CLOSE
            self._close_channel(channel, notify=False)
        closing = self._closing.pop(connection_id, None)
        if closing is not None:
            self._staged.pop(closing[0], None)

    def close(self) -> None:
        """Close every connection and the selector itself."""
        if self._closed:
            return
        self._closed = True
        for channel in list(self._channels.values()):
            self._close_channel(channel, notify=False)
        self._closing.clear()
        self._staged.clear()
        try:
            self._sel.unregister(self._wake_r)
        except (KeyError, ValueError):
            pass
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    # ----------------------------------------------------------------------------------- queries

    def is_channel_ready(self, connection_id: Any) -> bool:
        channel = self._channels.get(connection_id)
        if channel is None or not channel.ready():
            return False
        expires = channel.session_expires_ns
        return expires is None or self._time.nanoseconds() < expires

    def expired_sessions(self) -> list[Any]:
        """Connections whose SASL session is about to end (KIP-368): no new request may go on them."""
        if not self._sessions:
            return []
        now = self._time.nanoseconds()
        return [cid for cid, ch in self._sessions.items()
                if ch.session_expires_ns is not None and now >= ch.session_expires_ns]

    def channel(self, connection_id: Any) -> KafkaChannel | None:
        return self._channels.get(connection_id)

    def channels(self) -> list[KafkaChannel]:
        return list(self._channels.values())

    def connection_count(self) -> int:
        """Open connections (safe to call from any thread: reads one length)."""
        return len(self._channels)

    def is_explicitly_muted(self, connection_id: Any) -> bool:
        channel = self._channels.get(connection_id)
        return channel is not None and channel in self._explicitly_muted

    def num_staged_receives(self, connection_id: Any) -> int:
        channel = self._channels.get(connection_id)
        if channel is None:
            closing = self._closing.get(connection_id)
            channel = closing[0] if closing else None
        staged = self._staged.get(channel) if channel is not None else None
        return len(staged) if staged else 0

    def is_out_of_memory(self) -> bool:
        return self._out_of_memory

    @property
    def closed(self) -> bool:
        return self._closed
