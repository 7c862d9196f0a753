"""FrameBufferPool: a frame's buffer is handed out again only once nothing views it, so a frame (or a slice of it)
kept by a request handler never sees its bytes overwritten by a later frame."""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.connection import FrameBufferPool, FrameDecoder


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _id(view: memoryview | bytearray) -> int:
    """The id of the buffer under ``view`` (ids, not references: a reference held here would keep it in use)."""
    return id(view.obj if isinstance(view, memoryview) else view)


def _pooled(pool: FrameBufferPool) -> list[int]:
    return [id(b) for b in pool._buffers]


def test_a_buffer_nothing_views_is_handed_out_again() -> None:
    pool = FrameBufferPool(min_size=1024)
    first = pool.allocate(5000)
    base = _id(first)
    assert len(first) == 5000 and _pooled(pool) == [base]
    del first
    again = pool.allocate(4000)  # a smaller frame fits the same buffer, as a view of exactly its size
    assert _id(again) == base and len(again) == 4000
    assert pool.pooled_bytes == 5000


def test_a_buffer_still_viewed_is_not_handed_out() -> None:
    pool = FrameBufferPool(min_size=1024)
    frame = memoryview(pool.allocate(5000))
    first = _id(frame)
    part = frame[100:200]  # e.g. the records of a decoded produce request
    del frame
    other = pool.allocate(5000)
    assert _id(other) != first and len(pool._buffers) == 2
    del part  # the last view of the first buffer: it is free again (``other`` is still in use)
    assert _id(pool.allocate(5000)) == first


def test_the_smallest_idle_buffer_that_fits_is_chosen_and_small_frames_are_not_pooled() -> None:
    pool = FrameBufferPool(min_size=1024)
    big, small = pool.allocate(90_000), pool.allocate(10_000)
    big_id, small_id = _id(big), _id(small)
    del big, small
    a = pool.allocate(8000)
    b = pool.allocate(20_000)
    assert (_id(a), _id(b)) == (small_id, big_id)
    tiny = pool.allocate(1000)
    assert isinstance(tiny, bytearray) and id(tiny) not in _pooled(pool) and pool.pooled_bytes == 100_000


def test_the_pool_keeps_at_most_max_buffers_and_max_bytes() -> None:
    pool = FrameBufferPool(min_size=1024, max_buffers=2, max_bytes=50_000)
    held = [pool.allocate(20_000) for _ in range(3)]  # all in use: the third is not kept
    assert pool.pooled_bytes == 40_000 and len(pool._buffers) == 2 and _id(held[2]) not in _pooled(pool)
    huge = pool.allocate(60_000)  # over max_bytes on its own: never kept
    assert pool.pooled_bytes == 40_000 and _id(huge) not in _pooled(pool)
    del held
    bigger = pool.allocate(30_000)  # the idle buffers are too small: one dropped to make room
    assert pool.pooled_bytes == 50_000 and len(pool._buffers) == 2 and _id(bigger) in _pooled(pool)


def test_decoded_frames_kept_alive_keep_their_bytes() -> None:
    """The broker's case: a request frame stays queued (or parked) while the next frames arrive in pieces."""
    pool = FrameBufferPool(min_size=64)
    decoder = FrameDecoder(1 << 20, pool.allocate)
    payloads = [os.urandom(n) for n in (300, 5000, 300, 7000, 5000)]
    stream = b"".join(_frame(p) for p in payloads)
    kept = []
    for i in range(0, len(stream), 97):  # every frame spans reads: each is copied into a pool buffer
        kept.extend(decoder.feed(stream[i:i + 97]))
    assert [bytes(f) for f in kept] == payloads
    del kept
    again = [f for i in range(0, len(stream), 97) for f in decoder.feed(stream[i:i + 97])]
    assert [bytes(f) for f in again] == payloads
    assert len(pool._buffers) <= len(payloads)  # the second pass reused the first pass's buffers


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.booleans()), min_size=1, max_size=30),
       st.integers(1, 700), st.integers(1, 6))
def test_any_frames_any_reads_any_kept(frames: list[tuple[int, bool]], chunk: int, max_buffers: int) -> None:
    pool = FrameBufferPool(min_size=16, max_buffers=max_buffers, max_bytes=8000)
    decoder = FrameDecoder(1 << 20, pool.allocate)
    payloads = [os.urandom(n) for n, _ in frames]
    stream = b"".join(_frame(p) for p in payloads)
    kept: list[tuple[bytes, memoryview]] = []
    got = 0
    for i in range(0, len(stream), chunk):
        for frame in decoder.feed(bytearray(stream[i:i + chunk])):  # (a mutable chunk: frames are always copied)
            if frames[got][1]:
                kept.append((payloads[got], frame[len(frame) // 3:]))  # a slice keeps the buffer too
            else:
                assert bytes(frame) == payloads[got]
            got += 1
    assert got == len(payloads)
    for payload, part in kept:
        assert bytes(part) == payload[len(payload) // 3:]
    assert pool.pooled_bytes <= 8000 and len(pool._buffers) <= max_buffers
