"""Golden interop with kafka-python's record code (software we did not write), both directions.

kafka-python's snappy needs the ``python-snappy`` module, which is not installed here; a shim built on
cramjam's raw snappy is patched into ``kafka.codec`` (kafka-python still does its own xerial framing).
Its v0 lz4 writer needs ``xxhash``; a shim is patched in the same way.
"""

from __future__ import annotations

import struct
import types
import warnings
import zlib
from collections.abc import Iterator

import cramjam
import pytest

from strom.record import (
    CompressionType,
    MemoryRecords,
    MemoryRecordsBuilder,
    RecordBatch,
    build_control_batch,
)
from strom.record.compression import xxh32
from strom.record.varint import size_of_varint

with warnings.catch_warnings():  # kafka-python uses deprecated importlib.resources calls at import time
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kcodec
    from kafka.record import MemoryRecords as KMemoryRecords
    from kafka.record.default_records import DefaultRecordBatch as KBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as KBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder as KLegacyBuilder

pytestmark = [pytest.mark.unit, pytest.mark.interop]

TS = 1_650_000_000_000
RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (TS, b"key-0", b"value " * 30, []),
    (TS + 1, None, b"no key", []),
    (TS + 2, b"key-2", None, []),
    (TS + 3, b"k3", b"with headers", [("h1", b"v1"), ("empty", b""), ("null", None), ("ключ", b"\x00\xff")]),
    (TS - 50, b"", b"", []),
    (TS + 10**6, b"k5", bytes(range(256)) * 40, [("bin", bytes(range(32)))]),
]


@pytest.fixture(autouse=True)
def _codec_shims(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )
    monkeypatch.setattr(kcodec, "snappy", shim)

    class _Xxh32:
        def __init__(self, data: bytes) -> None:
            self._h = xxh32(bytes(data))

        def digest(self) -> bytes:
            return self._h.to_bytes(4, "big")

    monkeypatch.setattr(kcodec, "xxhash", types.SimpleNamespace(xxh32=_Xxh32))
    yield


def kafka_python_batch(codec: CompressionType, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    b = KBuilder(2, int(codec), False, pid, epoch, seq, 10**6)
    for i, (ts, key, value, headers) in enumerate(RECORDS):
        assert b.append(i, ts, key, value, headers) is not None
    return bytes(b.build())


@pytest.mark.parametrize("codec", list(CompressionType))
def test_we_read_kafka_python_batches(codec: CompressionType) -> None:
    data = kafka_python_batch(codec, pid=77, epoch=2, seq=100)
    batch = RecordBatch(data)
    batch.ensure_valid()
    kb = KBatch(bytearray(data))
    assert kb.validate_crc()
    assert batch.crc == kb.crc
    assert batch.compression_type is codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 100)
    assert (batch.last_sequence, batch.last_offset_delta) == (kb.last_sequence, kb.last_offset_delta)
    assert (batch.base_timestamp, batch.max_timestamp) == (kb.first_timestamp, kb.max_timestamp)
    recs = batch.records()
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in recs] == RECORDS
    assert [r.offset for r in recs] == list(range(len(RECORDS)))
    # kafka-python's size excludes the record's own length varint; ours (like Java's) includes it
    assert [r.size_in_bytes for r in recs] == [
        kr.size_in_bytes + size_of_varint(kr.size_in_bytes) for kr in KBatch(bytearray(data))
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_reads_our_batches(codec: CompressionType) -> None:
    b = MemoryRecordsBuilder(codec, base_offset=1000, producer_id=5, producer_epoch=1, base_sequence=3)
    for ts, key, value, headers in RECORDS:
        b.append(ts, key, value, headers)
    data = b.build()
    kmr = KMemoryRecords(data)
    kbatch = kmr.next_batch()
    assert kmr.next_batch() is None
    assert kbatch.validate_crc()
    assert kbatch.compression_type == codec
    assert (kbatch.base_offset, kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (
        1000,
        5,
        1,
        3,
    )
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kbatch]
    assert got == [(1000 + i, *rec) for i, rec in enumerate(RECORDS)]


def test_uncompressed_bytes_identical_to_kafka_python() -> None:
    ours = MemoryRecordsBuilder(partition_leader_epoch=0)  # kafka-python writes epoch 0, not -1
    for ts, key, value, headers in RECORDS:
        ours.append(ts, key, value, headers)
    assert ours.build() == kafka_python_batch(CompressionType.NONE)


def test_kafka_python_reads_our_control_batch() -> None:
    data = build_control_batch(1, 4, producer_id=9, producer_epoch=0, timestamp=TS, base_offset=20)
    kbatch = KMemoryRecords(data).next_batch()
    assert kbatch.is_control_batch and kbatch.is_transactional and kbatch.validate_crc()
    (rec,) = list(kbatch)
    assert rec.commit and rec.version == 0 and rec.offset == 20


# -- legacy v0/v1 message sets (read-only) ---------------------------------------------------------


def legacy_set(magic: int, codec: CompressionType, wrapper_offset: int | None = None) -> bytes:
    b = KLegacyBuilder(magic, int(codec), 10**6)
    for i, (ts, key, value, _headers) in enumerate(RECORDS):
        b.append(i, ts, key, value)
    data = bytearray(b.build())
    if wrapper_offset is not None:  # what a broker does to a compressed wrapper
        struct.pack_into(">q", data, 0, wrapper_offset)
        # the offset is outside the legacy CRC (which starts at the magic byte)
    return bytes(data)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]
)
def test_we_read_kafka_python_legacy_message_sets(magic: int, codec: CompressionType) -> None:
    n = len(RECORDS)
    data = legacy_set(
        magic, codec, wrapper_offset=None if codec == 0 else (n - 1 if magic == 0 else 500 + n - 1)
    )
    mr = MemoryRecords(data)
    mr.ensure_valid()
    batches = list(mr.batches())
    assert all(b.magic == magic for b in batches)
    assert len(batches) == (n if codec == 0 else 1)
    recs = list(mr.records())
    expected_ts = [ts if magic == 1 else -1 for ts, *_ in RECORDS]
    assert [(r.key, r.value) for r in recs] == [(k, v) for _ts, k, v, _h in RECORDS]
    assert [r.timestamp for r in recs] == expected_ts
    first = 500 if (magic == 1 and codec) else 0
    assert [r.offset for r in recs] == list(range(first, first + n))
    assert batches[0].compression_type is codec
    assert batches[-1].last_offset == first + n - 1
    assert batches[0].base_offset == first
    assert batches[0].records_count == (1 if codec == 0 else n)
    assert batches[0].producer_id == -1 and not batches[0].is_control
    if magic == 0 and codec == CompressionType.LZ4:  # Kafka 0.8/0.9's broken LZ4 header checksum
        frame = batches[0]._key_value()[1]
        assert frame is not None and frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF
    bad = bytearray(data)
    bad[-3] ^= 1
    assert not all(b.is_valid() for b in MemoryRecords(bytes(bad)).batches())


def test_legacy_log_append_time_wrapper() -> None:
    data = bytearray(legacy_set(1, CompressionType.GZIP, wrapper_offset=9))
    # set the LogAppendTime bit and the wrapper timestamp, then fix the CRC (broker behaviour)
    data[17] |= 0x08  # attributes
    struct.pack_into(">q", data, 18, TS + 999)  # timestamp
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    (batch,) = list(MemoryRecords(bytes(data)).batches())
    batch.ensure_valid()
    assert int(batch.timestamp_type) == 1
    assert {r.timestamp for r in batch} == {TS + 999}
