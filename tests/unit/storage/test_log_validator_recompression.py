"""A topic's ``compression.type`` (other than ``producer``) is enforced on append, as Kafka's LogValidator does:
client batches in another codec are stored recompressed, their records, producer fields and timestamps kept."""

from __future__ import annotations

import itertools
import os
import struct

import pytest

from strom.common.error_codes import InvalidRecordError, MessageTooLargeError
from strom.record.batch import RecordBatch
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType
from strom.record.control import build_control_batch
from strom.record.header import LOG_OVERHEAD, compute_crc, parse_header
from strom.storage.log_config import LogConfig
from strom.storage.log_validator import AppendOrigin, validate_and_assign_offsets, validate_replicated

from ._batches import T0, build_batch, build_record

pytestmark = pytest.mark.unit

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
RECORDS = [(T0 + i, f"k{i}".encode() if i % 3 else None, (b"value-%d " % i) * (i % 7 + 1),
            (("h", b"x"), ("n", None)) if i % 2 else ()) for i in range(50)]


def _batch(codec: str, records=RECORDS, *, producer=(7, 2, 100), transactional: bool = False) -> bytes:  # type: ignore[no-untyped-def]
    pid, epoch, seq = producer
    b = MemoryRecordsBuilder(CompressionType.from_name(codec), producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, is_transactional=transactional)
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return bytes(b.build())


def _config(**props: object) -> LogConfig:
    return LogConfig.from_props(props, LogConfig.from_broker_props({}))


def _validate(records: bytes | bytearray, config: LogConfig, origin: AppendOrigin = AppendOrigin.CLIENT):  # type: ignore[no-untyped-def]
    return validate_and_assign_offsets(memoryview(bytearray(records)), 42, config, T0 + 1000, leader_epoch=3,
                                       origin=origin)


def _records(buf: bytes | bytearray | memoryview, pos: int = 0) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:  # type: ignore[type-arg]
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in RecordBatch(buf, pos).records()]


@pytest.mark.parametrize(("source", "target"), [(s, t) for s, t in itertools.product(CODECS, CODECS) if s != t])
def test_a_batch_in_another_codec_is_stored_in_the_topics(source: str, target: str, records_walk: str) -> None:
    result = _validate(_batch(source, transactional=source == "lz4"), _config(**{
        "compression.type": "uncompressed" if target == "none" else target}))
    out = bytes(result.records)
    h = parse_header(out)
    assert h.compression == CompressionType.from_name(target)
    assert h.size == len(out) and compute_crc(out, 0, len(out)) == h.crc
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset_delta, h.records_count) == (42, 3, 49, 50)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (7, 2, 100, source == "lz4")
    assert (h.base_timestamp, h.max_timestamp) == (T0, T0 + 49)
    assert _records(out) == [(42 + i, ts, k, v, hd) for i, (ts, k, v, hd) in enumerate(RECORDS)]
    assert (result.first_offset, result.last_offset, result.num_records) == (42, 91, 50)
    assert validate_replicated(out).num_records == 50  # what a follower checks


@pytest.mark.parametrize("codec", CODECS)
def test_producer_or_the_same_codec_keeps_the_batch_as_it_came(codec: str) -> None:
    original = _batch(codec)
    for topic in ("producer", "uncompressed" if codec == "none" else codec):
        frame = bytearray(original)
        result = validate_and_assign_offsets(memoryview(frame), 42, _config(**{"compression.type": topic}), T0,
                                             leader_epoch=3)
        assert result.records.obj is frame  # rewritten in place, not rebuilt
        assert frame[61:] == original[61:] and parse_header(frame).crc == parse_header(original).crc


def _resized(batch: bytes, records_block: bytes) -> bytes:
    """``batch`` with another records block (batchLength and CRC set to match)."""
    buf = bytearray(batch[:61] + records_block)
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def test_offset_deltas_that_are_not_consecutive_are_renumbered(records_walk: str) -> None:
    batch = build_batch([b"v0", b"v1", b"v2", b"v3"], keys=[b"k0", b"k1", b"k2", b"k3"], offset_deltas=[0, 5, 2, 200],
                        last_offset_delta=3)
    result = _validate(batch, _config(**{"compression.type": "gzip"}))
    assert [(o, k, v) for o, _, k, v, _ in _records(result.records)] == [
        (42, b"k0", b"v0"), (43, b"k1", b"v1"), (44, b"k2", b"v2"), (45, b"k3", b"v3")]


@pytest.mark.parametrize("damage", ["trailing bytes", "fewer records than declared", "record past the end"])
def test_a_records_block_that_does_not_add_up_is_an_invalid_record(damage: str, records_walk: str) -> None:
    batch = build_batch([b"v0", b"v1", b"v2"])
    if damage == "trailing bytes":
        batch = _resized(batch, batch[61:] + build_record(3, 0, None, b"v3"))
    elif damage == "fewer records than declared":
        batch = build_batch([b"v0", b"v1"], records_count=3, last_offset_delta=2)
    else:
        batch = _resized(batch, batch[61:-1])
    with pytest.raises(InvalidRecordError):  # (Kafka's InvalidRecordException from its record iterator)
        _validate(batch, _config(**{"compression.type": "zstd"}))


def test_a_batch_that_grows_past_max_message_bytes_is_refused() -> None:
    noise = [(T0, None, os.urandom(4000), ())]
    batch = _batch("none", noise)
    config = _config(**{"compression.type": "snappy", "max.message.bytes": str(len(batch) + 2)})
    with pytest.raises(MessageTooLargeError, match="snappy"):
        _validate(batch, config)
    assert _validate(batch, _config(**{"compression.type": "snappy"})).num_records == 1


def test_control_batches_stay_uncompressed() -> None:
    marker = build_control_batch(0, 5, 7, 2, T0)
    result = _validate(marker, _config(**{"compression.type": "zstd"}), AppendOrigin.COORDINATOR)
    assert parse_header(result.records).compression == CompressionType.NONE
    assert bytes(result.records)[61:] == marker[61:]


def test_log_append_time_is_stamped_on_the_recompressed_batch() -> None:
    config = _config(**{"compression.type": "lz4", "message.timestamp.type": "LogAppendTime"})
    result = _validate(_batch("gzip"), config)
    h = parse_header(result.records)
    assert h.compression == CompressionType.LZ4 and h.max_timestamp == T0 + 1000
    assert compute_crc(result.records, 0, h.size) == h.crc
    assert result.max_timestamp == T0 + 1000 and result.log_append_time == T0 + 1000


def test_only_the_batches_in_another_codec_are_rewritten_and_offsets_run_on() -> None:
    first, second = _batch("none", RECORDS[:5]), _batch("zstd", RECORDS[5:9], producer=(8, 0, 0))
    result = _validate(first + second, _config(**{"compression.type": "zstd"}))
    out = bytes(result.records)
    h1 = parse_header(out)
    h2 = parse_header(out, h1.size)
    assert (h1.compression, h2.compression) == (CompressionType.ZSTD, CompressionType.ZSTD)
    assert out[h1.size + 61:] == second[61:]  # already zstd: its records block untouched
    assert (h1.base_offset, h2.base_offset, result.last_offset) == (42, 47, 50)
    assert [r[0] for r in _records(out) + _records(out, h1.size)] == list(range(42, 51))
