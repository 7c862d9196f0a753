"""Size-prefixed frames in and out: ``NetworkReceive`` and ``NetworkSend``.

Wire layout: ``INT32 size`` (big-endian, signed) then ``size`` payload bytes.

Kafka counterparts: ``org.apache.kafka.common.network.NetworkReceive`` (reads the 4-byte size, validates it
against ``max_size``, allocates the payload from a memory pool, then reads the payload, possibly across many
calls) and ``NetworkSend`` / ``ByteBufferSend`` (writes buffers, possibly across many calls, gathering writes).
Not thread-safe: owned by one channel on the I/O thread.
"""

from __future__ import annotations

import struct
from typing import Any

from strom.network.errors import InvalidReceiveError
from strom.network.transport import NONE_POOL, MemoryPool

__all__ = ["NetworkReceive", "NetworkSend", "UNLIMITED"]

UNLIMITED = -1
_I32 = struct.Struct(">i")
_EMPTY = bytearray()


class NetworkReceive:
    """One incoming frame being read (Kafka's ``NetworkReceive``)."""

    __slots__ = ("source", "max_size", "memory_pool", "_size", "_size_pos", "_buffer", "_pos", "requested_size")

    def __init__(self, max_size: int = UNLIMITED, source: Any = None, memory_pool: MemoryPool = NONE_POOL) -> None:
        self.source = source
        self.max_size = max_size
        self.memory_pool = memory_pool
        self._size = bytearray(4)
        self._size_pos = 0
        self._buffer: bytearray | None = None
        self._pos = 0
        self.requested_size = -1

    def read_from(self, transport: Any) -> int:
        """Read what is available; returns the bytes read. Raises ``EOFError`` at end of stream and
        :class:`InvalidReceiveError` for a bad size."""
        read = 0
        if self._size_pos < 4:
            n = transport.read(memoryview(self._size)[self._size_pos:])
            if n < 0:
                raise EOFError("connection closed by peer")
            read += n
            self._size_pos += n
            if self._size_pos == 4:
                receive_size = _I32.unpack(self._size)[0]
                if receive_size < 0:
                    raise InvalidReceiveError(f"Invalid receive (size = {receive_size})")
                if self.max_size != UNLIMITED and receive_size > self.max_size:
                    raise InvalidReceiveError(
                        f"Invalid receive (size = {receive_size} larger than {self.max_size})")
                self.requested_size = receive_size
                if receive_size == 0:
                    self._buffer = _EMPTY
        if self._buffer is None and self.requested_size != -1:
            self._buffer = self.memory_pool.try_allocate(self.requested_size)
        buffer = self._buffer
        if buffer is not None and self._pos < len(buffer):
            n = transport.read(memoryview(buffer)[self._pos:])
            if n < 0:
                raise EOFError("connection closed by peer")
            read += n
            self._pos += n
        return read

    def complete(self) -> bool:
        return self._size_pos == 4 and self._buffer is not None and self._pos == len(self._buffer)

    def required_memory_amount_known(self) -> bool:
        return self.requested_size != -1

    def memory_allocated(self) -> bool:
        return self._buffer is not None

    def payload(self) -> memoryview:
        """The frame payload (size prefix excluded)."""
        if self._buffer is None:
            raise ValueError("the payload is not allocated yet")
        return memoryview(self._buffer)

    def size(self) -> int:
        """Bytes of the whole frame read so far (4 + payload)."""
        return self._size_pos + self._pos

    def release(self) -> None:
        if self._buffer is not None and self._buffer is not _EMPTY:
            self.memory_pool.release(self._buffer)
        self._buffer = None

    def __repr__(self) -> str:
        return f"NetworkReceive(source={self.source}, size={self.requested_size}, read={self._pos})"


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
