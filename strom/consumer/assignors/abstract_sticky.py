"""The sticky assignment algorithm shared by ``sticky`` and ``cooperative-sticky``.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor``.

Goals, in order: (1) every partition of a subscribed topic is assigned to exactly one subscribed member;
(2) the assignment is *balanced*: member counts differ by at most one, or, when subscriptions differ, no
partition could move from a member with more partitions to a member with at least two fewer that is also
subscribed to its topic; (3) as many previously owned partitions as possible stay where they were.

Previous ownership is generation-aware (KIP-341/KIP-792): each member reports the partitions it owned and
the generation it owned them in (``member_data``). When two members claim one partition, the claim from the
higher generation wins; two claims from the same generation cancel each other (the partition counts as
owned by nobody and is reported in ``partitions_with_multiple_previous_owners``).

Two algorithms, as in Kafka:

* all members subscribe to the same topics → ``constrained_assign``: members keep up to ``max_quota``
  (``ceil(P/N)``, only for the first ``P % N`` members that own that many) or ``min_quota`` (``P // N``) of
  their owned partitions, then members under ``min_quota`` are filled round-robin from the unassigned
  partitions and the remaining ``P % N`` extras go one each to members at ``min_quota``;
* otherwise → ``general_assign``: keep owned partitions (of topics the member still subscribes to), give each
  unassigned partition (most constrained first) to the eligible member with the fewest partitions, then move
  partitions from larger to eligible smaller members until the balance criterion holds, preferring to move
  partitions that were not previously owned (Kafka's ``performReassignments`` reaches the same fixed point
  with a more elaborate search).

Not thread-safe (assignors are used on the consumer's thread).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from strom.common.structs import TopicPartition
from strom.consumer.assignors.abstract import (
    DEFAULT_GENERATION,
    AbstractPartitionAssignor,
    Subscription,
    all_partitions,
)

__all__ = ["AbstractStickyAssignor", "MemberData"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemberData:
    """What a member owned and in which generation (Kafka's ``AbstractStickyAssignor.MemberData``)."""

    partitions: list[TopicPartition]
    generation: int | None = None
    rack_id: str | None = None


class AbstractStickyAssignor(AbstractPartitionAssignor):
    """Base of :class:`StickyAssignor` and :class:`CooperativeStickyAssignor`; subclasses provide
    :meth:`member_data`. After :meth:`assign`, ``partitions_with_multiple_previous_owners`` and
    ``previous_owners`` ({partition: member} of the valid claims) describe the input."""

    def __init__(self) -> None:
        self.partitions_with_multiple_previous_owners: set[TopicPartition] = set()
        self.previous_owners: dict[TopicPartition, str] = {}

    def member_data(self, subscription: Subscription) -> MemberData:
        raise NotImplementedError

    # ------------------------------------------------------------------------------ previous ownership

    def _owned_partitions(self, partitions_per_topic: Mapping[str, int],
                          subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """``{member: [valid owned partitions]}``; fills ``previous_owners`` and the multi-owner set."""
        claims: dict[TopicPartition, tuple[str, int, bool]] = {}  # tp -> (member, generation, valid)
        for member in sorted(subscriptions):
            data = self.member_data(subscriptions[member])
            generation = DEFAULT_GENERATION if data.generation is None else data.generation
            for tp in data.partitions:
                count = partitions_per_topic.get(tp.topic)
                if count is None or not 0 <= tp.partition < count:
                    continue  # the topic or partition is gone
                previous = claims.get(tp)
                if previous is None or generation > previous[1]:
                    if previous is not None:
                        log.warning("%s claims %s from generation %d, newer than %s's generation %d; it keeps it",
                                    member, tp, generation, previous[0], previous[1])
                    claims[tp] = (member, generation, True)
                elif generation == previous[1]:
                    if previous[2]:
                        log.error("Found multiple consumers %s and %s claiming the same TopicPartition %s in the "
                                  "same generation %d; the claims are invalidated", previous[0], member, tp,
                                  generation)
                    claims[tp] = (member, generation, False)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        self.previous_owners = {}
        self.partitions_with_multiple_previous_owners = set()
        for tp, (member, _generation, valid) in claims.items():
            if valid:
                owned[member].append(tp)
                self.previous_owners[tp] = member
            else:
                self.partitions_with_multiple_previous_owners.add(tp)
        for parts in owned.values():
            parts.sort(key=lambda tp: (tp.topic, tp.partition))
        return owned

    # -------------------------------------------------------------------------------------- assignment

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        if not subscriptions:
            return {}
        owned = self._owned_partitions(partitions_per_topic, subscriptions)
        topic_sets = {frozenset(s.topics) for s in subscriptions.values()}
        if len(topic_sets) == 1:
            topics = next(iter(topic_sets))
            parts = all_partitions(partitions_per_topic, topics)
            valid = set(parts)
            owned = {m: [tp for tp in ps if tp in valid] for m, ps in owned.items()}
            return self.constrained_assign(parts, owned)
        return self.general_assign(partitions_per_topic, subscriptions, owned)

    @staticmethod
    def constrained_assign(partitions: list[TopicPartition],
                           owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
        """Every member subscribes to ``partitions``' topics; ``owned`` holds valid previous ownership."""
        members = sorted(owned)
        min_quota, extra_left = divmod(len(partitions), len(members))
        max_quota = min_quota + (1 if extra_left else 0)
        assignment: dict[str, list[TopicPartition]] = {}
        assigned: set[TopicPartition] = set()
        under_min: list[str] = []
        at_min: list[str] = []
        for member in members:
            own = owned.get(member, [])
            if len(own) <= min_quota:
                keep = list(own)
            elif extra_left > 0:
                keep = own[:max_quota]
                extra_left -= 1
            else:
                keep = own[:min_quota]
            assignment[member] = keep
            assigned.update(keep)
            if len(keep) < min_quota:
                under_min.append(member)
            elif len(keep) == min_quota:
                at_min.append(member)
        unassigned = iter([tp for tp in partitions if tp not in assigned])
        queue = deque(under_min)
        while queue:
            member = queue.popleft()
            assignment[member].append(next(unassigned))
            if len(assignment[member]) < min_quota:
                queue.append(member)
            else:
                at_min.append(member)
        for member in at_min:
            if extra_left == 0:
                break
            assignment[member].append(next(unassigned))
            extra_left -= 1
        leftover = list(unassigned)
        if leftover:  # cannot happen: the quotas add up to len(partitions)
            raise AssertionError(f"constrained assignment left partitions unassigned: {leftover}")
        return assignment

    @staticmethod
    def general_assign(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                       owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
        """Members subscribe to different topics (see the module docstring)."""
        topics_of = {m: {t for t in s.topics if t in partitions_per_topic} for m, s in subscriptions.items()}
        assignment: dict[str, list[TopicPartition]] = {
            m: [tp for tp in owned.get(m, []) if tp.topic in topics_of[m]] for m in subscriptions
        }
        sticky = {tp: m for m, parts in assignment.items() for tp in parts}
        eligible: dict[str, list[str]] = {}
        for member in sorted(subscriptions):
            for topic in topics_of[member]:
                eligible.setdefault(topic, []).append(member)
        pending = [tp for tp in all_partitions(partitions_per_topic, eligible) if tp not in sticky]
        pending.sort(key=lambda tp: (len(eligible[tp.topic]), tp.topic, tp.partition))
        for tp in pending:
            target = min(eligible[tp.topic], key=lambda m: (len(assignment[m]), m))
            assignment[target].append(tp)
        # Move partitions from larger to smaller eligible members until no such move is possible. Every move
        # lowers the sum of squared sizes, so this terminates.
        while True:
            order = sorted(assignment, key=lambda m: (len(assignment[m]), m))
            moved = False
            for big in reversed(order):
                for small in order:
                    if len(assignment[big]) <= len(assignment[small]) + 1:
                        break
                    movable = [tp for tp in assignment[big] if tp.topic in topics_of[small]]
                    if not movable:
                        continue
                    fresh = [tp for tp in movable if sticky.get(tp) != big]
                    tp = (fresh or movable)[-1]
                    assignment[big].remove(tp)
                    assignment[small].append(tp)
                    moved = True
                    break
                if moved:
                    break
            if not moved:
                break
        for parts in assignment.values():
            parts.sort(key=lambda tp: (tp.topic, tp.partition))
        return assignment
