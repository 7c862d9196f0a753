"""MemoryRecordsBuilder / RecordBatch / MemoryRecords behaviour (sizes, limits, control batches, split,
corruption and truncation)."""

from __future__ import annotations

import struct

import pytest

from strom.common.error_codes import CorruptMessageError
from strom.common.errors import IllegalStateError
from strom.record import (
    CompressionType,
    ControlRecordType,
    MemoryRecords,
    MemoryRecordsBuilder,
    Record,
    RecordBatch,
    TimestampType,
    build_control_batch,
    record_size,
    record_size_upper_bound,
    split_into_builders,
    split_records,
    upper_bound_size,
)
from strom.record import records as records_module
from strom.record.crc import crc32c
from strom.record.header import HEADER_SIZE, compute_crc, parse_header, set_base_offset

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000


def build(codec: CompressionType = CompressionType.NONE, n: int = 5, **kwargs: object) -> bytes:
    b = MemoryRecordsBuilder(codec, **kwargs)  # type: ignore[arg-type]
    for i in range(n):
        headers = (("h", b"x"), ("null", None)) if i % 2 else ()
        b.append(TS + i, b"k%d" % i, None if i == 2 else b"value-%d" % i * 3, headers)
    return b.build()


def test_header_fields_and_records() -> None:
    data = build(
        CompressionType.NONE,
        base_offset=100,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.next_offset, batch.last_offset_delta) == (
        100,
        104,
        105,
        4,
    )
    assert batch.size_in_bytes == len(data) == batch.batch_length + 12
    assert (batch.partition_leader_epoch, batch.magic) == (9, 2)
    assert batch.crc == crc32c(data[21:]) == compute_crc(data)
    assert batch.compression_type is CompressionType.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 4)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (
        42,
        3,
        7,
        11,
    )
    assert batch.records_count == len(batch) == 5
    assert batch.attributes == 0x10
    recs = list(batch)
    assert [r.offset for r in recs] == [100, 101, 102, 103, 104]
    assert [r.timestamp for r in recs] == [TS + i for i in range(5)]
    assert recs[2].value is None and recs[0].value == b"value-0value-0value-0"
    assert recs[1].headers == (("h", b"x"), ("null", None))
    assert recs[0].headers == ()
    assert sum(r.size_in_bytes for r in recs) == len(data) - HEADER_SIZE
    assert recs[3].size_in_bytes == record_size(3, 3, b"k3", b"value-3" * 3, (("h", b"x"), ("null", None)))
    assert batch.to_bytes() == data
    assert "base_offset=100" in repr(batch)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_each_codec_roundtrip_and_attributes(codec: CompressionType) -> None:
    data = build(codec, n=50)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.compression_type is codec
    assert batch.attributes & 7 == codec
    plain = RecordBatch(build(CompressionType.NONE, n=50))
    assert batch.records() == plain.records()
    assert batch.records() == batch.records()  # decompressed once, decoded again identically


def test_timestamps_base_is_first_max_is_largest_and_negative_deltas() -> None:
    b = MemoryRecordsBuilder()
    for ts in (TS, TS + 500, TS - 1000, TS + 20):
        b.append(ts, None, b"v")
    batch = RecordBatch(b.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 500)
    assert [r.timestamp for r in batch] == [TS, TS + 500, TS - 1000, TS + 20]


def test_log_append_time_batches_use_max_timestamp() -> None:
    b = MemoryRecordsBuilder(timestamp_type=1)
    b.append(TS, None, b"a")
    b.append(TS + 7, None, b"b")
    batch = RecordBatch(b.build())
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [TS + 7, TS + 7]
    with pytest.raises(ValueError):
        MemoryRecordsBuilder(timestamp_type=2)


def test_append_returns_delta_and_rejects_after_close() -> None:
    b = MemoryRecordsBuilder()
    assert [b.append(TS, None, b"x") for _ in range(3)] == [0, 1, 2]
    assert b.num_records == len(b) == 3
    data = b.build()
    assert b.is_closed and b.build() is data
    with pytest.raises(IllegalStateError):
        b.append(TS, None, b"y")
    assert b.try_append(TS, None, b"y") == -1
    assert not b.has_room_for(TS, None, b"y")
    assert b.is_full()
    assert b.estimated_size_in_bytes() == len(data)
    with pytest.raises(IllegalStateError):
        b.set_producer_state(1, 1, 1, False)


def test_failed_append_leaves_builder_unchanged() -> None:
    b = MemoryRecordsBuilder()
    b.append(TS, b"k", b"v")
    before = bytes(b._buf)
    with pytest.raises(TypeError):
        b.append(TS, b"k", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        b.append(-5, b"k", b"v")
    assert bytes(b._buf) == before and b.num_records == 1
    b.append(TS, bytearray(b"k2"), memoryview(b"v2"))  # any bytes-like works
    assert [(r.key, r.value) for r in RecordBatch(b.build())] == [(b"k", b"v"), (b"k2", b"v2")]


def test_empty_builder_builds_nothing() -> None:
    b = MemoryRecordsBuilder(CompressionType.LZ4)
    assert b.build() == b""
    assert list(MemoryRecords(b"").batches()) == []


def test_large_values_and_many_records_use_long_varints() -> None:
    b = MemoryRecordsBuilder()
    big = bytes(range(256)) * 100  # 25600 bytes: 3-byte length varints
    b.append(TS, b"k" * 9000, big, (("h" * 200, big[:10000]),))
    for _ in range(9000):  # offset deltas beyond the varint table
        b.append(TS + 10**9, None, None)
    recs = RecordBatch(b.build()).records()
    assert (
        recs[0].key == b"k" * 9000 and recs[0].value == big and recs[0].headers == (("h" * 200, big[:10000]),)
    )
    assert recs[-1].offset == 9000 and recs[-1].timestamp == TS + 10**9 and recs[-1].value is None


def test_unicode_header_keys() -> None:
    b = MemoryRecordsBuilder()
    b.append(TS, None, b"v", (("ключ", b"\xd0"), ("k", b"")))
    assert RecordBatch(b.build()).records()[0].headers == (("ключ", b"\xd0"), ("k", b""))


def test_has_room_for_matches_kafka_logic() -> None:
    b = MemoryRecordsBuilder(write_limit=200)
    assert b.has_room_for(TS, None, b"x" * 1000)  # the first record always fits
    b.append(TS, None, b"x" * 1000)
    assert b.is_full()
    assert not b.has_room_for(TS, None, b"")
    b = MemoryRecordsBuilder(write_limit=200)
    b.append(TS, b"k", b"v" * 50)
    used = b.estimated_size_in_bytes()
    assert used == len(b._buf)
    outcomes = set()
    for n in range(40, 100):
        fits = used + record_size(1, 0, b"k", b"v" * n) <= 200
        assert b.has_room_for(TS, b"k", b"v" * n) is fits
        outcomes.add(fits)
    assert outcomes == {True, False}
    # try_append takes the same decision and leaves the builder unchanged when it says no
    while True:
        before = len(b._buf)
        room = b.has_room_for(TS, b"k", b"v" * 10)
        delta = b.try_append(TS, b"k", b"v" * 10)
        assert (delta >= 0) is room
        if delta < 0:
            assert len(b._buf) == before
            break
    assert len(b.build()) <= 200
    assert MemoryRecordsBuilder(write_limit=None).has_room_for(TS, None, b"x")


def test_compressed_estimate_uses_ratio_and_factor() -> None:
    b = MemoryRecordsBuilder(CompressionType.GZIP, write_limit=10_000)
    b.append(TS, None, b"a" * 1000)
    records_len = len(b._buf) - HEADER_SIZE
    assert b.estimated_size_in_bytes() == HEADER_SIZE + int(records_len * 1.05)
    b2 = MemoryRecordsBuilder(CompressionType.GZIP, estimated_compression_ratio=0.5)
    b2.append(TS, None, b"a" * 1000)
    assert b2.estimated_size_in_bytes() == HEADER_SIZE + int(records_len * 0.5 * 1.05)
    b.build()
    assert b.compression_ratio < 0.1


def test_upper_bounds() -> None:
    headers = (("a", b"123"), ("bb", None))
    bound = record_size_upper_bound(b"key", b"value", headers)
    assert bound >= record_size(2**31 - 1, -(2**62), b"key", b"value", headers)
    assert upper_bound_size(b"key", b"value", headers) == 61 + bound
    assert upper_bound_size(None, None) == 61 + 21 + 1 + 1 + 1
    assert upper_bound_size(b"k", b"v", compression_type=CompressionType.ZSTD) == upper_bound_size(b"k", b"v")
    assert MemoryRecordsBuilder.upper_bound_size(b"k", b"v", headers) == upper_bound_size(b"k", b"v", headers)
    assert MemoryRecordsBuilder.record_size(0, 0, b"k", b"v") == record_size(0, 0, b"k", b"v") == 9
    b = MemoryRecordsBuilder()
    b.append(TS, b"key", b"value", headers)
    assert len(b.build()) <= upper_bound_size(b"key", b"value", headers)


def test_producer_state() -> None:
    b = MemoryRecordsBuilder()
    b.append(TS, None, b"v")
    b.append(TS, None, b"w")
    b.set_producer_state(1000, 5, 2**31 - 1, True)
    batch = RecordBatch(b.build())
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 5, 2**31 - 1)
    assert batch.last_sequence == 0  # wraps like Kafka's DefaultRecordBatch.incrementSequence
    assert batch.is_transactional
    b.reopen_and_rewrite_producer_state(2000, 6, 10, False)
    batch = RecordBatch(b.build())
    batch.ensure_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == (
        2000,
        6,
        10,
        False,
    )
    assert [r.value for r in batch] == [b"v", b"w"]


@pytest.mark.parametrize(
    ("ctype", "name"), [(ControlRecordType.ABORT, "ABORT"), (ControlRecordType.COMMIT, "COMMIT")]
)
def test_control_batches(ctype: ControlRecordType, name: str) -> None:
    data = build_control_batch(ctype, 17, producer_id=5, producer_epoch=2, timestamp=TS, base_offset=50)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.is_control and batch.is_transactional
    assert (batch.base_offset, batch.records_count, batch.base_sequence) == (50, 1, -1)
    assert (batch.producer_id, batch.producer_epoch) == (5, 2)
    assert batch.control_record_type() == ctype and batch.control_record_type().name == name
    assert batch.end_txn_marker() == (ctype, 17)
    rec = batch.records()[0]
    assert rec.key == struct.pack(">hh", 0, int(ctype)) and rec.value == struct.pack(">hi", 0, 17)
    assert list(MemoryRecords(data + build()).records(skip_control=True))[0].key == b"k0"


def test_control_record_type_edge_cases() -> None:
    with pytest.raises(CorruptMessageError, match="not a control batch"):
        RecordBatch(build()).control_record_type()
    b = MemoryRecordsBuilder(is_control=True, is_transactional=True)
    b.append(TS, struct.pack(">hh", 0, 99), b"")
    assert RecordBatch(b.build()).control_record_type() == ControlRecordType.UNKNOWN
    b = MemoryRecordsBuilder(is_control=True)
    b.append(TS, b"\x00", b"")
    with pytest.raises(CorruptMessageError):
        RecordBatch(b.build()).control_record_type()
    b = MemoryRecordsBuilder(is_control=True)
    b.append(TS, struct.pack(">hh", 0, 2), b"")
    with pytest.raises(CorruptMessageError, match="not a transaction marker"):
        RecordBatch(b.build()).end_txn_marker()


def test_split_records() -> None:
    recs = [Record(0, TS + i, b"key-%d" % i, b"v" * 100, (("h", b"1"),)) for i in range(100)]
    out = split_records(recs, 1000, CompressionType.NONE)
    assert len(out) > 5
    assert all(len(b) <= 1000 for b in out)
    decoded = [r for b in out for r in RecordBatch(b).records()]
    assert [(r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (r.timestamp, r.key, r.value, r.headers) for r in recs
    ]
    assert all(RecordBatch(b).base_offset == 0 and RecordBatch(b).records()[0].offset == 0 for b in out)
    # a record larger than the limit still gets a batch of its own
    big = [(TS, None, b"x" * 5000, ()), (TS, None, b"y", ())]
    assert [RecordBatch(b).records_count for b in split_records(big, 1000)] == [1, 1]
    builders = split_into_builders(recs, 4000, CompressionType.LZ4, producer_id=9, producer_epoch=1)
    assert all(not bl.is_closed and bl.producer_id == 9 for bl in builders)
    builders[0].set_producer_state(9, 1, 0, False)
    assert RecordBatch(builders[0].build()).base_sequence == 0


# -- MemoryRecords --------------------------------------------------------------------------------


def test_memory_records_iterates_and_skips_partial_trailing_batch() -> None:
    one = build(n=3, base_offset=0)
    two = build(CompressionType.ZSTD, n=4, base_offset=3)
    three = build(n=2, base_offset=7)
    buf = one + two + three
    mr = MemoryRecords(buf)
    assert [b.base_offset for b in mr.batches()] == [0, 3, 7]
    assert [r.offset for r in mr.records()] == list(range(9))
    assert mr.valid_bytes == mr.size_in_bytes == len(buf) and not mr.has_partial_batch
    mr.ensure_valid()
    for cut in (1, 11, 12, 30, 61, len(three) - 1):
        partial = MemoryRecords(memoryview(buf)[: len(buf) - len(three) + cut])
        assert [b.base_offset for b in partial.batches()] == [0, 3]
        assert partial.valid_bytes == len(one) + len(two)
        assert partial.has_partial_batch
    assert MemoryRecords(bytearray(buf)).first_batch_size() == len(one)
    assert MemoryRecords(b"\x00" * 11).first_batch_size() is None
    assert list(MemoryRecords(buf[:5]).batches()) == []
    assert "size=" in repr(mr)


def test_memory_records_rejects_bad_magic_and_size() -> None:
    bad = bytearray(build())
    bad[16] = 3
    with pytest.raises(CorruptMessageError, match="magic"):
        list(MemoryRecords(bytes(bad)).batches())
    bad = bytearray(build())
    struct.pack_into(">i", bad, 8, 5)
    with pytest.raises(CorruptMessageError, match="minimum"):
        list(MemoryRecords(bytes(bad)).batches())
    with pytest.raises(CorruptMessageError, match="magic 1, expected 2"):
        data = bytearray(build())
        data[16] = 1
        RecordBatch(bytes(data))
    with pytest.raises(CorruptMessageError, match="truncated"):
        RecordBatch(build()[:40])


def test_batch_inside_larger_buffer_at_offset() -> None:
    a, b = build(n=2), build(n=3, base_offset=2)
    for buf in (a + b, bytearray(a + b), memoryview(a + b)):
        batch = RecordBatch(buf, len(a))
        batch.ensure_valid()
        assert [r.offset for r in batch] == [2, 3, 4]
        assert batch.to_bytes() == b
        assert all(type(r.key) is bytes for r in batch)


def test_broker_rewrites_keep_crc_valid() -> None:
    buf = bytearray(build(n=3))
    set_base_offset(buf, 1234)
    batch = RecordBatch(buf)
    batch.ensure_valid()  # baseOffset is outside the CRC
    assert [r.offset for r in batch] == [1234, 1235, 1236]
    assert parse_header(buf).base_offset == 1234


# -- corruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_every_flipped_byte_in_crc_range_is_detected(codec: CompressionType) -> None:
    data = build(codec, n=3)
    for i in range(17, len(data)):  # crc field and everything it covers
        bad = bytearray(data)
        bad[i] ^= 0x40
        batch = RecordBatch(bytes(bad))
        assert not batch.is_valid(), i
        with pytest.raises(CorruptMessageError, match="crc"):
            batch.ensure_valid()


def test_length_field_corruption_is_detected() -> None:
    data = build(n=3)
    for delta in (-1, 1, -30):
        bad = bytearray(data)
        struct.pack_into(">i", bad, 8, len(data) - 12 + delta)
        batch = RecordBatch(bytes(bad))
        assert not batch.is_valid()
        with pytest.raises(CorruptMessageError):
            batch.records()
    bad = bytearray(data)
    struct.pack_into(">i", bad, 8, 20)
    with pytest.raises(CorruptMessageError, match="minimum batch overhead"):
        RecordBatch(bytes(bad)).ensure_valid()


def test_truncated_batch() -> None:
    data = build(n=3)
    batch = RecordBatch(data[:-1])
    assert not batch.is_valid()
    with pytest.raises(CorruptMessageError, match="truncated"):
        batch.ensure_valid()
    with pytest.raises(CorruptMessageError):
        batch.records()


def _with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def test_malformed_records_with_valid_crc_raise_corrupt() -> None:
    data = bytearray(build(n=3))
    count = bytearray(data)
    struct.pack_into(">i", count, 57, 4)  # claims one record more than present
    with pytest.raises(CorruptMessageError):
        RecordBatch(_with_crc(count)).records()
    fewer = bytearray(data)
    struct.pack_into(">i", fewer, 57, 2)  # trailing bytes left over
    with pytest.raises(CorruptMessageError, match="unaccounted"):
        RecordBatch(_with_crc(fewer)).records()
    length = bytearray(data)
    length[61] += 2  # first record's length varint disagrees with its content
    with pytest.raises(CorruptMessageError, match="length field"):
        RecordBatch(_with_crc(length)).records()
    codec = bytearray(data)
    codec[22] |= 0x07  # codec id 7
    batch = RecordBatch(_with_crc(codec))
    assert not batch.is_valid()
    with pytest.raises(CorruptMessageError):
        batch.records()
    garbage = bytearray(build(CompressionType.GZIP, n=3))
    garbage[70:80] = b"\x00" * 10
    with pytest.raises(CorruptMessageError, match="decompress"):
        RecordBatch(_with_crc(garbage)).records()


def test_records_module_reexports() -> None:
    for name in records_module.__all__:
        assert hasattr(records_module, name)


@pytest.mark.parametrize("size", [0, 9, (1 << 20) - 1, 1 << 20, (1 << 20) + 13])
def test_crc32c_on_both_sides_of_the_gil_threshold(size: int) -> None:
    """Below 1 MiB the CRC keeps the GIL, from 1 MiB on it releases it: the same checksum either way, and
    continuing a CRC over pieces (one below the threshold, one above) gives the checksum of the whole."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert crc32c(b"123456789") == 0xE3069283
    cut = size // 3
    whole = crc32c(data)
    assert crc32c(data[cut:], crc32c(data[:cut])) == whole
    assert crc32c(memoryview(bytearray(data))) == whole
    assert whole == _reference_crc32c(data)


def _reference_crc32c(data: bytes) -> int:
    """A bitwise CRC-32C (Castagnoli, reflected 0x82F63B78) to check against, byte by byte over a table."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()
