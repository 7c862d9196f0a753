"""Decode the records of one (uncompressed) v2 batch straight into :class:`ConsumerRecord` tuples.

Kafka counterpart: ``DefaultRecord.readFrom`` + ``CompletedFetch.parseRecord`` fused into one loop: the
consumer's hottest path. Record layout (see ``strom.record.batch``)::

    length VARINT | attributes INT8 | timestampDelta VARLONG | offsetDelta VARINT | keyLength VARINT | key |
    valueLength VARINT | value | headersCount VARINT | headers

Two paths for v2 batches (legacy v0/v1 message sets are decoded by :mod:`strom.record.legacy`):

* the fast path (:mod:`record_runs`) for the common batch shape — offset deltas ``0..count-1``
  (``records_count == last_offset_delta + 1``: no compaction gaps), non-null values, no headers, short
  varints, keys in all records or in none. It yields timestamps, keys and values; the ``ConsumerRecord`` tuples
  are then assembled by ``map``/``zip`` in C with the constant fields repeated. Offset deltas are checked for
  size only (the broker assigns them consecutively). Any other shape sends the whole batch to
* the general decoder, :func:`strom.record.batch.decode_records` (the one record-by-record v2 decoder, also
  used by the broker and ``MemoryRecords``): one- and two-byte varints inlined, everything decoded, building
  ``ConsumerRecord`` s directly.

Both check every record's structure against its length prefix and that the block is consumed exactly, else
:class:`~strom.common.error_codes.CorruptMessageError`. Pure functions; thread-safe.
"""

from __future__ import annotations

from itertools import repeat

from strom.common.error_codes import CorruptMessageError
from strom.consumer.consumer_records import ConsumerRecord
from strom.consumer.internals.record_runs import NotSimple, decode_simple
from strom.record.batch import decode_records

__all__ = ["decode_consumer_records"]

_new = tuple.__new__
_CR = ConsumerRecord


def decode_consumer_records(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                            contiguous: bool, topic: str, partition: int, timestamp_type: int,
                            leader_epoch: int | None, log_append_time: int | None = None) -> list[ConsumerRecord]:
    """``count`` records from ``data[start:end]`` as ``ConsumerRecord`` s (raw ``bytes`` keys and values)."""
    if contiguous and count > 0 and end - start >= 4:
        try:
            tss, keys, values, p = decode_simple(data, start, count, base_timestamp)
        except (NotSimple, IndexError):
            pass
        else:
            if p != end:
                raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after "
                                          f"{count} records")
            offsets = range(base_offset, base_offset + count)
            timestamps = repeat(log_append_time) if log_append_time is not None else tss
            if keys is not None:
                return list(map(_new, repeat(_CR), zip(
                    repeat(topic), repeat(partition), offsets, timestamps, repeat(timestamp_type), keys, values,
                    repeat(()), map(len, keys), map(len, values), repeat(leader_epoch))))
            return list(map(_new, repeat(_CR), zip(
                repeat(topic), repeat(partition), offsets, timestamps, repeat(timestamp_type), repeat(None), values,
                repeat(()), repeat(-1), map(len, values), repeat(leader_epoch))))
    return _decode_general(data, start, end, count, base_offset, base_timestamp, topic, partition, timestamp_type,
                           leader_epoch, log_append_time)


def _decode_general(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    topic: str, partition: int, timestamp_type: int, leader_epoch: int | None,
                    log_append_time: int | None) -> list[ConsumerRecord]:
    """Every other v2 shape: the one record decoder, :func:`strom.record.batch.decode_records`."""
    return decode_records(data, start, end, count, base_offset, base_timestamp, log_append_time,
                          (_CR, topic, partition, timestamp_type, leader_epoch))
