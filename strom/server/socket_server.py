"""Accepts connections and turns bytes into requests and responses (Kafka's ``SocketServer`` + ``RequestChannel``).

:class:`SocketServer` serves one listener (Kafka's ``Acceptor`` for one ``EndPoint``): it accepts connections
itself (so it can refuse and back off), applies the connection quotas shared by all listeners
(:class:`~strom.server.connection_quotas.ConnectionQuotas`: ``max.connections``, ``max.connections.per.ip`` and
its overrides), wraps TLS when the listener's protocol says so and reaps connections idle for longer than
``connections.max.idle.ms``.

Each connection is a :class:`KafkaServerProtocol`: a length-prefixed frame reader (the shared sans-I/O
:class:`~strom.protocol.connection.FrameDecoder`, sizes checked against ``socket.request.max.bytes``; an asyncio
buffered protocol: reads land in the listener's shared read buffer, whose frames are copied out at once, or, for
the rest of a large frame, straight in the frame's buffer from the listener's
:class:`~strom.protocol.connection.FrameBufferPool`), an optional
authenticator that sees every frame until the session is authenticated (SASL), then a per-connection worker that
handles requests in order — Kafka mutes a channel while a request is in flight, which gives clients in-order
responses; we keep a bounded queue instead and pause reading when it is full. One refinement: a Produce whose
appends are done and that only waits for the ISR (acks=all, parked in the purgatory) lets the worker go on to
the next Produce on the connection, so a producer's in-flight batches replicate together instead of one per
replication round trip. Appends still happen in request order and responses are written in request order; any
other request waits until the parked produces before it are answered (docs/divergences.md). Runs on the broker's
event loop only.

Zero-copy Fetch (Kafka's ``FileRecords.writeTo`` / ``transferTo``): a response whose records are file regions
arrives as a :class:`~strom.protocol.send.MultiSend`. On a plaintext connection (PLAINTEXT, SASL_PLAINTEXT) the
:class:`SocketWriter` writes it straight to the socket: the encoded bytes with ``send`` and each region with
``os.sendfile`` from the segment file, waiting for writability on the loop between partial writes. Over TLS the
regions are read into memory and the frame goes through the transport like any other response.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
import ssl
from asyncio import sslproto
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from strom.common.errors import ConfigError, ProtocolError
from strom.common.time import SYSTEM_TIME, Time
from strom.protocol.connection import FrameBufferPool, FrameDecoder
from strom.protocol.send import MultiSend, TransferableRecords
from strom.server.connection_quotas import ConnectionQuotas
from strom.server.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from strom.server.broker_config import Listener

__all__ = [
    "KafkaServerProtocol",
    "ConnectionContext",
    "ConnectionClosed",
    "SocketServer",
    "ServerAuthenticator",
]

log = logging.getLogger("strom.server")

MAX_QUEUED_PER_CONNECTION = 16
_READ_BUFFER_SIZE = 256 * 1024
_DIRECT_READ_MIN = 16 * 1024
# accept() failures that mean "out of a resource": stop accepting for a while instead of spinning on them.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_ACCEPT_BACKOFF_MIN_S = 0.05
_ACCEPT_BACKOFF_MAX_S = 1.0
_ACCEPTS_PER_WAKEUP = 64
# While descriptors stay scarce, accept() flaps between success and failure; one error line per this period.
_ACCEPT_ERROR_LOG_INTERVAL_NS = 60 * 1_000_000_000


class ConnectionContext:
    """What a handler knows about the connection a request came on (Kafka's ``RequestContext`` connection part).

    ``principal`` is ``User:ANONYMOUS`` on PLAINTEXT, the mapped certificate DN on SSL with a client certificate,
    or the SASL user once authenticated; the authorizer checks it with ``client_host``.
    """

    __slots__ = ("peer", "connection_id", "closed", "listener_name", "security_protocol", "principal",
                 "client_host", "sasl_mechanism", "received_ns", "throttle_ms", "zero_copy", "on_parked",
                 "client_software_name", "client_software_version")

    def __init__(self, peer: str, connection_id: int, listener_name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT") -> None:
        self.peer = peer
        self.connection_id = connection_id
        self.closed = False
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.principal: KafkaPrincipal = ANONYMOUS
        self.client_host = peer.rpartition(":")[0] if ":" in peer else peer
        self.sasl_mechanism: str | None = None
        # What the client named itself in its ApiVersions request (v3+; KIP-511), for client-metrics selectors.
        self.client_software_name = ""
        self.client_software_version = ""
        self.received_ns = 0  # when the request being handled arrived (RequestQueueTimeMs starts there)
        # Set by a handler whose request broke a client quota: after the response is written the connection is not
        # read for this long (KIP-219: the client is told throttle_time_ms and the broker mutes the channel).
        self.throttle_ms = 0
        # Responses may carry records as file regions written with sendfile (a plaintext socket); False: handlers
        # must put record bytes in memory.
        self.zero_copy = False
        # Set by the connection's worker while a Produce does its in-order part; see ``parked``.
        self.on_parked: Callable[[], None] | None = None

    def parked(self) -> None:
        """Called by the Produce handler once its appends are done and it only waits in the purgatory for the ISR
        (acks=all): the connection may start on its next Produce; this one's response is still written in order."""
        cb = self.on_parked
        if cb is not None:
            self.on_parked = None
            cb()


# A dispatcher takes (context, frame bytes) and returns the framed response (bytes, or a MultiSend of bytes and
# file regions), or None for no response.
Dispatcher = Callable[[ConnectionContext, memoryview], Awaitable[bytes | bytearray | MultiSend | None]]


class ConnectionClosed(Exception):
    """Raised by a dispatcher to make the server close the connection (a protocol violation, or an acks=0 produce
    that failed). ``response``: the response not sent, whose errors the request metrics still count (Kafka's
    ``closeConnection(request, errorCounts)``)."""

    def __init__(self, response: object = None) -> None:
        super().__init__()
        self.response = response


_MSG_MORE = getattr(socket, "MSG_MORE", 0)


class RegionTruncatedError(OSError):
    """A file region's file was cut shorter between the read and the send: the frame cannot be completed."""


class SocketWriter:
    """Writes :class:`MultiSend` frames straight to a connection's socket: bytes with ``send``, file regions with
    ``os.sendfile`` (no copy through Python). Event loop only; one frame at a time.

    It works on a duplicate of the transport's descriptor: the transport keeps owning the connection, and the
    event loop lets this writer wait for writability on its own descriptor (a loop refuses ``add_writer`` on a
    descriptor a transport uses, and uvloop has no ``loop.sendfile``). The caller makes sure the transport has
    nothing buffered before a frame is written here, so bytes never overtake each other. :meth:`close` must run
    when the connection is lost (the duplicate would otherwise keep the TCP connection open).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._sock = socket.socket(fileno=os.dup(fd))
        self._sock.setblocking(False)
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.sendfile_bytes = 0  # bytes sent from files (for tests and metrics)

    async def write(self, send: MultiSend) -> None:
        """Write every part; raises OSError (RegionTruncatedError, a reset connection) when the frame could not be
        written whole: the connection must then be closed, part of a frame may be out."""
        last = len(send.parts) - 1
        for i, part in enumerate(send.parts):
            if isinstance(part, TransferableRecords):
                await self._sendfile(part)
            else:
                await self._send(part, _MSG_MORE if i < last else 0)

    async def _send(self, data: bytes | bytearray | memoryview, flags: int) -> None:
        view = memoryview(data)
        while view:
            if self.closed:
                raise ConnectionResetError("connection closed")
            try:
                n = self._sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await self._writable()
                continue
            view = view[n:]

    async def _sendfile(self, region: TransferableRecords) -> None:
        in_fd = region.fileno()
        offset = region.position
        left = region.size
        while left > 0:
            if self.closed:
                raise ConnectionResetError("connection closed")
            try:
                n = os.sendfile(self._sock.fileno(), in_fd, offset, left)
            except (BlockingIOError, InterruptedError):
                await self._writable()
                continue
            if n == 0:
                raise RegionTruncatedError(errno.EIO, f"{region!r} was truncated under the fetch: {left} bytes "
                                                      "missing")
            offset += n
            left -= n
            self.sendfile_bytes += n

    async def _writable(self) -> None:
        fut: asyncio.Future[None] = self._loop.create_future()
        fd = self._sock.fileno()
        self._loop.add_writer(fd, _wake, fut)
        self._waiter = fut
        try:
            await fut
        finally:
            self._waiter = None
            if not self.closed:
                self._loop.remove_writer(fd)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        waiter = self._waiter
        if waiter is not None:
            self._loop.remove_writer(self._sock.fileno())
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("connection closed"))
        self._sock.close()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ServerAuthenticator(Protocol):
    """Sees every frame of a connection before the dispatcher does (Kafka's ``SaslServerAuthenticator``).

    ``handle`` returns ``(response_bytes_or_None, pass_to_dispatcher, close_after)``: ApiVersions before
    authentication is passed on; SaslHandshake / SaslAuthenticate are answered here; anything else before
    authentication, or after the session expired (KIP-368), closes the connection.
    """

    def handle(self, ctx: ConnectionContext, frame: memoryview, now_ms: int) -> tuple[bytes | None, bool, bool]: ...


class KafkaServerProtocol(asyncio.BufferedProtocol):
    _next_id = 0

    def __init__(self, dispatcher: Dispatcher, max_request_size: int,
                 on_close: Callable[[KafkaServerProtocol], None], *, listener: Listener | None = None,
                 authenticator: ServerAuthenticator | None = None, time: Time = SYSTEM_TIME,
                 principal_from_cert: Callable[[dict[str, Any]], KafkaPrincipal] | None = None,
                 zero_copy: bool = False, frame_pool: FrameBufferPool | None = None,
                 read_buffer: memoryview | None = None) -> None:
        """``zero_copy``: the transport is a plain socket, so Fetch records may be sent with ``sendfile`` (on other
        transports, TLS, they are file regions too, read when the response is written).
        ``frame_pool``: buffers for frames that span reads, shared by the listener's connections."""
        self._dispatch = dispatcher
        self._zero_copy = zero_copy
        self._writer: SocketWriter | None = None
        self._max = max_request_size
        self._on_close = on_close
        self._frames = (FrameDecoder(max_request_size) if frame_pool is None
                        else FrameDecoder(max_request_size, frame_pool.allocate))
        self._read_buffer = read_buffer if read_buffer is not None else memoryview(bytearray(_READ_BUFFER_SIZE))
        self._direct = False  # the last get_buffer() handed out the frame in progress
        self._queue: deque[tuple[memoryview, int]] = deque()  # (frame, arrival ns)
        self._wakeup: asyncio.Event = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None
        self._paused = False
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self._authenticator = authenticator
        self._principal_from_cert = principal_from_cert
        self._time = time
        KafkaServerProtocol._next_id += 1
        if listener is None:
            self.ctx = ConnectionContext("?", KafkaServerProtocol._next_id)
        else:
            self.ctx = ConnectionContext("?", KafkaServerProtocol._next_id, listener.name, listener.security_protocol)
        self._dispatching = False
        # Parked produces (and the produces after them) whose responses are still to be written, oldest first.
        self._pending: deque[asyncio.Task[bytes | bytearray | None]] = deque()
        self._pending_writer: asyncio.Task[None] | None = None
        self._unmuted = asyncio.Event()  # cleared while a client quota mutes the connection
        self._unmuted.set()
        # Activity for connections.max.idle.ms: a whole request received or a response written. Bytes of a frame
        # that never completes do not count, so a client trickling a request (slowloris) is reaped too.
        self.last_active_ns = time.nanoseconds()
        self.released = False  # the connection quota slot was given back
        # The broker closed this connection (idle expiry, shutdown, a bad frame, an error). When the client closed
        # it instead, the requests it sent whole before closing are still handled (Kafka's broker reads a closed
        # socket up to its end and handles every request found there: an acks=0 produce sent just before
        # close() is appended); their responses are dropped.
        self._aborted = False

    # -- asyncio callbacks -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # responses are written whole; never let Nagle hold back the tail of one
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            if self._zero_copy:
                try:
                    self._writer = SocketWriter(asyncio.get_running_loop(), sock.fileno())
                    self.ctx.zero_copy = True
                except OSError as e:  # out of descriptors: this connection copies records instead
                    log.debug("no zero-copy writes for %s: %s", self.ctx.peer, e)
        if not self._zero_copy:
            # TLS: Fetch records stay file regions until the response is written; each is then read and handed to
            # the TLS transport as it is, not copied into the response frame first (see _write_multi)
            self.ctx.zero_copy = True
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.ctx.client_host = peer[0] if isinstance(peer, tuple) else str(peer)
        if self._principal_from_cert is not None:
            cert = transport.get_extra_info("peercert")
            if cert:
                self.ctx.principal = self._principal_from_cert(cert)
        self.last_active_ns = self._time.nanoseconds()
        self._worker = asyncio.get_running_loop().create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport reads to: the rest of a large frame in progress (read straight into its buffer),
        else the listener's read buffer (frames found there are copied out in :meth:`buffer_updated`)."""
        frames = self._frames
        if frames.payload_allocated:
            buf = frames.buffer()
            if buf is not None and len(buf) >= _DIRECT_READ_MIN:
                self._direct = True
                return buf
        self._direct = False
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:  # (bytes of a payload whose size was checked: nothing to refuse)
            frame = self._frames.advance(nbytes)
            if frame is not None:
                self._frames_received([frame])
            return
        self.data_received(self._read_buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        try:
            frames = self._frames.feed(data)
        except ProtocolError as e:
            log.warning("closing connection %s: %s (socket.request.max.bytes=%d)", self.ctx.peer, e, self._max)
            self._abort()
            return
        self._frames_received(frames)

    def _frames_received(self, frames: list[memoryview]) -> None:
        if frames:
            now = self.last_active_ns = self._time.nanoseconds()
            self._queue.extend((f, now) for f in frames)
            self._wakeup.set()
            if len(self._queue) >= MAX_QUEUED_PER_CONNECTION and not self._paused and self._transport:
                self._paused = True
                self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.closed = True
        if self._writer is not None:
            self._writer.close()
        self._wakeup.set()
        self._write_ready.set()
        if self._pending_writer is not None and not self._pending:
            self._pending_writer.cancel()
        if self._worker is not None and not self.busy and (self._aborted or not self._queue):
            self._worker.cancel()
        self._on_close(self)

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The task handling this connection's requests (it may outlive the connection: see ``_aborted``)."""
        return self._worker

    def pause_writing(self) -> None:
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self._write_ready.set()

    # -- worker -----------------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A request is being handled or a response is still to be written."""
        return self._dispatching or bool(self._pending)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._aborted:
                if not self._queue:
                    if self.ctx.closed:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame, received_ns = self._queue.popleft()
                if self._paused and len(self._queue) < MAX_QUEUED_PER_CONNECTION // 2 and self._transport:
                    self._paused = False
                    self._transport.resume_reading()
                is_produce = len(frame) >= 2 and frame[0] == 0 and frame[1] == 0  # api key 0
                if self._pending and not is_produce:
                    await self._drain_pending()  # anything but a Produce starts after the parked ones are answered
                if not self._unmuted.is_set():
                    await self._unmuted.wait()
                if self._aborted:
                    return
                self.ctx.received_ns = received_ns
                response: bytes | bytearray | MultiSend | None = None
                close_after = False
                dispatch = True
                if self._authenticator is not None:
                    response, dispatch, close_after = self._authenticator.handle(
                        self.ctx, frame, self._time.milliseconds())
                if dispatch and is_produce:
                    self._dispatching = True
                    try:
                        parked: asyncio.Future[None] = loop.create_future()
                        self.ctx.on_parked = functools.partial(_resolve, parked)
                        task = loop.create_task(self._dispatch(self.ctx, frame))
                        try:
                            await asyncio.wait((task, parked), return_when=asyncio.FIRST_COMPLETED)
                        finally:
                            self.ctx.on_parked = None
                            if not parked.done():
                                parked.cancel()
                    finally:
                        self._dispatching = False
                    if not task.done() or self._pending:
                        # Parked (or behind a parked one): answer in order from the pending writer, go on reading.
                        self._pending.append(task)
                        if self._pending_writer is None or self._pending_writer.done():
                            self._pending_writer = loop.create_task(self._write_pending())
                        continue
                    try:
                        response = task.result()
                    except ConnectionClosed:
                        self._abort()
                        return
                elif dispatch:
                    self._dispatching = True
                    try:
                        response = await self._dispatch(self.ctx, frame)
                    except ConnectionClosed:
                        self._abort()
                        return
                    finally:
                        self._dispatching = False
                if not await self._write_response(response) and self._aborted:
                    return
                if close_after:
                    self._abort()
                    return
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a handler must not take the broker down
            log.exception("closing connection %s after an internal error", self.ctx.peer)
            self._abort()

    async def _write_multi(self, send: MultiSend) -> bool:
        """Write a frame holding file regions: sendfile on a plain socket, else each region read and the parts
        handed to the transport as a list (TLS encrypts them in turn: no copy into one frame). False when the
        frame could not be written whole (the connection must close: a partial frame may be out)."""
        try:
            if self.ctx.closed or self._transport is None:
                return True
            if self._writer is not None and await self._drain_transport():
                try:
                    await self._writer.write(send)
                except OSError as e:
                    if not self.ctx.closed:
                        log.warning("closing connection %s: a response could not be written whole (%s)",
                                    self.ctx.peer, e)
                    return False
            else:
                try:
                    parts = send.read_parts()
                except (OSError, ValueError) as e:
                    log.warning("closing connection %s: %s", self.ctx.peer, e)
                    return False
                self._transport.writelines(parts)
                if not self._write_ready.is_set():
                    await self._write_ready.wait()
            self.last_active_ns = self._time.nanoseconds()
            return True
        finally:
            send.release()

    async def _drain_transport(self) -> bool:
        """Wait until the transport has written everything it buffered (the socket writer must not overtake it):
        with a high-water mark of 0 the transport pauses this protocol until its buffer is empty. False when that
        cannot be waited for (the caller then writes through the transport)."""
        t = self._transport
        if t is None or t.get_write_buffer_size() == 0:
            return t is not None
        low, high = t.get_write_buffer_limits()
        t.set_write_buffer_limits(high=0, low=0)
        try:
            while t.get_write_buffer_size() and not self.ctx.closed:
                if self._write_ready.is_set():  # the transport did not pause us: do not spin
                    return False
                await self._write_ready.wait()
        finally:
            if not self.ctx.closed:
                t.set_write_buffer_limits(high=high, low=low)
        return not self.ctx.closed

    async def _write_response(self, response: bytes | bytearray | MultiSend | None) -> bool:
        """Write one response (a frame with file regions through :meth:`_write_multi`), wait for the transport's
        buffer to drain, apply a quota's mute; False once closed."""
        if isinstance(response, MultiSend):
            if not await self._write_multi(response):
                self._abort()
                return False
        elif response is not None and not self.ctx.closed and self._transport is not None:
            self._transport.write(response)
            self.last_active_ns = self._time.nanoseconds()
            if not self._write_ready.is_set():
                await self._write_ready.wait()
        if self.ctx.throttle_ms > 0 and not self.ctx.closed:
            await self._mute(self.ctx.throttle_ms)
        return not self.ctx.closed

    async def _write_pending(self) -> None:
        """Write the responses of parked produces (and of those queued behind them) in request order."""
        try:
            while self._pending:
                task = self._pending[0]
                try:
                    response = await task
                except ConnectionClosed:
                    response = None
                    self._abort()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("closing connection %s after an internal error", self.ctx.peer)
                    response = None
                    self._abort()
                self._pending.popleft()
                if not await self._write_response(response):
                    for t in self._pending:  # closed: nobody reads the rest; let them finish, drop their answers
                        t.add_done_callback(_discard_result)
                    self._pending.clear()
                    return
        finally:
            self._wakeup.set()

    async def _drain_pending(self) -> None:
        while self._pending:
            writer = self._pending_writer
            if writer is None or writer.done():
                writer = self._pending_writer = asyncio.get_running_loop().create_task(self._write_pending())
            await asyncio.shield(writer)

    async def _mute(self, throttle_ms: int) -> None:
        """Kafka's throttled channel: read nothing from this client (queued requests wait too) until the throttle
        time has passed, counted from the response being sent."""
        self.ctx.throttle_ms = 0
        self._unmuted.clear()
        transport = self._transport
        paused_here = transport is not None and not self._paused
        if paused_here:
            transport.pause_reading()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(throttle_ms / 1000.0)
        finally:
            if paused_here and not self.ctx.closed and not self._paused:
                transport.resume_reading()  # type: ignore[union-attr]
            self._unmuted.set()
            self.last_active_ns = self._time.nanoseconds()

    def _abort(self) -> None:
        self._aborted = True
        self.ctx.closed = True
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        """Close at once (idle expiry, broker shutdown)."""
        self._abort()

    @property
    def idle(self) -> bool:
        return not self.busy and not self._queue

    @property
    def established(self) -> bool:
        """``connection_made`` ran (for TLS: the handshake is done)."""
        return self._transport is not None

    def discard_queued(self) -> None:
        """Drop the requests not yet started (a broker shutting down); the one in progress, if any, finishes."""
        self._queue.clear()

    async def drain_and_close(self) -> None:
        """Graceful shutdown: stop reading, let the in-flight request finish, then close."""
        if self._transport is not None:
            self._transport.pause_reading()
        self._queue.clear()
        for _ in range(500):
            if not self.busy:
                break
            await asyncio.sleep(0.01)
        self._abort()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _discard_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning for a closed connection


class SocketServer:
    """Serves one listener: accept, quotas, TLS, idle expiry; requests go to ``dispatch``. Event loop only.

    ``await start()`` binds (port 0 picks one: see :attr:`bound_port`), ``await stop()`` stops accepting and
    drains the connections. ``ssl_context`` is required for SSL / SASL_SSL listeners;
    ``authenticator_factory`` (one authenticator per connection) for SASL listeners.
    """

    def __init__(self, listener: Listener, dispatch: Dispatcher, *, max_request_size: int = 104857600,
                 connections_max_idle_ms: int = 600000, quotas: ConnectionQuotas | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 authenticator_factory: Callable[[], ServerAuthenticator] | None = None,
                 principal_from_cert: Callable[[dict[str, Any]], KafkaPrincipal] | None = None,
                 time: Time = SYSTEM_TIME, backlog: int = 512) -> None:
        if listener.uses_ssl and ssl_context is None:
            raise ConfigError(f"listener {listener.name} ({listener.security_protocol}) needs an SSL context")
        if listener.uses_sasl and authenticator_factory is None:
            raise ConfigError(f"listener {listener.name} ({listener.security_protocol}) needs a SASL authenticator")
        self.listener = listener
        self._dispatch = dispatch
        self._max_request_size = max_request_size
        self._max_idle_ns = connections_max_idle_ms * 1_000_000
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        self._ssl = ssl_context if listener.uses_ssl else None  # replaced by set_ssl_context (a keystore rotated)
        self._authenticator_factory = authenticator_factory if listener.uses_sasl else None
        self._principal_from_cert = principal_from_cert
        self._time = time
        self._backlog = backlog
        self.connections: set[KafkaServerProtocol] = set()
        # Connections the client closed whose worker still handles the requests received before the close (a
        # shutdown drops the ones not started and does not wait for the one in progress).
        self._closed_working: set[KafkaServerProtocol] = set()
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting = False
        self._accept_failures = 0
        self._accept_error_logged_ns: int | None = None
        self._accept_episode_logged = False
        self._backoff_s = _ACCEPT_BACKOFF_MIN_S
        self._retry: asyncio.TimerHandle | None = None
        self._held: socket.socket | None = None  # accepted, waiting out the listener's connection creation rate
        # the inter-broker listener is exempt from the broker-wide max.connection.creation.rate (Kafka's)
        self.inter_broker = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}  # connections to close after a throttle
        self._stopped = False
        self.bound_port: int | None = None
        self.on_connection_created: Callable[[], None] | None = None  # socket-server-metrics
        self.frame_pool = FrameBufferPool()  # the event loop's: large requests' buffers, reused
        self.read_buffer = memoryview(bytearray(_READ_BUFFER_SIZE))  # shared: each read is handled before the next

    def set_ssl_context(self, context: ssl.SSLContext) -> None:
        """A new keystore / truststore (a dynamic broker config): connections accepted from now on use it, the
        open ones keep the one they were made with, as in Kafka."""
        if not self.listener.uses_ssl:
            raise ValueError(f"listener {self.listener.name} does not use TLS")
        self._ssl = context

    @classmethod
    def from_config(cls, listener: Listener, dispatch: Dispatcher, config: Any, quotas: ConnectionQuotas,
                    **kwargs: Any) -> SocketServer:
        """The settings a broker config gives a listener (``socket.request.max.bytes``,
        ``connections.max.idle.ms``)."""
        return cls(listener, dispatch, max_request_size=int(config["socket.request.max.bytes"]),
                   connections_max_idle_ms=int(config["connections.max.idle.ms"]), quotas=quotas, **kwargs)

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        host = self.listener.host or None
        infos = await self._loop.getaddrinfo(host, self.listener.port, type=socket.SOCK_STREAM,
                                             flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(self._backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.bound_port = int(sock.getsockname()[1])
        self._resume_accepting()
        self._tasks.add(self._loop.create_task(self._reap_idle()))

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, close every connection."""
        self._stopped = True
        self._pause_accepting()
        if self._retry is not None:
            self._retry.cancel()
        if self._held is not None:
            self._held.close()
            self._held = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for conn, handle in list(self._throttled.items()):
            handle.cancel()
            self._close_throttled(conn)
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for c in list(self._closed_working):
            c.discard_queued()  # a closed connection's request in progress finishes; no one waits for it
        await asyncio.gather(*(c.drain_and_close() for c in list(self.connections)), return_exceptions=True)

    def close_listening(self) -> None:
        """Stop accepting new connections (the first step of a broker shutdown)."""
        self._stopped = True
        self._pause_accepting()

    # -- accept -----------------------------------------------------------------------------------------------
    def _resume_accepting(self) -> None:
        if self._stopped or self._accepting or self._sock is None or self._loop is None:
            return
        self._accepting = True
        self._loop.add_reader(self._sock.fileno(), self._on_acceptable)

    def _pause_accepting(self) -> None:
        if self._accepting and self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._accepting = False

    def _on_acceptable(self) -> None:
        assert self._sock is not None
        for _ in range(_ACCEPTS_PER_WAKEUP):
            if self.quotas.at_broker_limit():
                # max.connections: leave new clients in the backlog until a connection closes.
                self._pause_accepting()
                self.quotas.wait_for_slot(self._resume_accepting)
                return
            try:
                conn, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as e:
                if e.errno in _RESOURCE_ERRNOS:
                    self._accept_failed(e)
                    return
                log.warning("accept() failed on listener %s: %s", self.listener.name, e)
                return
            if self._accept_failures:
                if self._accept_episode_logged:
                    log.info("listener %s accepts connections again after %d failed accept() calls",
                             self.listener.name, self._accept_failures)
                self._accept_failures = 0
                self._accept_episode_logged = False
                self._backoff_s = _ACCEPT_BACKOFF_MIN_S
            throttle_ms = self.quotas.record_listener_connection(self.listener.name, self.inter_broker)
            if throttle_ms > 0:
                # max.connection.creation.rate: this connection and the ones behind it wait (Kafka's acceptor)
                log.debug("listener %s over its connection creation rate: accepting again in %d ms",
                          self.listener.name, throttle_ms)
                self._pause_accepting()
                assert self._loop is not None
                self._held = conn
                self._retry = self._loop.call_later(throttle_ms / 1000, self._accept_after_throttle, conn, addr)
                return
            self._accepted(conn, addr)

    def _accept_after_throttle(self, conn: socket.socket, addr: Any) -> None:
        self._retry = self._held = None
        if self._stopped:
            conn.close()
            return
        self._accepted(conn, addr)
        self._resume_accepting()

    def _close_throttled(self, conn: socket.socket) -> None:
        self._throttled.pop(conn, None)
        conn.close()

    def _accept_failed(self, e: OSError) -> None:
        """Out of file descriptors (or memory): log once per episode, stop accepting for a while, retry."""
        now = self._time.nanoseconds()
        if self._accept_failures == 0 and (self._accept_error_logged_ns is None
                                           or now - self._accept_error_logged_ns > _ACCEPT_ERROR_LOG_INTERVAL_NS):
            self._accept_error_logged_ns = now
            self._accept_episode_logged = True
            log.error("accept() failed on listener %s: %s; retrying with back-off up to %.0f ms, "
                      "further failures are not logged for a minute",
                      self.listener.name, e, _ACCEPT_BACKOFF_MAX_S * 1000)
        self._accept_failures += 1
        self._pause_accepting()
        assert self._loop is not None
        self._retry = self._loop.call_later(self._backoff_s, self._retry_accept)
        self._backoff_s = min(self._backoff_s * 2, _ACCEPT_BACKOFF_MAX_S)

    def _retry_accept(self) -> None:
        self._retry = None
        self._resume_accepting()

    def _accepted(self, conn: socket.socket, addr: Any) -> None:
        ip = addr[0] if isinstance(addr, tuple) else str(addr)
        throttle_ms = self.quotas.record_ip_connection(ip)
        if throttle_ms > 0:
            # KIP-612, as Kafka's acceptor: the connection is held unanswered for the throttle time, then closed,
            # so a client reconnecting in a loop is slowed down rather than told to retry at once
            log.debug("delaying the close of a connection from %s on listener %s for %d ms: connection_creation_rate "
                      "quota exceeded", ip, self.listener.name, throttle_ms)
            assert self._loop is not None
            self._throttled[conn] = self._loop.call_later(throttle_ms / 1000, self._close_throttled, conn)
            return
        if not self.quotas.try_acquire(ip):
            log.info("rejected connection from %s on listener %s: max.connections.per.ip (%d) reached",
                     ip, self.listener.name, self.quotas.overrides.get(ip, self.quotas.max_connections_per_ip))
            conn.close()
            return
        conn.setblocking(False)
        proto = KafkaServerProtocol(self._dispatch, self._max_request_size, self._connection_closed,
                                    listener=self.listener,
                                    authenticator=self._authenticator_factory() if self._authenticator_factory else None,
                                    time=self._time, principal_from_cert=self._principal_from_cert,
                                    zero_copy=self._ssl is None, frame_pool=self.frame_pool,
                                    read_buffer=self.read_buffer)
        proto.ctx.client_host = ip
        self.connections.add(proto)
        if self.on_connection_created is not None:
            self.on_connection_created()
        assert self._loop is not None
        if self._ssl is None:
            coro = self._loop.connect_accepted_socket(lambda: proto, conn)
        else:
            # A client that never finishes the TLS handshake is dropped after the idle limit (or 60 s).
            timeout = min(60.0, max(0.1, self._max_idle_ns / 1e9))
            coro = self._tls_connect(conn, proto, timeout)
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._connect_done(t, proto, conn))

    async def _tls_connect(self, conn: socket.socket, proto: KafkaServerProtocol, handshake_timeout: float) -> None:
        """TLS through asyncio's own ``SSLProtocol`` over the loop's plain TCP transport, on every loop (what
        ``connect_accepted_socket(ssl=...)`` does on asyncio's loop). uvloop's TLS transport (0.23) loses the
        records it decrypted after a peer's close while the application has reading paused (its
        ``resume_reading`` does nothing once the close has moved it out of the WRAPPED state), and a connection
        pauses at ``MAX_QUEUED_PER_CONNECTION`` queued requests: a client's last requests would be dropped."""
        loop = self._loop
        assert loop is not None and self._ssl is not None
        waiter = loop.create_future()
        tls = sslproto.SSLProtocol(loop, proto, self._ssl, waiter, server_side=True,
                                   ssl_handshake_timeout=handshake_timeout)
        transport, _ = await loop.connect_accepted_socket(lambda: tls, conn)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise

    def _connect_done(self, task: asyncio.Task[Any], proto: KafkaServerProtocol, conn: socket.socket) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            exc: BaseException | None = asyncio.CancelledError()
        else:
            exc = task.exception()
        if exc is not None:
            # Failed TLS handshake (plaintext on a TLS port, untrusted certificate, a stalled client): Kafka logs
            # "Failed authentication" at INFO and closes; the broker goes on serving everyone else.
            if isinstance(exc, OSError | asyncio.TimeoutError):  # SSLError and ConnectionError are OSErrors
                log.info("failed TLS handshake from %s on listener %s: %s", proto.ctx.client_host,
                         self.listener.name, exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("connection from %s on listener %s failed: %r", proto.ctx.client_host,
                            self.listener.name, exc)
            try:
                conn.close()
            except OSError:
                pass
            if not proto.established:  # connection_made never ran, so connection_lost never will
                self._connection_closed(proto)

    def _connection_closed(self, proto: KafkaServerProtocol) -> None:
        self.connections.discard(proto)
        if not proto.released:
            proto.released = True
            self.quotas.release(proto.ctx.client_host)
        worker = proto.worker
        if worker is not None and not worker.done():  # still handling what the client sent before closing
            self._closed_working.add(proto)
            worker.add_done_callback(lambda _t: self._closed_working.discard(proto))

    # -- idle expiry ------------------------------------------------------------------------------------------
    async def _reap_idle(self) -> None:
        """Close connections idle for longer than ``connections.max.idle.ms`` (Kafka's Processor does this in
        its poll loop). A connection with a request being handled is never idle."""
        interval = min(1.0, max(0.01, self._max_idle_ns / 4e9))
        while True:
            await asyncio.sleep(interval)
            now = self._time.nanoseconds()
            for proto in list(self.connections):
                # A connection still in its TLS handshake has no transport yet: ssl_handshake_timeout drops it.
                if not proto.established or proto.ctx.closed:
                    continue
                if proto.idle and now - proto.last_active_ns > self._max_idle_ns:
                    log.debug("closing connection %s idle for more than %d ms", proto.ctx.peer,
                              self._max_idle_ns // 1_000_000)
                    proto.close()
