"""The aborted-transaction index of one partition: ``aborted.txnindex`` in the log directory.

Kafka counterpart: ``TransactionIndex`` / ``AbortedTxn``. Every ABORT marker appended to the partition adds one
entry; a read_committed Fetch asks which aborted transactions overlap the range it returns and hands them to the
consumer (``aborted_transactions``), which then skips those producers' records until their ABORT marker.

Entry layout (34 bytes, big-endian, Kafka's): ``version INT16 = 0, producerId INT64, firstOffset INT64,
lastOffset INT64, lastStableOffset INT64``. Kafka keeps one file per segment; strom keeps one per partition
(deleted segments leave entries whose ``lastOffset`` is below the log start: they are dropped on load and on
truncation rewrites, and they never overlap a read). Appends are fsynced with the log's own flushes (the
index is rebuilt from the log when an entry is missing: replaying the log's batch headers re-adds it). Entries
are kept in marker-offset order, so a read finds the first that can overlap it by bisection and looks only at
those after it (a consumer at the tail looks at a handful, not at every abort of the partition's life).
Thread-safety: called under the owning ``Log``'s lock.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass

from strom.storage.fs import atomic_write

__all__ = ["AbortedTxn", "TransactionIndex", "TXN_INDEX_FILE"]

log = logging.getLogger("strom.storage")

TXN_INDEX_FILE = "aborted.txnindex"
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, TXN_INDEX_FILE)
        self.entries: list[AbortedTxn] = []  # sorted by last_offset (the marker's offset)
        self._lasts: list[int] = []  # their last offsets, for bisection
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        usable = len(data) - len(data) % _ENTRY.size
        if usable != len(data):
            log.warning("%s: ignoring a torn entry at its end", self.path)
        for pos in range(0, usable, _ENTRY.size):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != 0:
                log.warning("%s: unknown entry version %d, ignoring the rest", self.path, version)
                break
            self.entries.append(AbortedTxn(pid, first, last, lso))
        self.entries.sort(key=lambda e: e.last_offset)
        self._lasts = [e.last_offset for e in self.entries]

    def append(self, txn: AbortedTxn) -> None:
        at = bisect.bisect_left(self._lasts, txn.last_offset)
        if at < len(self._lasts) and self._lasts[at] == txn.last_offset:
            return  # replayed after a restart: already indexed
        self.entries.insert(at, txn)
        self._lasts.insert(at, txn.last_offset)
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset))

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or beyond ``offset`` (log truncation)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def drop_before(self, log_start_offset: int) -> None:
        """Drop entries that ended before the log start (their segments are gone)."""
        kept = [e for e in self.entries if e.last_offset >= log_start_offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        self.entries = entries
        self._lasts = [e.last_offset for e in entries]
        atomic_write(self.path, b"".join(_ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset,
                                                     e.last_stable_offset) for e in entries))

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap ``[fetch_offset, upper_bound_offset)`` (Kafka's
        ``collectAbortedTxns``): begun before the upper bound and ended at or after the fetch offset."""
        start = bisect.bisect_left(self._lasts, fetch_offset)
        return [e for e in self.entries[start:] if e.first_offset < upper_bound_offset]

    def flush(self) -> None:
        """Nothing to do: every rewrite is an fsynced atomic replace (kept for the log's flush protocol)."""
