"""Accepts connections and turns bytes into requests and responses (Kafka's ``SocketServer`` + ``RequestChannel``).

One asyncio protocol per connection: a length-prefixed frame reader (sizes checked against
``socket.request.max.bytes``), then a per-connection worker that handles requests strictly in order — Kafka mutes
a channel while a request is in flight, which gives clients in-order responses; we keep a bounded queue instead
and pause reading when it is full. Runs on the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable

from strom.common.errors import ProtocolError
from strom.protocol.connection import FrameDecoder

__all__ = ["KafkaServerProtocol", "ConnectionContext"]

log = logging.getLogger("strom.server")

MAX_QUEUED_PER_CONNECTION = 16


class ConnectionContext:
    """What a handler knows about the connection a request came on."""

    __slots__ = ("peer", "connection_id", "closed")

    def __init__(self, peer: str, connection_id: int) -> None:
        self.peer = peer
        self.connection_id = connection_id
        self.closed = False


# A dispatcher takes (context, frame bytes) and returns the framed response bytes, or None for no response.
Dispatcher = Callable[[ConnectionContext, memoryview], Awaitable[bytes | bytearray | None]]


class ConnectionClosed(Exception):
    """Raised by a dispatcher to make the server close the connection (protocol violation)."""


class KafkaServerProtocol(asyncio.Protocol):
    _next_id = 0

    def __init__(self, dispatcher: Dispatcher, max_request_size: int, on_close: Callable[[KafkaServerProtocol], None]) -> None:
        self._dispatch = dispatcher
        self._max = max_request_size
        self._on_close = on_close
        self._frames = FrameDecoder(max_request_size)
        self._queue: deque[memoryview] = deque()
        self._wakeup: asyncio.Event = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None
        self._paused = False
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        KafkaServerProtocol._next_id += 1
        self.ctx = ConnectionContext("?", KafkaServerProtocol._next_id)
        self.busy = False

    # -- asyncio callbacks -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # responses are written whole; never let Nagle hold back the tail of one
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._worker = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except ProtocolError as e:
            log.warning("closing connection %s: %s (socket.request.max.bytes=%d)", self.ctx.peer, e, self._max)
            self._abort()
            return
        if frames:
            self._queue.extend(frames)
            self._wakeup.set()
            if len(self._queue) >= MAX_QUEUED_PER_CONNECTION and not self._paused and self._transport:
                self._paused = True
                self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ctx.closed = True
        self._wakeup.set()
        self._write_ready.set()
        if self._worker is not None and not self.busy:
            self._worker.cancel()
        self._on_close(self)

    def pause_writing(self) -> None:
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self._write_ready.set()

    # -- worker -----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            while not self.ctx.closed:
                if not self._queue:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame = self._queue.popleft()
                if self._paused and len(self._queue) < MAX_QUEUED_PER_CONNECTION // 2 and self._transport:
                    self._paused = False
                    self._transport.resume_reading()
                self.busy = True
                try:
                    response = await self._dispatch(self.ctx, frame)
                except ConnectionClosed:
                    self._abort()
                    return
                finally:
                    self.busy = False
                if response is not None and not self.ctx.closed and self._transport is not None:
                    self._transport.write(response)
                    if not self._write_ready.is_set():
                        await self._write_ready.wait()
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a handler must not take the broker down
            log.exception("closing connection %s after an internal error", self.ctx.peer)
            self._abort()

    def _abort(self) -> None:
        self.ctx.closed = True
        if self._transport is not None:
            self._transport.close()

    @property
    def idle(self) -> bool:
        return not self.busy and not self._queue

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
