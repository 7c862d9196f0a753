"""The broker's ``__consumer_offsets`` topic as the group coordinator writes and replays it.

Kafka counterpart: the parts of ``GroupMetadataManager`` that go through ``ReplicaManager.appendRecords`` (one
record batch per store, written with the coordinator's clock) and ``doLoadGroupsAndOffsets`` reading a partition
from its log start to its end, plus the internal-topic creation of ``AutoTopicCreationManager``
(``cleanup.policy=compact``, ``offsets.topic.num.partitions`` partitions, ``offsets.topic.segment.bytes``).

The topic is created on first use (the first write or FindCoordinator), as Kafka does. Event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError
from strom.common.structs import TopicPartition
from strom.record.batch import ControlRecordType
from strom.record.builder import MemoryRecordsBuilder
from strom.record.records import MemoryRecords
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME, GroupConfig, OffsetConfig
from strom.storage.log_validator import AppendOrigin

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.broker_config import BrokerConfig
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.storage.log import Log
    from strom.storage.producer_state import VerificationGuard

__all__ = ["ReplicaOffsetsLog", "create_group_coordinator"]

log = logging.getLogger("strom.coordinator")

_READ_CHUNK = 1 << 20


class ReplicaOffsetsLog:
    """Appends and reads ``__consumer_offsets`` partitions through the broker's replica manager.

    The topic itself is created by FindCoordinator (Kafka creates it there too); a write before it exists, or
    to a partition this broker does not lead, answers COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR.
    """

    def __init__(self, replica_manager: ReplicaManager, metadata: MetadataCache, time: Time, config: OffsetConfig,
                 topic: str = GROUP_METADATA_TOPIC_NAME) -> None:
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.time = time
        self.config = config
        self.topic = topic
        self._appended: dict[int, int] = {}  # partition -> the end offset of this coordinator's last append
        # partition -> producer id -> records of a transaction still open at the end of the last read (its marker
        # comes later: TxnOffsetCommit records whose commit or abort is decided after a reload).
        self.open_txn_records: dict[int, dict[int, list[tuple[bytes | None, bytes | None]]]] = {}

    def exists(self) -> bool:
        return self.topic in self.metadata

    def _log(self, partition: int) -> Log | None:
        return self.replica_manager.get_log(TopicPartition(self.topic, partition)) if self.exists() else None

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int = -1,
               producer_epoch: int = -1, verification_guard: VerificationGuard | None = None) -> int:
        """Append ``records`` as one batch; with a producer id, as part of that producer's transaction
        (TxnOffsetCommit: the records count once the transaction's COMMIT marker follows them; with the guard of
        its verification, KIP-890)."""
        if not self.exists():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        builder = MemoryRecordsBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                       is_transactional=producer_id >= 0)
        now = self.time.milliseconds()
        for key, value in records:
            builder.append(now, key, value)
        # (the coordinator's own writes, as Kafka's: a transactional batch here has no sequence numbers). acks=-1,
        # as Kafka's coordinators write (``offsets.commit.required.acks``, the transaction log's enforced acks): an
        # ISR below the partition's min.insync.replicas refuses the write before it reaches the log. Written
        # anyway and refused only after, it stayed in the log while the coordinator's cache and its client went
        # on without it, and the next leader to load the partition took effect of a state nobody was told of.
        r = self.replica_manager.append_local(TopicPartition(self.topic, partition), builder.build(),
                                              required_acks=-1, origin=AppendOrigin.COORDINATOR,
                                              verification_guard=verification_guard)
        if r.error_code == ErrorCode.NONE and r.info is not None:
            self._appended[partition] = r.info.last_offset + 1
        if r.error_code:
            log.warning("append to %s-%d failed with error %d: %s", self.topic, partition, r.error_code,
                        r.error_message)
        return r.error_code

    async def wait_replicated(self, partition: int, timeout_ms: int) -> int:
        """Wait until every in-sync replica has this coordinator's writes to ``partition`` (Kafka writes group
        records with acks=-1, ``offsets.commit.required.acks``); the error code (0 once replicated)."""
        required = self._appended.get(partition)
        if required is None:
            return ErrorCode.NONE
        fut = self.replica_manager.wait_replicated(TopicPartition(self.topic, partition), required)
        if fut is None:
            return ErrorCode.NONE
        try:
            return await asyncio.wait_for(fut, max(timeout_ms, 1) / 1000)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every data record of the partition in the order it took effect; control batches are skipped and
        transactional records are held back until their producer's marker: yielded at a COMMIT, dropped at an
        ABORT, left in ``open_txn_records`` when no marker follows yet."""
        lg = self._log(partition)
        open_txns: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.open_txn_records[partition] = open_txns
        if lg is None:
            return
        offset, end = lg.log_start_offset, lg.log_end_offset
        while offset < end:
            data = lg.read(offset, _READ_CHUNK, max_offset=end, min_one_message=True)
            if not data.records:
                break
            progressed = offset
            for batch in MemoryRecords(data.records).batches():
                if batch.is_control:
                    if batch.is_transactional and batch.producer_id in open_txns:
                        held = open_txns.pop(batch.producer_id)
                        try:
                            committed = batch.control_record_type() == ControlRecordType.COMMIT
                        except KafkaError:
                            committed = False
                        if committed:
                            yield from held
                elif batch.is_transactional:
                    open_txns.setdefault(batch.producer_id, []).extend(
                        (r.key, r.value) for r in batch.records() if r.offset >= offset)
                else:
                    for record in batch.records():
                        if record.offset >= offset:
                            yield record.key, record.value
                progressed = max(progressed, batch.next_offset)
            if progressed <= offset:
                log.warning("%s-%d: no progress reading at offset %d, stopping the load", self.topic, partition, offset)
                break
            offset = progressed


def create_group_coordinator(config: BrokerConfig, time: Time, metadata: MetadataCache,
                             replica_manager: ReplicaManager) -> GroupCoordinator:
    """The group coordinator of ``broker``, configured from its ``group.*`` / ``offsets.*`` keys.

    When ``__consumer_offsets`` exists its partition count wins over ``offsets.topic.num.partitions``, as in
    Kafka: groups must keep mapping to the partitions that hold their records.
    """
    offset_config = OffsetConfig.from_broker_config(config)
    existing = metadata.topic(GROUP_METADATA_TOPIC_NAME)
    if existing is not None and existing.num_partitions != offset_config.offsets_topic_num_partitions:
        log.warning("%s has %d partition(s); offsets.topic.num.partitions=%d is ignored", GROUP_METADATA_TOPIC_NAME,
                    existing.num_partitions, offset_config.offsets_topic_num_partitions)
        offset_config = dataclasses.replace(offset_config, offsets_topic_num_partitions=existing.num_partitions)
    offsets_log = ReplicaOffsetsLog(replica_manager, metadata, time, offset_config)
    return GroupCoordinator(GroupConfig.from_broker_config(config), offset_config, time, offsets_log)
