"""Batches written by librdkafka (captured by ``capture_librdkafka.py`` into ``fixtures/``).

Our reader must decode them exactly (keys, values, null values, headers, timestamps, CRC), and our
builder, fed the same records with the same codec, must produce batches that decode identically --
byte-identical where librdkafka's choices are deterministic and the same as ours (uncompressed, gzip, lz4).
One test also captures a batch live from the installed librdkafka, so the fixtures cannot silently rot.
"""

from __future__ import annotations

import json
import struct

import pytest

from strom.record import CompressionType, MemoryRecords, MemoryRecordsBuilder, RecordBatch
from strom.record.compression import XERIAL_MAGIC
from strom.record.crc import crc32c
from tests.unit.record.capture_librdkafka import CODECS, EXPECTED, FIXTURES, capture

pytestmark = [pytest.mark.unit, pytest.mark.interop]


def fixture(codec: str) -> bytes:
    return (FIXTURES / f"librdkafka-{codec}.bin").read_bytes()


def as_tuples(batch: RecordBatch) -> list[tuple[object, ...]]:
    return [(r.timestamp, r.key, r.value, r.headers) for r in batch.records()]


def test_fixture_metadata() -> None:
    meta = json.loads((FIXTURES / "librdkafka-meta.json").read_text())
    assert set(meta["produce_versions"]) == set(CODECS)
    assert meta["librdkafka"]


@pytest.mark.parametrize("codec", CODECS)
def test_we_decode_librdkafka_batches(codec: str) -> None:
    data = fixture(codec)
    mr = MemoryRecords(data)
    (batch,) = list(mr.batches())
    assert mr.valid_bytes == len(data)
    batch.ensure_valid()
    assert batch.crc == crc32c(data[21:])
    assert batch.compression_type is CompressionType.from_name(codec)
    assert (
        batch.magic == 2
        and batch.records_count == len(EXPECTED)
        and batch.last_offset_delta == len(EXPECTED) - 1
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == 0  # librdkafka writes 0, not -1
    assert batch.base_timestamp == EXPECTED[0][0]
    assert batch.max_timestamp == max(ts for ts, *_ in EXPECTED)
    assert as_tuples(batch) == EXPECTED
    assert [r.offset for r in batch] == list(range(len(EXPECTED)))


def test_librdkafka_snappy_is_raw_not_xerial() -> None:
    assert fixture("snappy")[61:69] != XERIAL_MAGIC


@pytest.mark.parametrize("codec", CODECS)
def test_our_reencoding_matches(codec: str) -> None:
    original = fixture(codec)
    b = MemoryRecordsBuilder(CompressionType.from_name(codec), partition_leader_epoch=0)
    for ts, key, value, headers in EXPECTED:
        b.append(ts, key, value, headers)
    ours = b.build()
    ours_batch, theirs = RecordBatch(ours), RecordBatch(original)
    ours_batch.ensure_valid()
    assert as_tuples(ours_batch) == as_tuples(theirs)
    # every header field except batchLength and crc is the same whatever the compressed payload
    assert ours[:8] == original[:8] and ours[12:17] == original[12:17] and ours[21:61] == original[21:61]
    if codec in ("none", "gzip", "lz4"):
        assert ours == original
    assert [r.size_in_bytes for r in ours_batch] == [r.size_in_bytes for r in theirs]


def test_uncompressed_records_block_is_identical() -> None:
    """Whatever the codec, the records block librdkafka compressed is byte-identical to ours."""
    b = MemoryRecordsBuilder()
    for ts, key, value, headers in EXPECTED:
        b.append(ts, key, value, headers)
    ours = b.build()[61:]
    for codec in CODECS:
        batch = RecordBatch(fixture(codec))
        data, start, end = batch._records_block()
        assert data[start:end] == ours, codec


def test_live_capture_from_installed_librdkafka() -> None:
    version, data = capture("lz4", EXPECTED[:3], timeout=10.0)
    assert 3 <= version <= 7
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.compression_type is CompressionType.LZ4
    assert as_tuples(batch) == EXPECTED[:3]
    assert struct.unpack_from(">i", data, 57)[0] == 3
