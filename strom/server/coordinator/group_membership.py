"""SyncGroup, Heartbeat and LeaveGroup of the group coordinator.

Kafka counterpart: ``GroupCoordinator.handleSyncGroup`` (the leader's assignment is stored in
``__consumer_offsets`` and then handed to every member parked in SyncGroup; followers wait for it),
``handleHeartbeat`` and ``handleLeaveGroup`` (KIP-345 batches and removal by ``group.instance.id``), plus
``propagateAssignment`` / ``resetAndPropagateAssignmentError``. Mixed into
:class:`~strom.server.coordinator.group_coordinator.GroupCoordinator`. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from strom.common.error_codes import ErrorCode as E
from strom.server.coordinator.group_metadata import (
    GroupMetadata,
    GroupState,
    MemberMetadata,
    SyncCallback,
    SyncResult,
)

if TYPE_CHECKING:
    from strom.server.coordinator.group_metadata_manager import GroupMetadataManager
    from strom.server.coordinator.timers import CoordinatorTimers

__all__ = ["GroupMembershipMixin", "LeaveMember", "resolver", "UNKNOWN_MEMBER_ID"]

log = logging.getLogger("strom.coordinator")

S = GroupState
T = TypeVar("T")
UNKNOWN_MEMBER_ID = ""
LeaveMember = tuple[str, str | None]  # (member id, group instance id)


def resolver(fut: asyncio.Future[T]) -> Callable[[T], None]:
    """A response callback that completes ``fut`` (once)."""

    def resolve(result: T) -> None:
        if not fut.done():
            fut.set_result(result)

    return resolve


class GroupMembershipMixin:
    if TYPE_CHECKING:
        manager: GroupMetadataManager
        timers: CoordinatorTimers

        def _validate(self, group_id: str | None, non_empty: bool) -> int | None: ...

        def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                timeout_ms: int | None = None) -> None: ...

        def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None: ...

        def _remove_pending_member(self, group: GroupMetadata, member_id: str) -> None: ...

        def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata,
                                            reason: str) -> None: ...

    # -- SyncGroup --------------------------------------------------------------------------------------------
    async def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                         protocol_name: str | None, group_instance_id: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self.handle_sync_group(group_id, generation_id, member_id, protocol_type, protocol_name, group_instance_id,
                               assignments, resolver(fut))
        return await fut

    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                          protocol_name: str | None, group_instance_id: str | None, assignments: dict[str, bytes],
                          callback: SyncCallback) -> None:
        err = self._validate(group_id, non_empty=True)
        group = self.manager.get_group(group_id) if err is None else None
        if err is None and group is None:
            err = E.UNKNOWN_MEMBER_ID
        if err is not None or group is None:
            callback(SyncResult(err or E.UNKNOWN_MEMBER_ID))
            return
        if group.is_state(S.DEAD):
            err = E.COORDINATOR_NOT_AVAILABLE
        elif group.is_static_member_fenced(group_instance_id, member_id):
            err = E.FENCED_INSTANCE_ID
        elif not group.has(member_id):
            err = E.UNKNOWN_MEMBER_ID
        elif generation_id != group.generation_id:
            err = E.ILLEGAL_GENERATION
        elif (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            err = E.INCONSISTENT_GROUP_PROTOCOL
        elif group.is_state(S.EMPTY):
            err = E.UNKNOWN_MEMBER_ID
        elif group.is_state(S.PREPARING_REBALANCE):
            err = E.REBALANCE_IN_PROGRESS
        if err is not None:
            callback(SyncResult(err))
            return
        member = group.get(member_id)
        self._remove_pending_sync_member(group, member_id)
        if group.is_state(S.STABLE):
            callback(SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name))
            self._schedule_heartbeat(group, member)
            return
        # CompletingRebalance: park until the leader's assignment is stored.
        if member.awaiting_sync is not None:
            group.maybe_invoke_sync_callback(member, SyncResult(E.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = callback
        if group.is_leader(member_id):
            log.info("assignment received from leader %s for group %s generation %d (%d member(s), %d static)",
                     member_id, group_id, group.generation_id, group.size, len(group.static_members))
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            missing = [mid for mid in group.members if mid not in assignments]
            if missing:
                log.warning("leader of group %s sent no assignment for %s: they get an empty one", group_id, missing)
            code = self.manager.store_group(group, full)
            if not (group.is_state(S.COMPLETING_REBALANCE) and generation_id == group.generation_id):
                return
            if code:
                self._reset_and_propagate_assignment_error(group, code)
                self._maybe_prepare_rebalance(group, f"error {code} storing the assignment of group {group_id}")
            else:
                for mid, m in group.members.items():
                    m.assignment = full[mid]
                self._propagate_assignment(group, E.NONE)
                group.transition_to(S.STABLE)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timers.cancel(("sync", group.group_id))

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ptype, pname = (group.protocol_type, group.protocol_name) if error == E.NONE else (None, None)
        for member in list(group.members.values()):
            if group.maybe_invoke_sync_callback(member, SyncResult(error, member.assignment, ptype, pname)):
                self._schedule_heartbeat(group, member)

    # -- Heartbeat / LeaveGroup -------------------------------------------------------------------------------
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> int:
        err = self._validate(group_id, non_empty=True)
        if err is not None:
            return err
        group = self.manager.get_group(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_state(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, group.get(member_id))
        return E.REBALANCE_IN_PROGRESS if group.is_state(S.PREPARING_REBALANCE) else E.NONE

    def handle_leave_group(self, group_id: str, members: Iterable[LeaveMember]) -> tuple[int, list[int]]:
        """Remove members; returns (top-level error, one error per member in request order)."""
        members = list(members)
        err = self._validate(group_id, non_empty=True)
        if err is not None:
            return err, []
        group = self.manager.get_group(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_state(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for member_id, instance_id in members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by its instance id (KIP-345).
                current = group.current_static_member_id(instance_id)
                if current is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                member_id = current
            elif member_id in group.pending_members:
                self._remove_pending_member(group, member_id)
                errors.append(E.NONE)
                continue
            elif group.is_static_member_fenced(instance_id, member_id):
                errors.append(E.FENCED_INSTANCE_ID)
                continue
            member = group.members.get(member_id)
            if member is None:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            log.info("member %s is leaving group %s", member_id, group_id)
            self._remove_member_and_update_group(group, member, f"member {member_id} left the group")
            errors.append(E.NONE)
        return E.NONE, errors
