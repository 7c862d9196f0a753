"""One log segment: a ``.log`` file of batches plus its sparse ``.index`` and ``.timeindex``.

Kafka counterpart: ``LogSegment``.

Files are ``<dir>/<base_offset:020d>.log|.index|.timeindex``. Every offset in the segment is >= ``base_offset``
and < ``base_offset + 2**31`` (index entries store 32-bit relative offsets).

Threading: not thread-safe, except :meth:`flush` which may run in another thread concurrently with
:meth:`append`/:meth:`read` (it only fsyncs); :meth:`close`/:meth:`delete` wait for an in-flight flush so a file
descriptor is never closed under it. The owning ``Log`` serialises everything else under its lock.
"""

from __future__ import annotations

import os
import struct
import threading

from strom.common.time import Time
from strom.record.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    compute_crc,
    parse_header,
)
from strom.storage.fetch_data_info import FetchData, FetchDataInfo
from strom.storage.file_records import BatchPosition, FileRecords, record_timestamps
from strom.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from strom.storage.log_config import LogConfig

__all__ = ["LogSegment", "log_file_name", "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "DELETED_SUFFIX"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
INT32_MAX = 2**31 - 1

_RECOVERY_CHUNK = 1 << 20
_DELTA_AND_TIMES = struct.Struct(">iqq")  # lastOffsetDelta, baseTimestamp, maxTimestamp at byte 23


def log_file_name(dir: str, base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return os.path.join(dir, f"{base_offset:020d}{suffix}")


class LogSegment:
    """A segment file with its indexes and the running state needed to append and roll."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        config: LogConfig,
        time: Time,
        *,
        load_state: bool = True,
        file_suffix: str = "",
    ) -> None:
        """Open (creating if missing) the segment's files.

        With ``load_state`` an existing segment's indexes are sanity-checked and its end offset and max timestamp
        are found by scanning the tail; an inconsistent index triggers :meth:`recover`. Pass ``load_state=False``
        when the caller runs :meth:`recover` itself.
        """
        self.dir = dir
        self.base_offset = base_offset
        self.config = config
        self._time = time
        log_path = log_file_name(dir, base_offset, LOG_SUFFIX + file_suffix)
        # ``preallocate``: a new segment's blocks are reserved at once (Kafka sizes the file; the size stays what
        # was written here). Existing segments reserve nothing when opened.
        preallocate = config.segment_bytes if config.preallocate and not os.path.exists(log_path) else 0
        self.log = FileRecords(log_path, preallocate=preallocate)
        self._inactive = False  # rolled past: a flush gives back the blocks reserved past its end
        self._indexes_existed = all(
            os.path.exists(log_file_name(dir, base_offset, sfx + file_suffix))
            for sfx in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
        )
        self.offset_index = OffsetIndex(
            log_file_name(dir, base_offset, INDEX_SUFFIX + file_suffix), base_offset, config.segment_index_bytes
        )
        self.time_index = TimeIndex(
            log_file_name(dir, base_offset, TIME_INDEX_SUFFIX + file_suffix), base_offset, config.segment_index_bytes
        )
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_last_index_entry = 0
        self.created_ms = time.milliseconds()
        self._flush_cond = threading.Condition()
        self._flushing = 0
        self._closed = False
        self.rebuilt_indexes = False
        self.truncated_on_load = 0
        if load_state:
            try:
                self.load_state()
            except CorruptIndexError:
                self.truncated_on_load = self.recover()

    # --- properties --------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (``base_offset`` when empty)."""
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def last_modified(self) -> int:
        """The log file's mtime in ms."""
        return self.log.last_modified_ms()

    @property
    def largest_timestamp(self) -> int:
        """Largest batch maxTimestamp, or the file's mtime when no batch carries one (Kafka's rule)."""
        return self._max_timestamp if self._max_timestamp >= 0 else self.last_modified

    def is_full(self) -> bool:
        return self.offset_index.is_full() or self.time_index.is_full()

    def can_convert_to_relative(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # --- state loading and recovery ---------------------------------------------------------------------

    def load_state(self) -> None:
        """Check the indexes against the log and compute the tail state; raises CorruptIndexError."""
        if self.offset_index.corrupt_on_load or self.time_index.corrupt_on_load:
            raise CorruptIndexError(f"unreadable index for segment {self.log.path}")
        if self.log.size and not self._indexes_existed:
            raise CorruptIndexError(f"missing index file for segment {self.log.path}")
        self.offset_index.sanity_check(self.log.size)
        start = 0
        if self.offset_index.entries:
            for n in (0, -1):
                offset, position = self.offset_index.entry(n)
                found = next(self.log.batches(position), None)
                if found is None or found.last_offset != offset:
                    raise CorruptIndexError(
                        f"index entry ({offset}, {position}) does not match {self.log.path}"
                    )
            start = self.offset_index.last_entry()[1]
        self._recompute_tail(start)
        self.time_index.sanity_check(self._next_offset - 1 if self.log.size else self.base_offset)
        if self.log.size == 0 and (self.offset_index.entries or self.time_index.entries):
            raise CorruptIndexError(f"empty segment {self.log.path} has index entries")

    def _recompute_tail(self, start: int) -> None:
        ts, ts_offset = self.time_index.last_entry()
        self._max_timestamp, self._offset_of_max_timestamp = ts, ts_offset
        next_offset = self.base_offset
        pos = start
        prev_last = self.base_offset - 1  # batches must start at or after the segment's base offset
        for batch in self.log.batches(start):
            h = batch.header
            if (
                h.magic != 2
                or h.base_offset <= prev_last
                or not self.can_convert_to_relative(batch.last_offset)
            ):
                raise CorruptIndexError(f"invalid batch at {batch.position} in {self.log.path}")
            prev_last = batch.last_offset
            if h.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = h.max_timestamp, batch.last_offset
            next_offset = batch.last_offset + 1
            pos = batch.position + batch.size
        if pos != self.log.size:
            raise CorruptIndexError(f"torn or invalid data at position {pos} of {self.log.path}")
        self._next_offset = next_offset
        self._bytes_since_last_index_entry = self.log.size - start

    def recover(self) -> int:
        """Re-validate every batch (size, magic 2, CRC, increasing offsets), rebuild both indexes and cut the file
        at the first invalid or torn batch. Returns the number of bytes truncated."""
        self.offset_index.truncate()
        self.time_index.truncate()
        self.rebuilt_indexes = True
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        valid = 0
        file_size = self.log.size
        buf = b""
        buf_pos = 0
        while valid + LOG_OVERHEAD <= file_size:
            off = valid - buf_pos
            if off + LOG_OVERHEAD > len(buf):
                buf, buf_pos, off = self.log.read(valid, _RECOVERY_CHUNK), valid, 0
            base_offset, length = struct.unpack_from(">qi", buf, off)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or valid + size > file_size:
                break
            if off + size > len(buf):
                buf, buf_pos, off = self.log.read(valid, max(size, _RECOVERY_CHUNK)), valid, 0
            header = parse_header(buf, off)
            last_offset = base_offset + header.last_offset_delta
            if (
                header.magic != 2
                or header.last_offset_delta < 0
                or base_offset < self._next_offset
                or not self.can_convert_to_relative(last_offset)
                or compute_crc(buf, off, size) != header.crc
            ):
                break
            self._index_batch(valid, last_offset, header.max_timestamp, size)
            self._next_offset = last_offset + 1
            valid += size
        return self.log.truncate_to(valid)

    # --- append ------------------------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_ts: int,
        records: bytes | bytearray | memoryview,
    ) -> None:
        """Append validated batches (offsets already assigned) and index them every ``index.interval.bytes``."""
        if not records:
            return
        if not self.can_convert_to_relative(largest_offset):
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        if self.log.size == 0:
            self.created_ms = self._time.milliseconds()
        position = self.log.append(records)
        end = len(records)
        rel = 0
        while rel < end:
            length = struct.unpack_from(">i", records, rel + 8)[0]
            base = struct.unpack_from(">q", records, rel)[0]
            delta, _base_ts, max_ts = _DELTA_AND_TIMES.unpack_from(records, rel + 23)
            size = length + LOG_OVERHEAD
            self._index_batch(position + rel, base + delta, max_ts, size)
            rel += size
        if largest_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = largest_timestamp, offset_of_max_ts
        self._next_offset = max(self._next_offset, largest_offset + 1)

    def _index_batch(self, position: int, last_offset: int, max_ts: int, size: int) -> None:
        if max_ts > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_ts, last_offset
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def on_become_inactive(self) -> None:
        """Called when the log rolls past this segment: record the final max timestamp in the time index. Its next
        flush (the flusher's, off the event loop) gives back the file's blocks reserved past its end."""
        self._inactive = True
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )

    # --- reads -------------------------------------------------------------------------------------------

    def find_offset_position(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset`` (the batch holding it), or None past the end."""
        position = max(start_position, self.offset_index.lookup(offset)[1])
        return self.log.search_for_offset(offset, position)

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = True,
        zero_copy: bool = False,
    ) -> FetchData | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes (but the first batch
        whole when ``min_one_message``), never at or past ``max_position``. None when the offset is past the end.

        ``zero_copy``: the records are a :class:`FileRegion` of the file (nothing read but batch headers near
        the end of the range, found through the offset index) instead of bytes.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size}")
        found = self.find_offset_position(start_offset)
        if found is None:
            return None
        limit = self.log.size if max_position is None else min(max_position, self.log.size)
        position = found.position
        if position >= limit:
            return FetchDataInfo(start_offset, b"", self.base_offset, position, found.header.base_offset)
        first_size = found.size
        if first_size > max_size and not min_one_message:
            return FetchDataInfo(start_offset, b"", self.base_offset, position, found.header.base_offset)
        fetch_size = min(max(max_size, first_size), limit - position)
        if zero_copy:
            if first_size > fetch_size:
                return FetchDataInfo(start_offset, b"", self.base_offset, position, found.header.base_offset)
            end = position + fetch_size
            scan_from = max(position + first_size, self.offset_index.floor_position(end))
            size = self.log.whole_batches_end(position + first_size, end, scan_from) - position
            return FetchDataInfo(start_offset, self.log.slice(position, size), self.base_offset, position,
                                 found.header.base_offset)
        data = self.log.read(position, fetch_size)
        end = _whole_batches_end(data, first_size)
        if end != len(data):
            data = data[:end]
        return FetchDataInfo(start_offset, data, self.base_offset, position, found.header.base_offset)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp`` at/after ``starting_offset``.

        Record timestamps are decoded for CreateTime batches (a compressed batch is decompressed for it, as
        Kafka's search does). In LogAppendTime batches every record carries the batch maxTimestamp.
        """
        start_offset = self.base_offset if starting_offset is None else starting_offset
        _ts, ts_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_offset, start_offset))[1]
        while True:
            batch = self.log.search_for_timestamp(timestamp, position, start_offset)
            if batch is None:
                return None
            found = self._timestamp_in_batch(batch, timestamp, start_offset)
            if found is not None:
                return found
            position = batch.position + batch.size

    def _timestamp_in_batch(
        self, batch: BatchPosition, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        h = batch.header
        first = max(h.base_offset, start_offset)
        if h.attributes & TIMESTAMP_TYPE_MASK:
            return first, h.max_timestamp
        try:
            records = record_timestamps(self.log.read(batch.position, batch.size))
        except ValueError:
            return first, h.max_timestamp
        for delta, ts in records:
            if ts >= timestamp and h.base_offset + delta >= start_offset:
                return h.base_offset + delta, ts
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record carrying the segment's max timestamp."""
        if self._max_timestamp < 0:
            return None
        return self.find_offset_by_timestamp(self._max_timestamp)

    # --- truncation, flush, lifecycle --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed. (The log truncates only
        its active segment: one rolled past before is active again.)"""
        self._inactive = False
        found = self.find_offset_position(offset)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.log.truncate_to(found.position)
        start = self.offset_index.last_entry()[1] if self.offset_index.entries else 0
        self._recompute_tail(start)
        if self.log.size == 0:
            self.created_ms = self._time.milliseconds()
        return removed

    def flush(self) -> None:
        """fsync the log and index files. Safe to call from another thread (see module docstring)."""
        with self._flush_cond:
            if self._closed:
                return
            self._flushing += 1
        try:
            if self._inactive:
                self.log.trim()
            self.log.flush()
            self.offset_index.flush()
            self.time_index.flush()
        finally:
            with self._flush_cond:
                self._flushing -= 1
                self._flush_cond.notify_all()

    def _wait_and_mark_closed(self) -> bool:
        with self._flush_cond:
            while self._flushing:
                self._flush_cond.wait()
            if self._closed:
                return False
            self._closed = True
            return True

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``<name><old_suffix>`` to ``<name><new_suffix>`` (compaction's
        ``.cleaned`` -> ``.swap`` -> final names); open descriptors stay valid."""
        for f in (self.log, self.offset_index, self.time_index):
            if not f.path.endswith(old_suffix):
                raise ValueError(f"{f.path} does not end with {old_suffix!r}")
            f.rename_to(f.path[: len(f.path) - len(old_suffix)] + new_suffix)

    def change_file_suffix(self, suffix: str) -> None:
        """Rename the three files by appending ``suffix`` (e.g. ``.deleted``); open descriptors stay valid."""
        for f in (self.log, self.offset_index, self.time_index):
            if os.path.exists(f.path):
                f.rename_to(f.path + suffix)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.offset_index.resize(config.segment_index_bytes)
        self.time_index.resize(config.segment_index_bytes)

    def close(self) -> None:
        """Write the final time index entry, trim indexes and close the files."""
        if not self._wait_and_mark_closed():
            return
        try:
            if self._max_timestamp >= 0:
                self.time_index.maybe_append(
                    self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
                )
        finally:  # even on a full disk the descriptors are given back; the caller reports the failure
            self.offset_index.close()
            self.time_index.close()
            self.log.close()

    def close_handlers(self) -> None:
        """Close the files without touching them (for deletion)."""
        if self._wait_and_mark_closed():
            self.offset_index.close()
            self.time_index.close()
            self.log.close()

    def delete(self) -> None:
        """Close and unlink the three files."""
        self.close_handlers()
        for f in (self.log, self.offset_index, self.time_index):
            f.delete()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self._next_offset})"
        )


def _whole_batches_end(data: bytes, first_size: int) -> int:
    """Length of the prefix of ``data`` made of whole batches (at least the first one if it is complete)."""
    end = first_size
    n = len(data)
    if end > n:
        return 0
    while end + LOG_OVERHEAD <= n:
        size = struct.unpack_from(">i", data, end + 8)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or end + size > n:  # a corrupt length ends the read; the next one reports it
            break
        end += size
    return end
