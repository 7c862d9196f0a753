"""Assignor properties: validity, balance, stickiness, generation-awareness and the cooperative two-phase
hand-over (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.structs import TopicPartition as TP
from strom.consumer.assignors import (
    Assignment,
    ConsumerGroupMetadata,
    CooperativeStickyAssignor,
    GroupSubscription,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    make_assignors,
)
from strom.consumer.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(1, 12), min_size=1)


@st.composite
def groups(draw, same_subscriptions: bool | None = None):
    partitions = draw(topics_st)
    names = sorted(partitions)
    n_members = draw(st.integers(1, 8))
    same = draw(st.booleans()) if same_subscriptions is None else same_subscriptions
    subs = {}
    for i in range(n_members):
        topics = names if same else draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        subs[f"m{i:02d}"] = list(topics)
    return partitions, subs


def run(assignor, partitions, subs, owned=None, generation=None, instance_ids=None):
    owned = owned or {}
    subscriptions = {
        m: Subscription(topics=list(t), owned_partitions=list(owned.get(m, [])),
                        generation_id=generation.get(m) if generation else None,
                        group_instance_id=(instance_ids or {}).get(m))
        for m, t in subs.items()
    }
    result = assignor.assign_group(partitions, GroupSubscription(subscriptions))
    return {m: a.partitions for m, a in result.assignments.items()}


def check_valid(partitions, subs, assignment, complete=True):
    assert set(assignment) == set(subs)
    seen = {}
    for member, parts in assignment.items():
        for tp in parts:
            assert tp.topic in subs[member], f"{member} got {tp} without subscribing"
            assert tp not in seen, f"{tp} assigned to {seen[tp]} and {member}"
            seen[tp] = member
    if complete:
        expected = {TP(t, p) for m in subs.values() for t in m for p in range(partitions[t])}
        assert set(seen) == expected


def check_balanced(subs, assignment):
    """Kafka's criterion: a member with >1 more partitions than another holds none of its topics."""
    for big, big_parts in assignment.items():
        for small, small_parts in assignment.items():
            if len(big_parts) > len(small_parts) + 1:
                assert not any(tp.topic in subs[small] for tp in big_parts), (big, small, assignment)


# ----------------------------------------------------------------------------------------------- range


def test_range_example():
    subs = {"c0": ["t0", "t1"], "c1": ["t0", "t1"]}
    out = run(RangeAssignor(), {"t0": 3, "t1": 3}, subs)
    assert out == {"c0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
                   "c1": [TP("t0", 2), TP("t1", 2)]}


def test_range_orders_static_members_first():
    subs = {"a": ["t"], "b": ["t"]}
    out = run(RangeAssignor(), {"t": 3}, subs, instance_ids={"b": "inst-0"})
    assert out["b"] == [TP("t", 0), TP("t", 1)]


@SETTINGS
@given(groups())
def test_range_valid_and_balanced_per_topic(group):
    partitions, subs = group
    out = run(RangeAssignor(), partitions, subs)
    check_valid(partitions, subs, out)
    for topic in partitions:
        counts = [sum(1 for tp in parts if tp.topic == topic) for m, parts in out.items() if topic in subs[m]]
        if counts:
            assert max(counts) - min(counts) <= 1


# ------------------------------------------------------------------------------------------ roundrobin


def test_roundrobin_example():
    subs = {"c0": ["t0", "t1"], "c1": ["t0", "t1"]}
    out = run(RoundRobinAssignor(), {"t0": 3, "t1": 3}, subs)
    assert out == {"c0": [TP("t0", 0), TP("t0", 2), TP("t1", 1)], "c1": [TP("t0", 1), TP("t1", 0), TP("t1", 2)]}


@SETTINGS
@given(groups())
def test_roundrobin_valid(group):
    partitions, subs = group
    out = run(RoundRobinAssignor(), partitions, subs)
    check_valid(partitions, subs, out)


@SETTINGS
@given(groups(same_subscriptions=True))
def test_roundrobin_balanced_with_equal_subscriptions(group):
    partitions, subs = group
    out = run(RoundRobinAssignor(), partitions, subs)
    sizes = [len(p) for p in out.values()]
    assert max(sizes) - min(sizes) <= 1


# ---------------------------------------------------------------------------------------------- sticky


def sticky_round(assignors, partitions, subs, leader=None):
    """One eager rebalance: every member reports its previous assignment through user data."""
    subscriptions = {m: Subscription(topics=list(t), user_data=assignors[m].subscription_user_data(set(t)))
                     for m, t in subs.items()}
    leader = leader or sorted(subs)[0]
    result = assignors[leader].assign_group(partitions, GroupSubscription(subscriptions))
    return {m: a.partitions for m, a in result.assignments.items()}


def deliver(assignors, assignment, generation):
    for m, parts in assignment.items():
        assignors[m].on_assignment(Assignment(parts), ConsumerGroupMetadata("g", generation, m))


@SETTINGS
@given(groups(), st.integers(0, 3), st.data())
def test_sticky_valid_balanced_and_sticky(group, n_new, data):
    partitions, subs = group
    assignors = {m: StickyAssignor() for m in subs}
    first = sticky_round(assignors, partitions, subs)
    check_valid(partitions, subs, first)
    check_balanced(subs, first)
    deliver(assignors, first, 1)
    # same members again: nothing moves
    again = sticky_round(assignors, partitions, subs)
    assert {m: set(p) for m, p in again.items()} == {m: set(p) for m, p in first.items()}
    # members leave and others join
    leaving = data.draw(st.lists(st.sampled_from(sorted(subs)), unique=True, max_size=len(subs) - 1))
    subs2 = {m: t for m, t in subs.items() if m not in leaving}
    all_topics = sorted(partitions)
    for i in range(n_new):
        subs2[f"n{i}"] = all_topics
        assignors[f"n{i}"] = StickyAssignor()
    second = sticky_round({m: assignors[m] for m in subs2}, partitions, subs2)
    check_valid(partitions, subs2, second)
    check_balanced(subs2, second)
    if not n_new and len({tuple(t) for t in subs2.values()}) == 1:
        # only departures with equal subscriptions: survivors keep everything they had
        for m in subs2:
            assert set(first[m]) <= set(second[m])


@SETTINGS
@given(groups(same_subscriptions=True), st.integers(1, 3))
def test_sticky_new_members_only_take_from_others(group, n_new):
    partitions, subs = group
    assignors = {m: StickyAssignor() for m in subs}
    first = sticky_round(assignors, partitions, subs)
    deliver(assignors, first, 1)
    subs2 = dict(subs)
    for i in range(n_new):
        subs2[f"n{i}"] = subs[next(iter(subs))]
        assignors[f"n{i}"] = StickyAssignor()
    second = sticky_round(assignors, partitions, subs2)
    check_valid(partitions, subs2, second)
    sizes = [len(p) for p in second.values()]
    assert max(sizes) - min(sizes) <= 1
    for m in subs:  # an old member never gains a partition another old member had
        gained = set(second[m]) - set(first[m])
        assert not gained or all(tp not in set().union(*first.values()) for tp in gained)


def test_sticky_user_data_round_trip_and_v0_fallback():
    parts = [TP("t", 0), TP("t", 3), TP("u", 1)]
    assert decode_sticky_user_data(encode_sticky_user_data(parts, 7)).generation == 7
    v0 = decode_sticky_user_data(encode_sticky_user_data(parts, None))
    assert v0.partitions == parts and v0.generation is None
    with pytest.raises(ValueError):
        decode_sticky_user_data(b"\x00\x00\x00\x05\x00")


def test_sticky_generation_aware_ownership():
    a = StickyAssignor()
    partitions = {"t": 4}
    # m1 claims t-0,t-1 in generation 5; m2 claims t-0 in stale generation 3; m3 claims t-2 in 5, m4 t-2 in 5
    subs = {
        "m1": Subscription(["t"], encode_sticky_user_data([TP("t", 0), TP("t", 1)], 5)),
        "m2": Subscription(["t"], encode_sticky_user_data([TP("t", 0)], 3)),
        "m3": Subscription(["t"], encode_sticky_user_data([TP("t", 2)], 5)),
        "m4": Subscription(["t"], encode_sticky_user_data([TP("t", 2)], 5)),
    }
    out = a.assign_group(partitions, GroupSubscription(subs)).assignments
    assert a.previous_owners[TP("t", 0)] == "m1"
    assert TP("t", 2) in a.partitions_with_multiple_previous_owners
    assert out["m1"].partitions == [TP("t", 0)]  # quota 1: keeps one of its own


# ---------------------------------------------------------------------------------- cooperative-sticky


def coop_round(assignors, partitions, subs, owned, generation):
    subscriptions = {m: Subscription(topics=list(t), owned_partitions=list(owned.get(m, [])),
                                     user_data=assignors[m].subscription_user_data(set(t)),
                                     generation_id=generation.get(m))
                     for m, t in subs.items()}
    leader = sorted(subs)[0]
    result = assignors[leader].assign_group(partitions, GroupSubscription(subscriptions))
    return {m: a.partitions for m, a in result.assignments.items()}


@SETTINGS
@given(groups(), st.integers(0, 3), st.data())
def test_cooperative_two_phase_handover(group, n_new, data):
    partitions, subs = group
    assignors = {m: CooperativeStickyAssignor() for m in subs}
    owned: dict[str, list[TP]] = {}
    gen = 1
    first = coop_round(assignors, partitions, subs, owned, {})
    check_valid(partitions, subs, first)
    check_balanced(subs, first)
    owned = {m: list(p) for m, p in first.items()}
    generation = dict.fromkeys(subs, gen)
    leaving = data.draw(st.lists(st.sampled_from(sorted(subs)), unique=True, max_size=len(subs) - 1))
    subs2 = {m: t for m, t in subs.items() if m not in leaving}
    for i in range(n_new):
        subs2[f"n{i}"] = sorted(partitions)
        assignors[f"n{i}"] = CooperativeStickyAssignor()
    owned = {m: p for m, p in owned.items() if m in subs2}
    # phase 1: nothing is handed directly from one live owner to another
    second = coop_round(assignors, partitions, subs2, owned, generation)
    check_valid(partitions, subs2, second, complete=False)
    for m, parts in second.items():
        for tp in parts:
            assert not any(tp in owned.get(o, []) for o in subs2 if o != m), f"{tp} moved directly to {m}"
    # members revoke what they lost; the ones that revoked rejoin: phase 2 completes the assignment
    owned = {m: [tp for tp in owned.get(m, []) if tp in second[m]] + [tp for tp in second[m]
                                                                       if tp not in owned.get(m, [])]
             for m in subs2}
    generation = dict.fromkeys(subs2, gen + 1)
    third = coop_round(assignors, partitions, subs2, owned, generation)
    check_valid(partitions, subs2, third)
    check_balanced(subs2, third)
    for m in subs2:  # phase 2 only adds: nobody loses what phase 1 left it
        assert set(owned[m]) <= set(third[m])


def test_cooperative_withholds_partition_claimed_twice_in_one_generation():
    a = CooperativeStickyAssignor()
    subs = {"m1": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=4),
            "m2": Subscription(["t"], owned_partitions=[TP("t", 0)], generation_id=4)}
    out = a.assign_group({"t": 2}, GroupSubscription(subs)).assignments
    assert TP("t", 0) not in out["m1"].partitions + out["m2"].partitions


def test_cooperative_user_data_and_protocols():
    a = CooperativeStickyAssignor()
    assert a.supported_protocols() == [RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER]
    a.on_assignment(Assignment([]), ConsumerGroupMetadata("g", 9, "m"))
    assert a.subscription_user_data({"t"}) == b"\x00\x00\x00\x09"
    # generation read from user data when the subscription version has none
    data = a.member_data(Subscription(["t"], user_data=b"\x00\x00\x00\x09"))
    assert data.generation == 9
    # librdkafka's layout (StickyAssignor v1) is understood too
    data = a.member_data(Subscription(["t"], user_data=encode_sticky_user_data([TP("t", 1)], 12)))
    assert data.generation == 12


def test_make_assignors_names():
    built = make_assignors(["range", "org.apache.kafka.clients.consumer.RoundRobinAssignor", StickyAssignor,
                            CooperativeStickyAssignor()])
    assert [a.name() for a in built] == ["range", "roundrobin", "sticky", "cooperative-sticky"]
    from strom.common.errors import ConfigError

    with pytest.raises(ConfigError):
        make_assignors(["range", "range"])
    with pytest.raises(ConfigError):
        make_assignors(["no.such.Assignor"])
