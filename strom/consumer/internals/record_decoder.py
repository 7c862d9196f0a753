"""Decode the records of one (uncompressed) v2 batch straight into :class:`ConsumerRecord` tuples.

Kafka counterpart: ``DefaultRecord.readFrom`` + ``CompletedFetch.parseRecord`` fused into one loop: the
consumer's hottest path. Record layout (see ``strom.record.batch``)::

    length VARINT | attributes INT8 | timestampDelta VARLONG | offsetDelta VARINT | keyLength VARINT | key |
    valueLength VARINT | value | headersCount VARINT | headers

Two decoders:

* the fast path (:mod:`record_runs`) for the common batch shape — offset deltas ``0..count-1``
  (``records_count == last_offset_delta + 1``: no compaction gaps), non-null values, no headers, short
  varints, keys in all records or in none. It yields timestamps, keys and values; the ``ConsumerRecord`` tuples
  are then assembled by ``map``/``zip`` in C with the constant fields repeated. Offset deltas are checked for
  size only (the broker assigns them consecutively). Any other shape sends the whole batch to
* the general decoder: one tuple per record, one- and two-byte varints inlined, everything decoded.

Both check every record's structure against its length prefix and that the block is consumed exactly, else
:class:`~strom.common.error_codes.CorruptMessageError`. Pure functions; thread-safe.
"""

from __future__ import annotations

from itertools import repeat

from strom.common.error_codes import CorruptMessageError
from strom.consumer.consumer_records import ConsumerRecord
from strom.consumer.internals.record_runs import NotSimple, decode_simple
from strom.record.varint import decode_varint, decode_varlong

__all__ = ["decode_consumer_records"]

_new = tuple.__new__
_CR = ConsumerRecord


def _headers(data: bytes, q: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, q = decode_varint(data, q)
    if count < 0:
        raise CorruptMessageError(f"invalid negative header count {count}")
    out = []
    for _ in range(count):
        klen, q = decode_varint(data, q)
        if klen < 0:
            raise CorruptMessageError("null header key")
        hkey = data[q:q + klen].decode("utf-8")
        q += klen
        vlen, q = decode_varint(data, q)
        if vlen < 0:
            out.append((hkey, None))
        else:
            out.append((hkey, data[q:q + vlen]))
            q += vlen
    return tuple(out), q


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
    return _decode_general(data, start, end, count, base_offset, base_timestamp, contiguous, topic, partition,
                           timestamp_type, leader_epoch, log_append_time)


def _decode_general(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                    contiguous: bool, topic: str, partition: int, timestamp_type: int,
                    leader_epoch: int | None, log_append_time: int | None = None) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    append = out.append
    p = start
    offset = base_offset - 1
    try:
        for _ in range(count):
            b = data[p]
            if b < 128:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                c = data[p + 1]
                if c < 128:
                    v = (b & 127) | (c << 7)
                    length = (v >> 1) ^ -(v & 1)
                    p += 2
                else:
                    length, p = decode_varint(data, p)
            rec_end = p + length
            q = p + 1  # attributes: unused
            b = data[q]
            if b < 128:
                ts = base_timestamp + ((b >> 1) ^ -(b & 1))
                q += 1
            else:
                c = data[q + 1]
                if c < 128:
                    v = (b & 127) | (c << 7)
                    ts = base_timestamp + ((v >> 1) ^ -(v & 1))
                    q += 2
                else:
                    ts, q = decode_varlong(data, q)
                    ts += base_timestamp
            if contiguous:
                offset += 1
                if data[q] < 128:
                    q += 1
                elif data[q + 1] < 128:
                    q += 2
                else:
                    _, q = decode_varint(data, q)
            else:
                delta, q = decode_varint(data, q)
                offset = base_offset + delta
            b = data[q]
            if b == 1:
                key = None
                ksize = -1
                q += 1
            else:
                if b < 128:
                    ksize = b >> 1
                    q += 1
                else:
                    ksize, q = decode_varint(data, q)
                if ksize < 0:
                    raise CorruptMessageError(f"invalid key length {ksize}")
                key = data[q:q + ksize]
                q += ksize
            b = data[q]
            if b == 1:
                value = None
                vsize = -1
                q += 1
            else:
                if b < 128:
                    vsize = b >> 1
                    q += 1
                else:
                    c = data[q + 1]
                    if c < 128:
                        vsize = ((b & 127) | (c << 7)) >> 1
                        q += 2
                    else:
                        vsize, q = decode_varint(data, q)
                if vsize < 0:
                    raise CorruptMessageError(f"invalid value length {vsize}")
                value = data[q:q + vsize]
                q += vsize
            if data[q] == 0:
                headers: tuple = ()
                q += 1
            else:
                headers, q = _headers(data, q)
            if q != rec_end:
                raise CorruptMessageError(f"record at offset {offset}: length field says {length} bytes, "
                                          f"found {q - p}")
            append(_new(_CR, (topic, partition, offset, ts if log_append_time is None else log_append_time,
                              timestamp_type, key, value, headers, ksize, vsize, leader_epoch)))
            p = rec_end
    except CorruptMessageError:
        raise
    except (IndexError, ValueError) as exc:  # ran off the buffer, overlong varint, bad UTF-8
        raise CorruptMessageError(f"malformed record #{len(out)}: {exc}") from None
    if p != end:
        raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after {count} records")
    return out
