"""Log compaction: keep at least the last record of every key of a ``cleanup.policy=compact`` log.

Kafka counterparts: ``LogCleaner`` (threads), ``Cleaner`` (one cleaning), ``LogCleanerManager`` (which log next,
checkpoints, aborts), ``LogToClean``, ``CleanerConfig``, ``Throttler``; the offset map is
:class:`strom.storage.offset_map.OffsetMap`.

A log is split at two offsets: the *first dirty offset* (``cleaner-offset-checkpoint`` in each log dir: where the
last cleaning stopped) and the *first uncleanable offset* (the lowest of the high watermark, the active segment's
base offset and, with ``min.compaction.lag.ms``, the first segment holding records younger than that lag). The
active segment is never touched. The dirtiest log (``dirty bytes / (clean + dirty bytes)``) whose ratio exceeds
``min.cleanable.dirty.ratio`` is cleaned first; a log whose oldest dirty record is older than
``max.compaction.lag.ms`` is cleaned regardless of its ratio.

One cleaning (:meth:`Cleaner.clean`):

1. map every key of the dirty section to its last offset (as much of the section as the map holds:
   ``log.cleaner.dedupe.buffer.size`` per thread); the map's end is the new checkpoint;
2. rewrite the segments below that end, in groups that fit one segment, keeping a record when it is the key's
   last (or lies past the map), dropping records without a key; batches keep their base offset, last offset
   delta, producer fields and leader epoch, so offsets never change (a batch losing records is re-encoded with
   the survivors, recompressed with its codec; a batch keeping all of them is copied byte for byte; a batch
   losing all of them disappears, unless it is a producer's last batch, which stays as an empty batch so producer
   state survives, Kafka's RETAIN_EMPTY);
3. tombstones (null values) survive the first cleaning that sees them: their batch gets a *delete horizon*
   (``now + delete.retention.ms``, written as the base timestamp with the delete-horizon attribute bit, KIP-534)
   and a later cleaning after that time removes them;
4. each group is written as ``<base>.log.cleaned`` (+ indexes), flushed, and swapped in by
   :meth:`strom.storage.log.Log.replace_segments` (``.cleaned`` -> ``.swap`` -> final names; the loader finishes a
   swap a crash interrupted and deletes ``.cleaned`` leftovers).

Transactions (Kafka's ``CleanedTransactionMetadata``): nothing at or past the first unstable offset (an open
transaction's first record) is cleaned. Batches of aborted transactions (known from the aborted-transaction index)
never enter the offset map, so an aborted write cannot supersede a committed value, and cleaning drops them (a
producer's last batch stays empty). A transaction marker stays while any batch of its transaction is still in the
log before it; once none is, its first cleaning gives it a delete horizon (``delete.retention.ms``, as
tombstones) and a cleaning after that removes it, so a read_committed consumer that was mid-way keeps seeing the
transaction end.

Reads and writes are throttled together to ``log.cleaner.io.max.bytes.per.second``.

Threading: ``log.cleaner.threads`` daemon threads, started by :meth:`LogCleaner.startup` (the LogManager does it)
and stopped by :meth:`LogCleaner.shutdown`; they never run on the event loop. Each thread decides from batch headers
what to map, filter, keep or drop, and hands the work on records to a worker process of its own
(:mod:`strom.storage.cleaner_records`: decoding records is CPU-bound and would otherwise hold the GIL the event loop
needs). A cleaning reads non-active
segments without the log lock (they are immutable) and takes it only for the swap, which is refused when the log
was truncated or lost a segment meanwhile. :meth:`LogCleaner.clean_once` runs one cleaning in the caller's
thread (tests, tools).
"""

from __future__ import annotations

import errno
import heapq
import logging
import math
import os
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.record.batch import DELETE_HORIZON_FLAG, RecordBatch
from strom.record.control import ControlRecordType
from strom.record.header import BatchHeader
from strom.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from strom.storage.cleaner_records import (
    MapItem,
    ProcessRecordFilter,
    RecordFilter,
    build_empty_batch,
    build_retained_batch,
)
from strom.storage.log import Log
from strom.storage.log_config import LONG_MAX
from strom.storage.log_dir_failure_channel import is_io_failure
from strom.storage.log_loader import CLEANED_SUFFIX
from strom.storage.log_segment import LogSegment, log_file_name
from strom.storage.offset_map import BYTES_PER_ENTRY

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILE",
    "CleanerConfig",
    "CleanerStats",
    "Cleaner",
    "LogCleaner",
    "LogCleanerManager",
    "LogCleaningAbortedError",
    "LogToClean",
    "Throttler",
    "build_empty_batch",
    "build_retained_batch",
    "group_segments_by_size",
    "log_to_clean",
]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_INT32_MAX = 2**31 - 1
_HEADER_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount, at byte 21
_HEADER_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")


_SEGMENT_GONE = frozenset({errno.ENOENT, errno.EBADF})  # a segment deleted or closed while being cleaned


class LogCleaningAbortedError(Exception):
    """A cleaning stopped because its log is being deleted or truncated, or the cleaner is shutting down."""


# --- configuration -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (the per-topic ones live in LogConfig).

    ``log.cleaner.io.buffer.size`` is accepted and validated but has no effect: strom's cleaner reads and writes
    one batch at a time instead of through Kafka's fixed I/O buffers.
    """

    enable_cleaner: bool = True
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = 15000

    KEYS = {
        "log.cleaner.enable": "enable_cleaner",
        "log.cleaner.threads": "num_threads",
        "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
        "log.cleaner.io.buffer.load.factor": "dedupe_buffer_load_factor",
        "log.cleaner.io.buffer.size": "io_buffer_size",
        "log.cleaner.io.max.bytes.per.second": "max_io_bytes_per_second",
        "log.cleaner.backoff.ms": "backoff_ms",
    }

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> CleanerConfig:
        """Read the ``log.cleaner.*`` keys of a broker config (others are ignored); ValueError names a bad key."""
        values: dict[str, object] = {}
        for key, attr in cls.KEYS.items():
            if key not in props:
                continue
            raw = str(props[key]).strip()
            try:
                if attr == "enable_cleaner":
                    if raw.lower() not in ("true", "false"):
                        raise ValueError("expected true or false")
                    values[attr] = raw.lower() == "true"
                elif attr in ("dedupe_buffer_load_factor", "max_io_bytes_per_second"):
                    values[attr] = float(raw)
                else:
                    values[attr] = int(raw)
            except ValueError as e:
                raise ValueError(f"Invalid value {raw} for configuration {key}: {e}") from None
        config = cls(**values)  # type: ignore[arg-type]
        config.validate()
        return config

    def validate(self) -> None:
        def bad(key: str, value: object, why: str) -> ValueError:
            return ValueError(f"Invalid value {value} for configuration {key}: {why}")

        if self.num_threads < 0:
            raise bad("log.cleaner.threads", self.num_threads, "must be at least 0")
        if self.num_threads and self.dedupe_buffer_size // self.num_threads < BYTES_PER_ENTRY:
            raise bad("log.cleaner.dedupe.buffer.size", self.dedupe_buffer_size, "too small for one entry per thread")
        if not 0 < self.dedupe_buffer_load_factor <= 1:
            raise bad("log.cleaner.io.buffer.load.factor", self.dedupe_buffer_load_factor, "must be in (0, 1]")
        if self.io_buffer_size < 1:
            raise bad("log.cleaner.io.buffer.size", self.io_buffer_size, "must be positive")
        if not self.max_io_bytes_per_second > 0:
            raise bad("log.cleaner.io.max.bytes.per.second", self.max_io_bytes_per_second, "must be positive")
        if self.backoff_ms < 0:
            raise bad("log.cleaner.backoff.ms", self.backoff_ms, "must be at least 0")


# --- throttling and statistics -------------------------------------------------------------------------------


class Throttler:
    """Sleep when the bytes reported per check interval exceed ``desired_rate`` bytes/s (Kafka's Throttler);
    shared by every cleaner thread. Uses the given Time's clock and sleep (MockTime in tests)."""

    def __init__(self, desired_rate: float, time: Time, check_interval_ms: int = 300) -> None:
        self.desired_rate = desired_rate
        self._time = time
        self.check_interval_ms = check_interval_ms
        self._lock = threading.Lock()
        self._period_start = time.milliseconds()
        self._observed = 0
        self.slept_ms = 0

    def maybe_throttle(self, observed: int) -> None:
        if math.isinf(self.desired_rate):
            return
        with self._lock:
            self._observed += observed
            now = self._time.milliseconds()
            elapsed = now - self._period_start
            if elapsed < self.check_interval_ms or self._observed <= 0:
                return
            rate = self._observed * 1000 / max(elapsed, 1)
            sleep_ms = 0
            if rate > self.desired_rate:
                sleep_ms = int(self._observed * 1000 / self.desired_rate - elapsed)
            self._observed = 0
        if sleep_ms > 0:
            self._time.sleep(sleep_ms)
            self.slept_ms += sleep_ms
        with self._lock:
            self._period_start = self._time.milliseconds()


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning did (Kafka's CleanerStats); ``mb_per_sec`` is the cleaner's throughput."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_records_read: int = 0
    records_read: int = 0
    records_written: int = 0
    invalid_records: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    markers_removed: int = 0
    segments_cleaned: int = 0
    swaps_refused: int = 0
    start_ms: int = 0
    end_ms: int = 0
    elapsed_s: float = 0.0

    @property
    def mb_per_sec(self) -> float:
        return (self.bytes_read + self.map_bytes_read) / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0


# --- which part of which log to clean ------------------------------------------------------------------------


@dataclass(slots=True)
class LogToClean:
    """A compacted log with its clean and dirty sections (Kafka's LogToClean)."""

    tp: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False
    segments: list[LogSegment] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _first_batch_timestamp(segment: LogSegment, from_offset: int) -> int:
    for batch in segment.log.batches():
        if batch.last_offset >= from_offset:
            return batch.header.max_timestamp
    return -1


def log_to_clean(tp: TopicPartition, lg: Log, checkpoint: int | None, now: int) -> LogToClean:
    """Kafka's ``cleanableOffsets`` + ``LogToClean``: where the dirty section starts and ends, and its size."""
    segments = lg.segments
    active = segments[-1]
    log_start = lg.log_start_offset
    first_dirty = log_start if checkpoint is None else checkpoint
    if first_dirty < log_start or first_dirty > lg.log_end_offset:
        if checkpoint is not None:
            log.info("resetting the first dirty offset of %s from %d to the log start %d", tp, first_dirty, log_start)
        first_dirty = log_start
    config = lg.config
    limits = [lg.high_watermark, active.base_offset]
    unstable = lg.first_unstable_offset
    if unstable is not None:
        limits.append(unstable)  # an open transaction may still abort: leave its records (and all after) dirty
    dirty = [s for s in segments[:-1] if s.next_offset > first_dirty]
    if config.min_compaction_lag_ms > 0:
        young = now - config.min_compaction_lag_ms
        for s in dirty:
            if s.largest_timestamp > young:
                limits.append(s.base_offset)
                break
    first_uncleanable = max(first_dirty, min(limits))
    needs_now = False
    if config.max_compaction_lag_ms < LONG_MAX and dirty:
        ts = _first_batch_timestamp(dirty[0], first_dirty)
        needs_now = ts >= 0 and now - ts > config.max_compaction_lag_ms
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty and s.next_offset > log_start)
    cleanable = sum(
        s.size for s in segments if s.next_offset > first_dirty and s.base_offset < first_uncleanable
    )
    return LogToClean(tp, lg, first_dirty, first_uncleanable, clean_bytes, cleanable, needs_now, segments)


class LogCleanerManager:
    """Picks the log to clean, remembers where each cleaning stopped, and coordinates aborts (Kafka's
    LogCleanerManager). Thread-safe."""

    IN_PROGRESS = "in-progress"
    ABORTED = "aborted"
    PAUSED = "paused"

    def __init__(
        self, log_dirs: list[str], logs: Callable[[], list[tuple[TopicPartition, Log]]], time: Time = SYSTEM_TIME
    ) -> None:
        self.log_dirs = log_dirs
        self._logs = logs
        self._time = time
        self._cond = threading.Condition()
        self._states: dict[TopicPartition, str] = {}
        self._paused: dict[TopicPartition, int] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._next_delete_horizon: dict[TopicPartition, int] = {}
        self._checkpoints = {d: OffsetCheckpointFile(os.path.join(d, CLEANER_OFFSET_CHECKPOINT_FILE)) for d in log_dirs}
        self._offline_dirs: set[str] = set()
        self.dirtiest_ratio = 0.0

    # -- checkpoints ----------------------------------------------------------------------------------------
    def _checkpoint_file(self, log_dir: str) -> OffsetCheckpointFile:
        if log_dir in self._offline_dirs:
            raise KafkaStorageError(f"log dir {log_dir} is offline")
        cp = self._checkpoints.get(log_dir)
        if cp is None:
            cp = self._checkpoints[log_dir] = OffsetCheckpointFile(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT_FILE))
        return cp

    def all_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in list(self._checkpoints):
            try:
                out.update(self._checkpoints[d].read())
            except CorruptCheckpointError as e:
                log.warning("%s; the logs of %s are cleaned from their start", e, d)
            except OSError as e:  # a failing dir: its logs are taken offline (LogManager.handle_log_dir_failure)
                log.debug("cannot read the cleaner checkpoint of %s: %s", d, e)
        return out

    def handle_log_dir_failure(self, log_dir: str, tps: list[TopicPartition]) -> None:
        """``log_dir`` went offline: its checkpoint is not read or written again, cleanings of its logs stop
        (Kafka's ``LogCleanerManager.handleLogDirFailure``)."""
        with self._cond:
            self._offline_dirs.add(log_dir)
            self._checkpoints.pop(log_dir, None)
            for tp in tps:
                if self._states.get(tp) == self.IN_PROGRESS:
                    self._states[tp] = self.ABORTED
                self._uncleanable.discard(tp)
                self._next_delete_horizon.pop(tp, None)
            self._cond.notify_all()

    def update_checkpoint(self, log_dir: str, tp: TopicPartition, offset: int | None) -> None:
        """Set (or with None remove) ``tp``'s first dirty offset in ``log_dir``'s checkpoint."""
        with self._cond:
            cp = self._checkpoint_file(log_dir)
            try:
                current = cp.read()
            except CorruptCheckpointError:
                current = {}
            if offset is None:
                if tp not in current:
                    return
                current.pop(tp)
            else:
                current[tp] = offset
            cp.write(current)

    def truncate_checkpoint(self, log_dir: str, tp: TopicPartition, offset: int) -> None:
        """The log was truncated to ``offset``: a checkpoint above it is lowered (Kafka's maybeTruncateCheckpoint)."""
        with self._cond:
            current = self.all_checkpoints().get(tp)
            if current is not None and current > offset:
                self.update_checkpoint(log_dir, tp, offset)

    # -- choosing -------------------------------------------------------------------------------------------
    def grab_filthiest_compacted_log(self) -> LogToClean | None:
        """The compacted log most in need of cleaning, marked in progress; None when no log needs it."""
        now = self._time.milliseconds()
        with self._cond:
            checkpoints = self.all_checkpoints()
            candidates = []
            for tp, lg in self._logs():
                if not lg.config.compact_enabled or tp in self._states or tp in self._uncleanable:
                    continue
                try:
                    candidates.append(log_to_clean(tp, lg, checkpoints.get(tp), now))
                except OSError as e:  # a segment vanished under us (retention, deletion): try again later
                    log.debug("skipping %s this round: %s", tp, e)
            cleanable = [
                c
                for c in candidates
                if (c.needs_compaction_now and c.cleanable_bytes > 0)
                or (c.cleanable_bytes > 0 and c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio)
            ]
            self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            if cleanable:
                chosen = max(cleanable, key=lambda c: (c.needs_compaction_now, c.cleanable_ratio))
            else:
                # Nothing dirty enough: use the quiet time to drop tombstones whose delete horizon has passed.
                expired = [c for c in candidates if self._next_delete_horizon.get(c.tp, LONG_MAX) <= now]
                if not expired:
                    return None
                chosen = expired[0]
            self._states[chosen.tp] = self.IN_PROGRESS
            return chosen

    def done_cleaning(self, tp: TopicPartition, log_dir: str, end_offset: int | None, next_horizon: int | None) -> None:
        """A cleaning of ``tp`` finished (``end_offset`` = new first dirty offset) or was aborted (None)."""
        with self._cond:
            state = self._states.pop(tp, None)
            if end_offset is not None and state == self.IN_PROGRESS and log_dir not in self._offline_dirs:
                self.update_checkpoint(log_dir, tp, end_offset)
                if next_horizon is None:
                    self._next_delete_horizon.pop(tp, None)
                else:
                    self._next_delete_horizon[tp] = next_horizon
            if tp in self._paused:
                self._states[tp] = self.PAUSED
            self._cond.notify_all()

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._cond:
            self._uncleanable.add(tp)

    # -- aborts ---------------------------------------------------------------------------------------------
    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._cond:
            if self._states.get(tp) == self.ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {tp} was aborted")

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Stop any cleaning of ``tp`` (waiting for it to notice) and keep it from starting until resumed."""
        with self._cond:
            self._paused[tp] = self._paused.get(tp, 0) + 1
            if self._states.get(tp) == self.IN_PROGRESS:
                self._states[tp] = self.ABORTED
            while self._states.get(tp) == self.ABORTED:
                self._cond.wait(0.1)
            self._states[tp] = self.PAUSED

    def resume_cleaning(self, tp: TopicPartition) -> None:
        with self._cond:
            n = self._paused.get(tp, 0) - 1
            if n > 0:
                self._paused[tp] = n
                return
            self._paused.pop(tp, None)
            if self._states.get(tp) == self.PAUSED:
                del self._states[tp]

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Stop any cleaning of ``tp`` for good (its log is being deleted) and forget its delete horizon."""
        self.abort_and_pause_cleaning(tp)
        with self._cond:
            self._paused.pop(tp, None)
            self._states.pop(tp, None)
            self._uncleanable.discard(tp)
            self._next_delete_horizon.pop(tp, None)


# --- one cleaning --------------------------------------------------------------------------------------------


def group_segments_by_size(segments: list[LogSegment], max_size: int) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits ``max_size`` and whose offsets fit one segment's 32-bit
    relative range (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = max(nxt.base_offset, nxt.next_offset - 1)
            if size + nxt.size > max_size or last - group[0].base_offset > _INT32_MAX:
                break
            group.append(nxt)
            size += nxt.size
            i += 1
        groups.append(group)
    return groups


# Batches handed to the record work in one call (a chunk): bounds the memory held for a chunk and how long the
# I/O throttle waits between checks.
_CHUNK_BYTES = 8 << 20


class Cleaner:
    """One cleaner thread's worker: its record work (offset map; in a worker process for the broker's threads)
    and the shared throttler (Kafka's Cleaner). Which batches are mapped, filtered, kept or dropped is decided here
    from their headers; the records themselves are read by :attr:`records` (:mod:`strom.storage.cleaner_records`)."""

    def __init__(
        self,
        records: RecordFilter | ProcessRecordFilter,
        throttler: Throttler,
        time: Time,
        check_done: Callable[[TopicPartition], None],
    ) -> None:
        self.records = records
        self.throttler = throttler
        self._time = time
        self._check_done = check_done

    def close(self) -> None:
        self.records.close()

    def clean(self, ltc: LogToClean) -> tuple[int, int | None, CleanerStats]:
        """Clean ``ltc``; returns (new first dirty offset, earliest remaining delete horizon or None, stats)."""
        lg, tp = ltc.log, ltc.tp
        stats = CleanerStats(start_ms=self._time.milliseconds())
        t0 = self._time.hi_res_milliseconds()
        version = lg.segments_version
        segments = [s for s in ltc.segments[:-1]]  # never the active segment
        end = self._build_offset_map(lg, tp, segments, ltc.first_dirty_offset, ltc.first_uncleanable_offset, stats)
        now = self._time.milliseconds()
        retention_ms = lg.config.delete_retention_ms
        horizon: int | None = None
        producer_last = lg.producer_last_batch_offsets()
        to_clean = [s for s in segments if s.base_offset < end]
        txns = CleanedTransactionMetadata()  # one for the whole pass: a transaction may span groups
        for group in group_segments_by_size(to_clean, lg.config.segment_bytes):
            self._check_done(tp)
            group_horizon = self._clean_segments(lg, tp, group, now, retention_ms, producer_last, stats, version,
                                                 txns)
            if group_horizon is False:
                stats.swaps_refused += 1
                raise LogCleaningAbortedError(f"{tp} changed during cleaning; the swap was refused")
            version += 1
            if isinstance(group_horizon, int):
                horizon = group_horizon if horizon is None else min(horizon, group_horizon)
        stats.end_ms = self._time.milliseconds()
        stats.elapsed_s = max(self._time.hi_res_milliseconds() - t0, 0) / 1000
        return end, horizon, stats

    def _build_offset_map(
        self, lg: Log, tp: TopicPartition, segments: list[LogSegment], start: int, end: int, stats: CleanerStats
    ) -> int:
        """Map the keys of ``[start, end)`` until the map is full; returns where mapping stopped. Records of
        aborted transactions are left out (they supersede nothing)."""
        work = self.records
        work.reset(start)  # everything below ``start`` counts as covered by the (empty) map
        txns = CleanedTransactionMetadata()
        txns.add_aborted(lg.collect_aborted_transactions(start, end))
        for segment in segments:
            if segment.next_offset <= start:
                continue
            if segment.base_offset >= end:
                break
            self._check_done(tp)
            items: list[MapItem] = []
            chunk = 0
            reached_end = False
            for batch in segment.log.batches():
                h = batch.header
                if batch.last_offset < start:
                    continue
                if h.base_offset >= end:
                    reached_end = True
                    break
                if h.is_control:
                    txns.on_control_batch_read(h, segment.log.read(batch.position, batch.size))
                    items.append((batch.position, batch.size, batch.last_offset, h.records_count, False))
                elif txns.on_batch_read(h):
                    stats.map_records_read += h.records_count  # aborted: read past, not mapped
                    items.append((batch.position, batch.size, batch.last_offset, h.records_count, False))
                else:
                    items.append((batch.position, batch.size, batch.last_offset, h.records_count, True))
                    chunk += batch.size
                if chunk >= _CHUNK_BYTES:
                    full_at = self._map_chunk(tp, segment, items, start, stats)
                    if full_at >= 0:
                        return full_at
                    self._check_done(tp)
                    items, chunk = [], 0
            if items:
                full_at = self._map_chunk(tp, segment, items, start, stats)
                if full_at >= 0:
                    return full_at
            if reached_end:
                return work.latest_offset + 1
        return max(work.latest_offset + 1, start)

    def _map_chunk(self, tp: TopicPartition, segment: LogSegment, items: list[MapItem], start: int,
                   stats: CleanerStats) -> int:
        full_at, records, nbytes = self.records.map_batches(segment.log.path, items, start)
        if full_at >= 0:
            log.debug("offset map full for %s at offset %d", tp, full_at)
        stats.map_records_read += records
        stats.map_bytes_read += nbytes
        self.throttler.maybe_throttle(nbytes)
        return full_at

    def _clean_segments(
        self,
        lg: Log,
        tp: TopicPartition,
        group: list[LogSegment],
        now: int,
        retention_ms: int,
        producer_last: set[int],
        stats: CleanerStats,
        version: int,
        txns: CleanedTransactionMetadata,
    ) -> int | None | bool:
        """Rewrite ``group`` into one cleaned segment and swap it in. Returns the earliest delete horizon left in
        it (None: no tombstones or removable markers left), or False when the log refused the swap."""
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex"):
            try:
                os.unlink(log_file_name(lg.dir, base, suffix + CLEANED_SUFFIX))
            except FileNotFoundError:
                pass
        cleaned = LogSegment(lg.dir, base, lg.config, self._time, file_suffix=CLEANED_SUFFIX)
        horizon: int | None = None
        try:
            for old in group:
                self._check_done(tp)
                txns.add_aborted(lg.collect_aborted_transactions(old.base_offset, old.next_offset))
                # In log order: (header, position, size, what the header decided or None when the record work
                # decides); the record work's batches are sent together once a chunk's worth is pending.
                pending: list[tuple[BatchHeader, int, int, tuple[bytes | None, int | None] | None]] = []
                remote: list[tuple[int, int]] = []
                chunk = 0
                for batch in old.log.batches():
                    h = batch.header
                    stats.bytes_read += batch.size
                    self.throttler.maybe_throttle(batch.size)
                    decided = self._filter_by_header(old, batch.position, batch.size, h, now, retention_ms,
                                                     producer_last, stats, txns)
                    pending.append((h, batch.position, batch.size, decided))
                    if decided is None:
                        remote.append((batch.position, batch.size))
                    chunk += batch.size
                    if chunk >= _CHUNK_BYTES:
                        horizon = self._write_chunk(old, cleaned, pending, remote, now, retention_ms, producer_last,
                                                    stats, horizon)
                        self._check_done(tp)
                        pending, remote, chunk = [], [], 0
                if pending:
                    horizon = self._write_chunk(old, cleaned, pending, remote, now, retention_ms, producer_last,
                                                stats, horizon)
            cleaned.on_become_inactive()
            cleaned.flush()
            mtime = max(old.last_modified for old in group)
            os.utime(cleaned.log.path, ns=(mtime * 1_000_000, mtime * 1_000_000))
        except BaseException:
            cleaned.delete()
            raise
        if not lg.replace_segments(cleaned, group, version):
            return False
        stats.segments_cleaned += len(group)
        return horizon

    def _write_chunk(self, old: LogSegment, cleaned: LogSegment,
                     pending: list[tuple[BatchHeader, int, int, tuple[bytes | None, int | None] | None]],
                     remote: list[tuple[int, int]], now: int, retention_ms: int, producer_last: set[int],
                     stats: CleanerStats, horizon: int | None) -> int | None:
        """Append the chunk's kept batches to ``cleaned`` in log order; returns the earliest horizon so far."""
        results = iter(self.records.filter_batches(old.log.path, remote, now, retention_ms, producer_last)
                       if remote else ())
        for h, position, size, decided in pending:
            if decided is not None:
                out, batch_horizon = decided
            else:
                kept, batch_horizon, (read, written, invalid, removed) = next(results)
                stats.records_read += read
                stats.records_written += written
                stats.invalid_records += invalid
                stats.tombstones_removed += removed
                out = old.log.read(position, size) if kept is True else kept  # type: ignore[assignment]
            if batch_horizon is not None:
                horizon = batch_horizon if horizon is None else min(horizon, batch_horizon)
            if out is None:
                continue
            last = h.base_offset + h.last_offset_delta
            cleaned.append(last, _max_timestamp_of(out), last, out)
            self.throttler.maybe_throttle(len(out))
            stats.bytes_written += len(out)
        return horizon

    def _filter_by_header(
        self, old: LogSegment, position: int, size: int, h: BatchHeader, now: int, retention_ms: int,
        producer_last: set[int], stats: CleanerStats, txns: CleanedTransactionMetadata,
    ) -> tuple[bytes | None, int | None] | None:
        """What the header alone decides for a batch — (bytes to keep or None, delete horizon of what is kept or
        None) — or None when its records must be checked against the map (the record work's part)."""
        has_horizon = bool(h.attributes & DELETE_HORIZON_FLAG)
        if h.is_control:
            data = old.log.read(position, size)
            if not txns.on_control_batch_read(h, data):
                return data, None  # its transaction still has batches before it
            if not has_horizon:
                return build_retained_batch(h, RecordBatch(data).records(), now + retention_ms), now + retention_ms
            if now >= h.base_timestamp:
                stats.markers_removed += 1
                return None, None
            return data, h.base_timestamp
        if txns.on_batch_read(h):
            stats.records_read += h.records_count
            stats.aborted_records_removed += h.records_count
            if h.base_offset + h.last_offset_delta in producer_last:
                return build_empty_batch(h), None
            return None, None
        if h.base_offset > self.records.latest_offset and not has_horizon:
            return old.log.read(position, size), None  # wholly past the mapped section: nothing in it can go
        return None


class CleanedTransactionMetadata:
    """What one cleaning pass knows of transactions (Kafka's ``CleanedTransactionMetadata``): the aborted ones from
    the index, fed in as the pass reaches them, and, per producer, whether the transaction being read is aborted
    or committed and whether any of its batches was seen before its marker."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, int]] = []  # heap of (first offset, producer id, marker offset)
        self._seen_aborted: set[tuple[int, int]] = set()
        self._ongoing_aborted: dict[int, bool] = {}  # producer id -> a batch of its aborted txn was read
        self._ongoing_committed: set[int] = set()  # producers with a batch of a (not aborted) txn read

    def add_aborted(self, aborted: list[Any]) -> None:
        for txn in aborted:
            key = (txn.producer_id, txn.first_offset)
            if key not in self._seen_aborted:
                self._seen_aborted.add(key)
                heapq.heappush(self._aborted, (txn.first_offset, txn.producer_id, txn.last_offset))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _first, pid, _marker = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(pid, False)

    def on_batch_read(self, h: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (its records can all go)."""
        self._consume_aborted_up_to(h.base_offset + h.last_offset_delta)
        if not h.is_transactional:
            return False
        if h.producer_id in self._ongoing_aborted:
            self._ongoing_aborted[h.producer_id] = True
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control_batch_read(self, h: BatchHeader, data: bytes) -> bool:
        """A marker: True when no batch of its transaction was read before it, so it may go (after a horizon)."""
        self._consume_aborted_up_to(h.base_offset + h.last_offset_delta)
        if h.records_count == 0:
            return True  # an emptied control batch: nothing to keep
        ctype = RecordBatch(data).control_record_type()
        if ctype == ControlRecordType.ABORT:
            return not self._ongoing_aborted.pop(h.producer_id, False)
        if ctype == ControlRecordType.COMMIT:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False
            return True
        return False


def _max_timestamp_of(batch: bytes) -> int:
    return int.from_bytes(batch[35:43], "big", signed=True)


# --- the threads ---------------------------------------------------------------------------------------------


class LogCleaner:
    """Cleaner threads over the logs of a LogManager (Kafka's LogCleaner)."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: list[str],
        logs: Callable[[], list[tuple[TopicPartition, Log]]],
        time: Time = SYSTEM_TIME,
        worker_processes: bool = True,
    ) -> None:
        """``worker_processes``: each cleaner's record work runs in a worker process of its own (the broker's
        way: the cleaning does not compete with the event loop for the GIL); False runs it in the cleaner's
        thread."""
        config.validate()
        self.config = config
        self._time = time
        self.manager = LogCleanerManager(log_dirs, logs, time)
        self.throttler = Throttler(config.max_io_bytes_per_second, time)
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._running = False
        self.last_stats: CleanerStats | None = None
        self.cleanings = 0
        self._worker_processes = worker_processes
        self._cleaners: list[Cleaner] = []
        self._once: Cleaner | None = None  # clean_once's, kept so its worker process is reused
        self._lifecycle_lock = threading.RLock()  # startup / shutdown / reconfigure
        self._wanted: CleanerConfig | None = None
        self._started = False  # startup() was called (reconfigure keeps a started cleaner started)
        # (log dir, message, error) of an I/O failure while cleaning: the LogManager takes the dir offline
        self.on_io_failure: Callable[[str, str, BaseException], object] | None = None

    def _new_cleaner(self) -> Cleaner:
        memory = self.config.dedupe_buffer_size // max(1, self.config.num_threads)
        factory = ProcessRecordFilter if self._worker_processes else RecordFilter
        cleaner = Cleaner(factory(memory, self.config.dedupe_buffer_load_factor), self.throttler, self._time,
                          self._check_done)
        self._cleaners.append(cleaner)
        return cleaner

    def _check_done(self, tp: TopicPartition) -> None:
        if self._running and self._stop.is_set():
            raise LogCleaningAbortedError("the log cleaner is shutting down")
        self.manager.check_cleaning_aborted(tp)

    # -- lifecycle ------------------------------------------------------------------------------------------
    def startup(self) -> None:
        """Start ``log.cleaner.threads`` threads (none when ``log.cleaner.enable=false``)."""
        with self._lifecycle_lock:
            self._startup()

    def _startup(self) -> None:
        self._started = True
        if self._threads or not self.config.enable_cleaner:
            return
        self._running = True
        self._stop.clear()
        threads = [threading.Thread(target=self._run, args=(self._new_cleaner(),), name=f"strom-log-cleaner-{i}",
                                    daemon=True) for i in range(self.config.num_threads)]
        for t in threads:
            t.start()
        self._threads = threads  # published once every thread runs
        log.info("started %d log cleaner thread(s)", len(threads))

    def shutdown(self) -> None:
        """Stop the threads; a cleaning in progress is abandoned (its ``.cleaned`` files deleted)."""
        with self._lifecycle_lock:
            self._shutdown()

    def _shutdown(self) -> None:
        threads, self._threads = self._threads, []  # unpublished before they are told to stop
        self._stop.set()
        for t in threads:
            t.join()
        self._running = False
        self._started = False
        cleaners, self._cleaners, self._once = self._cleaners, [], None
        for cleaner in cleaners:
            cleaner.close()

    def reconfigure(self, config: CleanerConfig) -> None:
        """New ``log.cleaner.*`` settings (a dynamic broker config): the threads stop, abandoning a cleaning in
        progress, and a started cleaner starts again with them, as Kafka's ``LogCleaner.reconfigure``. Blocking
        (joins threads); of calls that overlap, the last one's settings are the ones that stay."""
        config.validate()
        self._wanted = config
        with self._lifecycle_lock:
            if self._wanted is not config:
                return  # a later call takes over
            started = self._started
            self.shutdown()
            self.config = config
            self.throttler = Throttler(config.max_io_bytes_per_second, self._time)
            if started:
                self.startup()

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self._clean_filthiest(cleaner)
            except Exception:  # one bad log must not end cleaning for every other
                log.exception("log cleaner round failed")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)

    # -- cleaning -------------------------------------------------------------------------------------------
    def clean_once(self) -> CleanerStats | None:
        """Clean the filthiest log now, in this thread; returns its stats, or None when no log needed it."""
        before = self.cleanings
        if self._once is None:
            self._once = self._new_cleaner()
        self._clean_filthiest(self._once)
        return self.last_stats if self.cleanings != before else None

    def _clean_filthiest(self, cleaner: Cleaner) -> bool:
        ltc = self.manager.grab_filthiest_compacted_log()
        if ltc is None:
            return False
        log_dir = os.path.dirname(ltc.log.dir)
        end: int | None = None
        horizon: int | None = None
        try:
            end, horizon, stats = cleaner.clean(ltc)
            self.last_stats = stats
            self.cleanings += 1
            log.info(
                "cleaned %s up to offset %d: %d segment(s), %.1f MB read, %.1f MB written, %d record(s) removed, "
                "%.1f MB/s",
                ltc.tp, end, stats.segments_cleaned, (stats.bytes_read + stats.map_bytes_read) / 1e6,
                stats.bytes_written / 1e6, stats.records_read - stats.records_written, stats.mb_per_sec,
            )
        except LogCleaningAbortedError as e:
            log.info("%s", e)
        except OSError as e:
            if e.errno in _SEGMENT_GONE:  # retention or deletion took a segment from under the cleaner
                log.info("cleaning of %s stopped: %s", ltc.tp, e)
            else:  # the disk failed (full, read-only, gone): the dir goes offline, as Kafka's cleaner reports it
                self._io_failure(log_dir, f"cleaning {ltc.tp} failed", e)
        except Exception as e:
            if is_io_failure(e):
                self._io_failure(log_dir, f"cleaning {ltc.tp} failed", e)
            else:
                log.exception("cannot clean %s; it is marked uncleanable until restart", ltc.tp)
                self.manager.mark_uncleanable(ltc.tp)
        finally:
            self.manager.done_cleaning(ltc.tp, log_dir, end, horizon)
        return end is not None

    def _io_failure(self, log_dir: str, message: str, exc: BaseException) -> None:
        if self.on_io_failure is not None:
            self.on_io_failure(log_dir, message, exc)
        else:
            log.error("%s: %s", message, exc)

    # -- coordination with the LogManager -------------------------------------------------------------------
    def abort_cleaning(self, tp: TopicPartition, log_dir: str) -> None:
        """The log of ``tp`` is being deleted: stop cleaning it and forget its checkpoint entry."""
        self.manager.abort_cleaning(tp)
        try:
            self.manager.update_checkpoint(log_dir, tp, None)
        except (OSError, KafkaStorageError) as e:  # a full disk: the stale entry is reset at the next cleaning of a log of that name
            log.warning("could not remove %s from the cleaner checkpoint of %s: %s", tp, log_dir, e)

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_and_pause_cleaning(tp)

    def handle_log_dir_failure(self, log_dir: str, tps: list[TopicPartition]) -> None:
        self.manager.handle_log_dir_failure(log_dir, tps)

    def resume_cleaning(self, tp: TopicPartition) -> None:
        self.manager.resume_cleaning(tp)

