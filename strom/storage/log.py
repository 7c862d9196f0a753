"""A partition's log: an ordered list of segments with offsets, roll, read, flush, retention and truncation.

Kafka counterpart: ``UnifiedLog`` (``Log`` / ``LocalLog`` before 3.0), without tiered storage or transactions.

Leader epochs: ``leader_epoch_cache`` (:class:`LeaderEpochFileCache`) records where each leader epoch starts;
appends assign it, truncation and log-start moves trim it, and loading rebuilds it from the batch headers when
its file is missing or unreadable or when segments were recovered.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``; ``recovery_point`` is the offset below which
everything is fsynced. The high watermark is set by the broker (:meth:`update_high_watermark`; on a single broker
it follows the log end after each append) and bounds retention and timestamp lookups.

Reads return whole batches only (see :class:`FetchDataInfo`): where Kafka may end a Fetch response with a
truncated partial batch, strom stops at the last whole batch that fits in ``max_bytes``.

Threading: thread-safe. One re-entrant lock per ``Log`` serialises appends, reads, rolls, retention and
truncation. :meth:`flush` takes the lock only to pick segments and to advance the recovery point; the fsyncs
run outside it, so a flush in a worker thread does not block appends on the event loop. With a
:attr:`Log.flusher` (the broker's), an append that reaches ``flush.messages`` and a roll do not fsync on the
caller's thread: the flusher does, and the append's ``LogAppendInfo.flushed`` future says when its records are
durable. Segment files are removed ``file.delete.delay.ms`` after retention unlinks them from the log (renamed
``.deleted`` first).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future

from strom.common.error_codes import KafkaStorageError, OffsetOutOfRangeError
from strom.common.errors import KafkaError
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.record.header import HEADER_SIZE, BatchHeader, parse_header
from strom.record.records import MemoryRecords
from strom.storage.checkpoint import CorruptCheckpointError
from strom.storage.fetch_data_info import FetchDataInfo
from strom.storage.fs import fsync_dir, fsync_file
from strom.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochFileCache
from strom.storage.log_append_info import LogAppendInfo
from strom.storage.log_config import LogConfig
from strom.storage.log_flusher import LogFlusher
from strom.storage.log_loader import CLEANED_SUFFIX, SWAP_SUFFIX, delete_segment_files, load_log
from strom.storage.log_segment import DELETED_SUFFIX, LogSegment
from strom.storage.log_validator import (
    AppendOrigin,
    ValidationResult,
    validate_and_assign_offsets,
    validate_replicated,
)
from strom.storage.producer_state import CompletedTxn, ProducerStateManager, TxnMarker, VerificationGuard
from strom.storage.transaction_index import AbortedTxn, TransactionIndex

__all__ = [
    "Log",
    "UnexpectedAppendOffsetError",
    "parse_topic_partition",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
]

log = logging.getLogger(__name__)

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


def parse_topic_partition(dir_name: str) -> TopicPartition:
    """``my.topic-with-dash-3`` -> TopicPartition("my.topic-with-dash", 3); raises ValueError otherwise."""
    name = os.path.basename(os.path.normpath(dir_name))
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        raise ValueError(f"directory name {name!r} is not <topic>-<partition>")
    return TopicPartition(topic, int(partition))


class UnexpectedAppendOffsetError(KafkaStorageError):
    """A follower append whose first offset is below the log end (Kafka's UnexpectedAppendOffsetException):
    the fetcher must truncate or refetch, nothing was written."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class Log:
    """The segments of one partition in one directory."""

    def __init__(
        self,
        dir: str,
        config: LogConfig,
        time: Time = SYSTEM_TIME,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
    ) -> None:
        """Open (creating if missing) the log in ``dir``.

        ``high_watermark``: the checkpointed value (clamped to ``[log_start_offset, log_end_offset]``); None
        starts it at the log end, as a single broker whose every record is committed may do.
        """
        self.dir = dir
        self.config = config
        self._time = time
        self._lock = threading.RLock()
        loaded = load_log(
            dir,
            config,
            time,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
        )
        self._segments: list[LogSegment] = loaded.segments
        self._bases: list[int] = [s.base_offset for s in self._segments]
        self._next_offset = loaded.next_offset
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._high_watermark = (
            loaded.next_offset
            if high_watermark is None
            else min(max(high_watermark, loaded.log_start_offset), loaded.next_offset)
        )
        self.truncated_bytes_on_load = loaded.truncated_bytes
        self.recovered_segments_on_load = loaded.recovered_segments
        self._last_flush_ms = time.milliseconds()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._segments_version = 0  # bumped when segments are truncated or replaced (the cleaner checks it)
        self._dir_dirty = False
        self._closed = False
        # Set by the LogManager: flush.messages and roll flushes go to its thread instead of blocking the caller.
        self.flusher: LogFlusher | None = None
        self.producer_state = ProducerStateManager(dir)
        self.txn_index = TransactionIndex(dir)
        self._rebuild_producer_state()
        self.leader_epoch_cache = self._load_leader_epoch_cache(loaded.recovered_from)

    def _load_leader_epoch_cache(self, recovered_from: int | None) -> LeaderEpochFileCache:
        """Read ``leader-epoch-checkpoint``; rebuild it from batch headers where it cannot be trusted: all of it
        when the file is missing or unreadable, from the first recovered segment on after a crash."""
        try:
            cache = LeaderEpochFileCache(self.dir)
            rebuild_from = None if cache.file_existed else self._segments[0].base_offset
        except (CorruptCheckpointError, OSError) as e:
            log.warning("%s; rebuilding it from the log", e)
            os.unlink(os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT_FILE))
            cache = LeaderEpochFileCache(self.dir)
            rebuild_from = self._segments[0].base_offset
        if recovered_from is not None:
            rebuild_from = recovered_from if rebuild_from is None else min(rebuild_from, recovered_from)
        has_data = self._next_offset > self._segments[0].base_offset
        if rebuild_from is not None and has_data:
            # rebuilt in memory, written (with its fsyncs) once and only when it differs from the file: one write per
            # change made a broker with thousands of partitions spend seconds per thousand starting after a crash
            before = cache.entries if cache.file_existed else None
            cache.truncate_from_end(rebuild_from, persist=False)
            for segment in self._segments:
                if segment.next_offset <= rebuild_from:
                    continue
                for batch in segment.log.batches():
                    h = batch.header
                    if h.base_offset >= rebuild_from and h.partition_leader_epoch >= 0:
                        cache.assign(h.partition_leader_epoch, h.base_offset, persist=False)
            if cache.entries != before:
                cache.write()
        cache.truncate_from_end(self._next_offset)
        cache.truncate_from_start(self._log_start_offset)
        return cache

    # --- read-only state ---------------------------------------------------------------------------------

    @property
    def topic_partition(self) -> TopicPartition:
        return parse_topic_partition(self.dir)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self._next_offset - self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments_version(self) -> int:
        """Changes whenever existing segments are truncated or replaced (not on appends or rolls)."""
        return self._segments_version

    def producer_last_batch_offsets(self) -> set[int]:
        """Last offsets of each producer's latest batch: compaction keeps those batches (possibly emptied) so that
        producer state rebuilt from the log still knows the producer's last sequence (Kafka's RETAIN_EMPTY)."""
        with self._lock:
            return {e.batches[-1].last_offset for e in self.producer_state.producers.values() if e.batches}

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int] | None:
        """OffsetForLeaderEpoch as Kafka's ``UnifiedLog.endOffsetForEpoch``: ``(epoch, end_offset)`` from the epoch
        cache with the current log end, or None when the epoch is undefined or above every known epoch."""
        with self._lock:
            epoch, offset = self.leader_epoch_cache.end_offset_for(leader_epoch, self._next_offset)
            return None if offset < 0 else (epoch, offset)

    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``; returns it."""
        with self._lock:
            self._high_watermark = min(max(hw, self._log_start_offset), self._next_offset)
            return self._high_watermark

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.update_config(config)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    # --- append ------------------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int = 0,
        now_ms: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        records_checked: bool = False,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate ``records`` (whole v2 batches), assign offsets from the log end and append them
        (``records_checked``: see :func:`~strom.storage.log_validator.validate_and_assign_offsets`;
        ``verification_guard``: from :meth:`maybe_start_verification`, when transaction verification is on).

        Raises CorruptMessageError, MessageTooLargeError, RecordListTooLargeError, InvalidRecordError,
        InvalidTimestampError, UnsupportedForMessageFormatError or (a transactional batch whose transaction ended
        meanwhile) InvalidTxnStateError with nothing written; KafkaStorageError when the disk fails.
        """
        now = self._time.milliseconds() if now_ms is None else now_ms
        with self._lock:
            self._check_open()
            result = validate_and_assign_offsets(
                records, self._next_offset, self.config, now, leader_epoch=leader_epoch, origin=origin,
                records_checked=records_checked,
            )
            if result.num_batches == 0:
                return LogAppendInfo(-1, -1, -1, -1, -1, self._log_start_offset, 0, 0, 0)
            headers = _headers(result.records)
            markers = _txn_markers(result.records) if any(h.is_control for h in headers) else None
            if origin != AppendOrigin.REPLICATION:  # clients' sequences, and stale transaction markers
                duplicate = self.producer_state.check(headers, markers)
                if duplicate is not None:
                    # A retried batch already in the log: answer with where it went, write nothing.
                    return LogAppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp,
                                         duplicate.last_offset, -1, self._log_start_offset, 0, 0, 0)
                if verification_guard is not None:
                    self.producer_state.check_verification(headers, verification_guard)
            self._write(result, now)
            self._next_offset = result.last_offset + 1
            self._index_completed(self.producer_state.update(headers, markers))
            latest = self.leader_epoch_cache.latest_epoch
            if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
                self._assign_epoch(leader_epoch, result.first_offset)
            info = LogAppendInfo(
                first_offset=result.first_offset,
                last_offset=result.last_offset,
                max_timestamp=result.max_timestamp,
                offset_of_max_timestamp=result.offset_of_max_timestamp,
                log_append_time=result.log_append_time,
                log_start_offset=self._log_start_offset,
                num_records=result.num_records,
                valid_bytes=len(result.records),
                num_batches=result.num_batches,
                flushed=self._flush_if_due(),
            )
            return info

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader as the leader wrote them (offsets, epochs, timestamps kept).

        Batches are checked (structure, CRC, increasing offsets: CorruptMessageError); the first offset must not
        be below the log end (UnexpectedAppendOffsetError: truncate first); it may be above it, as fetching a
        compacted log skips removed offsets. Producer state is updated without duplicate checks (origin
        REPLICATION), the leader epoch cache from each batch's partitionLeaderEpoch, and the flush policy applies.
        """
        with self._lock:
            self._check_open()
            result = validate_replicated(records)
            if result.num_batches == 0:
                return LogAppendInfo(-1, -1, -1, -1, -1, self._log_start_offset, 0, 0, 0)
            if result.first_offset < self._next_offset:
                raise UnexpectedAppendOffsetError(
                    f"replicated batches {result.first_offset}..{result.last_offset} start below the log end "
                    f"{self._next_offset} of {self.dir}",
                    result.first_offset,
                    result.last_offset,
                )
            headers = _headers(result.records)
            now = self._time.milliseconds()
            self._write(result, now, roll_base=result.first_offset)
            self._next_offset = result.last_offset + 1
            self._update_producer_state(headers, result.records)
            for h in headers:
                if h.partition_leader_epoch >= 0:
                    self._assign_epoch(h.partition_leader_epoch, h.base_offset)
            info = LogAppendInfo(
                first_offset=result.first_offset,
                last_offset=result.last_offset,
                max_timestamp=result.max_timestamp,
                offset_of_max_timestamp=result.offset_of_max_timestamp,
                log_append_time=-1,
                log_start_offset=self._log_start_offset,
                num_records=result.num_records,
                valid_bytes=len(result.records),
                num_batches=result.num_batches,
                flushed=self._flush_if_due(),
            )
            return info

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Appends record new leader epochs; with a flusher the checkpoint's fsync waits for the next flush."""
        if self.leader_epoch_cache.assign(epoch, start_offset, sync=self.flusher is None) and self.flusher:
            self._dir_dirty = True  # the checkpoint's rename becomes durable with the directory's fsync

    def _flush_if_due(self) -> Future[None] | None:
        """``flush.messages`` reached: fsync now, or with a :attr:`flusher` hand it over and return its future."""
        if self.unflushed_messages < self.config.flush_messages:
            return None
        if self.flusher is None:
            self.flush()
            return None
        return self.flusher.request(self, self._next_offset)

    def _write(self, result: ValidationResult, now: int, roll_base: int | None = None) -> None:
        """Write validated batches to the (maybe rolled) active segment; on failure leave it as it was."""
        try:
            segment = self._maybe_roll(len(result.records), result.last_offset, now, roll_base)
        except OSError as e:
            raise KafkaStorageError(f"rolling a new segment of {self.dir} failed: {e}") from e
        size_before = segment.size
        try:
            segment.append(result.last_offset, result.max_timestamp, result.offset_of_max_timestamp, result.records)
        except OSError as e:
            self._undo_partial_append(segment, size_before)
            raise KafkaStorageError(f"append to {segment.log.path} failed: {e}") from e

    def _undo_partial_append(self, segment: LogSegment, size_before: int) -> None:
        try:
            segment.truncate_to(self._next_offset)
            segment.log.truncate_to(size_before)
        except OSError:
            log.exception("could not undo a failed append to %s", segment.log.path)

    def _maybe_roll(self, size: int, last_offset: int, now: int, roll_base: int | None = None) -> LogSegment:
        segment = self._segments[-1]
        if segment.size == 0:
            if roll_base is not None and not segment.can_convert_to_relative(last_offset):
                return self._replace_empty_active(roll_base)
            return segment
        config = self.config
        if (
            segment.size + size > config.segment_bytes
            or now - segment.created_ms > config.segment_ms
            or segment.is_full()
            or not segment.can_convert_to_relative(last_offset)
        ):
            return self._roll(now, roll_base)
        return segment

    def _replace_empty_active(self, base: int) -> LogSegment:
        """A follower append far past an empty active segment's base: restart the segment at ``base``."""
        old = self._segments.pop()
        self._bases.pop()
        old.delete()
        segment = LogSegment(self.dir, base, self.config, self._time)
        self._segments.append(segment)
        self._bases.append(base)
        self._dir_dirty = True
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op when the active segment is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._time.milliseconds())

    def _roll(self, now: int, base: int | None = None) -> LogSegment:
        active = self._segments[-1]
        if active.size == 0:
            return active
        base = self._next_offset if base is None else max(base, self._next_offset)
        active.on_become_inactive()
        delete_segment_files(self.dir, base)  # stale files at this offset cannot hold live data
        segment = LogSegment(self.dir, base, self.config, self._time)
        self.producer_state.take_snapshot(base, sync=self.flusher is None)
        self._segments.append(segment)
        self._bases.append(base)
        self._dir_dirty = True
        if self.flusher is not None:  # Kafka's roll: flush the finished segment (and the snapshot) off-thread
            self.flusher.request(self, base)
        log.debug("rolled %s at offset %d", self.dir, base)
        return segment

    def _rebuild_producer_state(self) -> None:
        """Snapshot + replay of the batch headers after it (Kafka's ``loadProducerState``); markers found in the
        replay end open transactions and re-add aborted ones to the index (entries already there are kept)."""
        start = self.producer_state.load_snapshot(self._next_offset)
        self.producer_state.truncate_to(self._next_offset)
        self.txn_index.truncate_to(self._next_offset)
        for segment in self._segments:
            if segment.next_offset <= start:
                continue
            for b in segment.log.batches():
                if b.last_offset < start:
                    continue
                markers = None
                if b.header.is_control:
                    markers = _txn_markers(segment.log.read(b.position, b.size))
                self._index_completed(self.producer_state.update([b.header], markers))

    def _update_producer_state(self, headers: list[BatchHeader], records: bytes | bytearray | memoryview) -> None:
        markers = _txn_markers(records) if any(h.is_control for h in headers) else None
        self._index_completed(self.producer_state.update(headers, markers))

    def _index_completed(self, completed: list[CompletedTxn]) -> None:
        for txn in completed:
            if txn.is_aborted:
                unstable = self.producer_state.first_unstable_offset()
                lso = txn.last_offset + 1 if unstable is None else min(unstable, txn.last_offset + 1)
                self.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    # --- transactions ------------------------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        with self._lock:
            return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """Below this offset every transaction is decided (Kafka's LSO): read_committed reads stop here."""
        with self._lock:
            unstable = self.producer_state.first_unstable_offset()
            return self._high_watermark if unstable is None else min(unstable, self._high_watermark)

    def maybe_start_verification(self, producer_id: int, producer_epoch: int) -> VerificationGuard:
        """KIP-890 part 1: the guard a transactional append of this producer presents (:data:`ONGOING` when its
        transaction is ongoing here and needs no verification)."""
        with self._lock:
            return self.producer_state.maybe_start_verification(producer_id, producer_epoch,
                                                                self._time.milliseconds())

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp, coordinator epoch of its last marker or -1, open
        transaction's first offset or -1) of each producer the partition remembers (DescribeProducers)."""
        with self._lock:
            return [(e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                     e.current_txn_first_offset) for e in self.producer_state.producers.values()]

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        with self._lock:
            return self.txn_index.collect_aborted(start_offset, upper_bound_offset)

    # --- read --------------------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, from a single segment, bytes as on disk.

        At most ``max_bytes`` (but the first batch whole when ``min_one_message``); only batches below
        ``max_offset`` (pass the high watermark for consumers). Raises OffsetOutOfRangeError outside
        ``[log_start_offset, log_end_offset]``; ``start_offset == log_end_offset`` gives empty records.
        ``zero_copy``: the records are a :class:`~strom.storage.file_records.FileRegion` (the caller releases
        it) rather than bytes; see :meth:`LogSegment.read`.
        """
        with self._lock:
            self._check_open()
            if start_offset < self._log_start_offset or start_offset > self._next_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is outside [{self._log_start_offset}, {self._next_offset}] of {self.dir}"
                )
            if start_offset == self._next_offset or (max_offset is not None and start_offset >= max_offset):
                return FetchDataInfo.empty(start_offset)
            idx = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
            while idx < len(self._segments):
                segment = self._segments[idx]
                max_position = None if max_offset is None else self._position_limit(segment, max_offset)
                try:
                    data = segment.read(start_offset, max_bytes, max_position, min_one_message, zero_copy)
                except OSError as e:
                    raise KafkaStorageError(f"read from {segment.log.path} failed: {e}") from e
                if data is not None:
                    return data
                idx += 1
            return FetchDataInfo.empty(start_offset)

    @staticmethod
    def _position_limit(segment: LogSegment, max_offset: int) -> int | None:
        if max_offset >= segment.next_offset:
            return None
        if max_offset <= segment.base_offset:
            return 0
        found = segment.find_offset_position(max_offset)
        return None if found is None else found.position

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: ``(offset, timestamp)`` or None when nothing qualifies.

        -2 earliest -> (log_start_offset, -1); -1 latest -> (high_watermark, -1); -3 -> the record with the
        largest timestamp; -4 earliest local -> (log_start_offset, -1); ``timestamp >= 0`` -> the first record at
        or after the log start with timestamp >= ``timestamp`` and offset below the high watermark (record
        timestamps read, compressed batches included: :meth:`LogSegment.find_offset_by_timestamp`).
        """
        with self._lock:
            self._check_open()
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return self._log_start_offset, -1
            if timestamp == LATEST_TIMESTAMP:
                return self._high_watermark, -1
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_record()
            if timestamp < 0:
                return None
            for segment in self._segments:
                if segment.max_timestamp_so_far < timestamp or segment.next_offset <= self._log_start_offset:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found if found[0] < self._high_watermark else None
            return None

    def _max_timestamp_record(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.next_offset <= self._log_start_offset:
                continue
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        return best.max_timestamp_record()

    # --- flush -------------------------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync segments holding offsets in ``[recovery_point, up_to_offset)`` (default: the log end) and
        advance the recovery point. May run in a worker thread."""
        with self._lock:
            if self._closed:
                return
            target = self._next_offset if up_to_offset is None else min(up_to_offset, self._next_offset)
            full = target == self._next_offset  # only a flush to the log end restarts the flush.ms clock
            now = self._time.milliseconds()
            if target <= self._recovery_point:
                if full:
                    self._last_flush_ms = now
                return
            segments = [
                s
                for i, s in enumerate(self._segments)
                if s.base_offset < target and self._upper_bound(i) > self._recovery_point
            ]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            unsynced_files = self.producer_state.unsynced_snapshots
            self.producer_state.unsynced_snapshots = set()
            if self.leader_epoch_cache.unsynced:
                self.leader_epoch_cache.unsynced = False
                unsynced_files.add(self.leader_epoch_cache.path)
        try:
            for segment in segments:
                segment.flush()
            self.txn_index.flush()
            for path in unsynced_files:  # roll snapshots, the epoch checkpoint
                fsync_file(path)
            if dir_dirty:
                fsync_dir(self.dir)
        except OSError as e:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
                self.producer_state.unsynced_snapshots |= unsynced_files - {self.leader_epoch_cache.path}
                if self.leader_epoch_cache.path in unsynced_files:
                    self.leader_epoch_cache.unsynced = True
            raise KafkaStorageError(f"flush of {self.dir} failed: {e}") from e
        with self._lock:
            if target > self._recovery_point:
                self._recovery_point = min(target, self._next_offset)
            if full:
                self._last_flush_ms = now

    def _upper_bound(self, index: int) -> int:
        return self._bases[index + 1] if index + 1 < len(self._bases) else self._next_offset

    # --- retention (Kafka: deleteOldSegments, deleteRecordsBefore) ----------------------------------------

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
                self.leader_epoch_cache.truncate_from_start(offset)
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
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
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


    # --- truncation --------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets >= ``offset`` (a batch straddling it goes entirely).
        Returns whether anything was removed."""
        with self._lock:
            self._check_open()
            if offset < 0:
                raise ValueError(f"cannot truncate to negative offset {offset}")
            if offset >= self._next_offset:
                return False
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            for segment in [s for s in self._segments if s.base_offset > offset]:
                self._segments.remove(segment)
                self._schedule_delete(segment)
            self._bases = [s.base_offset for s in self._segments]
            active = self._segments[-1]
            active.truncate_to(offset)
            self._next_offset = active.next_offset
            self._after_truncation()
            # Kafka's truncateAndReload: the newest snapshot at or below the new end, then replay the headers.
            self.producer_state.delete_snapshots_after(self._next_offset)
            self._rebuild_producer_state()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``offset`` (a follower far behind the leader's log
        start): log start, high watermark and recovery point all become ``offset``; producer state and leader
        epochs are cleared."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            for segment in self._segments:
                self._schedule_delete(segment)
            delete_segment_files(self.dir, offset)
            self._segments = [LogSegment(self.dir, offset, self.config, self._time)]
            self._bases = [offset]
            self._next_offset = offset
            self._log_start_offset = offset
            self._recovery_point = offset
            self._high_watermark = offset
            self._dir_dirty = True
            self._segments_version += 1
            self.leader_epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(offset)
            self.txn_index.truncate_to(-1)

    def replace_segments(
        self, new_segment: LogSegment, old_segments: list[LogSegment], expected_version: int
    ) -> bool:
        """Compaction's swap (Kafka's ``replaceSegments``): ``new_segment``, written and flushed under
        ``*.cleaned`` names, takes the place of ``old_segments`` (consecutive, non-active).

        Crash-safe order: ``.cleaned`` -> ``.swap`` (directory fsynced), old segments renamed ``.deleted``, then
        ``.swap`` -> final names; the loader completes a swap found at any point of it. Returns False (and deletes
        the cleaned files) when the log changed meanwhile: closed, truncated, or an old segment already gone.
        """
        with self._lock:
            current = set(map(id, self._segments))
            if (
                self._closed
                or self._segments_version != expected_version
                or not old_segments
                or any(id(s) not in current for s in old_segments)
                or old_segments[-1] is self._segments[-1]
            ):
                new_segment.delete()
                return False
            try:
                new_segment.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
                fsync_dir(self.dir)  # the swap must be durable before any old segment goes
                index = next(i for i, s in enumerate(self._segments) if s is old_segments[0])
                for segment in old_segments:
                    self._segments.remove(segment)
                    self._schedule_delete(segment)
                new_segment.change_file_suffixes(SWAP_SUFFIX, "")
                self._segments.insert(index, new_segment)
                self._bases = [s.base_offset for s in self._segments]
                fsync_dir(self.dir)
            except OSError as e:
                raise KafkaStorageError(f"replacing segments of {self.dir} failed: {e}") from e
            finally:
                self._segments_version += 1
            return True

    def _after_truncation(self) -> None:
        self._segments_version += 1
        self._recovery_point = min(self._recovery_point, self._next_offset)
        self._high_watermark = min(self._high_watermark, self._next_offset)
        self._log_start_offset = min(self._log_start_offset, self._next_offset)
        self._dir_dirty = True
        self.leader_epoch_cache.truncate_from_end(self._next_offset)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, close the segments and finish pending deletions."""
        with self._lock:
            if self._closed:
                return
            errors: list[Exception] = []
            try:
                self.flush()
            except KafkaStorageError as e:
                errors.append(e)
            self.producer_state.take_snapshot(self._next_offset)
            for segment in self._segments:
                try:
                    segment.close()
                except OSError as e:
                    errors.append(e)
            self._purge_deleted_segments(0, force=True)
            self._closed = True
            if errors:  # e.g. a full disk: the caller must not record a clean shutdown
                raise KafkaStorageError(f"closing {self.dir} failed: {errors[0]}")

    def close_handlers(self) -> None:
        """Close file descriptors without flushing (for a directory that is about to be deleted)."""
        with self._lock:
            for segment in self._segments:
                segment.close_handlers()
            for _t, segment in self._pending_deletes:
                segment.close_handlers()
            self._pending_deletes = []
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self.close_handlers()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log(dir={self.dir!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._next_offset}, segments={len(self._segments)})"
        )


def _txn_markers(records: bytes | bytearray | memoryview) -> dict[int, TxnMarker]:
    """base offset → (control record type, coordinator epoch) of each control batch in ``records`` (the epoch -1
    for a control type that is not a transaction marker; unreadable batches left out)."""
    out: dict[int, TxnMarker] = {}
    for batch in MemoryRecords(records).batches():
        if batch.is_control:
            try:
                ctype = batch.control_record_type()
                out[batch.base_offset] = batch.end_txn_marker() if ctype in (0, 1) else (ctype, -1)
            except KafkaError as e:
                log.warning("unreadable control batch at offset %d: %s", batch.base_offset, e)
    return out


def _headers(records: bytes | bytearray | memoryview) -> list[BatchHeader]:
    out = []
    pos, n = 0, len(records)
    while pos + HEADER_SIZE <= n:
        h = parse_header(records, pos)
        out.append(h)
        pos += h.batch_length + 12
    return out
