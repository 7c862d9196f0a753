"""Every produced record is read before it is stored, as Kafka's LogValidator reads it (its record iterator,
``DefaultRecord.readFrom``), a compressed batch decompressed for it: a batch whose CRC matches but whose records do
not parse is INVALID_RECORD, so it can never be stored and then fail every consumer that reads it.

Both ways of reading a records block are checked: the C accelerator's ``scan_records`` and the Python walk."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError, InvalidRecordError
from strom.record import compression
from strom.record.batch import RecordBatch
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType, compress
from strom.record.header import HEADER_SIZE, LOG_OVERHEAD, compute_crc, parse_header
from strom.storage import log_validator
from strom.storage.log_config import LogConfig
from strom.storage.log_validator import (
    NULL_KEY,
    RENUMBER,
    check_client_records,
    needs_worker_check,
    scan_records,
    validate_and_assign_offsets,
)

from ._batches import T0, build_batch, build_record, zigzag_varint

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=int(os.environ.get("STROM_HYPOTHESIS_EXAMPLES", "200")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _config(**props: object) -> LogConfig:
    return LogConfig.from_props(props, LogConfig.from_broker_props({}))


def _validate(records: bytes | bytearray, config: LogConfig | None = None):  # type: ignore[no-untyped-def]
    return validate_and_assign_offsets(memoryview(bytearray(records)), 10, config or _config(), T0 + 1000)


def _with_block(batch: bytes, block: bytes, codec: str = "none") -> bytes:
    """``batch``'s header over another records block, compressed with ``codec`` (length, attributes, CRC set)."""
    data = compress(CompressionType.from_name(codec), block) if codec != "none" else block
    buf = bytearray(batch[:HEADER_SIZE] + data)
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    attributes = struct.unpack_from(">h", buf, 21)[0] & ~0x07
    struct.pack_into(">h", buf, 21, attributes | CompressionType.from_name(codec))
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def _record(body: bytes) -> bytes:
    return zigzag_varint(len(body)) + body


def _fields(offset_delta: int, key: bytes, value: bytes, headers: bytes = b"\x00") -> bytes:
    """A record body from raw field bytes (attributes, timestampDelta 0, ``offset_delta``)."""
    return b"\x00\x00" + zigzag_varint(offset_delta) + key + value + headers


GOOD = _fields(1, zigzag_varint(1) + b"k", zigzag_varint(1) + b"v")
DAMAGED = {
    # each: record 1 of three, CRC intact, as a buggy client could send it
    "key longer than the record": _fields(1, zigzag_varint(50) + b"k", zigzag_varint(1) + b"v"),
    "value longer than the record": _fields(1, zigzag_varint(1) + b"k", zigzag_varint(9) + b"v"),
    "negative header count": _fields(1, zigzag_varint(-1), zigzag_varint(1) + b"v", zigzag_varint(-1)),
    "more headers than bytes": _fields(1, zigzag_varint(-1), zigzag_varint(1) + b"v", zigzag_varint(3) + b"\x02h\x00"),
    "null header key": _fields(1, zigzag_varint(-1), zigzag_varint(1) + b"v",
                               zigzag_varint(1) + zigzag_varint(-1) + zigzag_varint(-1)),
    "header value past the record": _fields(1, zigzag_varint(-1), zigzag_varint(1) + b"v",
                                            zigzag_varint(1) + zigzag_varint(1) + b"h" + zigzag_varint(7)),
    "bytes no field takes": _fields(1, zigzag_varint(1) + b"k", zigzag_varint(1) + b"v") + b"\x00\x00",
    "varint that runs on": b"\x00" + b"\xff" * 11,
}


def _three(middle: bytes) -> bytes:
    return _record(_fields(0, zigzag_varint(-1), zigzag_varint(1) + b"a")) + _record(middle) + _record(
        _fields(2, zigzag_varint(-1), zigzag_varint(1) + b"c"))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_record_that_does_not_parse_is_refused_on_any_topic(damage: str, codec: str, records_walk: str) -> None:
    template = build_batch([b"a", b"b", b"c"])
    assert _validate(_with_block(template, _three(GOOD), codec)).num_records == 3  # the same batch, undamaged
    batch = _with_block(template, _three(DAMAGED[damage]), codec)
    with pytest.raises(InvalidRecordError, match="record 1 of the 3"):
        _validate(batch)
    with pytest.raises(CorruptMessageError):  # what a consumer reading the batch would have met
        RecordBatch(batch).records()


@pytest.mark.parametrize("codec", CODECS)
def test_records_missing_or_left_over_are_refused(codec: str, records_walk: str) -> None:
    template = build_batch([b"a", b"b", b"c"])
    with pytest.raises(InvalidRecordError, match="record 2 of the 3"):  # only two records in the block
        _validate(_with_block(template, _three(GOOD)[:-len(_record(_fields(2, b"\x01", b"\x02c")))], codec))
    with pytest.raises(InvalidRecordError, match="bytes after the 3 records"):
        _validate(_with_block(template, _three(GOOD) + b"\x00", codec))


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_a_codec_that_does_not_exist_is_an_invalid_record(codec_id: int) -> None:
    """(It had escaped as a ValueError from naming the codec, which the broker answers as an internal error.)"""
    batch = bytearray(_batch("none"))
    struct.pack_into(">h", batch, 21, codec_id)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    with pytest.raises(InvalidRecordError, match=f"compression codec {codec_id}, which does not exist"):
        _validate(batch)
    with pytest.raises(InvalidRecordError, match="does not exist"):
        _validate(batch, _config(**{"compression.type": "gzip"}))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_block_that_does_not_decompress_is_refused(codec: str) -> None:
    good = bytes(_batch(codec))
    broken = bytearray(good[:HEADER_SIZE] + b"\x00\x01 not %s data \xff" % codec.encode() * 3)
    struct.pack_into(">i", broken, 8, len(broken) - LOG_OVERHEAD)
    struct.pack_into(">I", broken, 17, compute_crc(broken, 0, len(broken)))
    with pytest.raises(InvalidRecordError, match=f"cannot decompress the {codec}"):
        _validate(broken)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_that_decompresses_past_the_bound_is_refused(codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decompression bomb (a few kilobytes that stand for gigabytes) is refused once its records pass
    ``MAX_DECOMPRESSED_BATCH``, here lowered to 1 MiB; a batch just under it is taken."""
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BATCH", 1 << 20)
    template = build_batch([b"a"])
    big = _record(_fields(0, zigzag_varint(-1), zigzag_varint((1 << 20) + 10) + bytes((1 << 20) + 10)))
    with pytest.raises(InvalidRecordError, match="decompresses to more than 1048576 bytes"):
        _validate(_with_block(template, big, codec))
    fits = _record(_fields(0, zigzag_varint(-1), zigzag_varint((1 << 20) - 100) + bytes((1 << 20) - 100)))
    assert _validate(_with_block(template, fits, codec)).num_records == 1


def _batch(codec: str, keys: bool = True, n: int = 20) -> bytearray:
    b = MemoryRecordsBuilder(CompressionType.from_name(codec))
    for i in range(n):
        b.append(T0 + i, b"k%d" % i if keys else None, b"v%d" % i, (("h", b"x"),) if i % 2 else ())
    return b.build()


@pytest.mark.parametrize("codec", CODECS)
def test_a_compacted_topic_refuses_a_null_key_in_any_codec(codec: str, records_walk: str) -> None:
    compacted = _config(**{"cleanup.policy": "compact"})
    assert _validate(_batch(codec), compacted).num_records == 20
    with pytest.raises(InvalidRecordError, match="without key"):
        _validate(_batch(codec, keys=False), compacted)
    assert _validate(_batch(codec, keys=False)).num_records == 20  # a delete topic takes them


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_with_inner_offsets_out_of_order_is_rebuilt_as_kafka_does(codec: str,
                                                                                   records_walk: str) -> None:
    """Kafka's validator rebuilds a compressed batch whose inner offsets are not 0, 1, 2 ... (old clients wrote
    them so) rather than refusing it; an uncompressed batch keeps its deltas."""
    block = b"".join(build_record(d, 0, b"k%d" % i, b"v%d" % i) for i, d in enumerate([0, 5, 2]))
    template = build_batch([b"a", b"b", b"c"], producer_id=9, producer_epoch=1, base_sequence=4)
    out = bytes(_validate(_with_block(template, block, codec)).records)
    h = parse_header(out)
    assert (h.compression, h.producer_id, h.base_sequence) == (CompressionType.from_name(codec), 9, 4)
    assert [(r.offset, r.key) for r in RecordBatch(out).records()] == [(10, b"k0"), (11, b"k1"), (12, b"k2")]
    kept = bytes(_validate(_with_block(template, block)).records)
    assert kept[HEADER_SIZE:] == block


def test_the_check_in_a_worker_leaves_the_append_only_the_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_client_records`` does the record checks; an append with ``records_checked`` does not read the
    records again (it would refuse this damaged batch), and still assigns offsets."""
    damaged = _with_block(build_batch([b"a", b"b", b"c"]), _three(DAMAGED["key longer than the record"]), "zstd")
    with pytest.raises(InvalidRecordError):
        check_client_records(memoryview(bytearray(damaged)), _config(), T0)
    good = bytearray(_batch("zstd"))
    checked = check_client_records(memoryview(good), _config(), T0)
    monkeypatch.setattr(log_validator, "decompress", None)  # any decompression now fails loudly
    result = validate_and_assign_offsets(checked, 500, _config(), T0, records_checked=True)
    assert (result.first_offset, result.last_offset) == (500, 519)
    assert parse_header(result.records).base_offset == 500
    unchecked = validate_and_assign_offsets(memoryview(bytearray(damaged)), 0, _config(), T0, records_checked=True)
    assert unchecked.num_records == 3  # (what records_checked promises is the caller's: nothing is read)


def test_a_log_append_time_topic_through_the_worker() -> None:
    """The worker's check sets the LogAppendTime bit (as the append does); the append after it must not take that
    bit for a producer's (which Kafka refuses: INVALID_TIMESTAMP)."""
    config = _config(**{"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"})
    checked = check_client_records(memoryview(bytearray(_batch("none"))), config, T0 + 5)
    result = validate_and_assign_offsets(checked, 0, config, T0 + 9, records_checked=True)
    h = parse_header(result.records)
    assert (h.timestamp_type, h.max_timestamp, h.compression, result.num_records) == (1, T0 + 9, CompressionType.LZ4,
                                                                                     20)


def test_which_payloads_are_checked_in_a_worker() -> None:
    plain, zstd, gzip = bytes(_batch("none")), bytes(_batch("zstd")), bytes(_batch("gzip"))
    assert not needs_worker_check(plain + zstd, _config())  # (lz4, snappy, zstd: decompressed in the append)
    assert needs_worker_check(plain + gzip, _config())  # a gzip batch anywhere in the payload
    assert needs_worker_check(plain, _config(**{"compression.type": "lz4"}))  # the topic's codec to apply
    assert not needs_worker_check(plain[:HEADER_SIZE - 1], _config())  # (left to the validator to refuse)


_field = st.one_of(st.none(), st.binary(max_size=40))
_records = st.lists(st.tuples(_field, _field, st.lists(st.tuples(st.sampled_from(["", "h", "trace"]), _field),
                                                       max_size=3)), min_size=1, max_size=30)


@SETTINGS
@given(records=_records, rnd=st.randoms(use_true_random=False), damage=st.integers(0, 4))
def test_the_check_refuses_what_a_consumer_cannot_read(records, rnd: random.Random, damage: int,
                                                       records_walk: str) -> None:
    """On any batch, intact or with bytes changed, cut or inserted (CRC set to match, as a buggy client's): the
    broker stores exactly what its consumer's record decoder can read, and the C and Python walks agree."""
    b = MemoryRecordsBuilder()
    for i, (key, value, headers) in enumerate(records):
        b.append(T0 + i, key, value, tuple(headers))
    batch = bytearray(b.build())
    block = bytearray(batch[HEADER_SIZE:])
    for _ in range(damage):
        at = rnd.randrange(len(block))
        choice = rnd.randrange(3)
        if choice == 0:
            block[at] = rnd.randrange(256)
        elif choice == 1:
            del block[at:at + rnd.randrange(1, 4)]
        else:
            block[at:at] = bytes([rnd.randrange(256)])
    changed = _with_block(bytes(batch), bytes(block))
    flags = scan_records(changed[HEADER_SIZE:], len(records))
    try:
        decoded = RecordBatch(changed).records()
    except CorruptMessageError:
        assert flags < 0
        with pytest.raises(InvalidRecordError):
            _validate(changed)
        return
    assert flags >= 0
    assert bool(flags & NULL_KEY) == any(r.key is None for r in decoded)
    assert bool(flags & RENUMBER) == any(r.offset != i for i, r in enumerate(decoded))
    assert _validate(changed).num_records == len(records)
