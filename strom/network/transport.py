"""Byte transports under a :class:`~strom.network.kafka_channel.KafkaChannel`, and the receive memory pool.

Kafka counterparts: ``PlaintextTransportLayer`` (a non-blocking ``SocketChannel`` plus its selection key's
interest set), ``SslTransportLayer`` (TLS with Python's ``ssl`` over the same socket) and ``org.apache.kafka.common.memory.MemoryPool`` / ``SimpleMemoryPool``.

A transport reads into / writes from buffers without blocking: ``read(buf)`` returns the bytes read, ``0`` when
nothing is available and ``-1`` at end of stream; ``write(buffers)`` returns the bytes written (``0`` when the
socket buffer is full). Interest in readiness events is kept on the transport and pushed to the ``selectors``
registration only when it changes. I/O thread only.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import threading
from typing import Any, Protocol

from strom.protocol.connection import FrameBufferPool
from strom.security.sasl import SslAuthenticationError

__all__ = [
    "Transport",
    "PlaintextTransport",
    "SslTransport",
    "MemoryPool",
    "NONE_POOL",
    "SimpleMemoryPool",
    "EVENT_READ",
    "EVENT_WRITE",
]

EVENT_READ = selectors.EVENT_READ
EVENT_WRITE = selectors.EVENT_WRITE


class Transport(Protocol):
    """What a channel needs from the byte stream below it."""

    def read(self, buf: memoryview) -> int: ...
    def write(self, buffers: list[memoryview]) -> int: ...
    def finish_connect(self) -> bool: ...
    def ready(self) -> bool: ...
    def handshake(self) -> bool: ...
    def has_bytes_buffered(self) -> bool: ...
    def add_interest(self, ops: int) -> None: ...
    def remove_interest(self, ops: int) -> None: ...
    def set_interest(self, ops: int) -> None: ...
    def interest(self) -> int: ...
    def close(self) -> None: ...


class PlaintextTransport:
    """A non-blocking TCP socket registered with a ``selectors`` selector (Kafka's ``PlaintextTransportLayer``)."""

    __slots__ = ("sock", "_sel", "_interest", "attachment", "_registered")

    def __init__(self, sock: socket.socket, sel: selectors.BaseSelector, interest: int, attachment: Any) -> None:
        self.sock = sock
        self._sel = sel
        self._interest = interest
        self.attachment = attachment
        sel.register(sock, interest, attachment)
        self._registered = True

    def read(self, buf: memoryview) -> int:
        try:
            n = self.sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return 0
        return n if n or not len(buf) else -1

    def write(self, buffers: list[memoryview]) -> int:
        try:
            if len(buffers) == 1:
                return self.sock.send(buffers[0])
            return self.sock.sendmsg(buffers)
        except (BlockingIOError, InterruptedError):
            return 0

    def finish_connect(self) -> bool:
        """Completes a non-blocking connect: ``True`` when connected, raises ``OSError`` when it failed."""
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        try:
            self.sock.getpeername()
        except OSError:
            return False  # still in progress
        return True

    def ready(self) -> bool:
        return True

    def handshake(self) -> bool:
        return True

    def has_bytes_buffered(self) -> bool:
        return False

    def _update(self, interest: int) -> None:
        if interest != self._interest:
            self._interest = interest
            if self._registered:
                if interest:
                    self._sel.modify(self.sock, interest, self.attachment)
                else:  # selectors refuse an empty interest set: unregister until some interest returns
                    self._sel.unregister(self.sock)
                    self._registered = False
            elif interest:
                self._sel.register(self.sock, interest, self.attachment)
                self._registered = True

    def add_interest(self, ops: int) -> None:
        self._update(self._interest | ops)

    def remove_interest(self, ops: int) -> None:
        self._update(self._interest & ~ops)

    def set_interest(self, ops: int) -> None:
        self._update(ops)

    def interest(self) -> int:
        return self._interest

    def close(self) -> None:
        if self._registered:
            try:
                self._sel.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            self._registered = False
        try:
            self.sock.close()
        except OSError:
            pass


class MemoryPool(Protocol):
    """Memory for incoming payloads (Kafka's ``MemoryPool``)."""

    def try_allocate(self, size: int) -> bytearray | None: ...
    def release(self, buf: bytearray) -> None: ...
    def is_out_of_memory(self) -> bool: ...


class _NonePool:
    """Kafka's ``MemoryPool.NONE``: always allocates, never runs out. Thread-safe."""

    __slots__ = ()

    def try_allocate(self, size: int) -> bytearray | None:
        return bytearray(size)

    def release(self, buf: bytearray) -> None:
        pass

    def is_out_of_memory(self) -> bool:
        return False


NONE_POOL: MemoryPool = _NonePool()


class ReusingMemoryPool:
    """``MemoryPool.NONE`` (always allocates, never runs out) whose buffers for large responses are handed out
    again once nothing refers to them (:class:`FrameBufferPool`): a consumer receives a
    fetch response of up to ``max.partition.fetch.bytes`` per partition into memory that ``bytearray`` would
    zero-fill and often fault in anew each time. Records copied out of a response (the record-by-record path, the
    columnar decoders) let its buffer go at once; a view still alive makes the pool allocate another. Not
    thread-safe: the selector's reads must be serialized (the consumer polls under its client's lock)."""

    __slots__ = ("_frames",)

    def __init__(self, min_size: int = 64 * 1024, max_buffers: int = 4, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._frames = FrameBufferPool(min_size, max_buffers, max_bytes)

    def try_allocate(self, size: int) -> bytearray | memoryview:
        return self._frames.allocate(size)

    def release(self, buf: bytearray) -> None:
        pass

    def is_out_of_memory(self) -> bool:
        return False


class SimpleMemoryPool:
    """A bounded pool (Kafka's ``SimpleMemoryPool``): ``try_allocate`` fails (``None``) once ``size_bytes``
    are handed out; ``release`` gives memory back. Thread-safe."""

    def __init__(self, size_bytes: int, max_single_allocation: int | None = None) -> None:
        self.size_bytes = size_bytes
        self.max_single_allocation = max_single_allocation or size_bytes
        self.available = size_bytes
        self._lock = threading.Lock()

    def try_allocate(self, size: int) -> bytearray | None:
        if size > self.max_single_allocation:
            raise ValueError(f"requested {size}, maximum single allocation is {self.max_single_allocation}")
        with self._lock:
            if self.available <= 0:
                return None
            self.available -= size  # may go negative, as Kafka's pool allows one over-allocation
        return bytearray(size)

    def release(self, buf: bytearray) -> None:
        with self._lock:
            self.available += len(buf)

    def is_out_of_memory(self) -> bool:
        with self._lock:
            return self.available <= 0


class SslTransport(PlaintextTransport):
    """TLS over a non-blocking socket (Kafka's ``SslTransportLayer``): the socket is wrapped once TCP is
    connected, then :meth:`handshake` is driven by readiness events until the TLS handshake completes."""

    __slots__ = ("_ctx", "_server_hostname", "_wrapped", "_handshaken", "_received")

    def __init__(self, sock: socket.socket, sel: selectors.BaseSelector, interest: int, attachment: Any,
                 ctx: ssl.SSLContext, server_hostname: str | None) -> None:
        super().__init__(sock, sel, interest, attachment)
        self._ctx = ctx
        self._server_hostname = server_hostname
        self._wrapped = False
        self._handshaken = False
        self._received = False

    def finish_connect(self) -> bool:
        if not super().finish_connect():
            return False
        if not self._wrapped:
            # Wrapping detaches the plain socket: unregister it first, register the TLS socket after.
            registered = self._registered
            if registered:
                self._sel.unregister(self.sock)
                self._registered = False
            self.sock = self._ctx.wrap_socket(self.sock, server_hostname=self._server_hostname,
                                              do_handshake_on_connect=False)
            self._wrapped = True
            if registered and self._interest:
                self._sel.register(self.sock, self._interest, self.attachment)
                self._registered = True
        return True

    def ready(self) -> bool:
        return self._handshaken

    def handshake(self) -> bool:
        """One step of the TLS handshake: ``True`` when complete; raises :class:`SslAuthenticationError` when the
        handshake fails (certificate not trusted, host name mismatch, the peer refused ours)."""
        if self._handshaken:
            return True
        sock: ssl.SSLSocket = self.sock  # type: ignore[assignment]
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.set_interest(EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self.set_interest(EVENT_WRITE)
            return False
        except ssl.SSLCertVerificationError as e:
            raise SslAuthenticationError(f"SSL handshake failed: certificate verify failed: {e.verify_message} "
                                         f"(check ssl.ca.location / ssl.truststore.location and the broker's "
                                         f"host name)") from None
        except ssl.SSLError as e:
            raise SslAuthenticationError(f"SSL handshake failed: {e.reason or e}") from None
        except ConnectionError as e:
            raise SslAuthenticationError(f"SSL handshake failed: the broker closed the connection ({e})") from None
        self._handshaken = True
        return True

    def read(self, buf: memoryview) -> int:
        try:
            n = self.sock.recv_into(buf)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return 0
        except ssl.SSLError as e:
            if not self._received:
                # TLS 1.3: the broker checks our certificate after our side of the handshake is done; its refusal
                # (an alert) arrives with the first read.
                raise SslAuthenticationError(f"SSL handshake failed: the broker refused the connection "
                                             f"({e.reason or e}); check ssl.certificate.location / "
                                             f"ssl.keystore.location") from None
            raise
        if n:
            self._received = True
        elif len(buf):
            if not self._received:
                # TLS 1.3: a broker that refuses our certificate (or its absence) does so after our side of the
                # handshake is done, and closes: the first read meets the end of the stream.
                raise SslAuthenticationError(
                    "SSL handshake failed: the broker closed the connection right after the TLS handshake (does it "
                    "require a client certificate? check ssl.certificate.location / ssl.keystore.location)")
            return -1
        return n

    def write(self, buffers: list[memoryview]) -> int:
        # SSL sockets have no sendmsg: join small sends into one TLS record, write big ones buffer by buffer
        # (joining a large payload again after every partial write would copy it over and over).
        if len(buffers) == 1:
            data: Any = buffers[0]
        elif sum(len(b) for b in buffers) <= 65536:
            data = b"".join(buffers)
        else:
            data = buffers[0]
        try:
            return self.sock.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return 0

    def has_bytes_buffered(self) -> bool:
        sock = self.sock
        return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
