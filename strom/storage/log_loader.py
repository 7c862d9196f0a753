"""Open a partition directory: clean leftovers, load segments, recover what was not flushed.

Kafka counterpart: ``LogLoader``.

Steps:
1. delete ``*.deleted`` / ``*.cleaned`` / ``*.tmp`` leftovers (a segment deletion or a compaction interrupted by a
   crash); complete an interrupted segment swap: a ``<base>.log.swap`` (a cleaned segment whose old segments were
   being replaced) replaces every segment with a base offset in ``[base, its next offset)`` and takes the final
   name; its indexes are dropped and rebuilt by step 3;
2. delete index files whose ``.log`` is gone (orphans);
3. open every segment; segments holding offsets >= the recovery point are re-validated batch by batch
   (``LogSegment.recover``) unless the directory was shut down cleanly; other segments only get an index
   sanity check (and are recovered if it fails);
4. a segment whose recovery truncated a torn/corrupt tail drops every later segment (their data cannot be
   trusted to follow it);
5. with no segments left, an empty one is created at the log start offset; a log start offset above the log
   end (data lost with an unflushed tail) restarts the log there.

Runs single-threaded before the ``Log`` is visible to others.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from strom.common.time import Time
from strom.storage.file_records import FileRecords
from strom.storage.log_config import LogConfig
from strom.storage.log_segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    log_file_name,
)

__all__ = ["LoadedLog", "load_log", "delete_segment_files", "CLEANUP_SUFFIXES", "SWAP_SUFFIX", "CLEANED_SUFFIX"]

log = logging.getLogger(__name__)

CLEANUP_SUFFIXES = (".deleted", ".cleaned", ".tmp")
SWAP_SUFFIX = ".swap"
CLEANED_SUFFIX = ".cleaned"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    next_offset: int
    truncated_bytes: int
    recovered_segments: int
    recovered_from: int | None = None
    """Base offset of the first segment whose batches were re-validated (None when none was)."""


def _base_offset_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def delete_segment_files(dir: str, base_offset: int) -> None:
    """Unlink a segment's files (any that exist)."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        try:
            os.unlink(log_file_name(dir, base_offset, suffix))
        except FileNotFoundError:
            pass


def _complete_swaps(dir: str, names: list[str]) -> None:
    """Finish segment swaps a crash interrupted (Kafka: LogLoader's swap-file handling)."""
    present = sorted(b for name in names if (b := _base_offset_of(name, LOG_SUFFIX)) is not None)
    for name in sorted(names):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = _base_offset_of(name[: -len(SWAP_SUFFIX)], LOG_SUFFIX)
        if base is None:
            continue
        swap = FileRecords(os.path.join(dir, name))
        try:
            last, scanned = None, 0
            for batch in swap.batches():
                last, scanned = batch.last_offset, batch.position + batch.size
            whole = scanned == swap.size
        finally:
            swap.close()
        if not whole:
            # A swap file is a flushed, complete cleaned segment renamed; anything else cannot be trusted over
            # the segments it would replace.
            log.warning("discarding swap file %s: it does not hold whole batches", os.path.join(dir, name))
            os.unlink(os.path.join(dir, name))
            continue
        end = max(base + 1, last + 1 if last is not None else base)
        for old in present:
            if base <= old < end:
                log.info("swap of %s: deleting replaced segment %d", os.path.join(dir, name), old)
                delete_segment_files(dir, old)
        for suffix in _INDEX_SUFFIXES:  # rebuilt from the log when the segment is opened
            for stale in (suffix, suffix + SWAP_SUFFIX):
                try:
                    os.unlink(log_file_name(dir, base, stale))
                except FileNotFoundError:
                    pass
        os.replace(os.path.join(dir, name), log_file_name(dir, base))
        log.info("completed the interrupted swap of segment %d in %s", base, dir)


def _clean_directory(dir: str) -> list[int]:
    names = os.listdir(dir)
    for name in names:
        if name.endswith(CLEANUP_SUFFIXES):
            log.info("deleting leftover file %s", os.path.join(dir, name))
            os.unlink(os.path.join(dir, name))
    names = [n for n in names if not n.endswith(CLEANUP_SUFFIXES)]
    if any(n.endswith(SWAP_SUFFIX) for n in names):
        _complete_swaps(dir, names)
        for name in os.listdir(dir):
            if name.endswith(SWAP_SUFFIX):  # index swap files of a completed swap
                os.unlink(os.path.join(dir, name))
        names = os.listdir(dir)
    bases = sorted(
        b
        for name in names
        if name.endswith(LOG_SUFFIX) and (b := _base_offset_of(name, LOG_SUFFIX)) is not None
    )
    present = set(bases)
    for name in names:
        for suffix in _INDEX_SUFFIXES:
            if name.endswith(suffix):
                base = _base_offset_of(name, suffix)
                if base is not None and base not in present:
                    log.info("deleting orphan index %s", os.path.join(dir, name))
                    os.unlink(os.path.join(dir, name))
    return bases


def load_log(
    dir: str,
    config: LogConfig,
    time: Time,
    *,
    had_clean_shutdown: bool,
    recovery_point: int,
    log_start_offset: int,
) -> LoadedLog:
    os.makedirs(dir, exist_ok=True)
    bases = _clean_directory(dir)
    segments: list[LogSegment] = []
    truncated_total = 0
    recovered: list[LogSegment] = []
    for i, base in enumerate(bases):
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        needs_recovery = not had_clean_shutdown and (next_base is None or next_base > recovery_point)
        segment = LogSegment(dir, base, config, time, load_state=not needs_recovery)
        if needs_recovery:
            truncated = segment.recover()
            recovered.append(segment)
        else:
            truncated = segment.truncated_on_load  # an index check failed and the segment was recovered
            if segment.rebuilt_indexes:
                recovered.append(segment)
        segments.append(segment)
        if truncated > 0:
            truncated_total += truncated
            log.warning("truncated %d invalid bytes at the end of %s", truncated, segment.log.path)
            for later in bases[i + 1 :]:
                log.warning("deleting segment %d of %s after a corrupt segment", later, dir)
                delete_segment_files(dir, later)
            break
        if next_base is not None and segment.next_offset > next_base:
            log.warning("segment %d of %s overlaps the next one; dropping the following segments", base, dir)
            for later in bases[i + 1 :]:
                delete_segment_files(dir, later)
            break

    if not segments:
        segments.append(LogSegment(dir, log_start_offset, config, time))
    next_offset = segments[-1].next_offset
    log_start = max(log_start_offset, segments[0].base_offset)
    if log_start > next_offset:
        log.warning(
            "log start offset %d above log end %d in %s; restarting the log", log_start, next_offset, dir
        )
        for segment in segments:
            segment.delete()
        segments = [LogSegment(dir, log_start, config, time)]
        recovered = []
        next_offset = log_start
    recovered_from = min((s.base_offset for s in recovered), default=None)
    # After a clean shutdown everything was flushed. After a crash the recovered segments are not fsynced here (one
    # fsync per segment file made a broker with thousands of partitions take seconds per thousand to start): the
    # recovery point stays what was known durable, so a crash before the next flush recovers them again (Kafka's
    # LogLoader.recoverLog: the recovery point only advances when the log is flushed).
    recovery_point = next_offset if had_clean_shutdown else min(max(recovery_point, log_start), next_offset)
    return LoadedLog(segments, log_start, recovery_point, next_offset, truncated_total, len(recovered),
                     recovered_from)
