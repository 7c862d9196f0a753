"""Leader epochs of one partition: which epoch's leader wrote the records from which offset on.

Kafka counterpart: ``LeaderEpochFileCache`` with its ``LeaderEpochCheckpointFile`` (KIP-101, KIP-279).

Each entry ``(epoch, start_offset)`` says that the leader of ``epoch`` wrote its first record at
``start_offset``; entries grow strictly in both epoch and start offset. A follower asks the leader
``end_offset_for(its latest epoch)`` (OffsetForLeaderEpoch) and truncates its log to the answer, which is how a
returning ex-leader drops the records it wrote that the new leader never had.

File ``<partition dir>/leader-epoch-checkpoint`` in Kafka's text format::

    0             <- version
    2             <- number of entries
    0 0           <- epoch start_offset
    3 1234

rewritten whole (write ``.tmp``, fsync, rename, fsync the directory: :func:`strom.storage.fs.atomic_write`) on
every change. A missing file is an empty cache; a malformed one raises :class:`CorruptCheckpointError` naming
the file and line. Thread-safe: one lock per cache (the owning ``Log`` also calls it under its own lock).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading

from strom.common.error_codes import KafkaStorageError
from strom.storage.checkpoint import CHECKPOINT_VERSION, CorruptCheckpointError
from strom.storage.fs import atomic_write

__all__ = [
    "LeaderEpochFileCache",
    "EpochEntry",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = tuple[int, int]
"""(epoch, start_offset)"""


class LeaderEpochFileCache:
    """The epoch -> start offset entries of one partition, persisted in ``leader-epoch-checkpoint``."""

    def __init__(self, dir: str) -> None:
        self.path = os.path.join(dir, LEADER_EPOCH_CHECKPOINT_FILE)
        self._lock = threading.RLock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self.file_existed = os.path.exists(self.path)
        self.unsynced = False  # written without fsync since the last synced write (see assign)
        if self.file_existed:
            for epoch, offset in self._read():
                self._epochs.append(epoch)
                self._offsets.append(offset)

    # --- reads -------------------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return (self._epochs[-1], self._offsets[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def previous_epoch(self) -> int | None:
        """The epoch before the latest one (None with fewer than two entries)."""
        with self._lock:
            return self._epochs[-2] if len(self._epochs) >= 2 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` for a follower whose latest epoch is ``requested_epoch``.

        Kafka's rules: an undefined epoch (-1) or one above every known epoch answers (-1, -1); the latest epoch
        answers the log end offset; otherwise the answer is the start offset of the first epoch above the
        requested one, paired with the largest known epoch <= the requested one (the requested epoch itself when
        it is below every known epoch).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._epochs and self._epochs[-1] == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect.bisect_right(self._epochs, requested_epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._offsets[0]
            return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote ``offset`` (None when the offset precedes every entry)."""
        with self._lock:
            i = bisect.bisect_right(self._offsets, offset) - 1
            return self._epochs[i] if i >= 0 else None

    # --- writes ------------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, sync: bool = True, *, persist: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        ``sync=False`` (an append on the event loop, with a background flusher) writes the file without fsync and
        sets :attr:`unsynced`: the log's next flush syncs it, before the recovery point passes ``start_offset``
        (Kafka 3.7, KAFKA-15046: no fsync of this checkpoint on the append path). A crash before that flush
        recovers the segments from the recovery point, which rebuilds the entry from the batch headers.

        As Kafka: a no-op when ``epoch`` is already the latest with a start offset <= ``start_offset``; otherwise
        every entry with an epoch >= ``epoch`` or a start offset >= ``start_offset`` is dropped first (they can
        only be stale after a truncation), so the entries stay strictly monotonic. ``persist=False``: the file is
        not written (a rebuild that writes it once at the end, :meth:`write`).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._lock:
            if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
                return False
            removed = []
            while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
                removed.append((self._epochs.pop(), self._offsets.pop()))
            if removed:
                log.warning(
                    "%s: new epoch entry (%d, %d) replaces non-monotonic entries %s",
                    self.path, epoch, start_offset, removed[::-1],
                )
            self._epochs.append(epoch)
            self._offsets.append(start_offset)
            if persist:
                self._flush(sync)
            return True

    def truncate_from_end(self, end_offset: int, *, persist: bool = True) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated to it)."""
        with self._lock:
            if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
                return
            n = bisect.bisect_left(self._offsets, end_offset)
            del self._epochs[n:]
            del self._offsets[n:]
            if persist:
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: drop the entries at or below it, keeping the last of them
        (the epoch that wrote ``start_offset``) re-anchored at ``start_offset``."""
        with self._lock:
            if start_offset < 0:
                return
            n = bisect.bisect_right(self._offsets, start_offset)
            if n == 0:
                return
            epoch = self._epochs[n - 1]
            if n == 1 and self._offsets[0] == start_offset:
                return
            del self._epochs[:n]
            del self._offsets[:n]
            self._epochs.insert(0, epoch)
            self._offsets.insert(0, start_offset)
            self._flush()

    def clear(self) -> None:
        """Forget every entry (the log restarted empty)."""
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
            self._flush()

    def write(self) -> None:
        """Persist the current entries (used after a rebuild from the log)."""
        with self._lock:
            self._flush()

    def _flush(self, sync: bool = True) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        try:
            atomic_write(self.path, ("\n".join(lines) + "\n").encode(), sync=sync)
            self.unsynced = not sync  # a synced write makes the whole file durable
        except OSError as e:
            # The records this entry describes are written; a stale file would be trusted at the next load, so
            # remove it (that works on a full disk): the next load rebuilds the cache from the batch headers.
            log.error("could not write %s (%s); removing it so that it is rebuilt from the log", self.path, e)
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as e2:
                raise KafkaStorageError(f"leader epoch checkpoint {self.path} can be neither written nor removed: {e2}") from e
            self.file_existed = False
            return
        self.file_existed = True

    def _read(self) -> list[EpochEntry]:
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(f"leader epoch checkpoint {self.path} is not UTF-8 text: {e}") from None
        if lines and lines[-1] == "":
            lines.pop()

        def fail(line_no: int, why: str) -> CorruptCheckpointError:
            line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
            return CorruptCheckpointError(f"malformed leader epoch checkpoint {self.path}, line {line_no} {line!r}: {why}")

        if len(lines) < 2:
            raise fail(len(lines) + 1, "missing version or entry count")
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise fail(1, f"unsupported version (expected {CHECKPOINT_VERSION})")
        try:
            count = int(lines[1].strip())
        except ValueError:
            raise fail(2, "entry count is not an integer") from None
        if count < 0 or len(lines) - 2 != count:
            raise fail(2, f"expected {count} entries, found {len(lines) - 2}")
        out: list[EpochEntry] = []
        for n, line in enumerate(lines[2:], start=3):
            parts = line.split()
            if len(parts) != 2:
                raise fail(n, "expected 'epoch start_offset'")
            try:
                epoch, offset = int(parts[0]), int(parts[1])
            except ValueError:
                raise fail(n, "epoch and start offset must be integers") from None
            if out and (epoch <= out[-1][0] or offset <= out[-1][1]):
                raise fail(n, "entries must grow in epoch and start offset")
            out.append((epoch, offset))
        return out
