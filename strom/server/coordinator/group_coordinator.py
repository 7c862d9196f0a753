"""The classic group coordinator: membership, rebalances and liveness of consumer groups.

Kafka counterpart: ``GroupCoordinator`` (the pre-KIP-848 "classic" protocol): JoinGroup with
``MEMBER_ID_REQUIRED`` (v4+), the initial rebalance delay for new groups, protocol selection by vote, static
membership (KIP-345) with replacement and ``FENCED_INSTANCE_ID``; session, rebalance, pending-member and
pending-sync timeouts. SyncGroup, Heartbeat and LeaveGroup are in :mod:`~strom.server.coordinator.group_membership`,
offset commit/fetch and the admin APIs in :mod:`~strom.server.coordinator.group_admin` (mixins of the one class,
as Kafka has one ``GroupCoordinator``).

Every entry point takes a response callback (as Kafka's do) and may call it at once or later from a timer; the
``async`` wrappers (``join_group`` …) turn that into an awaitable for the request handlers. Timers run against
the injected :class:`~strom.common.time.Time`: tests step a ``MockTime`` and call :meth:`poll`. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging

from strom.common.error_codes import ErrorCode as E
from strom.common.time import Time
from strom.server.coordinator.group_admin import GroupAdminMixin
from strom.server.coordinator.group_membership import (
    UNKNOWN_MEMBER_ID,
    GroupMembershipMixin,
    LeaveMember,
    resolver,
)
from strom.server.coordinator.group_metadata import (
    GroupMetadata,
    GroupState,
    JoinCallback,
    JoinResult,
    MemberMetadata,
    SyncResult,
)
from strom.server.coordinator.group_metadata_manager import GroupMetadataManager, OffsetsLog
from strom.server.coordinator.group_txn_offsets import TxnOffsetStore
from strom.server.coordinator.offset_config import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupConfig, OffsetConfig
from strom.server.coordinator.timers import CoordinatorTimers

__all__ = ["GroupCoordinator", "LeaveMember"]

log = logging.getLogger("strom.coordinator")

S = GroupState


class GroupCoordinator(GroupMembershipMixin, GroupAdminMixin):
    def __init__(self, group_config: GroupConfig, offset_config: OffsetConfig, time: Time,
                 offsets_log: OffsetsLog) -> None:
        self.group_config = group_config
        self.offset_config = offset_config
        self.time = time
        self.manager = GroupMetadataManager(offset_config, time, offsets_log)
        self.timers = CoordinatorTimers(time)
        self.active = False
        self._initial_join: set[str] = set()  # groups whose pending join is the initial delay
        self._task: asyncio.Task[None] | None = None
        # __consumer_offsets partitions this broker leads; None = all of them (a standalone broker).
        self.owned_partitions: set[int] | None = None
        self.txn_offsets = TxnOffsetStore(self)  # TxnOffsetCommit offsets waiting for their transaction's marker

    # -- lifecycle --------------------------------------------------------------------------------------------
    def startup(self, load: bool = True) -> None:
        """Replay ``__consumer_offsets`` and start expiring members that were in groups when the broker stopped."""
        if load:
            partitions = range(self.offset_config.offsets_topic_num_partitions)
            for group in self.manager.load(partitions):
                for member in group.members.values():
                    self._schedule_heartbeat(group, member)
            for partition in partitions:
                self.txn_offsets.load(partition)
        self._schedule_retention_check()
        self.active = True

    async def start(self, load_all: bool = True) -> None:
        """Standalone: own and load every partition. Cluster: own none until partition leadership arrives."""
        if not load_all:
            self.owned_partitions = set()
        self.startup(load=load_all)
        self._task = asyncio.get_running_loop().create_task(self.timers.run())

    def on_election(self, partition: int) -> None:
        """This broker now leads ``__consumer_offsets`` partition ``partition``: load its groups (Kafka's
        ``onElection`` → ``loadGroupsForPartition``)."""
        if self.owned_partitions is None or partition in self.owned_partitions:
            return
        for group in self.manager.load([partition]):
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self.txn_offsets.load(partition)
        self.owned_partitions.add(partition)
        log.info("now coordinating the groups of %s partition %d", "__consumer_offsets", partition)

    def on_resignation(self, partition: int) -> None:
        """Leadership moved away: drop the partition's groups; parked members are told NOT_COORDINATOR."""
        if self.owned_partitions is None or partition not in self.owned_partitions:
            return
        self.owned_partitions.discard(partition)
        for group in [g for g in self.manager.groups.values() if self.partition_for(g.group_id) == partition]:
            # Kafka's onGroupUnloaded: the group object is dead and its timers go with it. (Left running, a
            # heartbeat deadline of this object fired after the partition came back and its groups were loaded
            # anew: it "rebalanced" the stale object, wrote it to the log as empty, and took the join timer of
            # the group now loaded, whose rebalance then never completed.)
            group.transition_to(S.DEAD)
            gid = group.group_id
            self.timers.cancel_matching(lambda key, gid=gid: len(key) > 1 and key[1] == gid)  # type: ignore[index, arg-type]
            self._initial_join.discard(gid)
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinResult(E.NOT_COORDINATOR, member.member_id))
                group.maybe_invoke_sync_callback(member, SyncResult(E.NOT_COORDINATOR))
            self.manager.groups.pop(gid, None)
        self.txn_offsets.unload(partition)
        log.info("no longer coordinating the groups of %s partition %d", "__consumer_offsets", partition)

    def shutdown(self) -> None:
        """Stop: answer every parked JoinGroup / SyncGroup with NOT_COORDINATOR so clients look again."""
        self.active = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for group in list(self.manager.groups.values()):
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(member, JoinResult(E.NOT_COORDINATOR, member.member_id))
                group.maybe_invoke_sync_callback(member, SyncResult(E.NOT_COORDINATOR))
        self.timers.clear()

    def poll(self) -> int:
        """Run due timers (tests call this after moving a mock clock)."""
        return self.timers.poll()

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    async def wait_for_durability(self, group_id: str, timeout_ms: int = 5000) -> int:
        """After a commit: wait until the group's records reached every in-sync replica. Replication errors
        become COORDINATOR_NOT_AVAILABLE, as Kafka answers a commit it could not replicate."""
        wait = getattr(self.manager.log, "wait_replicated", None)
        if wait is None:
            return E.NONE
        code = await wait(self.partition_for(group_id), timeout_ms)
        if code in (E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.REQUEST_TIMED_OUT):
            return E.COORDINATOR_NOT_AVAILABLE
        if code == E.NOT_LEADER_OR_FOLLOWER:
            return E.NOT_COORDINATOR
        return code

    def _validate(self, group_id: str | None, non_empty: bool) -> int | None:
        if group_id is None or (non_empty and group_id == ""):
            return E.INVALID_GROUP_ID
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        if self.owned_partitions is not None and self.partition_for(group_id) not in self.owned_partitions:
            return E.NOT_COORDINATOR
        return None

    # -- JoinGroup --------------------------------------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                         require_known_member_id: bool, support_skip_assignment: bool, client_id: str,
                         client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]]) -> JoinResult:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self.handle_join_group(group_id, member_id, group_instance_id, require_known_member_id,
                               support_skip_assignment, client_id, client_host, rebalance_timeout_ms,
                               session_timeout_ms, protocol_type, protocols, resolver(fut))
        return await fut

    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, support_skip_assignment: bool, client_id: str,
                          client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                          protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback) -> None:
        err = self._validate(group_id, non_empty=True)
        if err is None and not (self.group_config.group_min_session_timeout_ms <= session_timeout_ms
                                <= self.group_config.group_max_session_timeout_ms):
            err = E.INVALID_SESSION_TIMEOUT
        if err is not None:
            callback(JoinResult(err, member_id))
            return
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_group(group_id)
        if group is None:
            if not is_unknown:
                callback(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
                return
            group = self.manager.add_group(GroupMetadata(group_id, S.EMPTY, self.time))
        if not self._accept_joining_member(group, member_id):
            log.info("group %s is full: rejecting member %s", group_id, member_id or "(new)")
            callback(JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id))
        elif group.is_state(S.DEAD):
            # Deleted or expired while this request was on its way: the client looks up the coordinator again.
            callback(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id))
        elif not group.supports_protocols(protocol_type, (name for name, _ in protocols)):
            callback(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        elif is_unknown:
            new_id = group.generate_member_id(client_id, group_instance_id)
            if group_instance_id is not None:
                old_id = group.current_static_member_id(group_instance_id)
                if old_id is not None:
                    log.info("static member %s of group %s rejoins with an unknown member id in state %s: member "
                             "%s replaces %s", group_instance_id, group_id, group.state.value, new_id, old_id)
                    self._update_static_member_and_rebalance(group, old_id, new_id, group_instance_id, protocols,
                                                             rebalance_timeout_ms, session_timeout_ms,
                                                             support_skip_assignment, callback)
                else:
                    self._add_member_and_rebalance(group, new_id, group_instance_id, client_id, client_host,
                                                   rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                                   callback)
            elif require_known_member_id:
                # KIP-394: hand out the id first; the member joins with it in a second JoinGroup.
                group.pending_members.add(new_id)
                self.timers.schedule(("pending", group_id, new_id), session_timeout_ms,
                                     lambda: self._on_expire_pending_member(group, new_id))
                callback(JoinResult(E.MEMBER_ID_REQUIRED, new_id))
            else:
                self._add_member_and_rebalance(group, new_id, None, client_id, client_host, rebalance_timeout_ms,
                                               session_timeout_ms, protocol_type, protocols, callback)
        else:
            self._current_member_join(group, member_id, group_instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, callback)
        if group.is_state(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        limit = self.group_config.group_max_size
        if group.is_state(S.EMPTY, S.DEAD):
            return True
        if group.is_state(S.PREPARING_REBALANCE):
            return (group.has(member_id) and group.get(member_id).is_awaiting_join) or \
                group.num_members_awaiting_join < limit
        return group.has(member_id) or group.size < limit

    def _current_member_join(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                             client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                             protocol_type: str, protocols: list[tuple[str, bytes]], callback: JoinCallback) -> None:
        if member_id in group.pending_members:
            # The second JoinGroup of a KIP-394 member (never a static member).
            self.timers.cancel(("pending", group.group_id, member_id))
            self._add_member_and_rebalance(group, member_id, group_instance_id, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                           callback)
            return
        if group.is_static_member_fenced(group_instance_id, member_id):
            callback(JoinResult(E.FENCED_INSTANCE_ID, member_id))
            return
        if not group.has(member_id) or (group_instance_id is not None and
                                        not group.has_static_member(group_instance_id)):
            callback(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
            return
        member = group.get(member_id)
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              callback, "member joining during PreparingRebalance")
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # A retry of a JoinGroup whose response was lost: answer with the current generation.
                callback(self._join_result(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback,
                                                  "member changed its metadata during CompletingRebalance")
        elif state is S.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining (e.g. topic metadata changed) or changed metadata forces a rebalance.
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, callback, "leader or changed member rejoining")
            else:
                callback(self._join_result(group, member, with_members=False))
        else:
            log.warning("member %s joined group %s in unexpected state %s", member_id, group.group_id, state.value)
            callback(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: GroupMetadata, member: MemberMetadata, with_members: bool,
                     leader_id: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            E.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            (leader_id if leader_id is not None else group.leader_id) or "",
            group.current_member_metadata() if with_members else [], skip_assignment,
        )

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                  callback: JoinCallback) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_state(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # the initial delay may be extended
        group.add(member, callback)
        # A new member cannot heartbeat (no id yet, socket busy with the JoinGroup): bound its wait instead.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, callback: JoinCallback, reason: str) -> None:
        if member.awaiting_join is not None:
            # A duplicate JoinGroup (the client retried on another connection): the old one gets an answer too.
            group.maybe_invoke_join_callback(member, JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group: GroupMetadata, old_id: str, new_id: str, instance_id: str,
                                            protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                            session_timeout_ms: int, support_skip_assignment: bool,
                                            callback: JoinCallback) -> None:
        current_leader = group.leader_id
        self.timers.cancel(("hb", group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id, E.FENCED_INSTANCE_ID)
        self._schedule_heartbeat(group, member)
        old_settings = (member.supported_protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, callback)
        if group.is_state(S.STABLE):
            if group.protocol_name == group.select_protocol():
                # Nothing changes for the others: keep the generation, persist the new member id.
                code = self.manager.store_group(group, {m.member_id: m.assignment for m in group.members.values()})
                if code:
                    group.update_member(member, *old_settings, None)
                    group.replace_static_member(instance_id, new_id, old_id, E.FENCED_INSTANCE_ID)
                    self.timers.cancel(("hb", group.group_id, new_id))
                    self._schedule_heartbeat(group, member)
                    callback(JoinResult(code, UNKNOWN_MEMBER_ID))
                    return
                if group.is_leader(new_id) and support_skip_assignment:
                    result = self._join_result(group, member, with_members=True, skip_assignment=True)
                else:
                    # The old leader id keeps a rejoining static leader from re-assigning a stable group.
                    result = self._join_result(group, member, with_members=False, leader_id=current_leader)
                group.maybe_invoke_join_callback(member, result)
            else:
                self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined with other protocols")
        elif group.is_state(S.COMPLETING_REBALANCE):
            # The leader may have been given the old member id: a new rebalance avoids a lost assignment.
            self._prepare_rebalance(group, f"static member {instance_id} replaced during CompletingRebalance")

    # -- rebalance --------------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self.timers.cancel(("sync", group.group_id))
        was_empty = group.is_state(S.EMPTY)
        group.transition_to(S.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s with old generation %d (reason: %s)", group.group_id,
                 group.generation_id, reason)
        if was_empty:
            delay = self.group_config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            self._schedule_join(group)

    def _schedule_join(self, group: GroupMetadata) -> None:
        self._initial_join.discard(group.group_id)
        self.timers.schedule(("join", group.group_id), group.rebalance_timeout_ms(),
                             lambda: self._on_complete_join(group))
        self._maybe_complete_join(group)

    def _schedule_initial_join(self, group: GroupMetadata, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's ``InitialDelayedJoin``: wait ``delay_ms``, longer while new members keep arriving."""
        self._initial_join.add(group.group_id)

        def expired() -> None:
            if group.new_member_added and remaining_ms != 0:
                group.new_member_added = False
                delay = min(self.group_config.group_initial_rebalance_delay_ms, remaining_ms)
                self._schedule_initial_join(group, delay, max(remaining_ms - delay_ms, 0))
            else:
                self._on_complete_join(group)

        self.timers.schedule(("join", group.group_id), delay_ms, expired)

    def _maybe_complete_join(self, group: GroupMetadata) -> None:
        """Complete a (non-initial) pending join as soon as every member has rejoined."""
        if (group.is_state(S.PREPARING_REBALANCE) and group.group_id not in self._initial_join
                and ("join", group.group_id) in self.timers and group.has_all_members_joined()):
            self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        self._initial_join.discard(group.group_id)
        self.timers.cancel(("join", group.group_id))
        if not group.is_state(S.PREPARING_REBALANCE):
            return
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info("group %s removed dynamic member %s which did not rejoin", group.group_id, member.member_id)
                self._drop_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("group %s could not complete rebalance because no members rejoined", group.group_id)
            self._schedule_join(group)
            return
        group.init_next_generation()
        if group.is_state(S.EMPTY):
            log.info("group %s with generation %d is now empty (__consumer_offsets-%d)", group.group_id,
                     group.generation_id, self.partition_for(group.group_id))
            code = self.manager.store_group(group, {})
            if code:
                log.warning("failed to write empty group %s: error %d", group.group_id, code)
            return
        log.info("stabilized group %s generation %d (__consumer_offsets-%d) with %d member(s)", group.group_id,
                 group.generation_id, self.partition_for(group.group_id), group.size)
        members = group.current_member_metadata()
        for member in list(group.members.values()):
            result = self._join_result(group, member, with_members=False)
            if group.is_leader(member.member_id):
                result.members = members
            group.maybe_invoke_join_callback(member, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
        group.pending_sync_members = set(group.members)
        generation = group.generation_id
        self.timers.schedule(("sync", group.group_id), group.rebalance_timeout_ms(),
                             lambda: self._on_expire_pending_sync(group, generation))

    def _on_expire_pending_sync(self, group: GroupMetadata, generation: int) -> None:
        if generation != group.generation_id or not group.is_state(S.COMPLETING_REBALANCE, S.STABLE):
            return
        if group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._drop_member(group, member)
            self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time")

    def _drop_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.maybe_invoke_sync_callback(member, SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self.timers.cancel(("hb", group.group_id, member.member_id))

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        # A member removed while its JoinGroup is parked gets UNKNOWN_MEMBER_ID, so a live client rejoins.
        group.maybe_invoke_join_callback(member, JoinResult(E.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self._drop_member(group, member)
        if group.is_state(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_state(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _remove_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        self.timers.cancel(("pending", group.group_id, member_id))
        if group.is_state(S.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # -- liveness ---------------------------------------------------------------------------------------------
    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        member_id = member.member_id
        self.timers.schedule(("hb", group.group_id, member_id),
                             member.session_timeout_ms if timeout_ms is None else timeout_ms,
                             lambda: self._on_expire_heartbeat(group, member_id))

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or group.is_state(S.DEAD):
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return  # parked in a rebalance: the deadline is set again when it is answered
        log.info("member %s in group %s has failed (no heartbeat within %d ms), removing it from the group",
                 member_id, group.group_id, member.session_timeout_ms)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    def _on_expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        if member_id in group.pending_members:
            log.info("pending member %s in group %s has been removed after session timeout expiration",
                     member_id, group.group_id)
            self._remove_pending_member(group, member_id)

    def _schedule_retention_check(self) -> None:
        def check() -> None:
            try:
                self.manager.cleanup_expired_offsets()
            finally:
                self._schedule_retention_check()

        self.timers.schedule(("retention",), self.offset_config.offsets_retention_check_interval_ms, check)
