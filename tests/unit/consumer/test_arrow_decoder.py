"""The columnar decoder (``KafkaConsumer.poll_arrow``) yields the records the record-by-record decoder yields,
for every batch shape: uniform runs (one- to three-byte offset deltas, two-byte timestamp deltas), keys,
varying sizes, null keys and values, headers, LogAppendTime; and rejects corrupt blocks."""

from __future__ import annotations

import os
import random

import pytest

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals.arrow_decoder import decode_batch_columns
from strom.record.batch import RecordBatch, decode_records
from strom.record.builder import MemoryRecordsBuilder
from strom.record.header import HEADER_SIZE

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000


def _batch(kind: str, n: int, rng: random.Random) -> bytes:
    b = MemoryRecordsBuilder()
    for i in range(n):
        if kind == "uniform":
            b.append(TS + rng.choice([0, 0, 1, 100, 70]), None, b"v" * 50)
        elif kind == "keyed":
            b.append(TS + i // 100, b"k%05d" % (i % 7), b"v" * 30)
        elif kind == "vary":
            b.append(TS, None, os.urandom(rng.randint(0, 200)))
        elif kind == "nulls":
            b.append(TS, None if i % 3 else b"k", None if i % 5 == 0 else b"x")
        elif kind == "headers":
            b.append(TS, b"k", b"x", [("h", b"1")] if i % 2 else [])
        else:
            b.append(TS + rng.randint(0, 10**7), b"kk", b"v" * 3000)
    return bytes(b.build())


@pytest.mark.parametrize("kind", ["uniform", "keyed", "vary", "nulls", "headers", "big"])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 700, 9000])
def test_columns_equal_records(kind: str, n: int) -> None:
    rng = random.Random(n)
    data = _batch(kind, n if kind != "big" else min(n, 700), rng)
    h = RecordBatch(data).header
    count = h.records_count
    want = decode_records(data, HEADER_SIZE, len(data), count, 1000, h.base_timestamp)
    got = decode_batch_columns(data, HEADER_SIZE, len(data), count, 1000, h.base_timestamp, True, None, 1)
    assert got.column("offset").to_pylist() == [r.offset for r in want]
    assert got.column("timestamp").to_pylist() == [r.timestamp for r in want]
    assert got.column("timestamp_type").to_pylist() == [1] * count
    assert got.column("key").to_pylist() == [r.key for r in want]
    assert got.column("value").to_pylist() == [r.value for r in want]
    assert [[(x["key"], x["value"]) for x in hs] for hs in got.column("headers").to_pylist()] == \
        [list(r.headers) for r in want]


def test_log_append_time_replaces_timestamps() -> None:
    data = _batch("uniform", 100, random.Random(1))
    h = RecordBatch(data).header
    got = decode_batch_columns(data, HEADER_SIZE, len(data), 100, 0, h.base_timestamp, True, 42)
    assert got.column("timestamp").to_pylist() == [42] * 100


@pytest.mark.parametrize("kind", ["uniform", "vary", "headers"])
def test_truncated_or_overlong_block_is_corrupt(kind: str) -> None:
    data = _batch(kind, 200, random.Random(3))
    h = RecordBatch(data).header
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(data + b"\x00\x00", HEADER_SIZE, len(data) + 2, 200, 0, h.base_timestamp, True)
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(data[:-3], HEADER_SIZE, len(data) - 3, 200, 0, h.base_timestamp, True)
