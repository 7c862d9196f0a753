"""Offset commit / fetch / delete and the group admin APIs of the group coordinator.

Kafka counterpart: the offset and admin half of ``GroupCoordinator`` — ``handleCommitOffsets`` (generation and
member checks, simple commits by ``assign()`` consumers with generation -1), ``handleFetchOffsets``,
``handleListGroups``, ``handleDescribeGroups``, ``handleDeleteGroups`` and ``handleDeleteOffsets``.
Mixed into :class:`~strom.server.coordinator.group_coordinator.GroupCoordinator`. Event loop only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.server.coordinator.group_metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.group_metadata_manager import GroupMetadataManager
    from strom.server.coordinator.offset_config import OffsetConfig

__all__ = ["GroupAdminMixin", "GroupOverview", "GroupSummary", "MemberSummary", "CLASSIC_GROUP_TYPE"]

S = GroupState
CLASSIC_GROUP_TYPE = "classic"


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupSummary:
    group_id: str
    error: int
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: list[MemberSummary] = field(default_factory=list)


class GroupAdminMixin:
    if TYPE_CHECKING:
        manager: GroupMetadataManager
        offset_config: OffsetConfig
        time: Time
        active: bool

        def _validate(self, group_id: str | None, non_empty: bool) -> int | None: ...

        def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                timeout_ms: int | None = None) -> None: ...

    # -- OffsetCommit -----------------------------------------------------------------------------------------
    def handle_commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                              generation_id: int,
                              offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, int]:
        """Store ``offsets``; returns an error code per partition."""
        err = self._validate(group_id, non_empty=False)
        if err is not None:
            return dict.fromkeys(offsets, err)
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator does not know (or an old one): reject.
                return dict.fromkeys(offsets, E.ILLEGAL_GENERATION)
            # Not using group management (assign()): the group exists only to hold offsets.
            group = self.manager.add_group(GroupMetadata(group_id, S.EMPTY, self.time))
        err = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if err is None:
            if group.is_state(S.COMPLETING_REBALANCE):
                # The member has the new generation from JoinGroup but no assignment yet.
                err = E.REBALANCE_IN_PROGRESS
            elif group.is_state(S.STABLE, S.PREPARING_REBALANCE) and group.has(member_id):
                # Commits during PreparingRebalance are allowed; the next heartbeat tells the member to rejoin.
                self._schedule_heartbeat(group, group.get(member_id))
        if err is not None:
            return dict.fromkeys(offsets, err)
        limit = self.offset_config.max_metadata_size
        now = self.time.milliseconds()
        result: dict[TopicPartition, int] = {}
        valid: dict[TopicPartition, CommittedOffset] = {}
        for tp, off in offsets.items():
            if off.metadata is not None and len(off.metadata.encode()) > limit:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                if off.commit_timestamp < 0:
                    off.commit_timestamp = now
                valid[tp] = off
        code = self.manager.store_offsets(group, valid)
        for tp in valid:
            result[tp] = code
        return {tp: result[tp] for tp in offsets}

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None) -> int | None:
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            if group_instance_id is not None:
                if not group.has_static_member(group_instance_id):
                    return E.UNKNOWN_MEMBER_ID
                if group.is_static_member_fenced(group_instance_id, member_id):
                    return E.FENCED_INSTANCE_ID
            elif not group.has(member_id):
                return E.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
            return None
        if not group.is_state(S.EMPTY):
            # Only members may commit for a group that has members.
            return E.UNKNOWN_MEMBER_ID
        return None

    # -- OffsetFetch ------------------------------------------------------------------------------------------
    def handle_fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                             require_stable: bool = False) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (all when None); None for a partition without one.

        Plain commits are written before they become visible; offsets of an open transaction (TxnOffsetCommit)
        are pending, and ``require_stable`` (KIP-447) answers UNSTABLE_OFFSET_COMMIT while there are some.
        """
        err = self._validate(group_id, non_empty=False)
        if err is not None:
            return err, {}
        if require_stable and self.txn_offsets.has_pending(group_id, partitions):  # type: ignore[attr-defined]
            return E.UNSTABLE_OFFSET_COMMIT, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_state(S.DEAD):
            return E.NONE, {} if partitions is None else dict.fromkeys(partitions)
        if partitions is None:
            return E.NONE, dict(group.offsets)
        return E.NONE, {tp: group.offsets.get(tp) for tp in partitions}

    # -- ListGroups / DescribeGroups --------------------------------------------------------------------------
    def handle_list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[GroupOverview]]:
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, []
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
            return E.NONE, []
        out = [GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
               for g in self.manager.groups.values()
               if not wanted_states or g.state.value.lower() in wanted_states]
        return E.NONE, sorted(out, key=lambda o: o.group_id)

    def handle_describe_groups(self, group_ids: Iterable[str]) -> list[GroupSummary]:
        out = []
        for group_id in group_ids:
            err = self._validate(group_id, non_empty=False)
            if err is not None:
                out.append(GroupSummary(group_id, err, S.DEAD.value))
                continue
            group = self.manager.get_group(group_id)
            if group is None:
                out.append(GroupSummary(group_id, E.NONE, S.DEAD.value))
                continue
            stable = group.is_state(S.STABLE) and group.protocol_name is not None
            members = [
                MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              bytes(m.metadata(group.protocol_name)) if stable and group.protocol_name else b"",
                              bytes(m.assignment) if stable else b"")
                for m in group.members.values()
            ]
            out.append(GroupSummary(group_id, E.NONE, group.state.value, group.protocol_type or "",
                                    (group.protocol_name or "") if stable else "", members))
        return out

    # -- DeleteGroups / OffsetDelete --------------------------------------------------------------------------
    def handle_delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        result: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in group_ids:
            err = self._validate(group_id, non_empty=False)
            group = self.manager.get_group(group_id) if err is None else None
            if err is not None:
                result[group_id] = err
            elif group is None or group.is_state(S.DEAD):
                result[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.is_state(S.EMPTY):
                group.transition_to(S.DEAD)
                eligible.append(group)
                result[group_id] = E.NONE
            else:
                result[group_id] = E.NON_EMPTY_GROUP
        if eligible:
            self.manager.cleanup_group_metadata(eligible, lambda g: list(g.offsets))
        return result

    def handle_delete_offsets(self, group_id: str,
                              partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """Delete committed offsets (OffsetDelete); returns (group error, error per partition)."""
        err = self._validate(group_id, non_empty=False)
        if err is not None:
            return err, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_state(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        errors: dict[TopicPartition, int] = {}
        if group.is_state(S.EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == "consumer":
            eligible = [tp for tp in partitions if not group.is_subscribed_to_topic(tp.topic)]
            errors.update((tp, E.GROUP_SUBSCRIBED_TO_TOPIC) for tp in partitions if group.is_subscribed_to_topic(tp.topic))
        else:
            return E.NON_EMPTY_GROUP, {}
        if eligible:
            wanted = set(eligible)
            self.manager.cleanup_group_metadata([group], lambda g: [tp for tp in g.offsets if tp in wanted])
            errors.update((tp, E.NONE) for tp in eligible)
        return E.NONE, errors
