"""The partitions this broker hosts: appends, reads, leadership changes and the produce/fetch purgatories.

Kafka counterpart: ``ReplicaManager`` (appendRecords / fetchMessages / becomeLeaderOrFollower / stopReplicas)
with ``DelayedProduce`` and ``DelayedFetch`` kept in per-partition waiter lists: an append wakes only the fetches
parked on that partition, a high-watermark move completes only the acks=all produces waiting on it.
A standalone broker leads every partition with an ISR of itself; in a cluster the controller's LeaderAndIsr
requests decide, and followers replicate through the :class:`ReplicaFetcherManager`. Event loop only.

A log dir that fails (JBOD, KIP-112: an I/O error anywhere in it, reported to the log manager's
``LogDirFailureChannel``) takes its partitions offline (:meth:`handle_log_dir_failure`, Kafka's
``HostedPartition.Offline``): they answer KAFKA_STORAGE_ERROR to produce, fetch and LeaderAndIsr until the
broker restarts, and the controller moves their leadership to other replicas.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode, KafkaStorageError
from strom.common.errors import BrokerResponseError, KafkaError, error_class
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.record.header import HEADER_SIZE, parse_header
from strom.server.broker_metrics import add_remote_time
from strom.server.metadata_cache import MetadataCache, TopicInfo
from strom.server.partition import AlterPartitionCallback, LeaderAndIsr, Partition
from strom.server.replica_alter_log_dirs import ReplicaAlterLogDirsManager
from strom.server.replication_quota import ALTER_LOG_DIRS, FOLLOWER, LEADER, ReplicationQuotaManager
from strom.storage.log import Log
from strom.storage.log_append_info import LogAppendInfo
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_validator import AppendOrigin, check_client_records, needs_worker_check
from strom.storage.producer_state import ONGOING

if TYPE_CHECKING:
    from strom.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
    from strom.server.broker_metrics import BrokerMetrics
    from strom.storage.file_records import FileRegion
    from strom.storage.producer_state import VerificationGuard

__all__ = ["ReplicaManager", "AppendResult", "FetchPartition", "FetchResult"]

log = logging.getLogger("strom.server")

# What the coordinator answers when it cannot say yet: the producer is told NOT_ENOUGH_REPLICAS, which it retries
# (Kafka's conversion: clients before KIP-890 part 2 know no other retriable answer for it).
_VERIFICATION_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                     ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})


@dataclass(slots=True)
class AppendResult:
    error_code: int
    info: LogAppendInfo | None = None
    error_message: str | None = None
    validation_meter: str | None = None  # Kafka's meter of the validation that refused the append, if one counts it

    @classmethod
    def refused(cls, e: BrokerResponseError) -> AppendResult:
        return cls(e.errno, None, e.message, getattr(e, "validation_meter", None))


@dataclass(slots=True)
class FetchPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchResult:
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRegion = b""  # a FileRegion for zero-copy reads: the caller releases it
    last_stable_offset: int = -1
    preferred_read_replica: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None  # (producer id, first offset), read_committed only


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, metadata: MetadataCache, time: Time,
                 default_log_config: LogConfig, *, replica_lag_time_max_ms: int = 30_000,
                 metrics: BrokerMetrics | None = None, replication_quota_window: tuple[int, int] = (11, 1)) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.time = time
        self.default_log_config = default_log_config
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.rack_aware_selector = False  # replica.selector.class = RackAwareReplicaSelector (KIP-392)
        self.metrics = metrics  # BrokerTopicMetrics of appends, ISR shrinks / expands
        self.partitions: dict[TopicPartition, Partition] = {}
        self.offline_partitions: set[TopicPartition] = set()  # their log dir failed (KIP-112)
        self.alter_partition: AlterPartitionCallback | None = None
        self.fetcher_manager: ReplicaFetcherManagerLike | None = None
        # KIP-890 part 1 (transaction.partition.verification.enable): a transaction's first batch in a partition is
        # appended only once its coordinator confirmed the partition is in the producer's ongoing transaction.
        self.txn_verifier: AddPartitionsToTxnManager | None = None
        self.transaction_verification_enabled = True
        self.controller_epoch = -1
        # (partitions this broker now leads, partitions it now follows): the coordinators load / unload.
        self.on_leadership_change: Callable[[list[TopicPartition], list[TopicPartition]], None] | None = None
        self._configs: dict[str, LogConfig] = {}
        # replication throttles (KIP-73): rates are dynamic broker configs, throttled replicas topic configs
        window_num, window_s = replication_quota_window
        registry = metrics.metrics if metrics is not None else None  # byte-rate of type=Leader/FollowerReplication
        self.leader_quota = ReplicationQuotaManager(
            LEADER, node_id, lambda topic: self.log_config(topic).leader_replication_throttled_replicas,
            metrics=registry, window_num=window_num, window_size_seconds=window_s, time=time)
        self.follower_quota = ReplicationQuotaManager(
            FOLLOWER, node_id, lambda topic: self.log_config(topic).follower_replication_throttled_replicas,
            metrics=registry, window_num=window_num, window_size_seconds=window_s, time=time)
        # replica.alter.log.dirs.io.max.bytes.per.second: every partition's copy counts (Kafka's AlterLogDirs quota)
        self.alter_log_dirs_quota = ReplicationQuotaManager(
            ALTER_LOG_DIRS, node_id, lambda _topic: ("*",), metrics=registry, window_num=window_num,
            window_size_seconds=window_s, time=time)
        self.alter_log_dirs = ReplicaAlterLogDirsManager(self)  # replicas moving between log dirs (KIP-113)
        self._fetch_waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._produce_waiters: dict[TopicPartition, list[tuple[int, int, asyncio.Future[int]]]] = {}

    # -- logs and configs -------------------------------------------------------------------------------------
    def log_config(self, topic: str) -> LogConfig:
        cfg = self._configs.get(topic)
        if cfg is None:
            info = self.metadata.topic(topic)
            cfg = LogConfig.from_props(info.configs if info else {}, self.default_log_config)
            self._configs[topic] = cfg
        return cfg

    def default_log_config_changed(self, config: LogConfig) -> None:
        """New broker defaults (a dynamic broker config): every hosted log takes them where its topic has no
        override of its own (Kafka's ``DynamicLogConfig.reconfigure``)."""
        self.default_log_config = config
        self.log_manager.default_config = config
        self._configs.clear()
        for topic in sorted({tp.topic for tp, _ in self.log_manager.all_logs()}):
            self.log_manager.update_topic_config(topic, self.log_config(topic))

    def topic_config_changed(self, topic: str) -> None:
        self._configs.pop(topic, None)
        self.log_manager.update_topic_config(topic, self.log_config(topic))

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def get_log(self, tp: TopicPartition) -> Log | None:
        p = self.partitions.get(tp)
        return p.log if p is not None else None

    def leader_partition(self, tp: TopicPartition) -> Partition:
        """The partition when this broker leads it; raises NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION."""
        p = self.partitions.get(tp)
        if p is None:
            if tp in self.offline_partitions:
                raise _error(ErrorCode.KAFKA_STORAGE_ERROR, _offline_message(tp, self.node_id))
            if self.metadata.partition_state(tp) is not None:
                raise _error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"Broker {self.node_id} does not host {tp}")
            raise _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if not p.is_leader:
            raise _error(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         f"Leader not local for partition {tp} on broker {self.node_id}")
        return p

    def _get_or_create_partition(self, tp: TopicPartition, is_new: bool = True) -> Partition:
        p = self.partitions.get(tp)
        if p is None:
            if tp in self.offline_partitions:
                raise _error(ErrorCode.KAFKA_STORAGE_ERROR, _offline_message(tp, self.node_id))
            lg = self.log_manager.get_or_create_log(tp, self.log_config(tp.topic), is_new=is_new)
            p = Partition(tp, lg, self.node_id)
            p.alter_partition = self.alter_partition
            p.on_hw_change = self._on_hw_change
            p.on_isr_change = self.metrics.isr_changed if self.metrics is not None else None
            self.partitions[tp] = p
            if self.log_manager.future_log(tp) is not None:  # a move to another log dir the broker stopped in
                self.alter_log_dirs.resume(tp)
        return p

    # -- standalone: this broker leads everything ------------------------------------------------------------
    def open_standalone(self) -> None:
        """Lead every partition the registry lists; delete logs whose topic no longer exists."""
        known = {t.name: t for t in self.metadata.topics()}
        for tp, _lg in list(self.log_manager.all_logs()):
            info = known.get(tp.topic)
            if info is None or tp.partition >= info.num_partitions:
                log.info("deleting log of %s: its topic was deleted", tp)
                self.log_manager.delete_log(tp)
        for info in known.values():
            self.lead_locally(info)

    def lead_locally(self, info: TopicInfo) -> None:
        """Standalone: become leader of every partition of ``info`` (ISR = this broker). The logs of new partitions
        exist already (the admin manager opens them first); a partition whose log is missing while a log dir is
        offline stays offline (its log may be in that dir)."""
        now = self.time.milliseconds()
        for i, st in enumerate(info.partitions):
            tp = TopicPartition(info.name, i)
            try:
                p = self._get_or_create_partition(tp, is_new=False)
            except KafkaStorageError as e:
                log.error("%s stays offline: %s", tp, e)
                self.offline_partitions.add(tp)
                self.metadata.replica_offline(tp)
                continue
            p.make_leader(LeaderAndIsr(st.leader, st.leader_epoch, list(st.isr), 0, list(st.replicas)), now)

    def log_manager_delete(self, tps: Iterable[TopicPartition]) -> None:
        """Remove logs that were created for a topic change that then failed (never led, never visible)."""
        for tp in tps:
            try:
                self.log_manager.delete_log(tp)
            except OSError as e:
                log.warning("could not remove the log of %s after a failed change: %s", tp, e)

    def delete_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._configs.pop(tp.topic, None)
            self.offline_partitions.discard(tp)  # (an offline log stays in its dir: nothing to delete now)
            p = self.partitions.pop(tp, None)
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partitions([tp])
            if p is not None:
                self._fail_produce_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.log_manager.delete_log(tp)
            self._wake_fetches(tp)
            if self.metrics is not None and not any(t.topic == tp.topic for t in self.partitions):
                self.metrics.topic_stats.remove_topic(tp.topic)

    # -- cluster: the controller's decisions ------------------------------------------------------------------
    def become_leader_or_follower(self, controller_epoch: int,
                                  states: list[tuple[TopicPartition, LeaderAndIsr]]) -> dict[TopicPartition, int]:
        """Apply LeaderAndIsr; returns an error code per partition (Kafka's ``becomeLeaderOrFollower``)."""
        if controller_epoch < self.controller_epoch:
            return dict.fromkeys((tp for tp, _ in states), ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = controller_epoch
        now = self.time.milliseconds()
        errors: dict[TopicPartition, int] = {}
        followers: dict[TopicPartition, tuple[int, int]] = {}
        became_leader: list[TopicPartition] = []
        became_follower: list[TopicPartition] = []
        for tp, st in states:
            if self.node_id not in st.replicas:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            existing = self.partitions.get(tp)
            if existing is not None and st.leader_epoch < existing.leader_epoch:
                log.info("%s: ignoring LeaderAndIsr with stale leader epoch %d < %d", tp, st.leader_epoch,
                         existing.leader_epoch)
                errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                continue
            try:
                p = self._get_or_create_partition(tp, st.is_new)
            except (OSError, KafkaError) as e:
                log.error("%s: cannot open the log: %s", tp, e)
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if st.leader == self.node_id:
                if self.fetcher_manager is not None:
                    self.fetcher_manager.remove_partitions([tp])
                if p.make_leader(st, now):
                    became_leader.append(tp)
                    log.info("%s: became leader at epoch %d, ISR %s, LEO %d, HW %d", tp, st.leader_epoch,
                             st.isr, p.log_end_offset, p.high_watermark)
            else:
                was_leader = p.is_leader
                changed = p.make_follower(st)
                if was_leader:
                    self._fail_produce_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                became_follower.append(tp)
                if changed and st.leader >= 0:
                    followers[tp] = (st.leader, st.leader_epoch)
                    log.info("%s: following broker %d at epoch %d", tp, st.leader, st.leader_epoch)
                elif st.leader < 0 and self.fetcher_manager is not None:
                    self.fetcher_manager.remove_partitions([tp])
            self._wake_fetches(tp)
            errors[tp] = ErrorCode.NONE
        if followers and self.fetcher_manager is not None:
            self.fetcher_manager.add_partitions(followers)
        if (became_leader or became_follower) and self.on_leadership_change is not None:
            self.on_leadership_change(became_leader, became_follower)
        return errors

    def stop_replicas(self, controller_epoch: int, tps: list[tuple[TopicPartition, bool]]) -> dict[TopicPartition, int]:
        """StopReplica: stop fetching (and delete the log when asked)."""
        if controller_epoch < self.controller_epoch:
            return dict.fromkeys((tp for tp, _ in tps), ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = controller_epoch
        out: dict[TopicPartition, int] = {}
        for tp, delete in tps:
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partitions([tp])
            if delete:
                self.delete_partitions([tp])
            else:
                p = self.partitions.get(tp)
                if p is not None:
                    p.leader_id = -1
                    self._fail_produce_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            out[tp] = ErrorCode.NONE
        return out

    def metadata_updated(self, deleted: list[TopicPartition]) -> None:
        """After UpdateMetadata: drop deleted partitions, wake fetches that wait on a leadership change."""
        if deleted:
            self.delete_partitions([tp for tp in deleted if tp in self.partitions])
        for tp in list(self._fetch_waiters):
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                self._wake_fetches(tp)

    def set_alter_partition(self, cb: AlterPartitionCallback | None) -> None:
        self.alter_partition = cb
        for p in self.partitions.values():
            p.alter_partition = cb

    def maybe_shrink_isr(self) -> None:
        now = self.time.milliseconds()
        for p in list(self.partitions.values()):
            if p.is_leader and len(p.replicas) > 1:
                p.maybe_shrink_isr(now, self.replica_lag_time_max_ms)

    # -- append -----------------------------------------------------------------------------------------------
    def append_local(self, tp: TopicPartition, records: memoryview | bytes, required_acks: int = 1,
                     origin: AppendOrigin = AppendOrigin.CLIENT, received_bytes: int | None = None,
                     records_checked: bool = False, verification_guard: VerificationGuard | None = None,
                     ) -> AppendResult:
        """``received_bytes``: the size the client sent, when ``records`` were recompressed since (BytesInPerSec
        counts what came in, as Kafka's); ``records_checked``: ``check_client_records`` made them;
        ``verification_guard``: see :meth:`_verify_transactions`."""
        result = self._append_local(tp, records, required_acks, origin, records_checked, verification_guard)
        if self.metrics is not None:
            self.metrics.topic_stats.record_append(tp.topic, result,
                                                   len(records) if received_bytes is None else received_bytes)
        return result

    def _append_local(self, tp: TopicPartition, records: memoryview | bytes, required_acks: int,
                      origin: AppendOrigin, records_checked: bool = False,
                      verification_guard: VerificationGuard | None = None) -> AppendResult:
        try:
            p = self.leader_partition(tp)
            min_isr = self.log_config(tp.topic).min_insync_replicas
            info = p.append_records_to_leader(records, required_acks, min_isr, self.time.milliseconds(), origin,
                                              records_checked=records_checked, verification_guard=verification_guard)
        except BrokerResponseError as e:
            if self.maybe_log_dir_failure(tp, e):
                return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, None, str(e))
            log.info("rejected produce to %s: %s", tp, e)
            return AppendResult.refused(e)
        except KafkaError as e:
            log.warning("produce to %s failed: %s", tp, e)
            return AppendResult(ErrorCode.UNKNOWN_SERVER_ERROR, None, str(e))
        except OSError as e:
            log.error("produce to %s failed with a storage error: %s", tp, e)
            self.maybe_log_dir_failure(tp, e)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, None, f"I/O error: {e}")
        self._wake_fetches(tp)
        return AppendResult(ErrorCode.NONE, info, None)

    async def _checked_in_worker(self, entries: dict[TopicPartition, memoryview | bytes]
                                 ) -> dict[TopicPartition, memoryview | bytes | AppendResult]:
        """The partitions whose checks take a while (a topic codec to compress to, a gzip batch to decompress:
        ``needs_worker_check``) checked in worker threads (``check_client_records``): the records to append with
        ``records_checked``, or the error to answer with. The event loop serves other connections meanwhile;
        this connection's next request waits, so appends keep their order."""
        jobs: dict[TopicPartition, asyncio.Future[bytes | bytearray | memoryview]] = {}
        for tp, recs in entries.items():
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                continue  # the append answers with the routing error
            if needs_worker_check(recs, config := self.log_config(tp.topic)):
                # (the loop is looked up only here: get_running_loop costs a getpid() system call)
                jobs[tp] = asyncio.get_running_loop().run_in_executor(
                    None, check_client_records, recs, config, self.time.milliseconds())
        checked: dict[TopicPartition, memoryview | bytes | AppendResult] = {}
        for tp, job in jobs.items():
            try:
                checked[tp] = await job
            except BrokerResponseError as e:
                log.info("rejected produce to %s: %s", tp, e)
                checked[tp] = AppendResult.refused(e)
            except Exception:  # noqa: BLE001 - the append checks (or refuses) the batches itself
                log.exception("checking a produce payload for %s in a worker failed; the append does it", tp)
        return checked

    async def append_records(self, entries: dict[TopicPartition, memoryview | bytes], required_acks: int,
                             timeout_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT,
                             on_parked: Callable[[], None] | None = None, transactional_id: str | None = None,
                             ) -> dict[TopicPartition, AppendResult]:
        """Append to each leader partition; with acks=-1 wait until the ISR has every record (DelayedProduce).

        An append that reached ``flush.messages`` is answered once the log flusher has fsynced it (Kafka flushes
        inside the append, before the response): the event loop goes on serving others meanwhile.
        ``on_parked`` is called once the appends are done and the request waits for the ISR: the socket server
        then lets the connection's next Produce append while this one waits. Client records bound for a topic with a
        ``compression.type`` of its own, or with a gzip batch, are checked in a worker thread first
        (:meth:`_checked_in_worker`). A transactional producer's (``transactional_id``) batches are verified with
        the coordinator first where their transaction has no batch yet (:meth:`_verify_transactions`)."""
        checked = await self._checked_in_worker(entries) if origin is AppendOrigin.CLIENT else {}
        guards: dict[TopicPartition, VerificationGuard] = {}
        if transactional_id is not None and origin is AppendOrigin.CLIENT and self.transaction_verification_enabled:
            checked.update(await self._verify_transactions(transactional_id, entries, checked, guards))
        results = {}
        for tp, recs in entries.items():
            done = checked.get(tp)
            if isinstance(done, AppendResult):  # refused by the check
                if self.metrics is not None:
                    self.metrics.topic_stats.record_append(tp.topic, done, len(recs))
                results[tp] = done
            else:
                results[tp] = self.append_local(tp, recs if done is None else done, required_acks, origin,
                                                len(recs), records_checked=done is not None,
                                                verification_guard=guards.get(tp))
        for tp, r in results.items():
            if r.info is not None and r.info.flushed is not None:
                results[tp] = await self._await_flush(tp, r)
        if required_acks != -1:
            return results
        waits: dict[TopicPartition, asyncio.Future[int]] = {}
        for tp, r in results.items():
            if r.error_code or r.info is None or r.info.last_offset < 0:
                continue
            fut = self.wait_replicated(tp, r.info.last_offset + 1)
            if fut is not None:
                waits[tp] = fut
        if waits:
            if on_parked is not None:
                on_parked()
            parked_ns = self.time.nanoseconds()
            done, _pending = await asyncio.wait(waits.values(), timeout=max(timeout_ms, 0) / 1000.0)
            add_remote_time(self.time.nanoseconds() - parked_ns)
            for tp, fut in waits.items():
                if fut in done:
                    code = fut.result()
                else:
                    fut.cancel()
                    code = ErrorCode.REQUEST_TIMED_OUT
                if code:
                    results[tp] = AppendResult(code, results[tp].info, None)
        return results

    async def _verify_transactions(self, transactional_id: str, entries: dict[TopicPartition, memoryview | bytes],
                                   checked: dict[TopicPartition, memoryview | bytes | AppendResult],
                                   guards: dict[TopicPartition, VerificationGuard]) -> dict[TopicPartition, AppendResult]:
        """KIP-890 part 1 (Kafka's verification in ``ReplicaManager.appendRecords``): for each transactional batch
        (one per partition, Produce v3+) a guard goes into ``guards``; where the producer has no ongoing
        transaction the coordinator is asked whether the partition is in its transaction. Returns the refusals:
        INVALID_TXN_STATE (not in it: a late request of a transaction that ended), NOT_ENOUGH_REPLICAS (the
        coordinator could not say: retriable), or the coordinator's fencing error. The append itself fails if a
        marker ended the transaction meanwhile (the guard is gone)."""
        unverified: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp, recs in entries.items():
            p = self.partitions.get(tp)
            if isinstance(checked.get(tp), AppendResult) or p is None or not p.is_leader or len(recs) < HEADER_SIZE:
                continue  # refused already, or the append answers with the routing error
            h = parse_header(recs)
            if not h.is_transactional or h.is_control or h.producer_id < 0:
                continue
            guards[tp] = guard = p.log.maybe_start_verification(h.producer_id, h.producer_epoch)
            if guard is not ONGOING:
                unverified.setdefault((h.producer_id, h.producer_epoch), []).append(tp)
        if not unverified:
            return {}
        if self.txn_verifier is None:
            return {tp: AppendResult(ErrorCode.NOT_ENOUGH_REPLICAS, None, "No transaction coordinator to verify "
                                     "the partition with") for tps in unverified.values() for tp in tps}
        refused: dict[TopicPartition, AppendResult] = {}
        for (pid, epoch), tps in unverified.items():
            codes = await self.txn_verifier.verify(transactional_id, pid, epoch, tps)
            for tp, code in codes.items():
                if code == ErrorCode.INVALID_TXN_STATE:
                    refused[tp] = AppendResult(code, None, "Partition was not added to the transaction")
                elif code in _VERIFICATION_RETRIABLE:
                    refused[tp] = AppendResult(
                        ErrorCode.NOT_ENOUGH_REPLICAS, None, "Unable to verify the partition has been added to the "
                        f"transaction. Underlying error: {error_class(code).name}")
                elif code != ErrorCode.NONE:
                    refused[tp] = AppendResult(code, None, None)
        return refused

    async def _await_flush(self, tp: TopicPartition, r: AppendResult) -> AppendResult:
        assert r.info is not None and r.info.flushed is not None
        parked_ns = self.time.nanoseconds()
        try:
            await asyncio.wrap_future(r.info.flushed)
        except (KafkaError, OSError) as e:
            log.error("produce to %s: the flush failed: %s", tp, e)
            self.maybe_log_dir_failure(tp, e)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, r.info, f"I/O error: {e}")
        finally:
            add_remote_time(self.time.nanoseconds() - parked_ns)
        return r

    def wait_replicated(self, tp: TopicPartition, required_offset: int) -> asyncio.Future[int] | None:
        """None when the ISR already has everything below ``required_offset``, else a future of the error code."""
        p = self.partitions.get(tp)
        min_isr = self.log_config(tp.topic).min_insync_replicas
        code = p.check_enough_replicas_reached_offset(required_offset, min_isr) if p is not None \
            else ErrorCode.NOT_LEADER_OR_FOLLOWER
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if code is not None:
            if code == ErrorCode.NONE:
                return None
            fut.set_result(code)
            return fut
        self._produce_waiters.setdefault(tp, []).append((required_offset, min_isr, fut))
        return fut

    def _on_hw_change(self, p: Partition) -> None:
        waiters = self._produce_waiters.get(p.tp)
        if waiters:
            keep = []
            for required, min_isr, fut in waiters:
                if fut.done():
                    continue
                code = p.check_enough_replicas_reached_offset(required, min_isr)
                if code is None:
                    keep.append((required, min_isr, fut))
                else:
                    fut.set_result(code)
            if keep:
                self._produce_waiters[p.tp] = keep
            else:
                del self._produce_waiters[p.tp]
        self._wake_fetches(p.tp)

    def _fail_produce_waiters(self, tp: TopicPartition, code: int) -> None:
        for _r, _m, fut in self._produce_waiters.pop(tp, []):
            if not fut.done():
                fut.set_result(code)

    # -- fetch ------------------------------------------------------------------------------------------------
    def read(self, replica_id: int, part: FetchPartition, max_bytes: int, min_one: bool, *,
             client_rack: str | None = None, follower_reads: bool = False, isolation_level: int = 0,
             zero_copy: bool = False) -> FetchResult:
        """One partition's read for Fetch: consumers up to the HW (read_committed: up to the last stable offset,
        with the aborted transactions the records overlap), followers up to the LEO.

        KIP-392: a consumer that sends its rack (Fetch v11+, ``follower_reads``) may read from a follower, up to
        the follower's high watermark; with ``replica.selector.class`` set to the rack-aware selector, the leader
        answers such a consumer with the in-sync replica of its rack as ``preferred_read_replica``.

        ``zero_copy``: records come back as a :class:`FileRegion` (sent with ``sendfile`` on plaintext
        connections) instead of bytes; the caller must ``release()`` it."""
        p = self.partitions.get(part.tp)
        if p is None:
            code = ErrorCode.KAFKA_STORAGE_ERROR if part.tp in self.offline_partitions \
                else ErrorCode.NOT_LEADER_OR_FOLLOWER if self.metadata.partition_state(part.tp) is not None \
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return FetchResult(code)
        if part.current_leader_epoch >= 0 and part.current_leader_epoch != p.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if part.current_leader_epoch < p.leader_epoch \
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            return FetchResult(code, p.high_watermark, p.log.log_start_offset)
        if not p.is_leader:
            if not (follower_reads and replica_id < 0 and p.leader_id >= 0 and self.node_id in p.replicas):
                return FetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, p.high_watermark, p.log.log_start_offset)
        elif replica_id < 0 and client_rack and self.rack_aware_selector:
            preferred = self._preferred_read_replica(p, client_rack)
            if preferred != self.node_id:
                return FetchResult(ErrorCode.NONE, p.high_watermark, p.log.log_start_offset, b"", p.high_watermark,
                                   preferred)
        is_follower = replica_id >= 0
        lg = p.log
        hw = p.high_watermark
        lso = lg.last_stable_offset
        read_committed = isolation_level == 1 and not is_follower
        max_offset = lg.log_end_offset if is_follower else lso if read_committed else hw
        records: bytes | memoryview | FileRegion = b""
        code = ErrorCode.NONE
        if part.fetch_offset != max_offset or part.fetch_offset > lg.log_end_offset:
            try:
                data = lg.read(part.fetch_offset, max(max_bytes, 0), max_offset=max_offset, min_one_message=min_one,
                               zero_copy=zero_copy)
                records = data.records or b""
            except BrokerResponseError as e:
                code = e.errno
                self.maybe_log_dir_failure(part.tp, e)
        if is_follower and code == ErrorCode.NONE:
            p.update_follower_fetch_state(replica_id, part.fetch_offset, self.time.milliseconds())
            hw = p.high_watermark
        aborted = None
        if read_committed and records:
            aborted = [(a.producer_id, a.first_offset)
                       for a in lg.collect_aborted_transactions(part.fetch_offset, max_offset)]
        return FetchResult(code, hw, lg.log_start_offset, records, lso, aborted_transactions=aborted)

    def _preferred_read_replica(self, p: Partition, client_rack: str) -> int:
        """Kafka's RackAwareReplicaSelector: the leader when it is in the client's rack, else an in-sync replica
        there (the most caught up), else the leader."""
        me = self.metadata.broker(self.node_id)
        if me is not None and me.rack == client_rack:
            return self.node_id
        candidates = []
        for r in p.isr:
            b = self.metadata.broker(r)
            if r != self.node_id and b is not None and b.rack == client_rack:
                st = p.remote.get(r)
                candidates.append((st.log_end_offset if st is not None else -1, -r, r))
        return max(candidates)[2] if candidates else self.node_id

    def _wake_fetches(self, tp: TopicPartition) -> None:
        waiters = self._fetch_waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_data(self, tps: list[TopicPartition], timeout_s: float) -> None:
        """Park until one of ``tps`` gets an append or an HW move, or the timeout passes (DelayedFetch)."""
        if timeout_s <= 0 or not tps:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._fetch_waiters.setdefault(tp, set()).add(fut)
        parked_ns = self.time.nanoseconds()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            add_remote_time(self.time.nanoseconds() - parked_ns)
            for tp in tps:
                s = self._fetch_waiters.get(tp)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._fetch_waiters[tp]

    # -- failed log dirs (KIP-112) ----------------------------------------------------------------------------
    def maybe_log_dir_failure(self, tp: TopicPartition, exc: BaseException) -> bool:
        """Report ``tp``'s log dir to the failure channel when ``exc`` is an I/O failure; whether it was."""
        p = self.partitions.get(tp)
        if p is None:
            return False
        return self.log_manager.report_failure(os.path.dirname(p.log.dir), f"an operation on {tp} failed", exc)

    def handle_log_dir_failure(self, log_dir: str) -> list[TopicPartition]:
        """``log_dir`` failed: its partitions go offline (Kafka's ``ReplicaManager.handleLogDirFailure``). Their
        fetchers and moves stop, parked acks=all produces answer KAFKA_STORAGE_ERROR, parked fetches wake, the
        coordinators give up the partitions this broker led; returns the partitions taken offline."""
        log_dir = os.path.abspath(log_dir)
        hosted = [tp for tp, p in self.partitions.items() if os.path.dirname(p.log.dir) == log_dir]
        moving = [tp for tp, lg in self.log_manager.all_future_logs() if os.path.dirname(lg.dir) == log_dir]
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(hosted)
        for tp in hosted + moving:
            self.alter_log_dirs.remove_partition(tp)
        self.log_manager.handle_log_dir_failure(log_dir)
        led = []
        for tp in hosted:
            p = self.partitions.pop(tp)
            if p.is_leader:
                led.append(tp)
            self.offline_partitions.add(tp)
            self.metadata.replica_offline(tp)
            self._fail_produce_waiters(tp, ErrorCode.KAFKA_STORAGE_ERROR)
            self._wake_fetches(tp)
        log.warning("broker %d stopped serving partitions %s and moving %s: they are in the failed log dir %s",
                    self.node_id, ", ".join(map(str, hosted)) or "none", ", ".join(map(str, moving)) or "none",
                    log_dir)
        if led and self.on_leadership_change is not None:
            self.on_leadership_change([], led)
        return hosted

    # -- lifecycle --------------------------------------------------------------------------------------------
    def checkpoint_high_watermarks(self) -> None:
        fn = getattr(self.log_manager, "checkpoint_high_watermarks", None)
        if fn is not None:
            fn()

    def complete_delayed_operations(self) -> None:
        """Shutting down: answer every parked request now (fetches with what they have, acks=all produces with
        NOT_LEADER_OR_FOLLOWER, so the producer retries on the new leader)."""
        for waiters in self._fetch_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._fetch_waiters.clear()
        for tp in list(self._produce_waiters):
            self._fail_produce_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def shutdown(self) -> None:
        self.alter_log_dirs.shutdown()
        if self.fetcher_manager is not None:
            self.fetcher_manager.shutdown()
        self.complete_delayed_operations()


class ReplicaFetcherManagerLike:
    """What the replica manager needs of the fetcher manager (see ``replica_fetcher.ReplicaFetcherManager``)."""

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None: ...

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None: ...

    def shutdown(self) -> None: ...


def _offline_message(tp: TopicPartition, node_id: int) -> str:
    return f"Partition {tp} is in an offline log directory on broker {node_id}"


def _error(code: int, message: str) -> BrokerResponseError:
    from strom.common.errors import for_code

    return for_code(code, message)
