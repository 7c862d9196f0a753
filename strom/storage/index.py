"""Sparse segment indexes: offset -> file position and timestamp -> offset.

Kafka counterparts: ``OffsetIndex``, ``TimeIndex`` (and their base ``AbstractIndex``).

File layouts (big-endian, one fixed-size entry after another, nothing else in the file)::

    .index      relativeOffset INT32, position INT32        (8 bytes)
    .timeindex  timestamp INT64, relativeOffset INT32       (12 bytes)

Design choice (vs Kafka's preallocated mmap): entries live in memory in compact ``array`` columns for
``bisect`` lookups and every append is a ``pwrite`` of one entry at the end of the file, so the file is always
exactly ``entries * entry_size`` bytes; "trim on close" therefore only repairs a file whose size drifted.
Durability comes from :meth:`flush` (fsync), which the segment calls when the log is flushed; an index that does
not match its log after a crash is detected by :meth:`sanity_check` / the segment and rebuilt from the log.

An offset index entry maps the *last* offset of a batch to the position where that batch starts, so
``lookup(target)`` (largest entry <= target) gives a position at or before the batch holding ``target``.
A time index entry is (max timestamp so far, offset of the batch holding it), appended only when the timestamp
grows.

Not thread-safe: the owning ``LogSegment`` serialises access (under the ``Log`` lock).
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from array import array

from strom.storage.fs import PooledFile

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex", "OffsetPosition", "TimestampOffset"]

OffsetPosition = tuple[int, int]
"""(absolute offset, file position)"""
TimestampOffset = tuple[int, int]
"""(timestamp, absolute offset)"""

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1
_LITTLE = sys.byteorder == "little"


class CorruptIndexError(Exception):
    """An index file is inconsistent (bad size, non-monotonic entries, entries past the log)."""


class _IndexFile:
    """The file half shared by both indexes: open/create, append one entry, truncate, fsync, delete."""

    entry_size: int = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._file = PooledFile(path)  # descriptor from the shared cache: opened when used, closed when idle
        self._closed = False
        # Written since the last fsync (True at open: what a previous run wrote may not be synced). A flush with
        # nothing new skips the fsync: a log flush would otherwise pay three fsyncs for one file that changed.
        self._dirty = True

    @property
    def path(self) -> str:
        return self._file.path

    def _read_all(self) -> bytes:
        fd = self._file.acquire()
        try:
            size = os.fstat(fd).st_size
            if size % self.entry_size:
                raise CorruptIndexError(
                    f"index file {self.path} has size {size}, not a multiple of {self.entry_size}"
                )
            return os.pread(fd, size, 0) if size else b""
        finally:
            self._file.release()

    @property
    def entries(self) -> int:
        raise NotImplementedError

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def resize(self, max_index_size: int) -> None:
        self.max_entries = max(1, max_index_size // self.entry_size)

    def _write_entry(self, data: bytes, n: int) -> None:
        fd = self._file.acquire()
        self._dirty = True
        try:
            written = os.pwrite(fd, data, n * self.entry_size)
            if written != len(data):  # a short write (full disk): drop the partial entry, report the failure
                os.ftruncate(fd, n * self.entry_size)
                raise OSError(f"short write to {self.path}")
        finally:
            self._file.release()

    def _truncate_file(self, n: int) -> None:
        fd = self._file.acquire()
        self._dirty = True
        try:
            os.ftruncate(fd, n * self.entry_size)
        finally:
            self._file.release()

    def flush(self) -> None:
        if not self._closed and self._dirty:
            self._dirty = False  # before the fsync: a write racing with it marks the file dirty again
            fd = self._file.acquire()
            try:
                os.fsync(fd)
            except OSError:
                self._dirty = True
                raise
            finally:
                self._file.release()

    def trim(self) -> None:
        """Make the file exactly ``entries`` long (a no-op unless something wrote past the end)."""
        if os.stat(self.path).st_size != self.entries * self.entry_size:
            self._truncate_file(self.entries)

    def close(self) -> None:
        if not self._closed:
            try:
                self.trim()
            except FileNotFoundError:
                pass
            self._file.close()
            self._closed = True

    def rename_to(self, path: str) -> None:
        self._file.rename_to(path)

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_IndexFile):
    """Sparse map from (relative) offset to the file position of the batch it ends."""

    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10485760) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._offsets = array("i")  # relative offsets
        self._positions = array("i")
        try:
            self._load()
        except CorruptIndexError:
            self._offsets = array("i")
            self._positions = array("i")
            self.corrupt_on_load = True
        else:
            self.corrupt_on_load = False

    def _load(self) -> None:
        data = self._read_all()
        flat = array("i")
        flat.frombytes(data)
        if _LITTLE:
            flat.byteswap()
        self._offsets = flat[0::2]
        self._positions = flat[1::2]

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry (the base offset when empty)."""
        return self.base_offset + self._offsets[-1] if self._offsets else self.base_offset

    def entry(self, n: int) -> OffsetPosition:
        return self.base_offset + self._offsets[n], self._positions[n]

    def last_entry(self) -> OffsetPosition:
        return self.entry(-1) if self._offsets else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must grow strictly."""
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise ValueError(f"offset {offset} out of range for index with base {self.base_offset}")
        if self._offsets and (rel <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(
                f"non-increasing index entry ({offset}, {position}) after {self.last_entry()} in {self.path}"
            )
        self._write_entry(_OFFSET_ENTRY.pack(rel, position), len(self._offsets))
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup(self, target: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target``, or ``(base_offset, 0)``."""
        n = bisect.bisect_right(self._offsets, target - self.base_offset) - 1
        if n < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[n], self._positions[n]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 when none): a place to start walking batch
        headers towards ``position`` without reading everything before it."""
        n = bisect.bisect_right(self._positions, position) - 1
        return self._positions[n] if n >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        n = bisect.bisect_left(self._offsets, offset - self.base_offset)
        self._truncate_entries(n)

    def truncate(self) -> None:
        self._truncate_entries(0)

    def _truncate_entries(self, n: int) -> None:
        del self._offsets[n:]
        del self._positions[n:]
        self._truncate_file(n)

    def sanity_check(self, log_size: int) -> None:
        """Raise :class:`CorruptIndexError` unless entries grow strictly and point inside the log."""
        offs, poss = self._offsets, self._positions
        if not offs:
            return
        if offs[0] < 0 or poss[0] < 0 or poss[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"index {self.path} has entries outside the log (size {log_size})")
        if len(set(offs)) != len(offs) or sorted(offs) != offs.tolist():
            raise CorruptIndexError(f"index {self.path} has non-increasing offsets")
        if len(set(poss)) != len(poss) or sorted(poss) != poss.tolist():
            raise CorruptIndexError(f"index {self.path} has non-increasing positions")


class TimeIndex(_IndexFile):
    """Sparse map from the largest timestamp seen so far to the offset where it was seen."""

    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10485760) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._offsets = array("i")  # relative offsets
        try:
            self._load()
        except CorruptIndexError:
            self._timestamps = array("q")
            self._offsets = array("i")
            self.corrupt_on_load = True
        else:
            self.corrupt_on_load = False

    def _load(self) -> None:
        data = self._read_all()
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            self._timestamps.append(ts)
            self._offsets.append(rel)

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    def entry(self, n: int) -> TimestampOffset:
        return self._timestamps[n], self.base_offset + self._offsets[n]

    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty (Kafka's NO_TIMESTAMP convention)."""
        return self.entry(-1) if self._timestamps else (-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append when ``timestamp`` is larger than the last entry's; returns whether an entry was added."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"time index {self.path} is full")
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise ValueError(f"offset {offset} out of range for time index with base {self.base_offset}")
        if self._timestamps:
            if timestamp <= self._timestamps[-1]:
                return False
            if rel < self._offsets[-1]:
                raise ValueError(f"time index entry offset {offset} below the last entry in {self.path}")
        elif timestamp < 0:
            return False
        self._write_entry(_TIME_ENTRY.pack(timestamp, rel), len(self._timestamps))
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        return True

    def lookup(self, target_ts: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_ts``, or ``(-1, base_offset)``."""
        n = bisect.bisect_right(self._timestamps, target_ts) - 1
        if n < 0:
            return -1, self.base_offset
        return self._timestamps[n], self.base_offset + self._offsets[n]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        rel = offset - self.base_offset
        n = len(self._offsets)
        while n > 0 and self._offsets[n - 1] >= rel:
            n -= 1
        self._truncate_entries(n)

    def truncate(self) -> None:
        self._truncate_entries(0)

    def _truncate_entries(self, n: int) -> None:
        del self._timestamps[n:]
        del self._offsets[n:]
        self._truncate_file(n)

    def sanity_check(self, last_offset: int) -> None:
        """Raise unless timestamps grow strictly and offsets never decrease nor pass ``last_offset``."""
        ts, offs = self._timestamps, self._offsets
        if not ts:
            return
        if offs[0] < 0 or self.base_offset + offs[-1] > last_offset:
            raise CorruptIndexError(f"time index {self.path} has offsets outside the segment")
        if len(set(ts)) != len(ts) or sorted(ts) != ts.tolist() or sorted(offs) != offs.tolist():
            raise CorruptIndexError(f"time index {self.path} is not monotonic")
