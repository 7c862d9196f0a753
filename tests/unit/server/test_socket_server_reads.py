"""How a connection reads (``KafkaServerProtocol`` as an asyncio buffered protocol), driven the way a transport
drives it: ``get_buffer()``, bytes written there, ``buffer_updated(n)``. Large frames are read straight into their
own buffer; everything else goes through the listener's shared read buffer, and frames found there are copied out,
so a later read (of this connection or another) never changes a queued frame."""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.connection import FrameBufferPool
from strom.server.socket_server import KafkaServerProtocol

READ_BUFFER = 4096


async def _never(ctx: object, frame: memoryview) -> None:  # the dispatcher: not reached without a worker
    raise AssertionError("no dispatch expected")


def _protocol(pool: FrameBufferPool, read_buffer: memoryview) -> KafkaServerProtocol:
    return KafkaServerProtocol(_never, 1 << 24, lambda p: None, frame_pool=pool, read_buffer=read_buffer)


def _deliver(proto: KafkaServerProtocol, data: bytes, max_read: int) -> list[bool]:
    """Feed ``data`` as a transport would, at most ``max_read`` bytes per read; whether each read went straight
    into a frame's own buffer."""
    direct = []
    pos = 0
    while pos < len(data):
        buf = proto.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), max_read, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        direct.append(proto._direct)
        proto.buffer_updated(n)
        pos += n
    return direct


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _queued(proto: KafkaServerProtocol) -> list[bytes]:
    return [bytes(f) for f, _ in proto._queue]


def test_a_large_frame_is_read_into_its_own_buffer() -> None:
    shared = memoryview(bytearray(READ_BUFFER))
    proto = _protocol(FrameBufferPool(min_size=1024), shared)
    big = os.urandom(200_000)
    direct = _deliver(proto, _frame(big) + _frame(b"tail"), 65536)
    assert direct[0] is False and direct[1:-1] and all(direct[1:-1])  # the head came through the shared buffer
    assert _queued(proto) == [big, b"tail"]


def test_frames_in_the_shared_buffer_are_copied_out() -> None:
    shared = memoryview(bytearray(READ_BUFFER))
    a, b = _protocol(FrameBufferPool(), shared), _protocol(FrameBufferPool(), shared)
    _deliver(a, _frame(b"first") + _frame(b"x" * 100), READ_BUFFER)
    _deliver(b, _frame(b"\xff" * 3000), READ_BUFFER)  # another connection's read overwrites the shared buffer
    _deliver(a, _frame(b"\0" * 3000), READ_BUFFER)
    assert _queued(a) == [b"first", b"x" * 100, b"\0" * 3000]
    assert _queued(b) == [b"\xff" * 3000]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40_000), min_size=1, max_size=12), st.integers(1, 70_000), st.integers(0, 2))
def test_any_frames_any_reads(sizes: list[int], max_read: int, others: int) -> None:
    shared = memoryview(bytearray(READ_BUFFER))
    pool = FrameBufferPool(min_size=512, max_buffers=3, max_bytes=100_000)
    proto = _protocol(pool, shared)
    noise = [_protocol(pool, shared) for _ in range(others)]
    payloads = [os.urandom(n) for n in sizes]
    data = b"".join(_frame(p) for p in payloads)
    pos = 0
    while pos < len(data):  # reads of this connection interleaved with reads of others on the same listener
        buf = proto.get_buffer(-1)
        n = min(len(buf), max_read, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        proto.buffer_updated(n)
        pos += n
        for other in noise:
            _deliver(other, _frame(os.urandom(100)), READ_BUFFER)
    assert _queued(proto) == payloads
