"""Decode one v2 record batch straight into Arrow columns: the consumer's columnar read path (``poll_arrow``).

Kafka counterpart: none (Kafka's consumer hands out one ``ConsumerRecord`` per record). Output: a
``pyarrow.RecordBatch`` of :data:`BATCH_SCHEMA` — ``offset`` int64, ``timestamp`` int64 (ms), ``timestamp_type``
int8 (0 CreateTime, 1 LogAppendTime, -1 none), ``key`` and
``value`` binary (null when the record's is null), ``headers`` list<struct<key: string, value: binary>>.

Two paths, as in :mod:`record_decoder`:

* runs of same-layout records (see :mod:`record_runs`, which finds and verifies them): a run of ``n`` records
  of ``t`` bytes from ``p`` is a ``(n, t)`` numpy view of the fetched bytes, so the values are one 2-D slice
  ``[:, value_at:value_at + size]`` copied into the column's data buffer, the offsets buffer is an ``arange``,
  timestamps come from the strided delta bytes through lookup tables. No Python object per record.
* anything else (headers, null keys or values, compaction gaps, varying sizes, long varints): the records of
  :func:`strom.record.batch.decode_records` (or of the run decoder's per-record loop), then made columns.

Both check every record's structure against its length prefix and that the block is consumed exactly, else
:class:`~strom.common.error_codes.CorruptMessageError`. Needs numpy and pyarrow (imported by this module only:
the rest of the consumer does not). Pure functions; thread-safe.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals.record_runs import (
    _MIN_AVERAGE_RUN,
    _OFFSET_LIMIT,
    NotSimple,
    _layout,
    decode_simple,
    first_key_byte,
)
from strom.record.batch import decode_records

__all__ = ["BATCH_SCHEMA", "TABLE_SCHEMA", "HEADERS_TYPE", "decode_batch_columns", "records_to_columns",
           "empty_columns", "to_table"]

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
BATCH_SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False),
                          pa.field("timestamp", pa.int64(), nullable=False),
                          pa.field("timestamp_type", pa.int8(), nullable=False),
                          pa.field("key", pa.binary()), pa.field("value", pa.binary()),
                          pa.field("headers", HEADERS_TYPE, nullable=False)])

TABLE_SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False),
                          pa.field("partition", pa.int32(), nullable=False), *BATCH_SCHEMA])
"""``KafkaConsumer.poll_arrow``'s table: the topic-partition, then :data:`BATCH_SCHEMA`."""

_TS1 = np.array([(b >> 1) ^ -(b & 1) for b in range(256)], dtype=np.int64)
_TS2 = np.zeros(65536, dtype=np.int64)  # (lo | hi << 8) of a two-byte zig-zag varint -> value
for _lo in range(128, 256):
    for _hi in range(128):
        _v = (_lo & 127) | (_hi << 7)
        _TS2[_lo | (_hi << 8)] = (_v >> 1) ^ -(_v & 1)
del _lo, _hi, _v
_EMPTY_STRUCTS = pa.array([], HEADERS_TYPE.value_type)
_ZEROS = pa.py_buffer(bytes(1 << 18))
_WINDOW = 4096  # rows checked at once for a run (a longer run continues as the next one, same layout)


class _ShortRuns(Exception):
    """The batch's runs are short (varying sizes): the per-record path is cheaper."""


def _prim(typ: pa.DataType, values: np.ndarray, n: int) -> pa.Array:
    """A primitive column over a numpy array's memory (``pa.array`` costs more in type inference)."""
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(values)])


def _zeros(nbytes: int) -> pa.Buffer:
    return _ZEROS.slice(0, nbytes) if nbytes <= _ZEROS.size else pa.py_buffer(bytes(nbytes))


def _no_headers(n: int) -> pa.Array:
    return pa.Array.from_buffers(HEADERS_TYPE, n, [None, _zeros(4 * (n + 1))], children=[_EMPTY_STRUCTS])


def _binary(data: np.ndarray, sizes: np.ndarray | int, n: int) -> pa.Array:
    """A binary column of ``n`` items laid end to end in ``data`` with ``sizes`` (an int: all alike)."""
    if isinstance(sizes, int):
        offsets = np.arange(0, (n + 1) * sizes, sizes, dtype=np.int32) if sizes else np.zeros(n + 1, np.int32)
    else:
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def empty_columns() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], pa.int64()), pa.array([], pa.int64()), pa.array([], pa.int8()), pa.array([], pa.binary()),
         pa.array([], pa.binary()), pa.array([], HEADERS_TYPE)], schema=BATCH_SCHEMA)


def _ts_types(n: int, timestamp_type: int) -> pa.Array:
    if timestamp_type == 0:
        return pa.Array.from_buffers(pa.int8(), n, [None, _zeros(n)])
    return pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(bytes([timestamp_type & 0xFF]) * n)])


def decode_batch_columns(data: bytes, start: int, end: int, count: int, base_offset: int, base_timestamp: int,
                         contiguous: bool, log_append_time: int | None = None,
                         timestamp_type: int = 0) -> pa.RecordBatch:
    """``count`` records from ``data[start:end]`` (an uncompressed records block) as Arrow columns."""
    if contiguous and count > 0 and end - start >= 4:
        try:
            return _decode_runs(data, start, end, count, base_offset, base_timestamp, log_append_time,
                                timestamp_type)
        except _ShortRuns:
            try:
                tss, keys, values, p = decode_simple(data, start, count, base_timestamp)
            except (NotSimple, IndexError):
                pass
            else:
                if p != end:
                    raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after "
                                              f"{count} records")
                offsets = pa.array(np.arange(base_offset, base_offset + count, dtype=np.int64))
                ts = (pa.array(np.full(count, log_append_time, dtype=np.int64)) if log_append_time is not None
                      else pa.array(tss, pa.int64()))
                return pa.RecordBatch.from_arrays(
                    [offsets, ts, _ts_types(count, timestamp_type), pa.array(keys, pa.binary()) if keys is not None else pa.nulls(count, pa.binary()),
                     pa.array(values, pa.binary()), _no_headers(count)], schema=BATCH_SCHEMA)
        except (NotSimple, IndexError):
            pass
    return records_to_columns(decode_records(data, start, end, count, base_offset, base_timestamp,
                                             log_append_time), timestamp_type)


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
                                       _ts_types(len(records), timestamp_type), pa.array(keys, pa.binary()), pa.array(values, pa.binary()), header_col],
                                      schema=BATCH_SCHEMA)


def _decode_runs(data: bytes, start: int, end: int, count: int, base_offset: int, base_ts: int,
                 log_append_time: int | None, timestamp_type: int) -> pa.RecordBatch:
    """The run path (see the module docstring); raises NotSimple / IndexError / _ShortRuns to fall back."""
    keyed = first_key_byte(data, start) != 1
    buf = np.frombuffer(data, dtype=np.uint8)
    runs: list[tuple[int, int, tuple[int, ...]]] = []
    p = start
    done = 0
    n_data = len(data)
    while done < count:
        if len(runs) >= 8 and done < len(runs) * _MIN_AVERAGE_RUN:
            raise _ShortRuns
        lay = _layout(data, p, keyed)
        t, off_size = lay[0], lay[4]
        n = min(count - done, _OFFSET_LIMIT[off_size] - done, (n_data - p) // t, _WINDOW)
        if n <= 0:
            raise NotSimple
        if n > 1:
            n = _run_length(buf[p:p + n * t].reshape(n, t), lay)
        runs.append((p, n, lay))
        p += n * t
        done += n
    if p != end:
        raise CorruptMessageError(f"records block has {end - p:+d} bytes unaccounted for after {count} records")
    value_parts = []
    key_parts = []
    ts_parts = []
    vsizes = []
    ksizes = []
    ns = []
    for p, n, lay in runs:
        t, ts_at, ts_size = lay[0], lay[1], lay[2]
        block = buf[p:p + n * t].reshape(n, t)
        v_at, v_size = lay[8] + lay[9], lay[10]
        value_parts.append(block[:, v_at:v_at + v_size])
        vsizes.append(v_size)
        ns.append(n)
        if keyed:
            k_at, k_size = lay[5] + lay[6], lay[7]
            key_parts.append(block[:, k_at:k_at + k_size])
            ksizes.append(k_size)
        if log_append_time is None:
            if ts_size == 1:
                ts_parts.append(_TS1[block[:, ts_at]])
            else:
                ts_parts.append(_TS2[block[:, ts_at].astype(np.int32) | (block[:, ts_at + 1].astype(np.int32) << 8)])
    offsets = _prim(pa.int64(), np.arange(base_offset, base_offset + count, dtype=np.int64), count)
    if log_append_time is not None:
        ts = _prim(pa.int64(), np.full(count, log_append_time, dtype=np.int64), count)
    else:
        ts_values = ts_parts[0] if len(ts_parts) == 1 else np.concatenate(ts_parts)
        ts_values += base_ts
        ts = _prim(pa.int64(), ts_values, count)
    values = _column(value_parts, vsizes, ns, count)
    keys = _column(key_parts, ksizes, ns, count) if keyed else pa.nulls(count, pa.binary())
    return pa.RecordBatch.from_arrays([offsets, ts, _ts_types(count, timestamp_type), keys, values,
                                       _no_headers(count)], schema=BATCH_SCHEMA)


def _run_length(block: np.ndarray, lay: tuple[int, ...]) -> int:
    """How many leading rows of ``block`` (records of ``t`` bytes, one per row) have the layout ``lay`` of
    row 0: the same constant bytes (length prefix, attributes, key and value lengths, zero header count) and
    delta varints of the same sizes (continuation bits). The strided checks of ``record_runs._uniform``, done
    for the whole window at once."""
    t, ts_at, ts_size, off_at, off_size, key_at, key_len_size, _ks, value_at, value_len_size, _vs = lay
    cols = [*range(ts_at), *range(key_at, key_at + key_len_size), *range(value_at, value_at + value_len_size), t - 1]
    const = block[:, cols]
    bad = (const != const[0]).any(axis=1)
    for at, size in ((ts_at, ts_size), (off_at, off_size)):
        for j in range(size - 1):
            bad |= block[:, at + j] < 128
        bad |= block[:, at + size - 1] > 127
    first = int(bad.argmax())
    return first if bad[first] else len(block)


def _column(parts: list[np.ndarray], sizes: list[int], ns: list[int], count: int) -> pa.Array:
    if len(parts) == 1:
        return _binary(np.ascontiguousarray(parts[0]).reshape(-1), sizes[0], count)
    lengths = np.repeat(np.array(sizes, dtype=np.int32), ns)
    data = np.empty(int(lengths.sum()), dtype=np.uint8)
    pos = 0
    for part, size, n in zip(parts, sizes, ns, strict=True):
        data[pos:pos + n * size].reshape(n, size)[:] = part
        pos += n * size
    return _binary(data, lengths, count)


def to_table(fetched: dict[Any, list[pa.RecordBatch]]) -> pa.Table:
    """``{TopicPartition: [column batches]}`` (the fetcher's columnar output) as one table of
    :data:`TABLE_SCHEMA` (no copy of the columns: the table's chunks are the batches)."""
    batches = []
    for tp, chunks in fetched.items():
        topic = pa.scalar(tp.topic, pa.string())
        partition = pa.scalar(tp.partition, pa.int32())
        for chunk in chunks:
            n = len(chunk)
            batches.append(pa.RecordBatch.from_arrays([pa.repeat(topic, n), pa.repeat(partition, n), *chunk.columns],
                                                      schema=TABLE_SCHEMA))
    return pa.Table.from_batches(batches, schema=TABLE_SCHEMA)
