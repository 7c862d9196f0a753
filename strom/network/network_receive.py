"""Size-prefixed frames in and out: ``NetworkReceive`` and ``NetworkSend``.

Wire layout: ``INT32 size`` (big-endian, signed) then ``size`` payload bytes.

Kafka counterparts: ``org.apache.kafka.common.network.NetworkReceive`` (reads the 4-byte size, validates it
against ``max_size``, allocates the payload from a memory pool, then reads the payload, possibly across many
calls; the state machine is the shared :class:`~strom.protocol.connection.FrameDecoder`) and ``NetworkSend`` / ``ByteBufferSend`` (writes buffers, possibly across many calls, gathering writes).
Not thread-safe: owned by one channel on the I/O thread.
"""

from __future__ import annotations

import struct
from typing import Any

from strom.network.errors import InvalidReceiveError
from strom.network.transport import NONE_POOL, MemoryPool
from strom.protocol.connection import FrameDecoder, InvalidFrameError

__all__ = ["NetworkReceive", "NetworkSend", "UNLIMITED"]

UNLIMITED = -1
_I32 = struct.Struct(">i")


class NetworkReceive:
    """One incoming frame being read (Kafka's ``NetworkReceive``): the I/O side of the shared sans-I/O
    :class:`~strom.protocol.connection.FrameDecoder`, reading straight into the payload buffer (``recv_into``),
    which comes from the channel's memory pool."""

    __slots__ = ("source", "max_size", "memory_pool", "_decoder", "_payload", "_read")

    def __init__(self, max_size: int = UNLIMITED, source: Any = None, memory_pool: MemoryPool = NONE_POOL,
                 decoder: FrameDecoder | None = None) -> None:
        self.source = source
        self.max_size = max_size
        self.memory_pool = memory_pool
        # A channel passes its own decoder (at a frame boundary: it never reads past a frame) to save building
        # one per response.
        self._decoder = decoder if decoder is not None else FrameDecoder(max_size, memory_pool.try_allocate)
        self._payload: memoryview | None = None
        self._read = 0

    @property
    def requested_size(self) -> int:
        if self._payload is not None:
            return len(self._payload)
        return self._decoder.frame_size

    def read_from(self, transport: Any) -> int:
        """Read what is available, up to the end of this frame (never beyond: the next frame is the next
        receive's); returns the bytes read. Raises ``EOFError`` at end of stream and
        :class:`InvalidReceiveError` for a bad size. Reads until the transport has nothing more, so nothing stays
        buffered above the socket (TLS) where readiness events cannot see it."""
        read = 0
        decoder = self._decoder
        while self._payload is None:
            buf = decoder.buffer()
            if buf is None:  # the pool is out of memory: the channel mutes until it has some again
                break
            n = transport.read(buf)
            if n < 0:
                raise EOFError("connection closed by peer")
            if n == 0:
                break
            read += n
            try:
                self._payload = decoder.advance(n)
            except InvalidFrameError as e:
                raise InvalidReceiveError(str(e)) from None
        self._read += read
        return read

    def complete(self) -> bool:
        return self._payload is not None

    def required_memory_amount_known(self) -> bool:
        return self.requested_size != -1

    def memory_allocated(self) -> bool:
        return self._payload is not None or self._decoder.payload_allocated

    def payload(self) -> memoryview:
        """The frame payload (size prefix excluded)."""
        if self._payload is None:
            raise ValueError("the payload is not complete yet")
        return self._payload

    def size(self) -> int:
        """Bytes of the whole frame read so far (4 + payload)."""
        return self._read

    def release(self) -> None:
        payload = self._payload
        if payload is not None and len(payload):
            buf = payload.obj
            payload.release()
            if isinstance(buf, bytearray):
                self.memory_pool.release(buf)
        self._payload = None

    def __repr__(self) -> str:
        return f"NetworkReceive(source={self.source}, size={self.requested_size}, read={self._read})"


class NetworkSend:
    """A frame (or several buffers) to write to one destination (Kafka's ``NetworkSend``)."""

    __slots__ = ("destination", "_buffers", "_remaining", "size")

    def __init__(self, destination: Any, *buffers: bytes | bytearray | memoryview) -> None:
        self.destination = destination
        self._buffers = [memoryview(b).cast("B") for b in buffers if len(b)]
        self.size = sum(len(b) for b in self._buffers)
        self._remaining = self.size

    @classmethod
    def sized(cls, destination: Any, payload: bytes | bytearray | memoryview) -> NetworkSend:
        """A frame: the size prefix then ``payload``."""
        return cls(destination, _I32.pack(len(payload)), payload)

    def completed(self) -> bool:
        return self._remaining == 0

    def remaining(self) -> int:
        return self._remaining

    def write_to(self, transport: Any) -> int:
        """Write as much as the transport takes; returns the bytes written."""
        if not self._remaining:
            return 0
        n = transport.write(self._buffers)
        if n <= 0:
            return 0
        self._remaining -= n
        buffers = self._buffers
        left = n
        while left:
            first = buffers[0]
            if len(first) <= left:
                left -= len(first)
                buffers.pop(0)
            else:
                buffers[0] = first[left:]
                left = 0
        return n

    def __repr__(self) -> str:
        return f"NetworkSend(destination={self.destination}, size={self.size}, remaining={self._remaining})"
