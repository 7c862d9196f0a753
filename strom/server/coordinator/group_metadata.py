"""The state of one classic consumer group and its members.

Kafka counterparts: ``GroupMetadata`` (state machine, members, static members, pending members, protocol
selection by vote, committed offsets) and ``MemberMetadata`` (one member's protocols, timeouts, assignment and
the JoinGroup / SyncGroup responses it is waiting for). Plain data plus invariants; the rules of *when* to move
between states live in :mod:`strom.server.coordinator.group_coordinator`. Not thread-safe: event loop only.

States and the moves allowed into each (Kafka's ``GroupState.validPreviousStates``)::

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from strom.common.errors import ProtocolError
from strom.common.structs import TopicPartition
from strom.protocol.messages.consumer_protocol import ConsumerProtocolSubscription

if TYPE_CHECKING:
    from strom.common.time import Time

__all__ = [
    "GroupState",
    "JoinResult",
    "SyncResult",
    "JoinCallback",
    "SyncCallback",
    "MemberMetadata",
    "GroupMetadata",
    "CommittedOffset",
    "CONSUMER_PROTOCOL_TYPE",
    "subscription_topics",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
_INT16 = struct.Struct(">h")


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup request is answered with (Kafka's ``JoinGroupResult``)."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata) — only the leader gets them.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    """What a SyncGroup request is answered with (Kafka's ``SyncGroupResult``)."""

    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(slots=True)
class CommittedOffset:
    """A committed position as the coordinator keeps it (Kafka's ``OffsetAndMetadata`` + commit record info)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1  # -1: the time the coordinator stores it
    expire_timestamp: int | None = None


class MemberMetadata:
    """One member of a group (Kafka's ``MemberMetadata``)."""

    __slots__ = (
        "member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
        "session_timeout_ms", "protocol_type", "supported_protocols", "assignment", "awaiting_join",
        "awaiting_sync", "is_new",
    )

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 supported_protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = supported_protocols
        self.assignment = b""
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata in the same order (a rejoin that changes nothing)."""
        return len(protocols) == len(self.supported_protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.supported_protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (in its preference order) that every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} does not support any of the candidate protocols")

    def __repr__(self) -> str:
        return (f"MemberMetadata(member_id={self.member_id!r}, group_instance_id={self.group_instance_id!r}, "
                f"client_id={self.client_id!r}, protocols={self.protocol_names()})")


class GroupMetadata:
    """One classic group: state, generation, members and committed offsets (Kafka's ``GroupMetadata``)."""

    def __init__(self, group_id: str, state: GroupState, time: Time) -> None:
        self.group_id = group_id
        self.time = time
        self.state = state
        self.current_state_timestamp: int | None = time.milliseconds()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.static_members: dict[str, str] = {}
        self.supported_protocols: Counter[str] = Counter()
        self.num_members_awaiting_join = 0
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[TopicPartition, CommittedOffset] = {}

    # -- state ------------------------------------------------------------------------------------------------
    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id} should be in one of "
                               f"{sorted(s.value for s in _VALID_PREVIOUS[target])} before moving to "
                               f"{target.value}, but it is {self.state.value}")
        self.state = target
        self.current_state_timestamp = self.time.milliseconds()

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- members ----------------------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            self.supported_protocols += Counter()  # drop zero counts
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: JoinCallback | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.supported_protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        self.supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinResult) -> None:
        cb = member.awaiting_join
        if cb is not None:
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1
            cb(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncResult) -> bool:
        cb = member.awaiting_sync
        if cb is None:
            return False
        member.awaiting_sync = None
        cb(result)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False when nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    # -- static members ---------------------------------------------------------------------------------------
    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def current_static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """True when ``group_instance_id`` is known but now belongs to a different member id."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str,
                              fence_error: int) -> MemberMetadata:
        """Hand a static member's slot to a new member id; a request the old id is waiting on gets ``fence_error``."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join_callback(member, JoinResult(fence_error, old_member_id))
        self.maybe_invoke_sync_callback(member, SyncResult(fence_error))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member

    # -- protocols --------------------------------------------------------------------------------------------
    def supports_protocols(self, member_protocol_type: str, member_protocols: Iterable[str]) -> bool:
        names = set(member_protocols)
        if self.is_state(GroupState.EMPTY):
            return bool(member_protocol_type) and bool(names)
        return self.protocol_type == member_protocol_type and any(
            self.supported_protocols[p] == len(self.members) for p in names
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """The protocol every member supports that gets most members' first-choice votes (ties: first vote)."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])  # Counter keeps first-vote order, max() keeps the first tie

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """Union of the members' subscribed topics of a ``consumer`` group; None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                sub = subscription_topics(member.metadata(self.protocol_name))
            except KeyError:
                return None
            if sub is None:
                return None
            topics |= sub
        return topics

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """What the leader gets in its JoinGroup response: every member's metadata for the chosen protocol."""
        if self.protocol_name is None:
            raise RuntimeError(f"no protocol selected for group {self.group_id}")
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    # -- offsets ----------------------------------------------------------------------------------------------
    def has_offsets(self) -> bool:
        return bool(self.offsets)

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Offsets due to expire (Kafka's ``GroupMetadata.removeExpiredOffsets`` selection rules).

        * a group with a protocol type that is Empty: all offsets once it has been empty for the retention time;
        * a consumer group that is Stable and knows its subscriptions: offsets of topics it no longer consumes;
        * a standalone group (no protocol type, ``assign()`` consumers): offsets not committed for the retention time.
        An offset committed with an explicit expire timestamp (OffsetCommit v2-v4) expires at that time instead.
        """

        def select(base: Callable[[CommittedOffset], int], subscribed: set[str] = frozenset()) -> list[TopicPartition]:  # type: ignore[assignment]
            out = []
            for tp, off in self.offsets.items():
                if tp.topic in subscribed:
                    continue
                if off.expire_timestamp is not None and off.expire_timestamp >= 0:
                    if now_ms >= off.expire_timestamp:
                        out.append(tp)
                elif now_ms - base(off) >= retention_ms:
                    out.append(tp)
            return out

        if self.protocol_type is not None and self.is_state(GroupState.EMPTY):
            ts = self.current_state_timestamp
            return select(lambda o: ts if ts is not None else o.commit_timestamp)
        if (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
                and self.is_state(GroupState.STABLE)):
            return select(lambda o: o.commit_timestamp, self.subscribed_topics)
        if self.protocol_type is None:
            return select(lambda o: o.commit_timestamp)
        return []

    def __repr__(self) -> str:
        return (f"GroupMetadata(group_id={self.group_id!r}, generation={self.generation_id}, "
                f"state={self.state.value}, protocol_type={self.protocol_type!r}, "
                f"protocol={self.protocol_name!r}, members={list(self.members)})")


def subscription_topics(metadata: bytes | memoryview) -> set[str] | None:
    """Topics of a ``consumer`` protocol subscription (Kafka's ``ConsumerProtocol.deserializeSubscription``).

    None when the bytes do not parse. Newer subscription versions keep older layouts as a prefix, so a version
    above the newest known one is read with the newest layout.
    """
    view = memoryview(metadata)
    if len(view) < 2:
        return None
    version = _INT16.unpack_from(view, 0)[0]
    if version < 0:
        return None
    try:
        sub = ConsumerProtocolSubscription.decode(view[2:], min(version, ConsumerProtocolSubscription.VALID_VERSIONS[1]))
    except ProtocolError:
        return None
    return set(sub.topics)
