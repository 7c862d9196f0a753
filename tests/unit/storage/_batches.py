"""A tiny RecordBatch v2 builder for storage tests (the real builder lives in strom.record, written elsewhere)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from strom.record.header import LOG_OVERHEAD, compute_crc

T0 = 1_700_000_000_000
_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def build_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")
    body += zigzag_varint(ts_delta)
    body += zigzag_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(part)) + part
    body += zigzag_varint(0)  # no headers
    return zigzag_varint(len(body)) + bytes(body)


def build_batch(
    values: Sequence[bytes | None],
    *,
    base_offset: int = 0,
    timestamps: Sequence[int] | None = None,
    base_timestamp: int = T0,
    compression: int = 0,
    attributes: int = 0,
    leader_epoch: int = -1,
    records_count: int | None = None,
    last_offset_delta: int | None = None,
    magic: int = 2,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """One v2 batch of ``values`` (keys None unless ``keys``). ``compression=1`` gzips the records."""
    if timestamps is None:
        timestamps = [base_timestamp] * len(values)
    first_ts = timestamps[0] if timestamps else base_timestamp
    if keys is None:
        keys = [None] * len(values)
    deltas = list(range(len(values))) if offset_deltas is None else list(offset_deltas)
    records = b"".join(
        build_record(d, ts - first_ts, k, v)
        for d, k, v, ts in zip(deltas, keys, values, timestamps, strict=True)
    )
    if compression == 1:
        c = zlib.compressobj(wbits=31)
        records = c.compress(records) + c.flush()
    n = len(values)
    attrs = attributes | compression
    lod = n - 1 if last_offset_delta is None else last_offset_delta
    count = n if records_count is None else records_count
    max_ts = max(timestamps) if timestamps else first_ts
    header = _HEADER.pack(
        base_offset, 0, leader_epoch, magic, 0, attrs, lod, first_ts, max_ts, producer_id, producer_epoch,
        base_sequence, count
    )
    buf = bytearray(header + records)
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, 17, compute_crc(buf))
    return bytes(buf)


def sized_batch(size: int, n_records: int = 1, ts: int = T0) -> bytes:
    """A batch of about ``size`` bytes (exact when size is big enough) with ``n_records`` records."""
    overhead = len(build_batch([b""] * n_records, base_timestamp=ts))
    per = max(0, (size - overhead) // n_records)
    values = [b"x" * per] * n_records
    batch = build_batch(values, base_timestamp=ts)
    for _ in range(4):  # varint lengths may shift by a byte; nudge the last value until exact
        diff = size - len(batch)
        if diff == 0 or len(values[-1]) + diff < 0:
            break
        values[-1] = b"x" * (len(values[-1]) + diff)
        batch = build_batch(values, base_timestamp=ts)
    return batch


def split_batches(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(base_offset, last_offset, batch_bytes)`` for each whole batch in ``data`` (asserting no partials)."""
    out = []
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        size = length + LOG_OVERHEAD
        assert pos + size <= len(data), "partial batch in read result"
        lod = struct.unpack_from(">i", data, pos + 23)[0]
        out.append((base, base + lod, data[pos : pos + size]))
        pos += size
    return out
