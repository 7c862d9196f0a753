"""``MemoryRecordsBuilder.try_append_many`` (the producer's bulk path) writes exactly what the same records
appended one by one with ``try_append`` write, and stops where ``try_append`` would (size limit, compression
estimate, a non-empty builder, null keys/values, long values)."""

from __future__ import annotations

import os
import random

import pytest

from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType

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
