"""One segment's ``.log`` file: raw RecordBatch v2 bytes, appended and read with positional I/O.

Kafka counterpart: ``FileRecords`` (plus the record-level timestamp scan of ``LogSegment.findOffsetByTimestamp``).

Batches are never decoded here except by :func:`record_timestamps`, which walks the varint headers of a
batch's records (decompressing a compressed batch first) to find per-record timestamps (used by ListOffsets only).

The descriptor comes from the shared cache (:class:`strom.storage.fs.PooledFile`): it is opened on first use
and may be closed while the segment is idle. A failed append cuts the file back to its previous size, so a
partial write (ENOSPC in the middle of a batch) never leaves stray bytes behind.

Blocks are reserved ahead of the writes (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``: the file's size stays what
was written) once a file holds ``PREALLOCATE_AFTER`` bytes, a chunk at a time; with the topic's ``preallocate``
the whole segment is reserved when it is created, as Kafka's ``log.preallocate``. :meth:`trim` gives back what
was not written (a rolled segment, a closed file).

The owning segment serialises writes; ``os.pread`` reads are safe alongside them, and :meth:`trim` (called from
flush threads) is safe alongside appends and truncations.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator
from typing import NamedTuple

from strom.common.error_codes import CorruptMessageError
from strom.protocol.send import TransferableRecords
from strom.record.compression import decompress
from strom.record.header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
)
from strom.storage.fs import PooledFile, reserve_blocks

__all__ = ["FileRecords", "FileRegion", "BatchPosition", "CorruptRecordError", "record_timestamps"]

log = logging.getLogger("strom.storage.log")


class CorruptRecordError(CorruptMessageError):
    """A read met bytes that are not a batch where one must start (Kafka's CorruptRecordException): answered as
    CORRUPT_MESSAGE rather than as an empty read that would stall every consumer at that offset forever."""

    def __init__(self, message: str, path: str, position: int) -> None:
        super().__init__(message)
        self.path = path
        self.position = position

PREALLOCATE_AFTER = 1 << 20  # files smaller than this reserve nothing (most partitions of a busy broker are idle)
PREALLOCATE_CHUNK = 4 << 20  # reserved ahead of the writes at a time, at most as much as the file holds already
_FOREIGN_BLOCKS_SLACK = 64 << 10  # blocks a file may hold past its size for itself (extent-tree blocks, rounding)

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # smallest legal batchLength (a header with no records)
_SCAN_CHUNK = 8192


class BatchPosition(NamedTuple):
    """A batch found in a file: where it starts and its parsed header."""

    position: int
    header: BatchHeader

    @property
    def size(self) -> int:
        return self.header.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta


class FileRegion(TransferableRecords):
    """``size`` bytes of a segment file from ``position``, for a Fetch response sent with ``sendfile`` (Kafka's
    ``FileRecords.slice``).

    The region owns a duplicate of the file's descriptor, taken when the read was made under the log's lock, so
    the bytes stay reachable whatever happens to the segment before the response is written: retention,
    compaction's swap and follower truncation rename, close or unlink the file (an unlinked file lives while a
    descriptor is open). Only cutting the file itself (``ftruncate`` of the active segment: a follower truncating
    its log, an append undone) can take bytes away; then :meth:`read_bytes` raises and a ``sendfile`` comes up
    short, and the socket layer closes the connection rather than send a frame whose length is wrong (Kafka
    closes the connection too). :meth:`release` closes the descriptor; call it once the response is written or
    dropped (a forgotten region is closed when garbage-collected). Not thread-safe.
    """

    __slots__ = ("_fd", "path")

    def __init__(self, fd: int, position: int, size: int, path: str) -> None:
        super().__init__(size, position)
        self._fd: int | None = fd
        self.path = path

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            raise OSError(errno.EBADF, f"region of {self.path} was released")
        return self._fd

    def read_bytes(self) -> bytes:
        """The region's bytes; raises OSError when the file no longer holds all of them."""
        fd = self.fileno()
        data = os.pread(fd, self.size, self.position)
        while len(data) < self.size:
            more = os.pread(fd, self.size - len(data), self.position + len(data))
            if not more:
                raise OSError(errno.EIO, f"{self.path} was truncated under a fetch: {len(data)} of {self.size} "
                                         f"bytes left at position {self.position}")
            data += more
        return data

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"FileRegion({self.path!r}, position={self.position}, size={self.size})"


class FileRecords:
    """An append-only file of batches with a cached size. Opened read-write, created if missing."""

    def __init__(self, path: str, *, preallocate: int = 0) -> None:
        """Open (creating if missing) ``path``; ``preallocate`` > 0 reserves that many bytes of blocks from the
        file's start at once (best effort: a filesystem without the call or a full disk reserves nothing)."""
        self._file = PooledFile(path)
        self._reported: set[int] = set()  # positions of corruption already logged (readers retry; log it once)
        self._lock = threading.Lock()  # appends, truncations and trims of the reserved blocks
        self._reserving = True  # False once the filesystem refused a reservation
        fd = self._file.acquire()
        try:
            st = os.fstat(fd)
            self.size = st.st_size
            # The file's blocks reach at least here. More than the size plus the filesystem's own blocks: reserved
            # by a process that died before giving them back (kill -9 of the broker); the next trim frees them.
            held = st.st_blocks * 512
            self._reserved = held if held > self.size + _FOREIGN_BLOCKS_SLACK else self.size
            if preallocate > self.size:
                self._reserve(fd, preallocate - self.size)
        finally:
            self._file.release()

    @property
    def path(self) -> str:
        return self._file.path

    @property
    def closed(self) -> bool:
        return self._file.closed

    # --- writes ------------------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; returns the position it was written at. On failure the file is cut back to
        where it was (no partial batch stays) and the OSError is raised."""
        view = memoryview(data)
        written = 0
        with self._lock:
            position = self.size
            fd = self._file.acquire()
            try:
                if position + len(view) > self._reserved and position >= PREALLOCATE_AFTER and self._reserving:
                    self._reserve(fd, max(min(PREALLOCATE_CHUNK, position), len(view)))
                while written < len(view):
                    written += os.pwrite(fd, view[written:], position + written)
            except OSError:
                if written:
                    os.ftruncate(fd, position)  # shrinking needs no new space, so it works on a full disk
                    self._reserved = position  # (and gives back the blocks reserved past it)
                raise
            finally:
                self._file.release()
            self.size += written
        return position

    def _reserve(self, fd: int, length: int) -> None:
        """Reserve ``length`` bytes of blocks from the file's end (the lock held, or during construction)."""
        err = reserve_blocks(fd, self.size, length)
        if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            self._reserving = False  # the filesystem cannot: do not ask on every append
            return
        # Done, or failed part way (ENOSPC: ext4 keeps what it allocated before it ran out). Either way the range
        # counts as reserved, so the next trim frees whatever was allocated and a full disk is not asked again
        # until the writes pass it (the write itself reports the full disk).
        self._reserved = max(self._reserved, self.size + length)

    @property
    def reserved_past_end(self) -> int:
        """Bytes of blocks reserved past the file's end (given back by :meth:`trim`)."""
        return max(0, self._reserved - self.size)

    def trim(self) -> None:
        """Give back the blocks reserved past the end (Kafka's ``FileRecords.trim`` of a preallocated segment).
        Safe alongside appends and truncations in other threads; a closed file is left alone."""
        with self._lock:
            if self._reserved <= self.size or self._file.closed:
                return
            fd = self._file.acquire()
            try:
                os.ftruncate(fd, self.size)  # the same size: the data stays, the blocks past the end are freed
            finally:
                self._file.release()
            self._reserved = self.size

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        with self._lock:
            removed = self.size - size
            if removed > 0:
                fd = self._file.acquire()
                try:
                    os.ftruncate(fd, size)  # (this frees the reserved blocks past the end as well)
                finally:
                    self._file.release()
                self.size = size
                self._reserved = size
        return max(0, removed)

    def flush(self) -> None:
        fd = self._file.acquire()
        try:
            os.fsync(fd)
        finally:
            self._file.release()

    def close(self) -> None:
        try:
            self.trim()
        except OSError as e:  # the data is written: only the reserved blocks stay until the next open's trim
            log.warning("could not give back the blocks reserved past the end of %s: %s", self.path, e)
        finally:
            self._file.close()

    def rename_to(self, path: str) -> None:
        self._file.rename_to(path)

    def delete(self) -> None:
        self._file.close()  # (no trim: the blocks go with the file)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # --- reads -------------------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file)."""
        size = max(0, min(size, self.size - position))
        if size == 0:
            return b""
        fd = self._file.acquire()
        try:
            data = os.pread(fd, size, position)
            while len(data) < size:  # pread may return short on some filesystems
                more = os.pread(fd, size - len(data), position + len(data))
                if not more:
                    break
                data += more
        finally:
            self._file.release()
        return data

    def slice(self, position: int, size: int) -> FileRegion | bytes:
        """``size`` bytes from ``position`` as a :class:`FileRegion` holding its own descriptor (zero-copy reads);
        the bytes themselves when no descriptor can be spared (EMFILE / ENFILE)."""
        size = max(0, min(size, self.size - position))
        if size == 0:
            return b""
        fd = self._file.acquire()
        try:
            try:
                dup = os.dup(fd)
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                dup = -1
        finally:
            self._file.release()
        if dup < 0:
            return self.read(position, size)
        return FileRegion(dup, position, size, self.path)

    def whole_batches_end(self, start: int, end: int, scan_from: int | None = None) -> int:
        """The end of the last whole batch in ``[start, end)`` (``start`` when none fits), reading only batch
        headers: from ``scan_from`` (a batch start at or after ``start``, e.g. from the offset index) when given.
        A torn or implausible header ends the walk there (the next read reports it)."""
        pos = start if scan_from is None or scan_from < start else scan_from
        for batch in self.batches(pos, end):
            pos = batch.position + batch.size
        return pos

    def _pread(self, size: int, position: int) -> bytes:
        fd = self._file.acquire()
        try:
            return os.pread(fd, size, position)
        finally:
            self._file.release()

    def last_modified_ms(self) -> int:
        return os.stat(self.path).st_mtime_ns // 1_000_000

    def batches(self, start: int = 0, end: int | None = None, *, strict: bool = False) -> Iterator[BatchPosition]:
        """Headers of the whole batches in ``[start, end)``; stops quietly at a torn or implausible batch, or with
        ``strict`` raises :class:`CorruptRecordError` there unless it is a batch cut by an ``end`` below the file
        size (reads: the file holds only whole batches, so anything else is corruption).

        Reads ahead in small chunks so scanning many small batches costs few syscalls. Does not check CRCs.
        """
        file_end = end is None or end >= self.size
        end = self.size if end is None else min(end, self.size)
        pos = start
        buf = b""
        buf_pos = start
        while pos + HEADER_SIZE <= end:
            off = pos - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf = self._pread(min(_SCAN_CHUNK, end - pos), pos)
                buf_pos, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    break
            header = parse_header(buf, off)
            size = header.batch_length + LOG_OVERHEAD
            if header.batch_length < _MIN_BATCH_LENGTH or (strict and header.magic != 2):
                if strict:
                    self._corrupt(pos, f"batch length {header.batch_length}, magic {header.magic}")
                return
            if pos + size > end:
                if strict and file_end:
                    self._corrupt(pos, f"batch of {size} bytes runs past the end of the file ({self.size})")
                return
            yield BatchPosition(pos, header)
            pos += size
        if strict and file_end and pos < end:
            self._corrupt(pos, f"{end - pos} bytes left, less than a batch header")

    def _corrupt(self, position: int, why: str) -> None:
        message = f"corrupt record batch in {self.path} at position {position}: {why}"
        if position not in self._reported:
            self._reported.add(position)
            log.error("%s", message)
        raise CorruptRecordError(message, self.path, position)

    def search_for_offset(self, target: int, start: int, end: int | None = None) -> BatchPosition | None:
        """The first batch at or after ``start`` whose last offset is >= ``target``."""
        for batch in self.batches(start, end, strict=True):
            if batch.last_offset >= target:
                return batch
        return None

    def search_for_timestamp(self, target_ts: int, start: int, starting_offset: int) -> BatchPosition | None:
        """The first batch at or after ``start`` with maxTimestamp >= ``target_ts`` and offsets >= starting_offset."""
        for batch in self.batches(start, strict=True):
            if batch.header.max_timestamp >= target_ts and batch.last_offset >= starting_offset:
                return batch
        return None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint/varlong at ``pos`` -> (value, next position)."""
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def record_timestamps(batch: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """``(offset_delta, timestamp)`` of every record of one v2 batch; a compressed batch's records block is
    decompressed first (as Kafka's timestamp search iterates a compressed batch's records).

    Only the record prefix (length, attributes, timestampDelta, offsetDelta) is decoded; the rest of each
    record is skipped by its length. Raises ``ValueError`` on malformed records or a stream that does not
    decompress.
    """
    header = parse_header(batch)
    end = header.batch_length + LOG_OVERHEAD
    codec = header.compression & COMPRESSION_MASK
    data: bytes | bytearray | memoryview
    if codec:
        data = decompress(codec, memoryview(batch)[HEADER_SIZE:end])
        pos, end = 0, len(data)
    else:
        data, pos = batch, HEADER_SIZE
    out: list[tuple[int, int]] = []
    try:
        for _ in range(header.records_count):
            length, body = _varint(data, pos)
            if length < 0 or body + length > end:
                raise ValueError("record length out of bounds")
            ts_delta, p = _varint(data, body + 1)  # +1 skips the attributes byte
            offset_delta, _ = _varint(data, p)
            out.append((offset_delta, header.base_timestamp + ts_delta))
            pos = body + length
    except IndexError:
        raise ValueError("truncated record") from None
    return out
