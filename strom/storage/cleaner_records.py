"""The log cleaner's record-level work: mapping keys to their last offset and filtering record batches against
that map, in the cleaner's own process or in a worker process.

:class:`strom.storage.log_cleaner.Cleaner` decides, from batch headers alone, which batches to map and which to
filter (transaction markers, aborted transactions and batches wholly past the mapped section it handles itself);
the work on records goes through a :class:`RecordFilter`. Decoding every record of a segment is CPU-bound Python:
run on a thread of the broker it holds the GIL for most of a cleaning, and the event loop then waits for the GIL
at each step of every request (bench/compaction.py measured produce p99 at 4-12x of an idle broker's). So the
broker's cleaner threads hand it to :class:`ProcessRecordFilter`, a worker process per cleaner thread that owns
the offset map, reads the segment files itself (by path; segments being cleaned are immutable) and answers with
the re-encoded batches; the event loop's process keeps the GIL for itself. :class:`RecordFilter` does the same
work in the calling thread (``LogCleaner(worker_processes=False)``: tests and tools). A worker that cannot be
started fails the cleaning with an ``OSError`` like one that died.

The worker is a ``python`` running :func:`main`, talking over a socket pair with pickled tuples
(not ``multiprocessing``'s spawn, which re-imports the application's main module). It exits when the broker's
end closes, so a broker killed with SIGKILL leaves no worker behind; a worker that dies fails the cleaning in
progress with an ``OSError`` (the cleaner retries the log in its next round, with a new worker).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Collection, Sequence
from multiprocessing.connection import Connection
from typing import Any

from strom.record.batch import DELETE_HORIZON_FLAG, Record, RecordBatch
from strom.record.compression import compress
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
)
from strom.record.varint import varint_bytes, varlong_bytes
from strom.storage.offset_map import OffsetMap

__all__ = [
    "MapItem",
    "FilterResult",
    "RecordFilter",
    "ProcessRecordFilter",
    "build_empty_batch",
    "build_retained_batch",
]


_HEADER_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount, at byte 21
_HEADER_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")

# (position, size, last offset, records count, whether to map its records) of a batch, in log order
MapItem = tuple[int, int, int, int, bool]
# per filtered batch: (None = drop it, True = keep it unchanged, or the re-encoded batch; the delete horizon of
# the tombstones kept in it or None; (records read, records written, records without a key, tombstones removed))
FilterResult = tuple[bytes | bool | None, int | None, tuple[int, int, int, int]]


# --- re-encoding batches ---------------------------------------------------------------------------------------


def _encode_record(r: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")
    body += varlong_bytes(r.timestamp - base_timestamp)
    body += varint_bytes(r.offset - base_offset)
    for part in (r.key, r.value):
        if part is None:
            body += varint_bytes(-1)
        else:
            body += varint_bytes(len(part))
            body += part
    body += varint_bytes(len(r.headers))
    for hkey, hval in r.headers:
        kb = hkey.encode("utf-8") if isinstance(hkey, str) else bytes(hkey)
        body += varint_bytes(len(kb)) + kb
        if hval is None:
            body += varint_bytes(-1)
        else:
            body += varint_bytes(len(hval)) + hval
    return varint_bytes(len(body)) + bytes(body)


def _write_batch(h: BatchHeader, attributes: int, base_ts: int, max_ts: int, records: bytes, count: int) -> bytes:
    buf = bytearray(HEADER_SIZE)
    buf += records
    _HEADER_HEAD.pack_into(buf, 0, h.base_offset, len(buf) - LOG_OVERHEAD, h.partition_leader_epoch, 2)
    _HEADER_TAIL.pack_into(
        buf, ATTRIBUTES_OFFSET, attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id,
        h.producer_epoch, h.base_sequence, count,
    )
    _CRC.pack_into(buf, 17, compute_crc(buf))
    return bytes(buf)


def build_retained_batch(h: BatchHeader, retained: list[Record], delete_horizon: int | None) -> bytes:
    """A batch holding only ``retained`` of the original's records, offsets and producer fields unchanged,
    recompressed with its codec; with ``delete_horizon`` that becomes the base timestamp and the delete-horizon
    attribute is set (record timestamps stay what they were: their deltas are recomputed)."""
    log_append = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    attributes = h.attributes
    if delete_horizon is not None:
        base_ts = delete_horizon
        attributes |= DELETE_HORIZON_FLAG
    elif attributes & DELETE_HORIZON_FLAG:
        base_ts = h.base_timestamp
    else:
        base_ts = retained[0].timestamp if not log_append else h.base_timestamp
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in retained)
    data = b"".join(_encode_record(r, h.base_offset, base_ts) for r in retained)
    codec = h.attributes & COMPRESSION_MASK
    if codec:
        data = compress(codec, data)
    return _write_batch(h, attributes, base_ts, max_ts, data, len(retained))


def build_empty_batch(h: BatchHeader) -> bytes:
    """A producer's last batch with every record removed: the header alone (Kafka's writeEmptyHeader)."""
    attributes = h.attributes & ~COMPRESSION_MASK & ~DELETE_HORIZON_FLAG
    return _write_batch(h, attributes, h.max_timestamp, h.max_timestamp, b"", 0)


# --- the work ------------------------------------------------------------------------------------------------


def _pread(fd: int, size: int, position: int, path: str) -> bytes:
    data = os.pread(fd, size, position)
    while len(data) < size:  # pread may return short
        more = os.pread(fd, size - len(data), position + len(data))
        if not more:
            raise OSError(f"{path} ends at {position + len(data)}, inside a batch of {size} bytes at {position}")
        data += more
    return data


class RecordFilter:
    """The offset map and the record-level work on it, in the calling thread. Not thread-safe."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self._map = OffsetMap(memory, load_factor)

    @property
    def latest_offset(self) -> int:
        """The last offset the map covers (``start - 1`` after :meth:`reset`)."""
        return self._map.latest_offset

    def reset(self, start: int) -> None:
        """Empty the map for a cleaning whose dirty section starts at ``start``."""
        self._map.clear()
        self._map.latest_offset = start - 1

    def map_batches(self, path: str, items: Sequence[MapItem], start: int) -> tuple[int, int, int]:
        """Map the keys of the batches marked for it (records at or past ``start``), in order; every item moves
        the map's end to its last offset. Stops before a batch that could overflow the map. Returns (the offset
        where mapping stopped because the map was full or -1, records read, bytes read)."""
        m = self._map
        records = nbytes = 0
        with open(path, "rb") as f:
            fd = f.fileno()
            for position, size, last_offset, count, mapped in items:
                if mapped:
                    if len(m) and len(m) + count > m.max_entries:
                        return m.latest_offset + 1, records, nbytes
                    data = _pread(fd, size, position, path)
                    nbytes += size
                    put = m.put
                    for r in RecordBatch(data).records():
                        records += 1
                        if r.key is not None and r.offset >= start:
                            put(r.key, r.offset)
                if last_offset > m.latest_offset:
                    m.latest_offset = last_offset
        return -1, records, nbytes

    def filter_batches(self, path: str, positions: Sequence[tuple[int, int]], now: int, retention_ms: int,
                       producer_last: Collection[int]) -> list[FilterResult]:
        """Filter each batch at ``(position, size)`` against the map: keep a record when it is its key's last
        (or lies past the map); tombstones keep a delete horizon and go once it has passed."""
        out: list[FilterResult] = []
        with open(path, "rb") as f:
            fd = f.fileno()
            for position, size in positions:
                out.append(self._filter(_pread(fd, size, position, path), now, retention_ms, producer_last))
        return out

    def _filter(self, data: bytes, now: int, retention_ms: int, producer_last: Collection[int]) -> FilterResult:
        m = self._map
        latest = m.latest_offset
        batch = RecordBatch(data)
        h = batch.header
        has_horizon = bool(h.attributes & DELETE_HORIZON_FLAG)
        records = batch.records()
        retained: list[Record] = []
        tombstones_kept = False
        invalid = removed = 0
        for r in records:
            if r.offset > latest:  # past the mapped section: nothing newer is known for its key
                keep = True
            elif r.key is None:
                invalid += 1  # a compacted log cannot keep a record without a key (Kafka drops it)
                keep = False
            else:
                keep = r.offset >= m.get(r.key)
                if keep and r.value is None and has_horizon and now >= h.base_timestamp:
                    keep = False
                    removed += 1
            if keep:
                retained.append(r)
                tombstones_kept = tombstones_kept or r.value is None
        stats = (len(records), len(retained), invalid, removed)
        new_horizon = now + retention_ms if tombstones_kept and not has_horizon else None
        horizon = new_horizon if new_horizon is not None else (h.base_timestamp if tombstones_kept else None)
        if len(retained) == len(records) and new_horizon is None:
            return True, horizon, stats
        if not retained:
            if h.producer_id >= 0 and h.base_offset + h.last_offset_delta in producer_last:
                return build_empty_batch(h), None, stats
            return None, None, stats
        return build_retained_batch(h, retained, new_horizon), horizon, stats

    def close(self) -> None:
        """Nothing to release."""


class ProcessRecordFilter:
    """:class:`RecordFilter` in a worker process (started on first use, restarted after it died). Not
    thread-safe: one per cleaner thread."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self._memory = memory
        self._load_factor = load_factor
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._latest = -1
        self._lock = threading.Lock()  # close() may come from another thread than the cleaning

    @property
    def latest_offset(self) -> int:
        return self._latest

    def _call(self, *request: Any) -> Any:
        with self._lock:
            conn = self._ensure_started()
            try:
                conn.send(request)
                status, value = conn.recv()
            except (EOFError, OSError) as e:
                self._stop_locked()
                raise OSError(f"the log cleaner's worker process ended: {e!r}") from None
        if status == "error":
            raise value
        return value

    def _ensure_started(self) -> Connection:
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            return self._conn
        self._stop_locked()
        mine, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from strom.storage.cleaner_records import main; main()",
                 str(theirs.fileno()), str(self._memory), repr(self._load_factor)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True,
                # the broker's own import path, however it was started (an install, a checkout, PYTHONPATH)
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._conn = Connection(mine.detach())
        return self._conn

    def reset(self, start: int) -> None:
        self._call("reset", start)
        self._latest = start - 1

    def map_batches(self, path: str, items: Sequence[MapItem], start: int) -> tuple[int, int, int]:
        full_at, records, nbytes, latest = self._call("map", path, list(items), start)
        self._latest = latest
        return full_at, records, nbytes

    def filter_batches(self, path: str, positions: Sequence[tuple[int, int]], now: int, retention_ms: int,
                       producer_last: Collection[int]) -> list[FilterResult]:
        return self._call("filter", path, list(positions), now, retention_ms, frozenset(producer_last))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the worker (it is started again when needed)."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        conn, self._conn = self._conn, None
        proc, self._proc = self._proc, None
        if conn is not None:
            conn.close()  # the worker sees EOF and exits
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _serve(conn: Connection, memory: int, load_factor: float) -> None:
    work = RecordFilter(memory, load_factor)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the broker closed its end (or died)
        try:
            op = request[0]
            if op == "reset":
                work.reset(request[1])
                reply: Any = None
            elif op == "map":
                full_at, records, nbytes = work.map_batches(request[1], request[2], request[3])
                reply = (full_at, records, nbytes, work.latest_offset)
            elif op == "filter":
                reply = work.filter_batches(*request[1:])
            else:
                raise ValueError(f"unknown request {op!r}")
            response: tuple[str, Any] = ("ok", reply)
        except Exception as e:  # noqa: BLE001 - returned to the cleaner, which decides
            response = ("error", e)
        try:
            conn.send(response)
        except (EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))


def main() -> None:
    """The worker process: ``python -c "from strom.storage.cleaner_records import main; main()" <fd> <memory>
    <load factor>``."""
    _serve(Connection(int(sys.argv[1])), int(sys.argv[2]), float(sys.argv[3]))
