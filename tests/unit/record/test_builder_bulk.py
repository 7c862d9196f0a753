"""``MemoryRecordsBuilder.try_append_many`` (the producer's bulk path) writes exactly what the same records
appended one by one with ``try_append`` write, and stops where ``try_append`` would (size limit, compression
estimate, a non-empty builder, null keys/values, long values)."""

from __future__ import annotations

import os
import random

import pytest

from strom.record import _fastencode
from strom.record import builder as builder_module
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType
from strom.record.header import HEADER_SIZE

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000


def _one_by_one(builder: MemoryRecordsBuilder, keys: list[bytes | None] | None, values: list[bytes | None]) -> int:
    for i, value in enumerate(values):
        if builder.try_append(TS, keys[i] if keys is not None else None, value) < 0:
            return i
    return len(values)


@pytest.mark.parametrize("seed", range(40))
def test_same_bytes_and_same_cut_as_record_by_record(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 3000)
    vmax = rng.choice([0, 5, 100, 300, 9000])
    values: list[bytes | None] = [os.urandom(rng.randint(0, vmax)) for _ in range(n)]
    if rng.random() < 0.2:
        values[rng.randrange(n)] = None
    keys: list[bytes | None] | None = ([os.urandom(rng.randint(0, 20)) for _ in range(n)]
                                       if rng.random() < 0.5 else None)
    limit = rng.choice([None, 1000, 16384, 65536])
    codec = rng.choice([CompressionType.NONE, CompressionType.GZIP])
    bulk = MemoryRecordsBuilder(codec, write_limit=limit)
    single = MemoryRecordsBuilder(codec, write_limit=limit)
    for i in range(rng.randint(0, 3)):  # a batch already holding records (earlier timestamp)
        bulk.try_append(TS - 5, b"x", b"y" * i)
        single.try_append(TS - 5, b"x", b"y" * i)
    start = rng.randint(0, min(10, n - 1))
    appended = bulk.try_append_many(TS, keys, values, start, n)
    assert appended == _one_by_one(single, keys[start:] if keys else None, values[start:])
    assert bulk.build() == single.build()


def test_pooled_buffer_and_offset_deltas_past_8192() -> None:
    values = [b"%d" % (i % 10) for i in range(20_000)]
    bulk = MemoryRecordsBuilder(buffer=bytearray(300_000), write_limit=300_000)
    single = MemoryRecordsBuilder(write_limit=300_000)
    assert bulk.try_append_many(TS, None, values, 0, len(values)) == _one_by_one(single, None, values)
    assert bytes(bulk.build()) == single.build()


def test_closed_builder_takes_nothing() -> None:
    b = MemoryRecordsBuilder()
    b.try_append(TS, None, b"a")
    b.build()
    assert b.try_append_many(TS, None, [b"x"], 0, 1) == 0


@pytest.mark.parametrize("seed", range(60))
def test_the_c_bulk_encoder_writes_what_the_python_bulk_path_writes(seed: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Into a pooled buffer (the producer's batches) ``try_append_many`` runs the C encoder
    (``strom/record/_fastencode.c``, ``encode_records``; it must be built): the same counts and bytes as the Python
    bulk path and as ``try_append`` record by record, whatever stops it (the write limit, the end of the buffer,
    a null, a ``bytearray`` or a value of 9,000 bytes, a compressed batch, records already in the batch)."""
    assert builder_module._encode_records is not None  # built
    rng = random.Random(seed)
    n = rng.randint(1, 400)
    vmax = rng.choice([0, 5, 100, 1024, 9000])
    values: list[object] = [os.urandom(rng.randint(0, vmax)) for _ in range(n)]
    for _ in range(rng.choice([0, 0, 1, 3])):
        values[rng.randrange(n)] = rng.choice([None, bytearray(b"ba")])
    keys: list[object] | None = [os.urandom(rng.randint(0, 20)) for _ in range(n)] if rng.random() < 0.5 else None
    if keys is not None and rng.random() < 0.3:
        keys[rng.randrange(n)] = None
    buffer_size = rng.choice([HEADER_SIZE, HEADER_SIZE + 40, 4096, 65536, 300_000])
    limit = rng.choice([None, buffer_size, 1000, 16384, 65536])
    codec = rng.choice([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP])
    earlier = rng.randint(0, 3)
    start = rng.randint(0, min(10, n - 1))

    def fill(accelerated: bool) -> tuple[int, bytes]:
        with monkeypatch.context() as m:
            if not accelerated:
                m.setattr(builder_module, "_encode_records", None)
            b = MemoryRecordsBuilder(codec, buffer=bytearray(buffer_size), write_limit=limit,
                                     estimated_compression_ratio=0.5)
            for i in range(earlier):  # a batch already holding records (earlier timestamp)
                b.try_append(TS - 5, b"x", b"y" * i)
            appended = b.try_append_many(TS, keys, values, start, n)  # type: ignore[arg-type]
            return appended, bytes(b.build())

    fast, slow = fill(True), fill(False)
    assert fast == slow
    single = MemoryRecordsBuilder(codec, write_limit=limit, estimated_compression_ratio=0.5)
    for i in range(earlier):
        single.try_append(TS - 5, b"x", b"y" * i)
    one_by_one = [bytes(v) if isinstance(v, bytearray) else v for v in values]
    assert fast[0] == _one_by_one(single, keys[start:] if keys else None, one_by_one[start:])  # type: ignore[arg-type]
    assert fast[1] == single.build()


def test_the_c_bulk_encoder_says_why_it_stopped() -> None:
    encode_records = _fastencode.encode_records
    target = bytearray(100)
    values = [b"v" * 10] * 5  # 17 bytes a record (no key) with offset deltas below 64
    assert encode_records(target, 0, 1000, 0, 0, None, values, 0, 5) == (5, 85, 0, 17)  # all written
    assert encode_records(target, 0, 40, 0, 0, None, values, 0, 5) == (2, 34, 1, 17)
    assert encode_records(target, 0, 34, 0, 0, None, values, 0, 5) == (2, 34, 1, 17)  # exactly the write limit
    assert encode_records(target, 0, -5, 0, 0, None, values, 0, 5) == (1, 17, 1, 17)  # the batch's first one fits
    assert encode_records(target, 0, -5, 0, 3, None, values, 0, 5) == (0, 0, 1, 0)  # ... no later one
    assert encode_records(target, 50, 1000, 0, 0, None, values, 0, 5) == (2, 34, 2, 17)  # the end of the buffer
    assert encode_records(target, 66, 1000, 0, 0, None, values, 0, 5) == (2, 34, 2, 17)  # exactly the buffer's end
    assert encode_records(target, 0, 1000, 0, 0, None, [b"a", bytearray(b"b"), b"c"], 0, 3) == (1, 8, 3, 8)
    assert encode_records(target, 0, 1000, 0, 0, [b"k", "text"], [b"a", b"b"], 0, 2) == (1, 9, 3, 9)
    assert encode_records(target, 0, 1000, 0, 0, None, values, 2, 2) == (0, 0, 0, 0)
    # the largest record's size, wherever it is in the run
    assert encode_records(target, 0, 1000, 0, 0, None, [b"a", b"v" * 30, b"bb"], 0, 3) == (3, 54, 0, 37)
    with pytest.raises(TypeError):
        encode_records(target, 0, 1000, 0, 0, None, tuple(values), 0, 5)
    with pytest.raises(ValueError):
        encode_records(target, 0, 1000, 0, 0, None, values, 3, 6)
    with pytest.raises(ValueError):
        encode_records(target, 0, 1000, 0, 0, [b"k"], values, 0, 5)
    with pytest.raises(ValueError):
        encode_records(target, 101, 1000, 0, 0, None, values, 0, 5)
    with pytest.raises(BufferError):
        encode_records(memoryview(bytes(100)), 0, 1000, 0, 0, None, values, 0, 5)
    with pytest.raises(TypeError):
        encode_records(target, 0, 1000, 0, 0, None, values, 0)


def _record_sizes(batch: bytes) -> list[int]:
    """Each record's encoded size (its length varint included), read off an uncompressed batch."""
    from strom.record.varint import decode_varint

    sizes, pos = [], HEADER_SIZE
    while pos < len(batch):
        length, end = decode_varint(batch, pos)
        sizes.append(end - pos + length)
        pos = end + length
    return sizes


@pytest.mark.parametrize("c_encoder", [True, False])
@pytest.mark.parametrize("bulk", [True, False])
def test_the_largest_records_size_is_kept_on_every_path(c_encoder: bool, bulk: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_record_size`` (the producer's record-size-max) is the largest record as encoded, whichever path
    wrote it: the C or the Python encoder, one record at a time or in bulk."""
    if not c_encoder:
        monkeypatch.setattr(builder_module, "_encode_record", None)
        monkeypatch.setattr(builder_module, "_encode_records", None)
    rng = random.Random(7)
    values = [os.urandom(rng.choice((3, 40, 300, 9000 if not bulk else 2000))) for _ in range(60)]
    keys = [os.urandom(rng.randrange(0, 20)) for _ in values]
    b = MemoryRecordsBuilder(CompressionType.NONE, write_limit=1 << 20, buffer=bytearray(1 << 20))
    assert b.max_record_size == 0
    if bulk:
        assert b.try_append_many(TS, keys, values, 0, len(values)) == len(values)
    else:
        assert _one_by_one(b, keys, values) == len(values)
    expected = max(_record_sizes(bytes(b.build())))
    assert b.max_record_size == expected
