"""The cache of groups and committed offsets, written through to ``__consumer_offsets`` and rebuilt from it.

Kafka counterpart: ``GroupMetadataManager`` — ``storeGroup``, ``storeOffsets``, ``cleanupGroupMetadata``
(tombstones for expired or deleted offsets and dead groups), ``doLoadGroupsAndOffsets`` (replay at start) and
``partitionFor`` (``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``).

Writes are synchronous: an append to the local log is done (and flushed as the log's policy says) when
``append`` returns, so the group coordinator answers right after it. The topic is compacted by the log cleaner
(``cleanup.policy=compact``), as in Kafka: replay keeps the last value of each key and drops keys whose last
record is a tombstone, so it gives the same result on a cleaned log as on the whole history. Event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

import strom.server.coordinator.records as rec
from strom.common.error_codes import ErrorCode
from strom.common.errors import ProtocolError
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.protocol.messages.group_coordinator_records import GroupMetadataValue
from strom.server.coordinator.group_metadata import (
    CommittedOffset,
    GroupMetadata,
    GroupState,
    MemberMetadata,
)
from strom.server.coordinator.offset_config import OffsetConfig

__all__ = ["GroupMetadataManager", "OffsetsLog", "java_string_hash", "partition_for"]

log = logging.getLogger("strom.coordinator")

Record = tuple[bytes, bytes | None]


class OffsetsLog(Protocol):
    """The partitions of ``__consumer_offsets`` as the manager uses them."""

    def append(self, partition: int, records: list[Record]) -> int:
        """Append key/value records (value None = tombstone) as one batch; returns a Kafka error code (0 = ok)."""
        ...

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        """Every key/value in the partition, oldest first (control records and aborted data left out)."""
        ...


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode()``: 31-polynomial over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % n`` (``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def _append_error(code: int, for_offsets: bool) -> int:
    """Map a log append error to what a group API may return (Kafka's storeGroup/storeOffsets mapping)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER,):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if for_offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class GroupMetadataManager:
    def __init__(self, config: OffsetConfig, time: Time, offsets_log: OffsetsLog) -> None:
        self.config = config
        self.time = time
        self.log = offsets_log
        self.groups: dict[str, GroupMetadata] = {}
        self._group_values: dict[str, bytes] = {}  # last GroupMetadataValue written per group (for snapshots)
        self.on_offsets_stored: Callable[[int], None] | None = None  # offset-commit metrics: offsets written

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    # -- cache ------------------------------------------------------------------------------------------------
    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        """Add ``group`` unless one with its id exists; returns the cached one."""
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group: GroupMetadata) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- writes -----------------------------------------------------------------------------------------------
    def store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> int:
        """Write the group's generation, protocol and members (with ``assignment``); returns an error code."""
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            sub = m.metadata(protocol) if protocol is not None and group.protocol_type else b""
            members.append(GroupMetadataValue.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=bytes(sub),
                assignment=bytes(assignment.get(m.member_id, b"")),
            ))
        ts = group.current_state_timestamp
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id, protocol=protocol,
            leader=group.leader_id, current_state_timestamp=ts if ts is not None else -1, members=members,
        )
        record = (rec.group_metadata_key(group.group_id), rec.group_metadata_value(value))
        code = self.log.append(self.partition_for(group.group_id), [record])
        if code:
            log.warning("failed to write metadata of group %s generation %d: error %d", group.group_id,
                        group.generation_id, code)
        else:
            self._group_values[group.group_id] = record[1]
        return _append_error(code, for_offsets=False)

    def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, CommittedOffset]) -> int:
        """Write committed offsets and, once written, make them visible in the group; returns an error code."""
        if not offsets:
            return 0
        records = [(rec.offset_commit_key(group.group_id, tp.topic, tp.partition), rec.offset_commit_value(off))
                   for tp, off in offsets.items()]
        code = self.log.append(self.partition_for(group.group_id), records)
        if code:
            log.warning("failed to write %d offset(s) of group %s: error %d", len(offsets), group.group_id, code)
            return _append_error(code, for_offsets=True)
        group.offsets.update(offsets)
        if self.on_offsets_stored is not None:
            self.on_offsets_stored(len(offsets))
        return 0

    def cleanup_group_metadata(self, groups: Iterable[GroupMetadata],
                               selector: Callable[[GroupMetadata], list[TopicPartition]]) -> int:
        """Drop the offsets ``selector`` picks from each group, and each group left Empty without offsets.

        Writes a tombstone per dropped offset and per dead group. Returns how many offsets were dropped.
        """
        removed_total = 0
        for group in groups:
            removed = [tp for tp in selector(group) if tp in group.offsets]
            for tp in removed:
                del group.offsets[tp]
            if group.is_state(GroupState.EMPTY) and not group.has_offsets():
                log.info("group %s transitioned to Dead in generation %d", group.group_id, group.generation_id)
                group.transition_to(GroupState.DEAD)
            dead = group.is_state(GroupState.DEAD)
            tombstones: list[Record] = [(rec.offset_commit_key(group.group_id, tp.topic, tp.partition), None)
                                        for tp in removed]
            if dead:
                self.remove_group(group)
                self._group_values.pop(group.group_id, None)
                tombstones.append((rec.group_metadata_key(group.group_id), None))
            if tombstones:
                code = self.log.append(self.partition_for(group.group_id), tombstones)
                if code:
                    log.warning("failed to write %d tombstone(s) for group %s: error %d", len(tombstones),
                                group.group_id, code)
            removed_total += len(removed)
        return removed_total

    def cleanup_expired_offsets(self) -> int:
        """Expire offsets past ``offsets.retention.minutes`` (Kafka's ``cleanupGroupMetadata`` task)."""
        now = self.time.milliseconds()
        retention = self.config.offsets_retention_ms
        n = self.cleanup_group_metadata(list(self.groups.values()), lambda g: g.expired_offsets(now, retention))
        if n:
            log.info("removed %d expired offset(s)", n)
        return n

    # -- load -------------------------------------------------------------------------------------------------
    def load(self, partitions: Iterable[int]) -> list[GroupMetadata]:
        """Replay ``__consumer_offsets`` partitions into the cache; returns the groups that have members."""
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        values: dict[str, bytes] = {}
        n_records = 0
        for p in partitions:
            for key_bytes, value_bytes in self.log.read(p):
                if key_bytes is None:
                    continue
                n_records += 1
                try:
                    key = rec.read_key(key_bytes)
                    if isinstance(key, rec.OffsetKey):
                        tp = TopicPartition(key.topic, key.partition)
                        if value_bytes is None:
                            offsets.get(key.group, {}).pop(tp, None)
                        else:
                            offsets.setdefault(key.group, {})[tp] = rec.read_offset_value(value_bytes)
                    elif isinstance(key, rec.GroupKey):
                        if value_bytes is None:
                            values.pop(key.group, None)
                        else:
                            rec.read_group_value(value_bytes)  # unreadable values are skipped here
                            values[key.group] = bytes(value_bytes)
                except ProtocolError as e:
                    log.warning("skipping unreadable record in %s partition %d: %s", "__consumer_offsets", p, e)
        with_members = []
        for group_id in set(values) | {g for g, offs in offsets.items() if offs}:
            raw = values.get(group_id)
            group = self._load_group(group_id, rec.read_group_value(raw)) if raw is not None else GroupMetadata(
                group_id, GroupState.EMPTY, self.time)
            if raw is not None:
                self._group_values[group_id] = raw
            group.offsets.update(offsets.get(group_id, {}))
            self.groups[group_id] = group
            if group.members:
                with_members.append(group)
        log.info("loaded %d group(s) from %d record(s) of __consumer_offsets", len(self.groups), n_records)
        return with_members

    def _load_group(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
        """Kafka's ``GroupMetadata.loadGroup``: Stable when the record has members, else Empty."""
        group = GroupMetadata(group_id, GroupState.STABLE if value.members else GroupState.EMPTY, self.time)
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.current_state_timestamp = None if value.current_state_timestamp < 0 else value.current_state_timestamp
        for m in value.members:
            protocols = [(value.protocol or "", bytes(m.subscription))]
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                                    m.session_timeout, value.protocol_type, protocols)
            member.assignment = bytes(m.assignment)
            group.members[member.member_id] = member
            group.supported_protocols.update(member.protocol_names())
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

