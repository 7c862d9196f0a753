"""Decode the records of one (uncompressed) v2 batch straight into :class:`ConsumerRecord` tuples.

Kafka counterpart: ``DefaultRecord.readFrom`` + ``CompletedFetch.parseRecord`` fused into one loop: the
consumer's hottest path. Record layout (see ``strom.record.batch``)::

    length VARINT | attributes INT8 | timestampDelta VARLONG | offsetDelta VARINT | keyLength VARINT | key |
    valueLength VARINT | value | headersCount VARINT | headers

Three paths for v2 batches (legacy v0/v1 message sets are decoded by :mod:`strom.record.legacy`):

* the C decoder (``decode_records`` of ``strom/record/_fastdecode.c``, where ``pip install`` found a compiler) for
  batches with offset deltas ``0..count-1``, non-null values and keys in all records or in none (any header
  shape): timestamps, keys, values and header runs as lists in one pass, the records then assembled as below.
  Anything else (or an install without it) goes to
* the fast path (:mod:`record_runs`) for the common batch shape — offset deltas ``0..count-1``
  (``records_count == last_offset_delta + 1``: no compaction gaps), non-null values, headers with non-null
  values, short varints, keys in all records or in none. It yields timestamps, keys and values; the ``ConsumerRecord`` tuples
  are then assembled by ``map``/``zip`` in C with the constant fields repeated. Offset deltas are checked for
  size only (the broker assigns them consecutively). Any other shape sends the whole batch to
* the general decoder, :func:`strom.record.batch.decode_records` (the one record-by-record v2 decoder, also
  used by the broker and ``MemoryRecords``): one- and two-byte varints inlined, everything decoded, building
  ``ConsumerRecord`` s directly.

Both check every record's structure against its length prefix and that the block is consumed exactly, else
:class:`~strom.common.error_codes.CorruptMessageError`. Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from typing import Any

from strom.common.error_codes import CorruptMessageError
from strom.consumer.consumer_records import ConsumerRecord
from strom.consumer.internals.record_runs import HeaderColumns, NotSimple, decode_simple
from strom.record.batch import decode_records

try:  # the optional C decoder (strom/record/_fastdecode.c; setup.py builds it when it can)
    from strom.record._fastdecode import decode_records as _decode_records_c
except ImportError:  # (an install without a C compiler, or a build older than this file)
    _decode_records_c = None

__all__ = ["decode_consumer_records", "BatchRecords"]

_new = tuple.__new__
_CR = ConsumerRecord


def decode_consumer_records(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                            contiguous: bool, topic: str, partition: int, timestamp_type: int,
                            leader_epoch: int | None,
                            log_append_time: int | None = None) -> list[ConsumerRecord] | BatchRecords:
    """``count`` records from ``data[start:end]`` as ``ConsumerRecord`` s (raw ``bytes`` keys and values): a
    list, or from the fast path a :class:`BatchRecords` that makes them per slice."""
    if contiguous and count > 0 and end - start >= 4:
        decoded = None if _decode_records_c is None else _decode_records_c(data, start, end, count, base_timestamp)
        if decoded is not None:
            tss, keys, values, runs, p = decoded
            if p != end:
                raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after "
                                          f"{count} records")
            return BatchRecords(topic, partition, base_offset, None if log_append_time is not None else tss,
                                log_append_time, timestamp_type, keys, values, leader_epoch, 0, count,
                                None if runs is None else HeaderColumns.of_runs(runs))
        try:
            tss, keys, values, headers, p = decode_simple(data, start, count, base_timestamp)
        except (NotSimple, IndexError, ValueError):
            pass
        else:
            if p != end:
                raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after "
                                          f"{count} records")
            return BatchRecords(topic, partition, base_offset, None if log_append_time is not None else tss,
                                log_append_time, timestamp_type, keys, values, leader_epoch, 0, count, headers)
    return _decode_general(data, start, end, count, base_offset, base_timestamp, topic, partition, timestamp_type,
                           leader_epoch, log_append_time)


class BatchRecords:
    """The records of one batch as decoded fields; ``ConsumerRecord`` tuples are made when a slice is taken.

    Why not a list of records: ``ConsumerRecord`` is a ``NamedTuple``, and CPython's collector only untracks
    *exact* tuples, so every record stays tracked for its life. A batch (up to thousands of records) handed out
    ``max.poll.records`` at a time would live across many polls, be promoted to the oldest generation and drive
    full collections; made per poll, records die young. Supports ``len``, slices (a list), indexing, iteration
    and :meth:`starting_at`.
    """

    __slots__ = ("_topic", "_partition", "_base_offset", "_timestamps", "_log_append_time", "_timestamp_type",
                 "_keys", "_values", "_leader_epoch", "_start", "_stop", "_headers")

    def __init__(self, topic: str, partition: int, base_offset: int, timestamps: list[int] | None,
                 log_append_time: int | None, timestamp_type: int, keys: list[bytes] | None, values: list[bytes],
                 leader_epoch: int | None, start: int, stop: int, headers: HeaderColumns | None = None) -> None:
        self._topic = topic
        self._partition = partition
        self._base_offset = base_offset
        self._timestamps = timestamps
        self._log_append_time = log_append_time
        self._timestamp_type = timestamp_type
        self._keys = keys
        self._values = values
        self._leader_epoch = leader_epoch
        self._start = start
        self._stop = stop
        self._headers = headers  # None: no record has any

    def __len__(self) -> int:
        return self._stop - self._start

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return iter(self._make(self._start, self._stop))

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            a, b, step = index.indices(self._stop - self._start)
            if step != 1:
                return self._make(self._start, self._stop)[index]
            return self._make(self._start + a, self._start + b) if a < b else []
        n = self._stop - self._start
        if not -n <= index < n:
            raise IndexError("record index out of range")
        i = self._start + (index if index >= 0 else n + index)
        return self._make(i, i + 1)[0]

    def offset(self, i: int) -> int:
        """The offset of record ``i`` of this view."""
        return self._base_offset + self._start + i

    def starting_at(self, offset: int) -> BatchRecords:
        """The records at or after ``offset`` (offsets here are consecutive)."""
        start = min(max(self._start, offset - self._base_offset), self._stop)
        return BatchRecords(self._topic, self._partition, self._base_offset, self._timestamps,
                            self._log_append_time, self._timestamp_type, self._keys, self._values,
                            self._leader_epoch, start, self._stop, self._headers)

    def raw_columns(self, a: int, b: int) -> tuple[list[bytes] | None, list[bytes]]:
        """The keys (``None``: the batch's records have none) and values of records ``a..b-1`` of this view."""
        a += self._start
        b += self._start
        return (None if self._keys is None else self._keys[a:b]), self._values[a:b]

    def make(self, a: int, b: int, keys: list[Any] | None, values: list[Any]) -> list[ConsumerRecord]:
        """Records ``a..b-1`` of this view with ``keys`` / ``values`` (deserialized) in place of the raw ones
        (``keys`` ``None``: no keys); the serialized sizes stay the raw ones'."""
        return self._build(a + self._start, b + self._start, keys, values)

    def _make(self, a: int, b: int) -> list[ConsumerRecord]:
        keys = self._keys
        return self._build(a, b, None if keys is None else keys[a:b], self._values[a:b])

    def _build(self, a: int, b: int, keys: list[Any] | None, values: list[Any]) -> list[ConsumerRecord]:
        """Records ``a..b-1`` (positions in the batch) with these keys and values."""
        offsets = range(self._base_offset + a, self._base_offset + b)
        ts = self._timestamps
        timestamps = repeat(self._log_append_time) if ts is None else ts[a:b]
        value_sizes = map(len, self._values[a:b])
        key_sizes = repeat(-1) if self._keys is None else map(len, self._keys[a:b])
        headers = repeat(()) if self._headers is None else self._headers.slice(a, b)
        return list(map(_new, repeat(_CR), zip(
            repeat(self._topic), repeat(self._partition), offsets, timestamps, repeat(self._timestamp_type),
            repeat(None) if keys is None else keys, values, headers, key_sizes, value_sizes,
            repeat(self._leader_epoch))))


def _decode_general(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    topic: str, partition: int, timestamp_type: int, leader_epoch: int | None,
                    log_append_time: int | None) -> list[ConsumerRecord]:
    """Every other v2 shape: the one record decoder, :func:`strom.record.batch.decode_records`."""
    return decode_records(data, start, end, count, base_offset, base_timestamp, log_append_time,
                          (_CR, topic, partition, timestamp_type, leader_epoch))
