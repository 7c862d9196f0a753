"""CompletedFetch: slicing by max.poll.records, CRC checks, control batches, aborted transactions,
records before the fetch offset, compaction gaps and deserialization errors."""

from __future__ import annotations

from typing import Any

import pytest

from strom.common.errors import KafkaError
from strom.common.serialization import IntegerDeserializer, StringDeserializer
from strom.common.structs import TopicPartition
from strom.consumer.errors import CorruptRecordError, RecordDeserializationError
from strom.consumer.internals.completed_fetch import CompletedFetch, RecordConverter
from strom.record import CompressionType, MemoryRecordsBuilder

from .helpers import T0, batch, marker

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TP = TopicPartition("t", 0)
RAW = RecordConverter()


_AS_RECEIVED = [False]


@pytest.fixture(autouse=True, params=["bytes", "receive buffer view"])
def as_received(request: pytest.FixtureRequest):
    """Every test runs twice: records as ``bytes``, and as the network hands them over: a view into a response's
    receive buffer (a ``bytearray`` with other fields around the records)."""
    _AS_RECEIVED[0] = request.param != "bytes"
    yield _AS_RECEIVED[0]
    _AS_RECEIVED[0] = False


def received(data: bytes) -> memoryview:
    return memoryview(bytearray(b"\x00\x07head" + data + b"tail"))[6:6 + len(data)]


def cf(data: bytes, offset: int = 0, converter=RAW, **kw) -> CompletedFetch:
    if data is not None and _AS_RECEIVED[0]:
        data = received(data)
    return CompletedFetch(TP, offset, 0, data, converter, **kw)


def offsets(records):
    return [r.offset for r in records]


def test_slices_by_max_records_and_tracks_next_offset():
    f = cf(batch(0, 5) + batch(5, 5))
    first = f.fetch_records(3)
    assert offsets(first) == [0, 1, 2] and f.next_fetch_offset == 3
    assert offsets(f.fetch_records(4)) == [3, 4, 5, 6] and f.next_fetch_offset == 7
    assert offsets(f.fetch_records(100)) == [7, 8, 9] and f.next_fetch_offset == 10
    assert f.fetch_records(100) == [] and f.is_consumed


def test_record_fields():
    f = cf(batch(10, 1, headers=(("h", b"x"),)), offset=10)
    (r,) = f.fetch_records(10)
    assert (r.topic, r.partition, r.offset, r.key, r.value) == ("t", 0, 10, b"k10", b"v10")
    assert r.headers == (("h", b"x"),) and r.serialized_key_size == 3 and r.serialized_value_size == 3
    assert r.timestamp_type == 0 and r.leader_epoch == 3 and r.timestamp > 0


def test_skips_records_before_fetch_offset_inside_a_batch():
    f = cf(batch(0, 10, compression=CompressionType.GZIP), offset=7)
    assert offsets(f.fetch_records(100)) == [7, 8, 9]


def test_crc_mismatch_raises_and_keeps_position():
    data = bytearray(batch(0, 3) + batch(3, 3))
    data[-2] ^= 0x01  # corrupt a value byte of the second batch
    f = cf(bytes(data), check_crcs=True)
    assert offsets(f.fetch_records(100)) == [0, 1, 2]
    with pytest.raises(CorruptRecordError) as info:
        f.fetch_records(100)
    assert info.value.offset == 3 and f.next_fetch_offset == 3
    # without check.crcs the bytes are used as they are
    f2 = cf(bytes(data), check_crcs=False)
    assert len(f2.fetch_records(100)) == 6


def test_control_batches_are_skipped_and_advance_position():
    f = cf(batch(0, 2, pid=7, transactional=True) + marker(2, 7, commit=True))
    assert offsets(f.fetch_records(100)) == [0, 1]
    assert f.fetch_records(100) == [] and f.next_fetch_offset == 3


def test_read_committed_skips_aborted_transactions():
    data = (batch(0, 2, pid=1, transactional=True)       # aborted (pid 1 from offset 0)
            + batch(2, 2, pid=2, transactional=True)     # committed
            + marker(4, 1, commit=False)
            + marker(5, 2, commit=True)
            + batch(6, 2, pid=1, transactional=True)     # pid 1 again: committed this time
            + marker(8, 1, commit=True)
            + batch(9, 1))
    f = cf(data, read_committed=True, aborted_transactions=[(1, 0)])
    assert offsets(f.fetch_records(100)) == [2, 3, 6, 7, 9]
    assert f.next_fetch_offset == 10
    # read_uncommitted returns everything but the markers
    g = cf(data, read_committed=False, aborted_transactions=[(1, 0)])
    assert offsets(g.fetch_records(100)) == [0, 1, 2, 3, 6, 7, 9]


def test_compaction_gap_at_batch_end_moves_position_past_the_batch():
    f = cf(batch(0, 5, skip={3, 4}) + batch(5, 1))
    assert offsets(f.fetch_records(3)) == [0, 1, 2]
    assert f.next_fetch_offset == 5
    assert offsets(f.fetch_records(3)) == [5]


def test_deserialization_error_returns_earlier_records_then_raises():
    converter = RecordConverter(StringDeserializer(), IntegerDeserializer())
    data = batch(0, 1, prefix=b"\x00\x00\x00") + batch(1, 2, prefix=b"xx")  # value "\0\0\0" + "0" = 4 bytes
    f = cf(data, converter=converter)
    recs = f.fetch_records(100)
    assert offsets(recs) == [0] and recs[0].key == "k0" and isinstance(recs[0].value, int)
    with pytest.raises(RecordDeserializationError) as info:
        f.fetch_records(100)
    assert info.value.offset == 1 and info.value.partition == TP and f.next_fetch_offset == 1


def test_empty_and_null_records():
    f = cf(None)
    assert f.fetch_records(10) == [] and f.is_consumed
    g = cf(batch(0, 2, keys=False))
    recs = g.fetch_records(10)
    assert [r.key for r in recs] == [None, None] and recs[0].serialized_key_size == -1


def test_deserialization_error_inside_a_batch_polled_in_slices():
    """Records of one batch are deserialized per poll: the polls before the failing record return theirs, the
    one reaching it returns those before it, the next raises; the position stays at the failing record."""
    converter = RecordConverter(StringDeserializer(), IntegerDeserializer())
    f = cf(batch(0, 14, prefix=b"\x00\x00\x00"), converter=converter)  # values of offsets >= 10 are 5 bytes
    assert offsets(f.fetch_records(4)) == [0, 1, 2, 3]
    assert offsets(f.fetch_records(4)) == [4, 5, 6, 7]
    recs = f.fetch_records(4)
    assert offsets(recs) == [8, 9] and recs[1].value == int.from_bytes(b"\x00\x00\x009", "big")
    with pytest.raises(RecordDeserializationError) as info:
        f.fetch_records(4)
    assert info.value.offset == 10 and f.next_fetch_offset == 10


def test_deserialized_records_are_made_per_poll():
    """With deserializers too, a batch's records are made (and deserialized) by the poll that takes them: the
    others do not exist yet (they would age in the garbage collector)."""
    import gc

    from strom.consumer.consumer_records import ConsumerRecord

    def alive() -> int:
        return sum(type(o) is ConsumerRecord for o in gc.get_objects())

    f = cf(batch(0, 3000), converter=RecordConverter(StringDeserializer(), StringDeserializer()))
    gc.collect()  # no garbage records of other tests left to vanish mid-count
    gc.disable()
    try:
        before = alive()
        recs = f.fetch_records(100)
        after = alive()
    finally:
        gc.enable()
    assert offsets(recs) == list(range(100)) and recs[5].value == "v5"
    assert after == before + 100


class _FailsAt:
    """A deserializer of ``k<n>`` / ``v<n>`` bytes to ``n`` that fails for ``n`` == ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def deserialize(self, topic, data, headers=None):
        n = int(data[1:])
        if n == self.at:
            raise ValueError(f"no {n}")
        return n


@pytest.mark.parametrize(("key_at", "value_at", "what", "offset"), [
    (6, 99, "key", 6), (99, 6, "value", 6), (6, 6, "key", 6), (7, 5, "value", 5), (0, 99, "key", 0)])
def test_the_first_record_that_fails_to_deserialize_stops_the_poll(key_at, value_at, what, offset):
    f = cf(batch(0, 12), converter=RecordConverter(_FailsAt(key_at), _FailsAt(value_at)))
    if offset:  # the records before the failing one come first (none: the first poll raises)
        recs = f.fetch_records(100)
        assert offsets(recs) == list(range(offset)) and [r.key for r in recs] == list(range(offset))
        assert [r.value for r in recs] == list(range(offset)) and all(r.serialized_value_size == 2 for r in recs)
    with pytest.raises(RecordDeserializationError) as info:
        f.fetch_records(100)
    assert info.value.offset == offset and f.next_fetch_offset == offset and what in str(info.value)


def _legacy_v1() -> bytes:
    import warnings

    with warnings.catch_warnings():  # kafka-python's deprecated importlib.resources calls at import time
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.legacy_records import LegacyRecordBatchBuilder

    b = LegacyRecordBatchBuilder(1, 0, 10**6)
    for i in range(3):
        b.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    return bytes(b.build())


SHAPES = {
    "plain": lambda: batch(0, 3),
    "headers": lambda: batch(0, 3, headers=(("h", b"x"), ("n", None))),
    "gzip": lambda: batch(0, 3, compression=CompressionType.GZIP),
    "null keys": lambda: batch(0, 3, keys=False),
    "two batches and a marker": lambda: batch(0, 2, pid=7, transactional=True) + marker(2, 7, commit=True)
    + batch(3, 2),
    "legacy v1": _legacy_v1,
    "mixed header counts": lambda: _mixed_headers(),
}


def _mixed_headers() -> bytes:
    """Records with 0, 1 and 2 headers in one batch: the record decoder's shape in both paths."""
    from strom.record import MemoryRecordsBuilder

    b = MemoryRecordsBuilder()
    for i in range(6):
        b.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, [("h", b"x"), ("n", None)][:i % 3])
    return bytes(b.build())


@pytest.mark.parametrize("shape", SHAPES)
def test_records_from_a_receive_buffer_are_bytes(shape: str, as_received: bool) -> None:
    """Keys, values and header values are ``bytes`` (never slices of the receive buffer, a ``bytearray``), the
    same as from ``bytes``; columns too."""
    data = SHAPES[shape]()
    records = cf(data).fetch_records(100)
    assert records == CompletedFetch(TP, 0, 0, data, RAW).fetch_records(100) and records
    for r in records:
        assert all(type(x) is bytes for x in (r.key, r.value, *(v for _k, v in r.headers)) if x is not None)
    columns = cf(data).fetch_columns(100)
    assert columns == CompletedFetch(TP, 0, 0, data, RAW).fetch_columns(100)


def test_columns_are_decoded_from_the_receive_buffer_itself(as_received: bool, monkeypatch) -> None:
    """No copy of a response's records for the columnar path: the decoder gets the receive buffer."""
    from strom.consumer.internals import arrow_decoder

    seen = []
    for name in ("decode_batch_columns", "decode_blocks_columns"):
        monkeypatch.setattr(arrow_decoder, name,
                            lambda data, *a, _decode=getattr(arrow_decoder, name): seen.append(data) or _decode(data, *a))
    data = batch(0, 3) + batch(3, 2)
    f = cf(data)
    assert [c.column(0).to_pylist() for c in f.fetch_columns(100)] == [[0, 1, 2, 3, 4]]  # the two decoded together
    data_2 = batch(0, 3) + batch(3, 2, compression=CompressionType.GZIP)  # (a compressed batch is not joined)
    assert [c.column(0).to_pylist() for c in cf(data_2).fetch_columns(100)] == [[0, 1, 2], [3, 4]]
    seen = seen[:2]  # (the second read's compressed batch is decoded from its decompressed bytes)
    if as_received:
        assert len(seen) == 2
        assert all(type(d) is bytearray and len(d) == len(b) + 10 for d, b in zip(seen, (data, data_2), strict=True))
    else:
        assert seen[0] is data


# ------------------------------------------------------------------ columnar reads: batches decoded together


def _log_append_batch(base_offset: int, n: int, epoch: int = 3) -> bytes:
    b = MemoryRecordsBuilder(base_offset=base_offset, partition_leader_epoch=epoch, timestamp_type=1)
    for i in range(n):
        b.append(T0 + i, b"k%d" % (base_offset + i), b"v%d" % (base_offset + i))
    return b.build()


def _corrupt_last_value_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[-2] ^= 0x01
    return bytes(out)


_SHAPES = {  # name -> (records, CompletedFetch keyword arguments)
    "plain": (lambda: b"".join(batch(10 * i, 10) for i in range(6)), {}),
    "headers and null keys": (lambda: batch(0, 4, headers=(("h", b"x"),)) + batch(4, 5, keys=False)
                              + batch(9, 3, headers=(("a", None), ("b", b""))), {}),
    "fetch offset inside the second batch": (lambda: b"".join(batch(5 * i, 5) for i in range(4)), {"offset": 7}),
    "compaction gaps": (lambda: batch(0, 5, skip={1, 4}) + batch(5, 4, skip={5}) + batch(9, 2), {}),
    "control and aborted, read_committed": (
        lambda: (batch(0, 2, pid=1, transactional=True) + batch(2, 2, pid=2, transactional=True)
                 + batch(4, 3, pid=2, transactional=True) + marker(7, 1, commit=False) + marker(8, 2, commit=True)
                 + batch(9, 2) + batch(11, 2, pid=1, transactional=True) + marker(13, 1, commit=True)
                 + batch(14, 3) + batch(17, 1)),
        {"read_committed": True, "aborted_transactions": [(1, 0)]}),
    "control and aborted, read_uncommitted": (
        lambda: (batch(0, 2, pid=1, transactional=True) + batch(2, 2) + marker(4, 1, commit=False)
                 + batch(5, 2) + batch(7, 2)),
        {"aborted_transactions": [(1, 0)]}),
    "aborted and control right after plain batches, one leader epoch": (
        lambda: (batch(0, 2, epoch=-1) + batch(2, 2, pid=1, transactional=True, epoch=-1)
                 + batch(4, 2, pid=2, transactional=True, epoch=-1) + marker(6, 2, commit=True)
                 + marker(7, 1, commit=False) + batch(8, 2, epoch=-1) + batch(10, 1, epoch=-1)),
        {"read_committed": True, "aborted_transactions": [(1, 2)]}),
    "compressed between plain": (lambda: batch(0, 3) + batch(3, 3, compression=CompressionType.GZIP) + batch(6, 3)
                                 + batch(9, 3), {}),
    "leader epoch changes": (lambda: batch(0, 3, epoch=3) + batch(3, 3, epoch=3) + batch(6, 3, epoch=4)
                             + batch(9, 2, epoch=4), {}),
    "log append time between create time": (lambda: batch(0, 3) + _log_append_batch(3, 3) + _log_append_batch(6, 2)
                                            + batch(8, 2), {}),
    "crc mismatch in the third batch": (lambda: batch(0, 3) + batch(3, 3) + _corrupt_last_value_byte(batch(6, 3))
                                        + batch(9, 3), {"check_crcs": True}),
    "truncated last batch": (lambda: batch(0, 3) + batch(3, 3) + batch(6, 3)[:-7], {}),
    "a bad batch size after two": (lambda: batch(0, 3) + batch(3, 3) + b"\x00" * 8 + b"\x00\x00\x00\x01"
                                   + b"\x00" * 60, {}),
}


def _rows_of_records(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers)) for r in records]


def _rows_of_columns(chunks) -> list[tuple]:
    rows = []
    for c in chunks:
        for o, t, tt, k, v, h in zip(*(c.column(i).to_pylist() for i in range(6)), strict=True):
            rows.append((o, t, tt, k, v, tuple((e["key"], e["value"]) for e in h)))
    return rows


def _read(f: CompletedFetch, method: str, size: int) -> tuple[list[tuple], Any]:
    """One call: the rows it returned, or the error it raised (type and offset)."""
    try:
        if method == "records":
            return _rows_of_records(f.fetch_records(size)), None
        return _rows_of_columns(f.fetch_columns(size)), None
    except (CorruptRecordError, KafkaError) as e:
        return [], (type(e), getattr(e, "offset", None))


@pytest.mark.parametrize("shape", list(_SHAPES))
@pytest.mark.parametrize("size", [1, 3, 7, 100])
@pytest.mark.parametrize("calls", ["columns", "alternating"])
def test_columnar_reads_equal_the_row_path(shape: str, size: int, calls: str) -> None:
    """Batches decoded together (``poll_arrow``) give, call after call, the rows, positions and errors of the
    record-by-record path: fetch offset, control batches, aborted transactions, compaction gaps, compressed
    batches, leader epochs, timestamp types, CRC errors, truncated and malformed data; also when ``poll`` and
    ``poll_arrow`` alternate on the partition (the batches decoded together are read again one by one)."""
    make, kwargs = _SHAPES[shape]
    data = make()
    kwargs = dict(kwargs)
    offset = kwargs.pop("offset", 0)
    kwargs.setdefault("check_crcs", True)
    expected_f = cf(data, offset, **kwargs)
    actual_f = cf(data, offset, **kwargs)
    for call in range(200):
        method = "columns" if calls == "columns" or call % 2 == 0 else "records"
        expected = _read(expected_f, "records", size)
        actual = _read(actual_f, method, size)
        assert actual == expected, (call, method)
        assert actual_f.next_fetch_offset == expected_f.next_fetch_offset, call
        assert actual_f.last_epoch == expected_f.last_epoch, call
        if expected_f.is_consumed and actual_f.is_consumed and not expected[0] and expected[1] is None:
            break
    assert expected_f.is_consumed and actual_f.is_consumed


def test_columnar_reads_decode_following_batches_together(monkeypatch) -> None:
    """Six plain batches: one vectorized pass; a compressed batch ends a group (it is decoded alone)."""
    from strom.consumer.internals import arrow_decoder

    calls = []
    blocks = arrow_decoder.decode_blocks_columns
    monkeypatch.setattr(arrow_decoder, "decode_blocks_columns", lambda data, b, *a: calls.append(len(b)) or blocks(data, b, *a))
    f = cf(b"".join(batch(10 * i, 10) for i in range(6)))
    assert [len(c) for c in f.fetch_columns(1000)] == [60] and calls == [6]
    calls.clear()
    f = cf(batch(0, 3) + batch(3, 3) + batch(6, 3, compression=CompressionType.GZIP) + batch(9, 3) + batch(12, 3))
    assert [len(c) for c in f.fetch_columns(1000)] == [6, 3, 6] and calls == [2, 2]


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
@pytest.mark.parametrize("columnar", [False, True])
def test_a_batch_that_decompresses_past_the_bound_is_corrupt_at_its_offset(codec, columnar, monkeypatch) -> None:
    """A decompression bomb served by some broker (a few kilobytes that stand for gigabytes) is refused as soon as
    its block passes ``MAX_DECOMPRESSED_BATCH`` (here lowered to 1 MiB), instead of filling the consumer's memory;
    the records before it are delivered and the position stays at the bomb."""
    from strom.record import compression

    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BATCH", 1 << 20)
    b = MemoryRecordsBuilder(codec, base_offset=3)
    b.append(T0, b"k", bytes(2 << 20))
    f = cf(batch(0, 3) + b.build())
    take = f.fetch_columns if columnar else f.fetch_records
    first = take(100)
    assert (sum(c.num_rows for c in first) if columnar else len(first)) == 3
    with pytest.raises(CorruptRecordError, match="decompresses to more than 1048576 bytes") as info:
        take(100)
    assert info.value.offset == 3 and f.next_fetch_offset == 3
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BATCH", 4 << 20)  # under the bound: read as before
    g = cf(b.build(), offset=3)
    (r,) = g.fetch_records(100)
    assert r.offset == 3 and r.value == bytes(2 << 20)
