"""CompletedFetch: slicing by max.poll.records, CRC checks, control batches, aborted transactions,
records before the fetch offset, compaction gaps and deserialization errors."""

from __future__ import annotations

import pytest

from strom.common.serialization import IntegerDeserializer, StringDeserializer
from strom.common.structs import TopicPartition
from strom.consumer.errors import CorruptRecordError, RecordDeserializationError
from strom.consumer.internals.completed_fetch import CompletedFetch, RecordConverter
from strom.record import CompressionType

from .helpers import batch, marker

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TP = TopicPartition("t", 0)
RAW = RecordConverter()


def cf(data: bytes, offset: int = 0, converter=RAW, **kw) -> CompletedFetch:
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
