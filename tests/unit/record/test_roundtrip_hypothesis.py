"""Property tests: builder -> reader round trips over random records and codecs; random corruption never
escapes as anything but ``CorruptMessageError``."""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError
from strom.record import CompressionType, MemoryRecords, MemoryRecordsBuilder, RecordBatch, split_records
from strom.record.builder import record_size
from strom.record.crc import crc32c

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch as KBatch

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), maybe_bytes), max_size=4).map(tuple)
timestamps = st.integers(min_value=0, max_value=2**48)
records = st.lists(st.tuples(timestamps, maybe_bytes, maybe_bytes, headers), min_size=1, max_size=25)
codecs = st.sampled_from(list(CompressionType))


@SETTINGS
@given(
    recs=records,
    codec=codecs,
    base_offset=st.integers(min_value=0, max_value=2**62),
    pid=st.integers(min_value=-1, max_value=2**62),
    epoch=st.integers(min_value=-1, max_value=2**15 - 1),
    seq=st.integers(min_value=-1, max_value=2**31 - 1),
    txn=st.booleans(),
)
def test_builder_reader_roundtrip(
    recs: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    codec: CompressionType,
    base_offset: int,
    pid: int,
    epoch: int,
    seq: int,
    txn: bool,
) -> None:
    b = MemoryRecordsBuilder(
        codec,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    for i, (ts, key, value, hdrs) in enumerate(recs):
        assert b.append(ts, key, value, hdrs) == i
    data = b.build()
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (
        pid,
        epoch,
        seq,
        txn,
    )
    assert batch.base_timestamp == recs[0][0] and batch.max_timestamp == max(r[0] for r in recs)
    decoded = batch.records()
    assert [(r.timestamp, r.key, r.value, r.headers) for r in decoded] == recs
    assert [r.offset for r in decoded] == [base_offset + i for i in range(len(recs))]
    assert [r.size_in_bytes for r in decoded] == [
        record_size(i, ts - recs[0][0], k, v, h) for i, (ts, k, v, h) in enumerate(recs)
    ]
    # kafka-python agrees (no snappy module there; its other codecs are real)
    if codec != CompressionType.SNAPPY:
        kb = KBatch(bytearray(data))
        assert kb.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kb] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded
        ]


@SETTINGS
@given(recs=records, codec=codecs, limit=st.integers(min_value=100, max_value=3000))
def test_split_preserves_records(
    recs: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    codec: CompressionType,
    limit: int,
) -> None:
    batches = split_records(recs, limit, codec)
    got = [(r.timestamp, r.key, r.value, r.headers) for data in batches for r in RecordBatch(data).records()]
    assert got == recs
    for data in batches:
        if RecordBatch(data).records_count > 1 and codec == CompressionType.NONE:
            assert len(data) <= limit


@SETTINGS
@given(recs=records, codec=codecs, data=st.data())
def test_random_corruption_is_detected_or_reported(
    recs: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    codec: CompressionType,
    data: st.DataObject,
) -> None:
    b = MemoryRecordsBuilder(codec)
    for ts, key, value, hdrs in recs:
        b.append(ts, key, value, hdrs)
    buf = bytearray(b.build())
    index = data.draw(st.integers(min_value=17, max_value=len(buf) - 1))
    buf[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    assert not RecordBatch(bytes(buf)).is_valid()
    # with the CRC "fixed" the garbage must still only ever raise CorruptMessageError
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    try:
        for batch in MemoryRecords(bytes(buf)).batches():
            batch.records()
    except CorruptMessageError:
        pass


@SETTINGS
@given(garbage=st.binary(min_size=0, max_size=400), count=st.integers(min_value=0, max_value=50))
def test_garbage_records_block_raises_only_corrupt(garbage: bytes, count: int) -> None:
    header = bytearray(61)
    struct.pack_into(">qiib", header, 0, 0, 49 + len(garbage), -1, 2)
    struct.pack_into(">i", header, 57, count)
    buf = header + garbage
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    batch = RecordBatch(bytes(buf))
    batch.ensure_valid()
    try:
        recs = batch.records()
    except CorruptMessageError:
        return
    assert len(recs) == count
