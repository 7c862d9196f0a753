"""Decode one v2 record batch straight into Arrow columns: the consumer's columnar read path (``poll_arrow``).

Kafka counterpart: none (Kafka's consumer hands out one ``ConsumerRecord`` per record). Output: a
``pyarrow.RecordBatch`` of :data:`BATCH_SCHEMA` — ``offset`` int64, ``timestamp`` int64 (ms), ``timestamp_type``
int8 (0 CreateTime, 1 LogAppendTime, -1 none), ``key`` and
``value`` binary (null when the record's is null), ``headers`` list<struct<key: string, value: binary>>.

Three paths, the first that can read a batch does:

* the C accelerator ``strom/record/_fastdecode.c``, where ``pip install`` found a C compiler: one pass checks every
  record, sizes the columns and notes where each record's fields are, a second copies them into buffers from
  Arrow's memory pool (any header count; a null header key, a header key that is not UTF-8 or anything that does
  not add up goes on to the next path: the record decoder at last reports corruption, or decodes a key that is not
  UTF-8 with U+FFFD for what does not decode, as Kafka's Java consumer);
* the vectorized path, for every batch whose records have at most 63 headers each: numpy works on all of a
  batch's records at once, with no Python object per record. First the records' start positions: each record begins with its
  length, so a *run* of records with the same length prefix is found by comparing the prefix bytes of the
  would-be next records (a strided ``bytes`` slice and ``lstrip``, in C) — records produced together mostly
  share a length, and when the runs turn out short a per-record loop reads the prefixes instead. Then each
  field is read for all records at once: varints through byte gathers (``take``) and lookup tables, the key
  and value lengths give the byte ranges, and the key and value columns are filled with one gather per
  distinct length (a ``V<length>`` view of the fetched bytes, i.e. a ``memcpy`` per record in C) or, for
  many distinct lengths, Arrow's ``take`` over the ranges. Offsets come from the records' offset deltas, so
  compacted batches (gaps) take this path too. Headers: header ``j`` of every record that has one is read at
  once, and the ranges are ordered by record.
  :func:`decode_blocks_columns` runs the same pass over several consecutive batches of a fetch at once (a
  batch's fixed cost, about 30 numpy and Arrow calls, dominates for batches of a few hundred records).
* anything else (more than 63 headers, a null header key, varints the vectorized path does not read, a
  malformed block): the records of
  :func:`strom.record.batch.decode_records`, made columns.

All check every record's structure against its length prefix and that the block is consumed exactly (the
faster paths hand anything they cannot account for to the record decoder, which raises
:class:`~strom.common.error_codes.CorruptMessageError`). Needs numpy and pyarrow (imported by this module only:
the rest of the consumer does not). Thread-safe: pure functions, and :func:`to_table`'s cache of topic and
partition columns takes a lock.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa

from strom.record.batch import decode_records

try:
    from strom.record import _fastdecode
except ImportError:  # not built (no C compiler at install time): the numpy path reads every batch
    _fastdecode = None

__all__ = ["BATCH_SCHEMA", "TABLE_SCHEMA", "HEADERS_TYPE", "Block", "decode_batch_columns", "decode_blocks_columns",
           "records_to_columns", "empty_columns", "to_table"]

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
BATCH_SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False),
                          pa.field("timestamp", pa.int64(), nullable=False),
                          pa.field("timestamp_type", pa.int8(), nullable=False),
                          pa.field("key", pa.binary()), pa.field("value", pa.binary()),
                          pa.field("headers", HEADERS_TYPE, nullable=False)])

TABLE_SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False),
                          pa.field("partition", pa.int32(), nullable=False), *BATCH_SCHEMA])
"""``KafkaConsumer.poll_arrow``'s table: the topic-partition, then :data:`BATCH_SCHEMA`."""

def _zigzag(v: np.ndarray) -> np.ndarray:
    return (v >> 1) ^ -(v & 1)


_W = np.arange(65536, dtype=np.int64)
_ZZ1 = _zigzag(_W[:256] & 127)  # one-byte varint -> value
_ZZ2 = _zigzag((_W & 127) | ((_W >> 8) << 7))  # b0 | b1 << 8 (b0 >= 128 > b1) -> the two-byte varint's value
del _W
# (no pa.array here or on the vectorized path: its first call imports pandas, 0.2-2 s in a fresh process)
_EMPTY_STRUCTS = pa.nulls(0, HEADERS_TYPE.value_type)
_ZEROS = pa.py_buffer(bytes(1 << 18))
_BYTE = [bytes([i]) for i in range(256)]
_EVEN = np.arange(0, 1 << 17, 2, dtype=np.int32)
_MIN_AVERAGE_RUN = 8  # below this many records per run, the starts are read record by record
_SHORT = 32  # items up to this long, of varying lengths, are cut from equal-length gathers
_PREFIX_MASKS = [np.arange(high) < np.arange(high + 1)[:, None] for high in range(_SHORT + 1)]  # [high][length]
_MAX_GATHERS = 8  # distinct key (value) lengths filled by one gather each; more go through Arrow's take
_MAX_STRING_BYTES = 1 << 31  # Arrow string columns have int32 offsets


Block = tuple[int, int, int, int, int, int | None]
"""A record block for :func:`decode_blocks_columns`: ``(start, end, count, base_offset, base_timestamp,
log_append_time)``."""


class _Fallback(Exception):
    """The batch has something the vectorized path does not read: the record decoder takes it."""


def _zeros(nbytes: int) -> pa.Buffer:
    return _ZEROS.slice(0, nbytes) if nbytes <= _ZEROS.size else pa.py_buffer(bytes(nbytes))


def _no_headers(n: int) -> pa.Array:
    return pa.Array.from_buffers(HEADERS_TYPE, n, [None, _zeros(4 * (n + 1))], children=[_EMPTY_STRUCTS])


def values_of(column: pa.Array | pa.ChunkedArray, dtype: type = np.int64) -> np.ndarray:
    """The values of a primitive column without nulls (an array or a table's chunked column) as numpy: a view of
    its buffer for one chunk. (``to_numpy`` would do, but its first call imports pandas.)"""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    size = np.dtype(dtype).itemsize
    parts = [np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c), offset=c.offset * size) for c in chunks]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def _prim(typ: pa.DataType, values: np.ndarray, n: int) -> pa.Array:
    """A primitive column over a numpy array's memory (``pa.array`` costs more in type inference)."""
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(values)])


def empty_columns() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in BATCH_SCHEMA], schema=BATCH_SCHEMA)


def _ts_types(n: int, timestamp_type: int) -> pa.Array:
    if timestamp_type == 0:
        return pa.Array.from_buffers(pa.int8(), n, [None, _zeros(n)])
    return pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(bytes([timestamp_type & 0xFF]) * n)])


def decode_batch_columns(data: bytes | bytearray, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                         log_append_time: int | None = None, timestamp_type: int = 0) -> pa.RecordBatch:
    """``count`` records from ``data[start:end]`` (an uncompressed records block) as Arrow columns."""
    if count > 0:
        try:
            return _decode_vectorized(data, [(start, end, count, base_offset, base_timestamp, log_append_time)],
                                      timestamp_type)
        except (_Fallback, IndexError, ValueError):  # (ValueError: numpy on ranges a corrupt batch made up)
            pass
    return records_to_columns(decode_records(data, start, end, count, base_offset, base_timestamp,
                                             log_append_time), timestamp_type)


def decode_blocks_columns(data: bytes | bytearray, blocks: list[Block], timestamp_type: int = 0) -> pa.RecordBatch | None:
    """The records of several uncompressed record blocks of ``data`` (consecutive batches of one fetch, same
    timestamp type) as one column batch, decoded in one vectorized pass: a record batch has a fixed cost of
    about 30 numpy and Arrow calls, which dominates for batches of a few hundred records. ``blocks``:
    ``(start, end, count, base_offset, base_timestamp, log_append_time)`` each, ``count > 0``. ``None`` when the
    vectorized path cannot read them (the caller decodes the batches one by one, which also reports corruption)."""
    try:
        return _decode_vectorized(data, blocks, timestamp_type)
    except (_Fallback, IndexError, ValueError):
        return None


def records_to_columns(records: list[Any], timestamp_type: int) -> pa.RecordBatch:
    """Columns of :class:`strom.record.batch.Record` tuples ``(offset, timestamp, key, value, headers, size)``."""
    if not records:
        return empty_columns()
    offsets, tss, keys, values, headers, _sizes = zip(*records, strict=True)
    if any(headers):
        header_col = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], HEADERS_TYPE)
    else:
        header_col = _no_headers(len(records))
    return pa.RecordBatch.from_arrays([pa.array(offsets, pa.int64()), pa.array(tss, pa.int64()),
                                       _ts_types(len(records), timestamp_type), pa.array(keys, pa.binary()),
                                       pa.array(values, pa.binary()), header_col], schema=BATCH_SCHEMA)


def _decode_vectorized(data: Any, blocks: list[Block], timestamp_type: int) -> pa.RecordBatch:
    """The vectorized path (see the module docstring) over one or more record blocks of ``data``, in C when the
    accelerator is built; raises _Fallback or IndexError to hand the batches to the record decoder."""
    if _fastdecode is not None:
        columns = _decode_native(data, blocks, timestamp_type)
        if columns is not None:
            return columns
    return _decode_numpy(data, blocks, timestamp_type)


def _decode_native(data: Any, blocks: list[Block], timestamp_type: int) -> pa.RecordBatch | None:
    """The C accelerator's pass (``strom/record/_fastdecode.c``): the column buffers of every record, made into
    Arrow columns here. ``None`` when it found something that does not add up, or header keys that are not
    UTF-8: the numpy path looks again and hands the batches to the record decoder, which reports corruption (or
    replaces what is not UTF-8)."""
    parts = _fastdecode.decode_blocks(data, blocks, pa.allocate_buffer)  # (Arrow's pool: see the C source)
    if parts is None:
        return None
    (n, offsets, timestamps, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,
     header_offsets, hkey_offsets, hkey_data, hvalue_offsets, hvalue_data, hvalue_valid) = parts
    if header_offsets is None:
        headers = _no_headers(n)
    else:
        hvalues = pa.Array.from_buffers(pa.binary(), hkey_offsets.size // 4 - 1,
                                        [hvalue_valid, hvalue_offsets, hvalue_data])
        try:
            headers = _header_column(n, header_offsets, [hkey_offsets, hkey_data], hvalues)
        except _Fallback:
            return None
    return pa.RecordBatch.from_arrays(
        [pa.Array.from_buffers(pa.int64(), n, [None, offsets]), pa.Array.from_buffers(pa.int64(), n, [None, timestamps]),
         _ts_types(n, timestamp_type), pa.Array.from_buffers(pa.binary(), n, [key_valid, key_offsets, key_data]),
         pa.Array.from_buffers(pa.binary(), n, [value_valid, value_offsets, value_data]), headers],
        schema=BATCH_SCHEMA)


def _decode_numpy(data: Any, blocks: list[Block], timestamp_type: int) -> pa.RecordBatch:
    """The numpy pass over one or more record blocks of ``data``; raises _Fallback or IndexError to hand the
    batches to the record decoder."""
    if not isinstance(data, (bytes, bytearray)):
        data = bytes(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, prefix_sizes = _record_starts(data, blocks)
    rec_end = np.empty_like(starts)
    rec_end[:-1] = starts[1:]
    if len(blocks) == 1:
        start, end, count, base_offset, base_ts, log_append_time = blocks[0]
        rec_end[-1] = end
        counts = None
    else:
        counts = np.array([b[2] for b in blocks], dtype=np.int64)
        count = int(counts.sum())
        rec_end[np.cumsum(counts) - 1] = [b[1] for b in blocks]  # each block's last record ends with the block
    q = starts + prefix_sizes
    q += 1  # attributes (unused, as in Kafka)
    ts_delta, size = _varints(buf, q, 10)  # a varlong
    q += size
    offset_delta, size = _offset_deltas(buf, q, count) if counts is None else _block_offset_deltas(buf, q, counts)
    q += size
    key_len, size = _varints(buf, q)
    q += size
    key_at = q.copy()
    key_len, key_nulls = _lengths(key_len)
    q += key_len
    value_len, size = _varints(buf, q)
    q += size
    value_at = q.copy()
    value_len, value_nulls = _lengths(value_len)
    q += value_len
    header_counts = buf.take(q)
    q += 1
    header_fields = None
    if header_counts.any():
        q, header_fields = _header_fields(buf, q, header_counts)
    if not np.array_equal(q, rec_end):
        raise _Fallback  # (before any field is copied: a corrupt length may point anywhere)
    headers = _no_headers(count) if header_fields is None else _headers(data, count, *header_fields)
    if counts is None:
        offset_delta += base_offset
        if log_append_time is not None:
            ts_delta.fill(log_append_time)
        else:
            ts_delta += base_ts
    else:
        offset_delta += np.repeat(np.array([b[3] for b in blocks], dtype=np.int64), counts)
        if blocks[0][5] is not None:  # (the blocks share their timestamp type)
            ts_delta = np.repeat(np.array([b[5] for b in blocks], dtype=np.int64), counts)
        else:
            ts_delta += np.repeat(np.array([b[4] for b in blocks], dtype=np.int64), counts)
    return pa.RecordBatch.from_arrays(
        [_prim(pa.int64(), offset_delta, count), _prim(pa.int64(), ts_delta, count),
         _ts_types(count, timestamp_type), _binary(data, key_at, key_len, key_nulls),
         _binary(data, value_at, value_len, value_nulls), headers], schema=BATCH_SCHEMA)


def _header_fields(buf: np.ndarray, q: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, tuple[Any, ...]]:
    """The positions after the headers of records whose header sections start at ``q`` (after their one-byte
    header counts ``counts``), and ``(headers per record, key starts, key lengths, value starts, value lengths,
    null values)`` of all headers in record order. Header ``j`` of every record that has one is read at once;
    a header count over 63 or a null header key: _Fallback (the record decoder reads them, or raises
    CorruptMessageError)."""
    if counts.max() >= 128 or (counts & 1).any():
        raise _Fallback
    per_record = (counts >> 1).astype(np.int64)
    most = int(per_record.max())
    everyone = int(per_record.min()) == most
    q = q.copy()
    rows = np.arange(len(q))
    parts = []
    for j in range(most):
        idx = rows if everyone else np.flatnonzero(per_record > j)
        at = q if everyone else q[idx]
        length, size = _varints(buf, at)
        at = at + size
        if length.min() < 0:
            raise _Fallback
        key_at, key_len = at, length
        at = at + length
        length, size = _varints(buf, at)
        at = at + size
        value_len, nulls = _lengths(length)
        value_at = at
        at = at + value_len
        if everyone:
            q = at
        else:
            q[idx] = at
        parts.append((idx * most + j, key_at, key_len, value_at, value_len,
                      np.zeros(len(idx), dtype=bool) if nulls is None else nulls))
    if len(parts) == 1:
        fields = parts[0][1:]
    else:  # record 0's headers, then record 1's, ...
        order = np.argsort(np.concatenate([part[0] for part in parts]), kind="stable")
        fields = tuple(np.concatenate([part[i] for part in parts])[order] for i in range(1, 6))
    return q, (per_record, *fields)


def _headers(data: Any, n: int, per_record: np.ndarray, key_at: np.ndarray, key_len: np.ndarray,
             value_at: np.ndarray, value_len: np.ndarray, value_nulls: np.ndarray) -> pa.Array:
    """The headers column from :func:`_header_fields`' ranges (checked to end where the records end); keys that
    are not UTF-8: _Fallback."""
    keys = _binary(data, key_at, key_len, None)
    values = _binary(data, value_at, value_len, value_nulls if value_nulls.any() else None)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(per_record, out=offsets[1:])
    return _header_column(n, pa.py_buffer(offsets), keys.buffers()[1:], values)


def _header_column(n: int, list_offsets: pa.Buffer, key_buffers: list[pa.Buffer], values: pa.Array) -> pa.Array:
    """The headers column of ``n`` records: each record's headers from ``list_offsets`` (int32), the headers' keys
    from their offsets and bytes ``key_buffers`` (checked to be UTF-8, else _Fallback) and their values."""
    keys = pa.Array.from_buffers(pa.string(), len(values), [None, *key_buffers])
    try:
        keys.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        raise _Fallback from None
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
    return pa.Array.from_buffers(HEADERS_TYPE, n, [None, list_offsets], children=[entries])


def _record_starts(data: bytes | bytearray, blocks: list[Block]) -> tuple[np.ndarray, int | np.ndarray]:
    """The start positions of the records of ``blocks`` and the sizes of their length prefixes (an int when all
    are alike): runs of records with equal length prefixes (:func:`_one_run`; one set of runs over all the
    blocks, expanded once, run sizes learnt in one block serving the next), or, when a block's runs turn out
    short (16 runs averaging fewer than 8 records: sizes that vary record to record), record by record."""
    run_at: list[int] = []
    run_n: list[int] = []
    run_t: list[int] = []
    run_sz: list[int] = []
    last_run: dict[int, int] = {}
    total = 0
    for start, end, count, *_ in blocks:
        p = start
        done = 0
        first = len(run_at)
        while done < count:
            if len(run_at) - first >= 16 and done < (len(run_at) - first) * _MIN_AVERAGE_RUN:
                parts = [_record_starts_one_by_one(data, b[0], b[1], b[2]) for b in blocks]
                return np.concatenate([part[0] for part in parts]), np.concatenate([part[1] for part in parts])
            n, t, sz = _one_run(data, p, end, count - done, last_run)
            run_at.append(p)
            run_n.append(n)
            run_t.append(t)
            run_sz.append(sz)
            p += n * t
            done += n
        if p != end:
            raise _Fallback
        total += count
    starts = _expand_runs(total, run_at, run_n, run_t)
    first_size = run_sz[0]
    if all(sz == first_size for sz in run_sz):
        return starts, first_size
    return starts, np.repeat(np.array(run_sz, dtype=np.int64), run_n)


def _one_run(data: bytes | bytearray, p: int, end: int, left: int, last_run: dict[int, int]) -> tuple[int, int, int]:
    """The run of records from ``p`` (at most ``left``, before ``end``) with the length prefix of the record at
    ``p``: ``(records, record size, prefix size)``, found by comparing the prefix bytes at the run's stride
    (``lstrip`` of a strided slice). The first slice is as long as the last run of records of that size
    (``last_run``: producers repeat their patterns, keys k0..k999 give runs of 10, 90 and 900 records) and grows
    4x while the run goes on."""
    b = data[p]
    if b < 128:
        if b & 1:
            raise _Fallback
        sz = 1
        t = 1 + (b >> 1)
    elif data[p + 1] < 128 and not b & 1:
        sz = 2
        t = 2 + (((b & 127) | (data[p + 1] << 7)) >> 1)
    else:
        length, sz = _prefix(data, p)
        t = sz + length
    limit = (end - p) // t
    if left < limit:
        limit = left
    if limit <= 0:
        raise _Fallback
    n = 1
    window = last_run.get(t, 16)
    while n < limit:
        m = limit - n
        if window < m:
            m = window
        q = p + n * t
        k = m - len(data[q:q + m * t:t].lstrip(_BYTE[b]))
        for j in range(1, sz):
            if k:
                k -= len(data[q + j:q + j + k * t:t].lstrip(_BYTE[data[p + j]]))
        n += k
        if k < m:
            break
        window *= 4
    last_run[t] = n
    return n, t, sz


def _record_starts_one_by_one(data: bytes | bytearray, p: int, end: int,
                              left: int) -> tuple[np.ndarray, np.ndarray]:
    """Record starts and length-prefix sizes of ``left`` records from ``p``, record by record."""
    starts = []
    sizes = []
    append = starts.append
    append_size = sizes.append
    for _ in range(left):
        append(p)
        b = data[p]
        if b < 128:
            if b & 1:
                raise _Fallback
            append_size(1)
            p += 1 + (b >> 1)
        else:
            length, sz = _prefix(data, p)
            append_size(sz)
            p += sz + length
    if p != end:
        raise _Fallback
    return np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64)


def _prefix(data: bytes | bytearray, p: int) -> tuple[int, int]:
    """The record length (a zig-zag varint) at ``p`` and its size; _Fallback if negative or over 5 bytes."""
    value = shift = 0
    for i in range(5):
        b = data[p + i]
        value |= (b & 127) << shift
        if b < 128:
            if value & 1:
                raise _Fallback
            return value >> 1, i + 1
        shift += 7
    raise _Fallback


def _expand_runs(count: int, run_at: list[int], run_n: list[int], run_t: list[int]) -> np.ndarray:
    """The start positions of ``count`` records in runs (``run_n[i]`` records of ``run_t[i]`` bytes from
    ``run_at[i]``)."""
    if len(run_at) == 1:
        return np.arange(run_at[0], run_at[0] + count * run_t[0], run_t[0], dtype=np.int64)
    if not run_at:
        return np.empty(0, dtype=np.int64)
    if len(run_at) <= 8:
        return np.concatenate([np.arange(p, p + n * t, t, dtype=np.int64)
                               for p, n, t in zip(run_at, run_n, run_t, strict=True)])
    n = np.array(run_n, dtype=np.int64)
    first = np.zeros(len(run_n), dtype=np.int64)
    np.cumsum(n[:-1], out=first[1:])
    starts = np.arange(count, dtype=np.int64)
    starts -= np.repeat(first, n)
    starts *= np.repeat(np.array(run_t, dtype=np.int64), n)
    starts += np.repeat(np.array(run_at, dtype=np.int64), n)
    return starts


def _delta_encodings(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The three bytes and the sizes of the zig-zag varints of 0..n-1 (n <= 2^20): the offset deltas of a batch
    without gaps."""
    z = np.arange(n, dtype=np.int64) << 1
    first = (z & 127) | np.where(z >= 128, 128, 0)
    second = ((z >> 7) & 127) | np.where(z >= 1 << 14, 128, 0)
    third = z >> 14
    size = 1 + (z >= 128) + (z >= 1 << 14)
    return first.astype(np.uint8), second.astype(np.uint8), third.astype(np.uint8), size.astype(np.uint8)


_DELTAS = _delta_encodings(1 << 16)


def _offset_deltas(buf: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, int | np.ndarray]:
    """The offset deltas at ``q``: compared with the encodings of ``0..n-1`` (a batch without gaps: one gather
    per varint byte, no decoding), else decoded."""
    first, second, third, size = _DELTAS
    if n <= len(first) and np.array_equal(buf.take(q), first[:n]) and (
            n <= 64 or np.array_equal(buf.take(q[64:] + 1), second[64:n])) and (
            n <= 8192 or np.array_equal(buf.take(q[8192:] + 2), third[8192:n])):
        return np.arange(n, dtype=np.int64), (size[:n] if n > 64 else 1)
    return _varints(buf, q)


def _block_offset_deltas(buf: np.ndarray, q: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The offset deltas at ``q`` of records in blocks of ``counts`` records: each block's compared with the
    encodings of ``0..count-1`` (batches without gaps), else decoded."""
    first, second, third, size = _DELTAS
    n = len(q)
    if int(counts.max()) <= len(first):
        within = np.arange(n, dtype=np.int64)
        within -= np.repeat(np.cumsum(counts) - counts, counts)
        if np.array_equal(buf.take(q), first.take(within)):
            two = np.flatnonzero(within >= 64)
            three = np.flatnonzero(within >= 8192)
            if (not len(two) or np.array_equal(buf.take(q[two] + 1), second.take(within[two]))) and (
                    not len(three) or np.array_equal(buf.take(q[three] + 2), third.take(within[three]))):
                return within, size.take(within)
    return _varints(buf, q)


def _varints(buf: np.ndarray, q: np.ndarray, limit: int = 5) -> tuple[np.ndarray, int | np.ndarray]:
    """The zig-zag varints at positions ``q`` (int64 values) and their sizes (an int when all are alike);
    ``limit`` bytes at most (5: an int32 field, 10: a varlong); longer or out-of-range ones: _Fallback."""
    b = buf.take(q)
    if b.max() < 128:
        return _ZZ1.take(b), 1
    c = buf.take(q + 1)
    if b.min() >= 128:
        if c.max() >= 128:
            return _varints3(buf, q, b, c, b >= 128, limit)
        w = c.astype(np.int64)
        w <<= 8
        w |= b
        return _ZZ2.take(w), 2
    cont = b >= 128
    if (c[cont] >= 128).any():
        return _varints3(buf, q, b, c, cont, limit)
    w = c.astype(np.int64)
    w *= cont
    w <<= 8
    w |= b
    return _ZZ2.take(w), cont.view(np.uint8) + 1


def _varints3(buf: np.ndarray, q: np.ndarray, b: np.ndarray, c: np.ndarray, cont: np.ndarray,
              limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints of up to three bytes (offset deltas past 8191, lengths past 8191), in int32; longer ones go to
    :func:`_varints_long`."""
    cont2 = c >= 128
    cont2 &= cont
    d = buf.take(q + 2)
    if (d[cont2] >= 128).any():
        return _varints_long(buf, q, b, limit)
    value = (c & 127).astype(np.int32)
    value *= cont
    value <<= 7
    high = d.astype(np.int32)
    high *= cont2
    high <<= 14
    value |= high
    value |= b & 127
    size = cont.view(np.uint8) + cont2.view(np.uint8)
    size += 1
    return _zigzag(value).astype(np.int64), size


def _varints_long(buf: np.ndarray, q: np.ndarray, b: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints of up to ``limit`` bytes, one byte position at a time; values past int32 (``limit`` 5) or int64
    (10) are left to the record decoder."""
    value = (b & 127).astype(np.int64)
    cont = b >= 128
    size = cont.astype(np.int64) + 1
    for j in range(1, limit):
        bj = buf.take(q + j)
        if j == 9 and (bj[cont] > 1).any():
            raise _Fallback  # past 64 bits
        value |= ((bj & 127).astype(np.int64) << (7 * j)) * cont
        cont &= bj >= 128
        if not cont.any():
            if limit <= 5 and (value >> 32).any():
                raise _Fallback  # past 32 bits
            return _zigzag(value), size
        size += cont
    raise _Fallback


def _lengths(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Key or value lengths -> (lengths with nulls as 0, the null mask or None); _Fallback below -1."""
    low = lengths.min()
    if low >= 0:
        return lengths, None
    if low < -1:
        raise _Fallback
    nulls = lengths < 0
    return np.where(nulls, 0, lengths), nulls


def _fixed_view(obj: Any, size: int) -> np.ndarray:
    """Every ``size``-byte window of ``obj`` as one ``V<size>`` item (item ``i`` = bytes ``i..i+size``)."""
    return np.ndarray(shape=(len(obj) - size + 1,), dtype=f"V{size}", buffer=obj, offset=0, strides=(1,))


def _binary(data: Any, at: np.ndarray, lengths: np.ndarray, nulls: np.ndarray | None) -> pa.Array:
    """The binary column of the byte ranges ``data[at[i]:at[i] + lengths[i]]`` (null where ``nulls``)."""
    n = len(at)
    validity = None
    null_count = 0
    if nulls is not None:
        null_count = int(np.count_nonzero(nulls))
        if null_count == n:
            return pa.nulls(n, pa.binary())
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    low, high = int(lengths.min()), int(lengths.max())
    if low == high:
        offsets = np.arange(0, (n + 1) * high, high, dtype=np.int32) if high else np.zeros(n + 1, np.int32)
        values = pa.py_buffer(_fixed_view(data, high)[at]) if high else _zeros(0)
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), values], null_count)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        raise _Fallback
    if high <= _SHORT and at[-1] + high <= len(data):
        # short items (keys): ``high`` bytes from each start, then the bytes past each item's length dropped
        rows = _fixed_view(data, high)[at].view(np.uint8).reshape(n, high)
        out = rows[_PREFIX_MASKS[high].take(lengths, axis=0)]
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(out)], null_count)
    sizes = np.flatnonzero(np.bincount(lengths)) if high < 1 << 16 else None
    if sizes is not None and len(sizes) <= _MAX_GATHERS:
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        dest = offsets[:-1]
        for size in sizes.tolist():
            if size:
                rows = lengths == size
                _fixed_view(out, size)[dest[rows]] = _fixed_view(data, size)[at[rows]]
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(out)], null_count)
    # many distinct lengths: ranges as the even items of one binary array over the fetched bytes, taken by Arrow
    if at[-1] + lengths[-1] >= 1 << 31:
        raise _Fallback
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = at
    bounds[1::2] = at + lengths
    ranges = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    taken = ranges.take(_prim(pa.int32(), _EVEN[:n] if n <= len(_EVEN) else np.arange(0, 2 * n, 2, dtype=np.int32), n))
    return pa.Array.from_buffers(pa.binary(), n, [validity, *taken.buffers()[1:]], null_count)


def _partition_columns(topic: bytes, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
    """The ``topic`` and ``partition`` columns of ``n`` rows of one topic-partition."""
    topics = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(
        np.arange(0, (n + 1) * len(topic), len(topic), dtype=np.int32)), pa.py_buffer(topic * n)])
    return topics, _prim(pa.int32(), np.full(n, partition, dtype=np.int32), n)


_CONSTANT_COLUMNS: dict[tuple[bytes, int], tuple[pa.Array, pa.Array]] = {}
_CONSTANT_COLUMNS_MAX_BYTES = 16 << 20  # what the cache's columns take, all partitions together
_constant_columns_lock = threading.Lock()
_constant_columns_bytes = 0


def _cached_partition_columns(topic: bytes, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
    """:func:`_partition_columns` of at least ``n`` rows (to slice), kept from poll to poll: built for each poll,
    they cost a column of ``n`` copies of the topic name per fetch. The oldest partitions' columns are dropped
    past :data:`_CONSTANT_COLUMNS_MAX_BYTES`; columns too large to keep are built each time."""
    global _constant_columns_bytes
    key = (topic, partition)
    cached = _CONSTANT_COLUMNS.get(key)
    if cached is not None and len(cached[0]) >= n:
        return cached
    rows = max(n, 1024, 2 * len(cached[0]) if cached is not None else 0)
    if rows * (len(topic) + 8) > _CONSTANT_COLUMNS_MAX_BYTES // 4:
        return _partition_columns(topic, partition, n)
    columns = _partition_columns(topic, partition, rows)
    with _constant_columns_lock:
        old = _CONSTANT_COLUMNS.pop(key, None)
        if old is not None:
            _constant_columns_bytes -= len(old[0]) * (len(topic) + 8)
        _CONSTANT_COLUMNS[key] = columns
        _constant_columns_bytes += rows * (len(topic) + 8)
        while _constant_columns_bytes > _CONSTANT_COLUMNS_MAX_BYTES:
            oldest = next(iter(_CONSTANT_COLUMNS))
            _constant_columns_bytes -= len(_CONSTANT_COLUMNS.pop(oldest)[0]) * (len(oldest[0]) + 8)
    return columns


def to_table(fetched: dict[Any, list[pa.RecordBatch]]) -> pa.Table:
    """``{TopicPartition: [column batches]}`` (the fetcher's columnar output) as one table of
    :data:`TABLE_SCHEMA` (no copy of the columns: the table's chunks are the batches; a partition's topic and
    partition columns, the same value on every row, are made once and sliced per chunk)."""
    batches = []
    for tp, chunks in fetched.items():
        topic = tp.topic.encode()
        longest = max((len(chunk) for chunk in chunks), default=0)
        whole = (longest + 1) * len(topic) < _MAX_STRING_BYTES
        if whole:
            topics, partitions = _cached_partition_columns(topic, tp.partition, longest)
        for chunk in chunks:
            n = len(chunk)
            columns = ([topics.slice(0, n), partitions.slice(0, n)] if whole
                       else list(_partition_columns(topic, tp.partition, n)))
            batches.append(pa.RecordBatch.from_arrays([*columns, *chunk.columns], schema=TABLE_SCHEMA))
    return pa.Table.from_batches(batches, schema=TABLE_SCHEMA)
