"""The consumer's fast record decoder for "simple" batches: runs of same-layout records read with strided slices.

Kafka counterpart: none (``DefaultRecord.readFrom`` decodes record by record); this is how strom makes
record decoding cheap in pure Python. It applies to batches whose offset deltas are ``0..count-1`` and whose
records all have a non-null value, headers (if any) with non-null values and at most 63 of them, varints of at
most two bytes (three for offset deltas), and either no key at all or a key each. Anything else raises
:class:`NotSimple` and the caller uses the general decoder.

Records produced together usually share one *layout*: the same length prefix, attributes, key and value
lengths and varint sizes; only the timestamp and offset deltas differ. For a run of ``n`` such records of
``t`` bytes starting at ``p``, byte ``j`` of every record is ``data[p + j : p + n*t : t]`` — one slice in C.
So a run is verified by comparing those strided slices of the constant bytes (length, attributes, key and
value lengths, the header count, each header's key and value length) against the first record's, and checking the continuation bits of the
two delta varints (``min``/``max`` of a slice); timestamps are decoded through lookup tables with ``map``,
keys, values and header values are cut with one comprehension each (header tuples are made per poll, see
:class:`HeaderColumns`). A run ends where a check fails (found by bisection) or
where the offset delta needs one more varint byte (deltas 64, 8192 and 2^20). When runs turn out short (varying
key or value sizes), the rest of the batch goes through a per-record loop doing the same checks.

Pure functions; thread-safe.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import repeat
from operator import add, lshift, or_
from typing import Any

from strom.common.error_codes import CorruptMessageError
from strom.record.batch import read_headers

__all__ = ["NotSimple", "decode_simple", "first_key_byte", "HeaderColumns"]


class NotSimple(Exception):
    """The batch has a record the fast path does not handle."""


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


_TS1 = [_zigzag(b) for b in range(256)]  # one-byte varint -> value
_TS2 = [0] * 65536  # (lo | hi << 8) of a two-byte varint -> value
for _lo in range(128, 256):
    for _hi in range(128):
        _TS2[_lo | (_hi << 8)] = _zigzag((_lo & 127) | (_hi << 7))
del _lo, _hi
_OFFSET_LIMIT = {1: 64, 2: 8192, 3: 1 << 20}  # offset deltas a varint of that many bytes holds
_MIN_AVERAGE_RUN = 16


def _varint2(data: bytes, q: int) -> tuple[int, int]:
    """A non-negative length in a one- or two-byte zigzag varint at ``q``: ``(value, size)``."""
    b = data[q]
    if b & 1:
        raise NotSimple  # null (-1) or negative
    if b < 128:
        return b >> 1, 1
    c = data[q + 1]
    if c > 127:
        raise NotSimple
    return ((b & 127) | (c << 7)) >> 1, 2


def first_key_byte(data: bytes, p: int) -> int:
    """The first byte of the key length of the record at ``p`` (1 = null key)."""
    p += 1 if data[p] < 128 else 2  # length
    p += 1  # attributes
    for _ in range(2):  # timestamp delta, offset delta
        p += 1 if data[p] < 128 else 2
    return data[p]


def _layout(data: bytes, p: int, keyed: bool) -> tuple[Any, ...]:
    """Field positions of the simple record at ``p``: ``(t, ts_at, ts_size, off_at, off_size, key_len_at,
    key_len_size, key_size, value_len_at, value_len_size, value_size, constant, header_keys, header_values)``
    (key fields 0 without a key): ``constant`` the positions of the bytes every record of a run repeats (length,
    attributes, the key and value lengths, the header count, each header's key with its length and its value's
    length), ``header_keys`` the headers' keys, ``header_values`` each header value's ``(position, size)``."""
    length, lsz = _varint2(data, p)
    t = lsz + length
    q = lsz + 1
    ts_at = q
    ts_size = 1 if data[p + q] < 128 else 2
    if ts_size == 2 and data[p + q + 1] > 127:
        raise NotSimple
    q += ts_size
    off_at = q
    # offset deltas of up to three bytes (batches of more than 8192 records, e.g. librdkafka's 10,000)
    off_size = 1 if data[p + q] < 128 else 2 if data[p + q + 1] < 128 else 3
    if off_size == 3 and data[p + q + 2] > 127:
        raise NotSimple
    q += off_size
    key_at = q
    if keyed:
        key_size, key_len_size = _varint2(data, p + q)
        q += key_len_size + key_size
    else:
        if data[p + q] != 1:
            raise NotSimple
        key_size, key_len_size = 0, 1
        q += 1
    value_at = q
    value_size, value_len_size = _varint2(data, p + q)
    q += value_len_size + value_size
    const = [(0, ts_at), (key_at, key_at + key_len_size), (value_at, value_at + value_len_size), (q, q + 1)]
    count = data[p + q]  # the header count (one byte: up to 63 headers)
    if count & 1 or count > 127:
        raise NotSimple
    q += 1
    header_keys = []
    header_values = []
    for _ in range(count >> 1):
        hkey_size, hkey_len_size = _varint2(data, p + q)
        const.append((q, q + hkey_len_size + hkey_size))  # a header's key is the same in all records of a run
        q += hkey_len_size
        header_keys.append(data[p + q:p + q + hkey_size].decode("utf-8", "replace"))  # (as Kafka's consumer)
        q += hkey_size
        hvalue_size, hvalue_len_size = _varint2(data, p + q)  # (a null header value is not simple)
        const.append((q, q + hvalue_len_size))
        q += hvalue_len_size
        header_values.append((q, hvalue_size))
        q += hvalue_size
    if q != t:
        raise NotSimple
    return (t, ts_at, ts_size, off_at, off_size, key_at, key_len_size, key_size, value_at, value_len_size,
            value_size, tuple(j for a, b in const for j in range(a, b)), tuple(header_keys), tuple(header_values))


def _uniform(data: bytes, p: int, n: int, lay: tuple[int, ...]) -> bool:
    """Do the ``n`` records from ``p`` all have layout ``lay``?"""
    t, ts_at, ts_size, off_at, off_size = lay[:5]
    e = p + n * t
    if e > len(data):
        return False
    for j in lay[11]:
        if data[p + j:e:t] != data[p + j:p + j + 1] * n:
            return False
    for at, size in ((ts_at, ts_size), (off_at, off_size)):
        if size == 1:
            if max(data[p + at:e:t]) > 127:
                return False
        elif size == 2:
            if min(data[p + at:e:t]) < 128 or max(data[p + at + 1:e:t]) > 127:
                return False
        elif (min(data[p + at:e:t]) < 128 or min(data[p + at + 1:e:t]) < 128
              or max(data[p + at + 2:e:t]) > 127):
            return False
    return True


def decode_simple(data: bytes, p: int, count: int, base_ts: int) -> tuple[list[int], list[bytes] | None,
                                                                         list[bytes], HeaderColumns | None, int]:
    """``(timestamps, keys or None, values, headers or None, end position)`` of ``count`` simple records from
    ``p`` (headers ``None`` when no record has any); raises :class:`NotSimple` (or ``IndexError`` on a truncated
    block)."""
    keyed = first_key_byte(data, p) != 1
    tss: list[int] = []
    keys: list[bytes] | None = [] if keyed else None
    values: list[bytes] = []
    headers: HeaderColumns | None = None
    done = runs = 0
    while done < count:
        if runs >= 4 and done < runs * _MIN_AVERAGE_RUN:
            return _finish_per_record(data, p, done, count, base_ts, tss, keys, values, headers)
        lay = _layout(data, p, keyed)
        t, ts_at, ts_size, off_size = lay[0], lay[1], lay[2], lay[4]
        n = min(count - done, _OFFSET_LIMIT[off_size] - done, (len(data) - p) // t)
        if n <= 0:
            raise NotSimple
        if n > 1 and not _uniform(data, p, n, lay):
            lo, hi = 1, n  # _uniform(lo) holds (the layout came from that record), _uniform(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _uniform(data, p, mid, lay):
                    lo = mid
                else:
                    hi = mid
            n = lo
        e = p + n * t
        if ts_size == 1:
            tss.extend(map(add, map(_TS1.__getitem__, data[p + ts_at:e:t]), repeat(base_ts)))
        else:
            lo_bytes, hi_bytes = data[p + ts_at:e:t], data[p + ts_at + 1:e:t]
            tss.extend(map(add, map(_TS2.__getitem__, map(or_, lo_bytes, map(lshift, hi_bytes, repeat(8)))),
                           repeat(base_ts)))
        if keys is not None:
            start, size = p + lay[5] + lay[6], lay[7]
            keys.extend([data[i:i + size] for i in range(start, e, t)])
        start, size = p + lay[8] + lay[9], lay[10]
        values.extend([data[i:i + size] for i in range(start, e, t)])
        header_keys = lay[12]
        if header_keys:
            if headers is None:
                headers = HeaderColumns()
            # (range ends past the field: an empty last value sits at the record's very end)
            headers.add(done, done + n, header_keys,
                        [[data[i:i + size] for i in range(p + at, p + at + n * t, t)] for at, size in lay[13]])
        p = e
        done += n
        runs += 1
    return tss, keys, values, headers, p


def _finish_per_record(data: bytes, p: int, done: int, count: int, base_ts: int, tss: list[int],
                       keys: list[bytes] | None, values: list[bytes],
                       headers: HeaderColumns | None) -> tuple[list[int], list[bytes] | None, list[bytes],
                                                               HeaderColumns | None, int]:
    """Records ``done..count-1`` one by one (same shape rules as the runs; varints inlined)."""
    tapp = tss.append
    vapp = values.append
    per_record: list[Any] = []
    happ = per_record.append
    count -= done
    kapp = keys.append if keys is not None else None
    for _ in range(count):
        b = data[p]
        if b < 128:
            rec_end = p + 1 + (b >> 1)
            q = p + 2  # length, attributes
        else:
            c = data[p + 1]
            if c > 127:
                raise NotSimple
            rec_end = p + 2 + (((b & 127) | (c << 7)) >> 1)
            q = p + 3
        b = data[q]
        if b < 128:
            tapp(base_ts + ((b >> 1) ^ -(b & 1)))
            q += 1
        else:
            c = data[q + 1]
            if c > 127:
                raise NotSimple
            b = (b & 127) | (c << 7)
            tapp(base_ts + ((b >> 1) ^ -(b & 1)))
            q += 2
        if data[q] < 128:  # offset delta: size only
            q += 1
        elif data[q + 1] < 128:
            q += 2
        elif data[q + 2] < 128:
            q += 3
        else:
            raise NotSimple
        b = data[q]
        if kapp is None:
            if b != 1:
                raise NotSimple
            q += 1
        else:
            if b & 1:  # null (or negative) key length
                raise NotSimple
            if b < 128:
                q += 1
                b >>= 1
            else:
                c = data[q + 1]
                if c > 127:
                    raise NotSimple
                q += 2
                b = ((b & 127) | (c << 7)) >> 1
            kapp(data[q:q + b])
            q += b
        b = data[q]
        if b & 1:  # null (or negative) value length
            raise NotSimple
        if b < 128:
            q += 1
            b >>= 1
        else:
            c = data[q + 1]
            if c > 127:
                raise NotSimple
            q += 2
            b = ((b & 127) | (c << 7)) >> 1
        vapp(data[q:q + b])
        q += b
        count_byte = data[q]
        if not count_byte:
            if q + 1 != rec_end:  # one header-count byte (zero headers), then the end
                raise NotSimple
            happ(())
        else:
            if count_byte & 1 or count_byte > 127:
                raise NotSimple
            try:
                hs, q = read_headers(data, q + 1, count_byte >> 1)
            except CorruptMessageError:
                raise NotSimple from None
            if q != rec_end:
                raise NotSimple
            happ(hs)
        p = rec_end
    if any(per_record):
        if headers is None:
            headers = HeaderColumns()
        headers.add(done, done + count, None, per_record)
    return tss, keys, values, headers, p


class HeaderColumns:
    """The headers of a batch's records, kept as the runs decoded them: per run its header keys and a column
    of values per header (or, for records read one by one, their header tuples); a record's headers tuple
    ``((key, value), ...)`` is made when a slice is taken, like the records (so it dies young in the collector).
    Records outside every run have no headers."""

    __slots__ = ("_starts", "_runs")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._runs: list[tuple[int, int, tuple[str, ...] | None, list[Any]]] = []

    @classmethod
    def of_runs(cls, runs: list[tuple[int, int, tuple[str, ...], list[Any]]]) -> HeaderColumns:
        """Headers from ``(start, stop, keys, columns)`` runs in record order (the C decoder's)."""
        headers = cls()
        headers._starts = [run[0] for run in runs]
        headers._runs = runs  # type: ignore[assignment]
        return headers

    def add(self, start: int, stop: int, keys: tuple[str, ...] | None, columns: list[Any]) -> None:
        """Records ``start..stop-1``: ``keys`` and a value column per key, or ``keys`` ``None`` and the records'
        header tuples in ``columns``."""
        self._starts.append(start)
        self._runs.append((start, stop, keys, columns))

    def slice(self, a: int, b: int) -> list[Any]:
        """The headers tuples of records ``a..b-1``."""
        out: list[Any] = []
        at = a
        runs = self._runs
        for i in range(max(bisect_right(self._starts, a) - 1, 0), len(runs)):
            start, stop, keys, columns = runs[i]
            if start >= b:
                break
            lo, hi = max(start, a), min(stop, b)
            if lo >= hi:
                continue
            if lo > at:
                out.extend(repeat((), lo - at))
            if keys is None:
                out.extend(columns[lo - start:hi - start])
            elif len(keys) == 1:  # the common case, in one comprehension
                key = keys[0]
                out.extend([((key, v),) for v in columns[0][lo - start:hi - start]])
            else:
                out.extend(map(tuple, map(zip, repeat(keys), zip(*(c[lo - start:hi - start] for c in columns),
                                                                  strict=True))))
            at = hi
        if at < b:
            out.extend(repeat((), b - at))
        return out
