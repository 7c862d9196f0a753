"""The transaction coordinator (KIP-98): transactional ids, producer epochs, and the two-phase end of a transaction.

Kafka counterpart: ``TransactionCoordinator`` + ``TransactionStateManager``. The state of each transactional id
lives in the compacted internal topic ``__transaction_state`` (partition ``abs(hash(id)) % n``); the coordinator of
an id is the leader of its partition and loads the partition's records when it becomes leader. Every state change
is written there (acks=-1) before it takes effect:

* InitProducerId: a new producer id, or the next epoch of the existing one, which fences the old incarnation; an
  open transaction of the old incarnation is aborted first (with a bumped epoch) and the client told to retry
  (CONCURRENT_TRANSACTIONS), as Kafka does.
* AddPartitionsToTxn / AddOffsetsToTxn: Empty/Complete* → Ongoing, the partitions recorded.
* EndTxn: Ongoing → PrepareCommit/PrepareAbort (the decision, durable once written), then COMMIT/ABORT markers to
  every partition (:class:`TxnMarkerWriter`), then CompleteCommit/CompleteAbort. After a restart or a leader
  change, a transaction found in a Prepare state is completed by the new coordinator.
* A transaction open longer than its timeout is aborted with a bumped epoch (the producer is fenced); an id idle
  longer than ``transactional.id.expiration.ms`` is removed (tombstone).

Event loop only. Each transactional id's operations are serialised by a lock; marker writing runs in a task so an
EndTxn's decision does not depend on every partition leader being reachable at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import ProtocolError
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.server.coordinator.group_metadata_manager import partition_for
from strom.server.coordinator.transaction_metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionConfig,
    TransactionMetadata,
    TransactionState,
    read_txn_key,
    read_txn_value,
    txn_key,
    txn_value,
)

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.coordinator.offsets_log import ReplicaOffsetsLog
    from strom.server.coordinator.txn_markers import TxnMarkerWriter
    from strom.server.metadata_cache import MetadataCache
    from strom.server.producer_id_manager import ProducerIdManager
    from strom.server.replica_manager import ReplicaManager
    from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["TransactionCoordinator", "InitPidResult", "create_transaction_coordinator"]

log = logging.getLogger("strom.coordinator")

S = TransactionState
MARKER_RETRY_BACKOFF_S = 0.2
MARKER_RETRY_MAX_BACKOFF_S = 5.0
InitPidResult = tuple[int, int, int]  # (error code, producer id, producer epoch)


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, time: Time, txn_log: ReplicaOffsetsLog,
                 generate_producer_id: Callable[[], Awaitable[int]], markers: TxnMarkerWriter,
                 coordinator_epoch: Callable[[int], int] | None = None) -> None:
        self.config = config
        self.time = time
        self.log = txn_log
        self.generate_producer_id = generate_producer_id
        self.markers = markers
        self.coordinator_epoch = coordinator_epoch or (lambda _p: 0)
        self.cache: dict[str, TransactionMetadata] = {}
        self.active = False
        self.owned_partitions: set[int] | None = None  # None: all of them (a standalone broker)
        self._locks: dict[str, asyncio.Lock] = {}
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self, load_all: bool = True) -> None:
        """Standalone: own and load every partition. Cluster: own none until partition leadership arrives."""
        if load_all:
            if self.log.exists():
                self._load(range(self.config.num_partitions))
        else:
            self.owned_partitions = set()
        self.active = True
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(self.config.abort_timed_out_interval_ms,
                                                        self.abort_timed_out_transactions)))
        self._tasks.append(loop.create_task(self._every(self.config.remove_expired_interval_ms,
                                                        self.remove_expired_transactional_ids)))

    def on_election(self, partition: int) -> None:
        if self.owned_partitions is None or partition in self.owned_partitions:
            return
        self.owned_partitions.add(partition)
        self._load([partition])
        log.info("now coordinating the transactional ids of %s partition %d", TRANSACTION_STATE_TOPIC_NAME, partition)

    def on_resignation(self, partition: int) -> None:
        if self.owned_partitions is None or partition not in self.owned_partitions:
            return
        self.owned_partitions.discard(partition)
        for tid in [t for t in self.cache if self.partition_for(t) == partition]:
            del self.cache[tid]
            task = self._completions.pop(tid, None)
            if task is not None:
                task.cancel()
        log.info("no longer coordinating the transactional ids of %s partition %d", TRANSACTION_STATE_TOPIC_NAME,
                 partition)

    async def shutdown(self) -> None:
        self.active = False
        tasks = self._tasks + list(self._completions.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._completions.clear()
        self.markers.close()

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            try:
                await fn()
            except Exception:
                log.exception("transaction coordinator task %s failed", getattr(fn, "__name__", fn))

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    # -- load -------------------------------------------------------------------------------------------------
    def _load(self, partitions: Iterable[int]) -> None:
        loaded: dict[str, TransactionMetadata] = {}
        for p in partitions:
            for key, value in self.log.read(p):
                if key is None:
                    continue
                try:
                    tid = read_txn_key(key)
                    if tid is None:
                        continue
                    if value is None:
                        loaded.pop(tid, None)
                    else:
                        loaded[tid] = read_txn_value(tid, value)
                except ProtocolError as e:
                    log.warning("skipping unreadable record in %s-%d: %s", TRANSACTION_STATE_TOPIC_NAME, p, e)
        self.cache.update(loaded)
        for meta in loaded.values():
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                # The decision was written, the markers maybe not: finish what the previous coordinator began.
                self._start_completion(meta)
        if loaded:
            log.info("loaded %d transactional id(s) from %s", len(loaded), TRANSACTION_STATE_TOPIC_NAME)

    # -- helpers ----------------------------------------------------------------------------------------------
    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    def _validate(self, transactional_id: str | None) -> int | None:
        if not transactional_id:
            return E.INVALID_REQUEST
        if not self.active or not self.log.exists():
            return E.COORDINATOR_NOT_AVAILABLE
        if self.owned_partitions is not None and self.partition_for(transactional_id) not in self.owned_partitions:
            return E.NOT_COORDINATOR
        return None

    async def _persist(self, new: TransactionMetadata, tombstone: bool = False) -> int:
        """Write ``new`` (or a tombstone) and wait for the in-sync replicas; an error code for the client."""
        partition = self.partition_for(new.transactional_id)
        record = (txn_key(new.transactional_id), None if tombstone else txn_value(new))
        code = self.log.append(partition, [record])
        if code == E.NONE:
            code = await self.log.wait_replicated(partition, 30_000)
        if code in (E.NONE,):
            return E.NONE
        log.warning("writing the state of transactional id %s failed: error %d", new.transactional_id, code)
        if code == E.NOT_LEADER_OR_FOLLOWER:
            return E.NOT_COORDINATOR
        return E.COORDINATOR_NOT_AVAILABLE

    def _check_producer(self, meta: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> int | None:
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return E.PRODUCER_FENCED
        return None

    # -- InitProducerId ---------------------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, txn_timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> InitPidResult:
        err = self._validate(transactional_id)
        if err is not None:
            return err, -1, -1
        if not 0 < txn_timeout_ms <= self.config.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        result = await self._init_producer_id(transactional_id, txn_timeout_ms, expected_producer_id, expected_epoch)
        if result[0] == E.CONCURRENT_TRANSACTIONS:
            # Outside the id's lock: the completion takes it to write the Complete state.
            await self._await_completion(transactional_id, 5.0)
        return result

    async def _init_producer_id(self, transactional_id: str, txn_timeout_ms: int, expected_producer_id: int,
                                expected_epoch: int) -> InitPidResult:
        async with self._lock(transactional_id):
            meta = self.cache.get(transactional_id)
            now = self.time.milliseconds()
            if meta is None:
                try:
                    pid = await self.generate_producer_id()
                except Exception as e:
                    log.warning("cannot allocate a producer id: %s", e)
                    return E.COORDINATOR_NOT_AVAILABLE, -1, -1
                meta = TransactionMetadata(transactional_id, pid, -1, txn_timeout_ms, S.EMPTY, set(), -1, now)
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            if expected_producer_id >= 0 and not (
                    meta.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_id == meta.producer_id
                    or (expected_producer_id == meta.last_producer_id and expected_epoch + 1 >= MAX_EPOCH)):
                # KIP-360: a producer that thinks it is someone the coordinator already moved past is fenced. (A
                # metadata just created has no epoch yet: the producer lost its id -- e.g. it expired -- and gets
                # the new one; the last id matches a retried rotation whose answer was lost.)
                return E.PRODUCER_FENCED, -1, -1
            if meta.state == S.ONGOING:
                # A new incarnation: abort the old one's transaction with a bumped epoch (fencing it), then let
                # the client retry, which then gets the next epoch.
                code = await self._begin_end(meta, commit=False, bump_epoch=True)
                return (code if code != E.NONE else E.CONCURRENT_TRANSACTIONS), -1, -1
            expected = expected_producer_id >= 0
            if meta.producer_epoch + 1 >= MAX_EPOCH and (not expected or expected_epoch == meta.producer_epoch):
                try:
                    new_pid = await self.generate_producer_id()
                except Exception as e:
                    log.warning("cannot allocate a producer id: %s", e)
                    return E.COORDINATOR_NOT_AVAILABLE, -1, -1
                new = meta.copy(producer_id=new_pid, producer_epoch=0, last_producer_id=meta.producer_id,
                                last_producer_epoch=meta.producer_epoch if expected else NO_PRODUCER_EPOCH)
            elif not expected:
                # A new incarnation: the last epoch is forgotten, so that no older one can pass for a retry.
                new = meta.copy(producer_epoch=meta.producer_epoch + 1, last_producer_id=meta.producer_id,
                                last_producer_epoch=NO_PRODUCER_EPOCH)
            elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
                # KIP-360: the producer goes on after an error (its transaction aborted) with the next epoch.
                new = meta.copy(producer_epoch=meta.producer_epoch + 1, last_producer_id=meta.producer_id,
                                last_producer_epoch=meta.producer_epoch)
            elif expected_epoch == meta.last_producer_epoch:
                # The retry of a bump whose answer was lost: the current epoch again, not bumped twice.
                new = meta.copy()
            else:
                return E.PRODUCER_FENCED, -1, -1
            new.txn_timeout_ms = txn_timeout_ms
            new.state = S.EMPTY
            new.partitions = set()
            new.txn_start_ms = -1
            new.txn_last_update_ms = now
            code = await self._persist(new)
            if code != E.NONE:
                return code, -1, -1
            if transactional_id in self.cache:
                self.cache[transactional_id].apply(new)
            else:
                self.cache[transactional_id] = new
            log.info("transactional id %s: producer id %d, epoch %d", transactional_id, new.producer_id,
                     new.producer_epoch)
            return E.NONE, new.producer_id, new.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------------------
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[TopicPartition]) -> int:
        err = self._validate(transactional_id)
        if err is not None:
            return err
        async with self._lock(transactional_id):
            meta = self.cache.get(transactional_id)
            err = self._check_producer(meta, producer_id, producer_epoch)
            if err is not None:
                return err
            assert meta is not None
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
                return E.CONCURRENT_TRANSACTIONS
            if meta.state == S.ONGOING and partitions <= meta.partitions:
                return E.NONE
            now = self.time.milliseconds()
            if meta.state == S.ONGOING:
                new = meta.copy(partitions=meta.partitions | partitions, txn_last_update_ms=now)
            else:
                new = meta.copy(state=S.ONGOING, partitions=set(partitions), txn_start_ms=now,
                                txn_last_update_ms=now)
            code = await self._persist(new)
            if code == E.NONE:
                meta.apply(new)
            return code

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ with verifyOnly, sent by a partition leader before it appends a
        transaction's first batch): NONE for each partition of the producer's ongoing transaction, INVALID_TXN_STATE
        for the others; nothing is added (Kafka's ``handleVerifyPartitionsInTransaction``). The state read is the
        last one persisted, so a partition whose AddPartitionsToTxn is still being written is not in it yet."""
        err = self._validate(transactional_id)
        if err is None:
            meta = self.cache.get(transactional_id)
            err = self._check_producer(meta, producer_id, producer_epoch)
            if err is None and meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                                                   S.PREPARE_EPOCH_FENCE):
                err = E.CONCURRENT_TRANSACTIONS
            if err is None and meta is not None:
                ongoing = meta.partitions if meta.state == S.ONGOING else set()
                return {tp: E.NONE if tp in ongoing else E.INVALID_TXN_STATE for tp in partitions}
        return dict.fromkeys(partitions, err)

    # -- EndTxn -----------------------------------------------------------------------------------------------
    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> int:
        err = self._validate(transactional_id)
        if err is not None:
            return err
        async with self._lock(transactional_id):
            meta = self.cache.get(transactional_id)
            err = self._check_producer(meta, producer_id, producer_epoch)
            if err is not None:
                # A retried EndTxn after the coordinator's own timeout abort bumped the epoch: fenced.
                return err
            assert meta is not None
            if meta.state == S.ONGOING:
                code = await self._begin_end(meta, commit, bump_epoch=False)
                if code != E.NONE:
                    return code
            elif meta.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
                return E.NONE  # a retry of an EndTxn that already completed
            elif meta.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                return E.CONCURRENT_TRANSACTIONS
            else:
                return E.INVALID_TXN_STATE
        # The decision is durable: the client may go on. Wait a little for the markers (milliseconds when every
        # leader is up) so that what it wrote is visible to read_committed readers when its commit returns; not
        # long for a leader that is down (Kafka answers before the markers at once).
        await self._await_completion(transactional_id, 2.0)
        return E.NONE

    async def _begin_end(self, meta: TransactionMetadata, commit: bool, bump_epoch: bool) -> int:
        """Write PrepareCommit/PrepareAbort (caller holds the id's lock), then complete in a task."""
        now = self.time.milliseconds()
        new = meta.copy(state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, txn_last_update_ms=now)
        if bump_epoch:  # fencing (Kafka's prepareFenceProducerEpoch): no epoch before it may pass for a retry
            new.producer_epoch = meta.producer_epoch + 1
            new.last_producer_epoch = NO_PRODUCER_EPOCH
            new.last_producer_id = meta.producer_id
        code = await self._persist(new)
        if code != E.NONE:
            return code
        meta.apply(new)
        self._start_completion(meta)
        return E.NONE

    def _start_completion(self, meta: TransactionMetadata) -> None:
        tid = meta.transactional_id
        if tid in self._completions and not self._completions[tid].done():
            return
        self._completions[tid] = asyncio.get_running_loop().create_task(self._complete(meta))

    async def _await_completion(self, transactional_id: str, timeout_s: float) -> None:
        task = self._completions.get(transactional_id)
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
            except TimeoutError:
                log.info("transaction of %s: markers still being written", transactional_id)

    async def _complete(self, meta: TransactionMetadata) -> None:
        """Write the markers (retrying until every partition has one), then the Complete state."""
        commit = meta.state == S.PREPARE_COMMIT
        tid = meta.transactional_id
        pending = set(meta.partitions)
        coordinator_epoch = self.coordinator_epoch(self.partition_for(tid))
        backoff = MARKER_RETRY_BACKOFF_S
        while pending:
            pending = await self.markers.write(meta.producer_id, meta.producer_epoch, commit, coordinator_epoch,
                                               pending)
            if pending:
                # A leader that is gone for long (a stopped broker) is retried less and less often, up to 5 s.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_MAX_BACKOFF_S)
        while True:
            async with self._lock(tid):
                if self.cache.get(tid) is not meta or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    return
                new = meta.copy(state=S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, partitions=set(),
                                txn_last_update_ms=self.time.milliseconds())
                code = await self._persist(new)
                if code == E.NONE:
                    meta.apply(new)
                    log.info("transactional id %s: %s (producer %d epoch %d)", tid,
                             "committed" if commit else "aborted", meta.producer_id, meta.producer_epoch)
                    return
                if code == E.NOT_COORDINATOR:
                    return  # the new coordinator completes it
            await asyncio.sleep(MARKER_RETRY_BACKOFF_S)

    # -- timers -----------------------------------------------------------------------------------------------
    async def abort_timed_out_transactions(self) -> int:
        """Abort (with a bumped epoch, fencing the producer) every transaction open longer than its timeout."""
        now = self.time.milliseconds()
        n = 0
        for tid, meta in list(self.cache.items()):
            if meta.state != S.ONGOING or now <= meta.txn_start_ms + meta.txn_timeout_ms:
                continue
            async with self._lock(tid):
                if self.cache.get(tid) is not meta or meta.state != S.ONGOING:
                    continue
                log.info("transactional id %s: aborting a transaction open for %d ms (timeout %d ms)", tid,
                         now - meta.txn_start_ms, meta.txn_timeout_ms)
                if await self._begin_end(meta, commit=False, bump_epoch=True) == E.NONE:
                    n += 1
        return n

    async def remove_expired_transactional_ids(self) -> int:
        """Drop ids idle for ``transactional.id.expiration.ms`` with no open transaction (tombstones)."""
        now = self.time.milliseconds()
        n = 0
        for tid, meta in list(self.cache.items()):
            if meta.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
                    or now - meta.txn_last_update_ms < self.config.transactional_id_expiration_ms:
                continue
            async with self._lock(tid):
                if self.cache.get(tid) is not meta:
                    continue
                if await self._persist(meta, tombstone=True) == E.NONE:
                    del self.cache[tid]
                    self._locks.pop(tid, None)
                    n += 1
        if n:
            log.info("removed %d expired transactional id(s)", n)
        return n

    # -- describe ---------------------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        err = self._validate(transactional_id)
        if err is not None:
            return err, None
        meta = self.cache.get(transactional_id)
        return (E.NONE, meta) if meta is not None else (E.TRANSACTIONAL_ID_NOT_FOUND, None)


def create_transaction_coordinator(config: object, time: Time, metadata: MetadataCache,
                                   replica_manager: ReplicaManager, group_coordinator: GroupCoordinator,
                                   producer_ids: ProducerIdManager, listener: str | None,
                                   security: InterBrokerSecurity | None = None) -> TransactionCoordinator:
    """The broker's transaction coordinator, configured from its ``transaction.*`` keys, over
    ``__transaction_state`` (whose existing partition count wins over the configured one, as in Kafka)."""
    import dataclasses

    from strom.server.coordinator.offsets_log import ReplicaOffsetsLog
    from strom.server.coordinator.txn_markers import TxnMarkerWriter

    cfg = TransactionConfig.from_broker_config(config)
    existing = metadata.topic(TRANSACTION_STATE_TOPIC_NAME)
    if existing is not None and existing.num_partitions != cfg.num_partitions:
        log.warning("%s has %d partition(s); transaction.state.log.num.partitions=%d is ignored",
                    TRANSACTION_STATE_TOPIC_NAME, existing.num_partitions, cfg.num_partitions)
        cfg = dataclasses.replace(cfg, num_partitions=existing.num_partitions)
    txn_log = ReplicaOffsetsLog(replica_manager, metadata, time, group_coordinator.offset_config,
                                topic=TRANSACTION_STATE_TOPIC_NAME)
    markers = TxnMarkerWriter(replica_manager.node_id, metadata, replica_manager, group_coordinator, time, listener,
                              security=security)

    def coordinator_epoch(partition: int) -> int:
        p = replica_manager.get_partition(TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition))
        return max(p.leader_epoch, 0) if p is not None else 0

    return TransactionCoordinator(cfg, time, txn_log, producer_ids.generate_producer_id, markers, coordinator_epoch)
