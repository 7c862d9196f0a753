"""The broker's ``__consumer_offsets`` topic as the group coordinator writes and replays it.

Kafka counterpart: the parts of ``GroupMetadataManager`` that go through ``ReplicaManager.appendRecords`` (one
record batch per store, written with the coordinator's clock) and ``doLoadGroupsAndOffsets`` reading a partition
from its log start to its end, plus the internal-topic creation of ``AutoTopicCreationManager``
(``cleanup.policy=compact``, ``offsets.topic.num.partitions`` partitions, ``offsets.topic.segment.bytes``).

The topic is created on first use (the first write or FindCoordinator), as Kafka does. Event loop only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError
from strom.common.structs import TopicPartition
from strom.record.builder import MemoryRecordsBuilder
from strom.record.records import MemoryRecords
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME, GroupConfig, OffsetConfig

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer

__all__ = ["ReplicaOffsetsLog", "create_group_coordinator"]

log = logging.getLogger("strom.coordinator")

_READ_CHUNK = 1 << 20


class ReplicaOffsetsLog:
    """Appends and reads ``__consumer_offsets`` partitions through the broker's replica manager."""

    def __init__(self, broker: BrokerServer, config: OffsetConfig, topic: str = GROUP_METADATA_TOPIC_NAME) -> None:
        self.broker = broker
        self.config = config
        self.topic = topic

    def exists(self) -> bool:
        assert self.broker.metadata is not None
        return self.topic in self.broker.metadata

    def ensure_topic(self) -> None:
        """Create the compacted internal topic when it does not exist yet."""
        md, rm = self.broker.metadata, self.broker.replica_manager
        assert md is not None and rm is not None
        info = md.topic(self.topic)
        if info is None:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(self.config.offsets_topic_segment_bytes),
                       "compression.type": "producer"}
            info = md.create_topic(self.topic, self.config.offsets_topic_num_partitions, configs)
            rm.ensure_logs(info)
            log.info("created internal topic %s with %d partition(s)", self.topic, info.num_partitions)

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        rm = self.broker.replica_manager
        if rm is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            self.ensure_topic()
        except (OSError, KafkaError) as e:
            log.error("cannot create %s: %s", self.topic, e)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        builder = MemoryRecordsBuilder()
        now = self.broker.time.milliseconds()
        for key, value in records:
            builder.append(now, key, value)
        code, _info, message = rm.append(TopicPartition(self.topic, partition), builder.build())
        if code:
            log.warning("append to %s-%d failed with error %d: %s", self.topic, partition, code, message)
        return code

    def offset_range(self, partition: int) -> tuple[int, int]:
        rm = self.broker.replica_manager
        lg = rm.get_log(TopicPartition(self.topic, partition)) if rm is not None and self.exists() else None
        return (0, 0) if lg is None else (lg.log_start_offset, lg.log_end_offset)

    def delete_before(self, partition: int, offset: int) -> None:
        rm = self.broker.replica_manager
        lg = rm.get_log(TopicPartition(self.topic, partition)) if rm is not None and self.exists() else None
        if lg is not None:
            lg.delete_records_before(offset)

    def read(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Every data record of the partition, oldest first; control batches are skipped."""
        rm = self.broker.replica_manager
        lg = rm.get_log(TopicPartition(self.topic, partition)) if rm is not None and self.exists() else None
        if lg is None:
            return
        offset, end = lg.log_start_offset, lg.log_end_offset
        while offset < end:
            data = lg.read(offset, _READ_CHUNK, max_offset=end, min_one_message=True)
            if not data.records:
                break
            progressed = offset
            for batch in MemoryRecords(data.records).batches():
                if not batch.is_control:
                    for record in batch.records():
                        if record.offset >= offset:
                            yield record.key, record.value
                progressed = max(progressed, batch.next_offset)
            if progressed <= offset:
                log.warning("%s-%d: no progress reading at offset %d, stopping the load", self.topic, partition, offset)
                break
            offset = progressed


def create_group_coordinator(broker: BrokerServer) -> GroupCoordinator:
    """The group coordinator of ``broker``, configured from its ``group.*`` / ``offsets.*`` keys.

    When ``__consumer_offsets`` exists its partition count wins over ``offsets.topic.num.partitions``, as in
    Kafka: groups must keep mapping to the partitions that hold their records.
    """
    offset_config = OffsetConfig.from_broker_config(broker.config)
    existing = broker.metadata.topic(GROUP_METADATA_TOPIC_NAME) if broker.metadata is not None else None
    if existing is not None and existing.num_partitions != offset_config.offsets_topic_num_partitions:
        log.warning("%s has %d partition(s); offsets.topic.num.partitions=%d is ignored", GROUP_METADATA_TOPIC_NAME,
                    existing.num_partitions, offset_config.offsets_topic_num_partitions)
        offset_config = dataclasses.replace(offset_config, offsets_topic_num_partitions=existing.num_partitions)
    offsets_log = ReplicaOffsetsLog(broker, offset_config)
    return GroupCoordinator(GroupConfig.from_broker_config(broker.config), offset_config, broker.time, offsets_log)
