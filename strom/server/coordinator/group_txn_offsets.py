"""Transactional offset commits (KIP-98 ``TxnOffsetCommit``): pending until the transaction's marker.

Kafka counterpart: ``GroupMetadata.pendingTransactionalOffsetCommits`` with ``GroupCoordinator.handleTxnCommitOffsets``
and ``handleTxnCompletion``. A TxnOffsetCommit writes the offsets to the group's ``__consumer_offsets`` partition
as part of the producer's transaction (a transactional batch with its producer id and epoch) and keeps them
aside; when the transaction coordinator's COMMIT marker lands in that partition they become the group's committed
offsets, an ABORT marker drops them. A load of a partition puts the records of transactions still open at its end
(:attr:`ReplicaOffsetsLog.open_txn_records`) back among the pending offsets, as Kafka's ``loadGroupsAndOffsets``
does: a marker decided after a restart or a coordinator move still applies them, and ``require_stable`` OffsetFetch
answers UNSTABLE_OFFSET_COMMIT until it comes.
Event loop only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import ProtocolError
from strom.common.structs import TopicPartition
from strom.server.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState
from strom.server.coordinator.records import (
    OffsetKey,
    offset_commit_key,
    offset_commit_value,
    read_key,
    read_offset_value,
)

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.storage.producer_state import VerificationGuard

__all__ = ["TxnOffsetStore"]

log = logging.getLogger("strom.coordinator")


class TxnOffsetStore:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        # producer id -> group id -> offsets written in its open transaction
        self.pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    def has_pending(self, group_id: str, partitions: list[TopicPartition] | None) -> bool:
        """Whether an open transaction holds offsets of these partitions of the group (OffsetFetch
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT then)."""
        for groups in self.pending.values():
            offs = groups.get(group_id)
            if offs and (partitions is None or any(tp in offs for tp in partitions)):
                return True
        return False

    def commit(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
               group_instance_id: str | None, generation_id: int,
               offsets: dict[TopicPartition, CommittedOffset],
               verification_guard: VerificationGuard | None = None) -> dict[TopicPartition, int]:
        """Write ``offsets`` in the producer's transaction; an error code per partition (``verification_guard``:
        from the transaction's verification with its coordinator, KIP-890)."""
        gc = self.coordinator
        err = gc._validate(group_id, non_empty=False)
        if err is not None:
            return dict.fromkeys(offsets, err)
        group = gc.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, E.ILLEGAL_GENERATION)
            group = gc.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, gc.time))
        elif generation_id >= 0 or member_id:
            # KIP-447: the producer carries the consumer's group metadata, so a zombie of an old generation fails.
            err = gc._validate_offset_commit(group, generation_id, member_id, group_instance_id)
            if err is not None:
                return dict.fromkeys(offsets, err)
        now = gc.time.milliseconds()
        result: dict[TopicPartition, int] = {}
        valid: dict[TopicPartition, CommittedOffset] = {}
        for tp, off in offsets.items():
            if off.metadata is not None and len(off.metadata.encode()) > gc.offset_config.max_metadata_size:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
                continue
            if off.commit_timestamp < 0:
                off.commit_timestamp = now
            valid[tp] = off
        if valid:
            records = [(offset_commit_key(group_id, tp.topic, tp.partition), offset_commit_value(off))
                       for tp, off in valid.items()]
            code = gc.manager.log.append(gc.partition_for(group_id), records,  # type: ignore[call-arg]
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         verification_guard=verification_guard)
            if code == E.NOT_LEADER_OR_FOLLOWER:
                code = E.NOT_COORDINATOR
            elif code not in (E.NONE, E.INVALID_TXN_STATE):  # (the transaction ended while it was verified)
                code = E.COORDINATOR_NOT_AVAILABLE
            else:
                self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(valid)
            result.update(dict.fromkeys(valid, code))
        return {tp: result[tp] for tp in offsets}

    def load(self, partition: int) -> None:
        """``__consumer_offsets`` partition ``partition`` was just loaded: the offsets of transactions still open at
        its end become pending again (their marker comes later)."""
        gc = self.coordinator
        open_txns = getattr(gc.manager.log, "open_txn_records", {}).pop(partition, {})
        for producer_id, records in open_txns.items():
            for key, value in records:
                try:
                    k = read_key(key) if key is not None else None
                    if isinstance(k, OffsetKey) and value is not None and gc.partition_for(k.group) == partition:
                        self.pending.setdefault(producer_id, {}).setdefault(k.group, {})[
                            TopicPartition(k.topic, k.partition)] = read_offset_value(value)
                except ProtocolError as e:
                    log.warning("skipping an unreadable transactional offset record: %s", e)

    def unload(self, partition: int) -> None:
        """The coordinator resigned ``__consumer_offsets`` partition ``partition``: forget its groups' pending
        offsets (Kafka keeps them in the group object, unloaded with it). Kept, the marker a later coordinator
        wrote never reached them, and once this broker coordinated the partition again its OffsetFetch with
        require_stable answered UNSTABLE_OFFSET_COMMIT for ever; what is still open is loaded from the log again."""
        gc = self.coordinator
        for producer_id in list(self.pending):
            groups = self.pending[producer_id]
            for group_id in [g for g in groups if gc.partition_for(g) == partition]:
                del groups[group_id]
            if not groups:
                del self.pending[producer_id]

    def complete(self, producer_id: int, partition: int, committed: bool) -> None:
        """The transaction's marker was written to ``__consumer_offsets`` partition ``partition``."""
        gc = self.coordinator
        groups = self.pending.get(producer_id, {})
        for group_id in [g for g in groups if gc.partition_for(g) == partition]:
            offsets = groups.pop(group_id)
            if committed:
                self._apply(group_id, offsets)
        if not groups:
            self.pending.pop(producer_id, None)

    def _apply(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        gc = self.coordinator
        group = gc.manager.get_group(group_id)
        if group is None:
            group = gc.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, gc.time))
        group.offsets.update(offsets)
        log.debug("group %s: %d transactional offset(s) committed", group_id, len(offsets))
