"""Idempotent-producer state of one partition: sequence checks, duplicate detection, snapshots.

Kafka counterpart: ``ProducerStateManager`` + ``ProducerAppendInfo`` + ``ProducerStateEntry``. For every producer
id the partition remembers the current epoch and the metadata of its last five batches (Kafka's
``NUM_BATCHES_TO_RETAIN``), which is what lets a retried batch be recognised and answered with its original
offset instead of being written twice.

Snapshot file ``<offset:020d>.snapshot`` (JSON, written by write-temp-then-rename) holds the state as of that
offset; on load the newest snapshot not beyond the log end is read and the batches after it are replayed from
their headers (no record decoding). Without a snapshot the whole log is replayed. Thread-safety: called under
the owning ``Log``'s lock.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.common.error_codes import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from strom.record.header import BatchHeader
from strom.storage.fs import atomic_write

__all__ = ["ProducerStateManager", "ProducerStateEntry", "BatchMetadata", "CompletedTxn", "TxnMarker", "SNAPSHOT_SUFFIX",
           "ONGOING", "VerificationGuard"]

log = logging.getLogger("strom.storage")

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
INT_MAX = 0x7FFFFFFF
TxnMarker = tuple[int, int]  # a control batch's (control record type: 0 ABORT, 1 COMMIT; coordinator epoch)


class VerificationGuard:
    """KIP-890 part 1 (Kafka's ``VerificationGuard``): what a transactional produce holds while the leader asks the
    coordinator whether the partition is in the producer's transaction. Its append passes only while the partition
    still holds the same guard for the producer: a marker written meanwhile (the transaction ended) drops it."""

    __slots__ = ("created_ms",)

    def __init__(self, created_ms: int) -> None:
        self.created_ms = created_ms


ONGOING = VerificationGuard(-1)
"""Given to the append of a producer whose transaction was ongoing in the partition when its request arrived (so
it was not verified): the append fails if a marker ended that transaction meanwhile."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    # The offset of this producer's first record in its open transaction; -1 when none is open (Kafka's
    # ``currentTxnFirstOffset``). The partition's last stable offset cannot pass it.
    current_txn_first_offset: int = -1
    # The coordinator epoch of the last transaction marker (Kafka's ``coordinatorEpoch``): a marker from an older
    # coordinator (a zombie, or a request that was in flight when the coordinator moved) is refused.
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT_MAX and next_seq == 0)


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) & INT_MAX


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class ProducerStateManager:
    """Per-partition producer ids → epoch, recent batches and open transactions."""

    def __init__(self, log_dir: str, producer_id_expiration_ms: int = 86_400_000) -> None:
        self.log_dir = log_dir
        self.expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # first_unstable_offset() is asked on every Fetch: cached, recomputed only after a transaction began or
        # ended (or the state was reloaded or truncated).
        self._unstable_cache: int | None = None
        self._unstable_dirty = True
        # Snapshots written without fsync (at a roll, with a background flusher): the next log flush syncs them.
        self.unsynced_snapshots: set[str] = set()
        # KIP-890 part 1: producer id -> the guard of the verification under way for its next transaction here.
        self.verification_guards: dict[int, VerificationGuard] = {}

    # -- transaction verification (KIP-890 part 1) ----------------------------------------------------------
    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset >= 0 and e.epoch == producer_epoch

    def maybe_start_verification(self, producer_id: int, producer_epoch: int, now_ms: int) -> VerificationGuard:
        """:data:`ONGOING` when the producer's transaction is ongoing here (no verification needed), else the
        guard the append must present once the coordinator confirmed the partition (the same one for concurrent
        requests of the producer; Kafka's ``maybeCreateVerificationStateEntry``)."""
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return ONGOING
        guard = self.verification_guards.get(producer_id)
        if guard is None:
            guard = self.verification_guards[producer_id] = VerificationGuard(now_ms)
        return guard

    def check_verification(self, headers: Iterable[BatchHeader], guard: VerificationGuard) -> None:
        """Raise INVALID_TXN_STATE when a transactional batch among ``headers`` belongs to no ongoing transaction
        here and ``guard`` is not (any longer) the producer's verification guard."""
        for h in headers:
            if not h.is_transactional or h.is_control or h.producer_id < 0:
                continue
            if self.has_ongoing_transaction(h.producer_id, h.producer_epoch):
                continue
            if guard is ONGOING or self.verification_guards.get(h.producer_id) is not guard:
                raise InvalidTxnStateError(
                    f"The transaction of producer {h.producer_id} (epoch {h.producer_epoch}) ended before its "
                    f"batch at offset {h.base_offset} could be appended: the batch is part of no ongoing transaction")

    # -- append path --------------------------------------------------------------------------------------
    def check(self, headers: Iterable[BatchHeader], markers: dict[int, TxnMarker] | None = None,
              ) -> BatchMetadata | None:
        """Validate the batches of one append against the current state, without changing it. ``markers``: base
        offset → (type, coordinator epoch) of each control batch among them.

        Returns the original batch's metadata when the (single) batch is a duplicate of one already written;
        raises OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED when it
        cannot be appended.
        """
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last seq) within this append
        for h in headers:
            if h.is_control and h.producer_id >= 0:
                # A transaction marker from a coordinator that fenced the producer carries a newer epoch; one
                # with an older epoch than the partition has seen is stale (Kafka: ProducerFencedException).
                current = self.producers.get(h.producer_id)
                if current is not None and h.producer_epoch < current.epoch:
                    raise InvalidProducerEpochError(
                        f"Transaction marker of producer {h.producer_id} has epoch {h.producer_epoch}, older than "
                        f"the last seen epoch {current.epoch}")
                ctype, coordinator_epoch = (markers or {}).get(h.base_offset, (-1, -1))
                if current is not None and ctype in (0, 1) and coordinator_epoch < current.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"Invalid coordinator epoch for producer {h.producer_id}: {coordinator_epoch} (zombie), "
                        f"{current.coordinator_epoch} (current)")
                continue
            if h.producer_id < 0 or h.base_sequence < 0:
                continue
            entry = self.producers.get(h.producer_id)
            epoch, last = pending.get(h.producer_id, (entry.epoch, entry.last_seq) if entry else (NO_EPOCH, -1))
            if entry is not None and h.producer_id not in pending:
                dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, _last_seq(h))
                if dup is not None:
                    return dup
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"Epoch of producer {h.producer_id} at offset {h.base_offset} is {h.producer_epoch}, which is "
                    f"smaller than the last seen epoch {epoch}")
            if h.producer_epoch != epoch:
                if h.base_sequence != 0 and epoch != NO_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"Invalid sequence number for new epoch of producer {h.producer_id} at offset "
                        f"{h.base_offset}: {h.producer_epoch} (request epoch), {h.base_sequence} (seq. number), "
                        f"{epoch} (current producer epoch)")
            elif last == -1 and entry is not None and entry.batches and h.base_sequence != 0:
                raise OutOfOrderSequenceNumberError(
                    f"Out of order sequence number for producer {h.producer_id} at offset {h.base_offset}: "
                    f"{h.base_sequence} (incoming seq. number), {last} (current end sequence number)")
            elif last != -1 and not _in_sequence(last, h.base_sequence):
                raise OutOfOrderSequenceNumberError(
                    f"Out of order sequence number for producer {h.producer_id} at offset {h.base_offset}: "
                    f"{h.base_sequence} (incoming seq. number), {last} (current end sequence number)")
            pending[h.producer_id] = (h.producer_epoch, _last_seq(h))
        return None

    def update(self, headers: Iterable[BatchHeader], markers: dict[int, TxnMarker] | None = None,
               ) -> list[CompletedTxn]:
        """Record appended batches (headers carry their assigned offsets); returns the transactions that their
        markers ended. ``markers``: base offset → (control record type: 0 ABORT, 1 COMMIT; coordinator epoch) of
        each control batch among them."""
        completed: list[CompletedTxn] = []
        for h in headers:
            if h.producer_id < 0:
                continue
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id)
            if h.producer_epoch != entry.epoch:
                entry.epoch = h.producer_epoch
                entry.batches.clear()
            if h.is_control:
                ctype, coordinator_epoch = (markers or {}).get(h.base_offset, (-1, -1))
                if ctype in (0, 1):
                    entry.coordinator_epoch = coordinator_epoch
                    self.verification_guards.pop(h.producer_id, None)  # a verification under way is outdated
                if ctype in (0, 1) and entry.current_txn_first_offset >= 0:
                    completed.append(CompletedTxn(h.producer_id, entry.current_txn_first_offset, h.base_offset,
                                                  ctype == 0))
                    entry.current_txn_first_offset = -1
                    self._unstable_dirty = True
                entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
                continue
            if h.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = h.base_offset
                self._unstable_dirty = True
                self.verification_guards.pop(h.producer_id, None)  # ongoing now: its next batches need none
            if h.base_sequence >= 0:
                entry.batches.append(BatchMetadata(h.base_sequence, _last_seq(h), h.base_offset,
                                                   h.base_offset + h.last_offset_delta, h.max_timestamp))
            entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        return completed

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None when no transaction is open)."""
        if self._unstable_dirty:
            firsts = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset >= 0]
            self._unstable_cache = min(firsts) if firsts else None
            self._unstable_dirty = False
        return self._unstable_cache

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id → first offset of its open transaction."""
        return {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                if e.current_txn_first_offset >= 0}

    def remove_expired(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= self.expiration_ms and e.current_txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        for pid in [pid for pid, g in self.verification_guards.items() if now_ms - g.created_ms >= self.expiration_ms]:
            del self.verification_guards[pid]  # a producer that never came back after its verification
        return len(expired)

    def truncate_to(self, offset: int) -> None:
        """Forget batches at or beyond ``offset`` (log truncation)."""
        self._unstable_dirty = True
        for pid in list(self.producers):
            e = self.producers[pid]
            kept = [b for b in e.batches if b.last_offset < offset]
            if e.current_txn_first_offset >= offset:
                e.current_txn_first_offset = -1
            if not kept and e.current_txn_first_offset < 0:
                del self.producers[pid]
            else:
                e.batches = deque(kept, maxlen=NUM_BATCHES_TO_RETAIN)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log restarted empty at ``offset``: forget every producer and every snapshot."""
        self.producers = {}
        self._unstable_dirty = True
        self.delete_snapshots_after(-1)

    # -- snapshots ----------------------------------------------------------------------------------------
    def delete_snapshots_after(self, offset: int) -> None:
        """Remove snapshots taken beyond ``offset`` (the log was truncated below them)."""
        for off in self._snapshot_offsets():
            if off > offset:
                try:
                    os.unlink(self._path(off))
                except FileNotFoundError:
                    pass

    def _snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.log_dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(out)

    def _path(self, offset: int) -> str:
        return os.path.join(self.log_dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def take_snapshot(self, end_offset: int, sync: bool = True) -> bool:
        """Write the state as of ``end_offset`` and remove older snapshots. A failure (full disk) is logged, not
        raised: snapshots only shorten loading, and an older one plus replay gives the same state.

        ``sync=False`` (a roll on the event loop) skips the fsyncs; the file is listed in
        :attr:`unsynced_snapshots` for the log's next flush (Kafka 3.5+ flushes roll snapshots asynchronously
        too). Should a crash leave it unreadable, loading falls back to replaying the log."""
        existing = self._snapshot_offsets()
        if end_offset in existing or (end_offset == 0 and not self.producers):
            return True  # nothing changed since that snapshot / nothing to replay without one
        doc = {"version": 1, "end_offset": end_offset, "producers": [
            {"pid": e.producer_id, "epoch": e.epoch, "last_ts": e.last_timestamp, "txn_first": e.current_txn_first_offset,
             "coordinator_epoch": e.coordinator_epoch,
             "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in e.batches]}
            for e in self.producers.values()
        ]}
        try:
            atomic_write(self._path(end_offset), json.dumps(doc).encode(), sync=sync)
            if not sync:
                self.unsynced_snapshots.add(self._path(end_offset))
        except OSError as e:
            log.warning("could not write producer snapshot %s: %s", self._path(end_offset), e)
            return False
        for off in self._snapshot_offsets():
            if off != end_offset:
                try:
                    os.unlink(self._path(off))
                except FileNotFoundError:
                    pass
        return True

    def load_snapshot(self, max_offset: int) -> int:
        """Load the newest readable snapshot at or below ``max_offset``; returns its offset (0 when none)."""
        self._unstable_dirty = True
        for off in reversed(self._snapshot_offsets()):
            if off > max_offset:
                continue
            try:
                with open(self._path(off), "rb") as f:
                    doc = json.loads(f.read())
                self.producers = {}
                for p in doc["producers"]:
                    e = ProducerStateEntry(int(p["pid"]), int(p["epoch"]), last_timestamp=int(p["last_ts"]),
                                           current_txn_first_offset=int(p.get("txn_first", -1)),
                                           coordinator_epoch=int(p.get("coordinator_epoch", -1)))
                    for b in p["batches"]:
                        e.batches.append(BatchMetadata(*(int(x) for x in b)))
                    self.producers[e.producer_id] = e
                return off
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("ignoring unreadable producer snapshot %s: %s", self._path(off), e)
        self.producers = {}
        return 0
