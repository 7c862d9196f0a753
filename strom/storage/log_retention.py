"""Deleting whole segments: retention by time and size, DeleteRecords, and delayed file deletion.

Kafka counterpart: the retention half of ``UnifiedLog`` (``deleteOldSegments``, ``deleteRecordsBefore`` …).
A mixin of :class:`strom.storage.log.Log`; every method runs under the log's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from strom.common.error_codes import OffsetOutOfRangeError
from strom.common.time import Time
from strom.storage.log_config import LogConfig
from strom.storage.log_segment import DELETED_SUFFIX, LogSegment

__all__ = ["LogRetention"]

log = logging.getLogger("strom.storage.log")


class LogRetention:
    # State owned by Log (declared here for the type checker).
    dir: str
    config: LogConfig
    _time: Time
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _next_offset: int
    _log_start_offset: int
    _recovery_point: int
    _high_watermark: int
    _pending_deletes: list[tuple[int, LogSegment]]
    _dir_dirty: bool
    _closed: bool

    def _check_open(self) -> None:
        raise NotImplementedError

    def _roll(self, now: int) -> LogSegment:
        raise NotImplementedError

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (-1 = high watermark) and delete the
        segments wholly below it. Returns the new log start offset. Offsets above the high watermark raise
        OffsetOutOfRangeError."""
        with self._lock:
            self._check_open()
            if offset == -1:
                offset = self._high_watermark
            if offset < 0 or offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: high watermark is {self._high_watermark}"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._delete_log_start_breached()
            return self._log_start_offset

    def delete_old_segments(self) -> int:
        """Retention: delete whole segments past ``retention.ms`` (by largest timestamp) or beyond
        ``retention.bytes`` (oldest first), and those below the log start offset. Only ``cleanup.policy=delete``
        topics are trimmed by time/size. Never deletes at or above the high watermark. Returns segments deleted."""
        with self._lock:
            if self._closed:
                return 0
            now = self._time.milliseconds()
            deleted = 0
            if self.config.delete_enabled:
                deleted += self._delete_retention_ms_breached(now)
                deleted += self._delete_retention_size_breached()
            deleted += self._delete_log_start_breached()
            self._purge_deleted_segments(now)
            return deleted

    def _delete_retention_ms_breached(self, now: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_segments(lambda seg, _next: now - seg.largest_timestamp > retention_ms)

    def _delete_retention_size_breached(self) -> int:
        retention_bytes = self.config.retention_bytes
        size = sum(s.size for s in self._segments)
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def predicate(seg: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - seg.size >= 0:
                excess -= seg.size
                return True
            return False

        return self._delete_segments(predicate)

    def _delete_log_start_breached(self) -> int:
        start = self._log_start_offset
        return self._delete_segments(lambda _seg, nxt: nxt is not None and nxt.base_offset <= start)

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        deletable: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = nxt.base_offset if nxt is not None else self._next_offset
            last_and_empty = nxt is None and segment.size == 0
            if last_and_empty or self._high_watermark < upper or not predicate(segment, nxt):
                break
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self._roll(self._time.milliseconds())
        for segment in deletable:
            self._segments.remove(segment)
            self._schedule_delete(segment)
        self._bases = [s.base_offset for s in self._segments]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        log.info(
            "deleted %d segment(s) of %s; log start offset %d",
            len(deletable),
            self.dir,
            self._log_start_offset,
        )
        return len(deletable)

    def _schedule_delete(self, segment: LogSegment) -> None:
        try:
            segment.change_file_suffix(DELETED_SUFFIX)
        except OSError:
            log.exception("could not rename segment %s for deletion", segment.log.path)
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            segment.delete()
        else:
            self._pending_deletes.append((self._time.milliseconds() + delay, segment))
        self._dir_dirty = True

    def purge_deleted_segments(self) -> int:
        """Unlink ``.deleted`` segment files whose ``file.delete.delay.ms`` has passed; returns how many."""
        with self._lock:
            return self._purge_deleted_segments(self._time.milliseconds())

    def _purge_deleted_segments(self, now: int, force: bool = False) -> int:
        due = [(t, s) for t, s in self._pending_deletes if force or t <= now]
        if not due:
            return 0
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if not (force or t <= now)]
        for _t, segment in due:
            try:
                segment.delete()
            except OSError:
                log.exception("could not delete segment %s", segment.log.path)
        return len(due)

