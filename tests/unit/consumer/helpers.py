"""Batch builders for consumer tests."""

from __future__ import annotations

from strom.record import CompressionType, MemoryRecordsBuilder
from strom.record.batch import ControlRecordType
from strom.record.control import build_control_batch

T0 = 1_700_000_000_000


def batch(base_offset: int, n: int, *, prefix: bytes = b"v", pid: int = -1, transactional: bool = False,
          compression: CompressionType = CompressionType.NONE, epoch: int = 3, keys: bool = True,
          headers: tuple = (), skip: set[int] | None = None) -> bytes:
    """``n`` records at ``base_offset``..; offsets in ``skip`` are left out (a compacted batch keeps its
    last offset delta)."""
    b = MemoryRecordsBuilder(compression, base_offset=base_offset, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=0 if pid >= 0 else -1, is_transactional=transactional,
                             partition_leader_epoch=epoch)
    for i in range(n):
        b.append(T0 + i, (b"k%d" % (base_offset + i)) if keys else None, prefix + b"%d" % (base_offset + i),
                 headers)
    data = b.build()
    if skip:
        data = compact(data, skip)
    return data


def compact(data: bytes, skip: set[int]) -> bytes:
    """Rebuild a batch without the records at ``skip`` offsets, keeping base offset and last offset delta."""
    from strom.record import RecordBatch

    rb = RecordBatch(data)
    kept = [r for r in rb.records() if r.offset not in skip]
    return _raw_batch(rb.base_offset, rb.last_offset_delta, [(r.offset - rb.base_offset, r) for r in kept])


def _zz(n: int) -> bytes:
    z = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _raw_batch(base_offset: int, last_delta: int, records: list) -> bytes:
    import struct

    from strom.record.header import LOG_OVERHEAD, compute_crc

    body = bytearray()
    base_ts = records[0][1].timestamp if records else T0
    for delta, r in records:
        rec = bytearray(b"\x00") + _zz(r.timestamp - base_ts) + _zz(delta)
        for part in (r.key, r.value):
            rec += _zz(-1) if part is None else _zz(len(part)) + part
        rec += _zz(0)
        body += _zz(len(rec)) + rec
    header = struct.pack(">qiibIhiqqqhii", base_offset, 0, 3, 2, 0, 0, last_delta, base_ts,
                         records[-1][1].timestamp if records else T0, -1, -1, -1, len(records))
    buf = bytearray(header) + body
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, 17, compute_crc(buf))
    return bytes(buf)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return build_control_batch(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, 0, pid, 0,
                               T0, base_offset=offset)
