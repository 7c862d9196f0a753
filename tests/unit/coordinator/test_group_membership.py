"""GroupCoordinator state machine: join / sync / heartbeat / expiry / static members / leave (MockTime)."""

from __future__ import annotations

import pytest

from strom.common.error_codes import ErrorCode as E
from strom.server.coordinator.group_metadata import GroupState

from .helpers import join, join_new, make_coordinator, subscription, sync

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def stable_group(coord, time, n=2, group="g", **kw):  # type: ignore[no-untyped-def]
    """n dynamic members joined and synced; returns their member ids (leader first) and the generation."""
    boxes = [join_new(coord, group, client_id=f"c{i}", **kw) for i in range(n)]
    coord.poll()
    results = [b.value for b in boxes]
    assert all(r.error == 0 for r in results), results
    leader = results[0].leader_id
    ids = [r.member_id for r in results]
    gen = results[0].generation_id
    syncs = [sync(coord, group, gen, m, {x: x.encode() for x in ids} if m == leader else None) for m in ids]
    assert all(s.value.error == 0 for s in syncs)
    assert coord.manager.get_group(group).state is GroupState.STABLE
    return [leader] + [m for m in ids if m != leader], gen


def test_member_id_required_then_join_and_sync() -> None:
    coord, time, log = make_coordinator()
    first = join(coord)
    assert first.value.error == E.MEMBER_ID_REQUIRED and first.value.member_id.startswith("c-")
    second = join(coord, member_id=first.value.member_id)
    assert not second.done  # parked until the (zero) initial delay passes
    coord.poll()
    r = second.value
    assert (r.error, r.generation_id, r.leader_id, r.protocol_name) == (0, 1, r.member_id, "range")
    assert [m[0] for m in r.members] == [r.member_id]
    s = sync(coord, "g", 1, r.member_id, {r.member_id: b"assign"})
    assert s.value.error == 0 and s.value.assignment == b"assign" and s.value.protocol_name == "range"
    assert coord.manager.get_group("g").state is GroupState.STABLE
    assert log.appends == 1  # the assignment was written to __consumer_offsets


def test_version_below_4_joins_without_member_id_round_trip() -> None:
    coord, time, _ = make_coordinator()
    box = join(coord, require_known=False)
    coord.poll()
    assert box.value.error == 0 and box.value.generation_id == 1


def test_initial_rebalance_delay_is_extended_by_new_members() -> None:
    coord, time, _ = make_coordinator(initial_delay_ms=3000)
    a = join_new(coord, client_id="a")
    time.sleep(1000)
    b = join_new(coord, client_id="b")
    time.sleep(2000)
    coord.poll()
    assert not a.done and not b.done  # a member arrived during the delay: wait another delay
    time.sleep(3000)
    coord.poll()
    assert a.value.generation_id == b.value.generation_id == 1
    leader = a.value if a.value.leader_id == a.value.member_id else b.value
    follower = b.value if leader is a.value else a.value
    assert len(leader.members) == 2 and follower.members == []


def test_followers_wait_for_leader_assignment() -> None:
    coord, time, _ = make_coordinator()
    boxes = [join_new(coord, client_id=f"c{i}") for i in range(3)]
    coord.poll()
    res = [b.value for b in boxes]
    leader = next(r for r in res if r.member_id == r.leader_id)
    followers = [r for r in res if r is not leader]
    fsync = [sync(coord, "g", 1, f.member_id) for f in followers]
    assert not any(s.done for s in fsync)
    assignment = {r.member_id: r.member_id.encode() for r in res}
    lsync = sync(coord, "g", 1, leader.member_id, assignment)
    assert lsync.value.assignment == leader.member_id.encode()
    for f, s in zip(followers, fsync, strict=True):
        assert s.value.error == 0 and s.value.assignment == f.member_id.encode()


def test_heartbeat_errors() -> None:
    coord, time, _ = make_coordinator()
    (leader, follower), gen = stable_group(coord, time)
    assert coord.handle_heartbeat("g", follower, None, gen) == 0
    assert coord.handle_heartbeat("g", follower, None, gen + 5) == E.ILLEGAL_GENERATION
    assert coord.handle_heartbeat("g", "nobody", None, gen) == E.UNKNOWN_MEMBER_ID
    assert coord.handle_heartbeat("nogroup", follower, None, gen) == E.UNKNOWN_MEMBER_ID
    assert coord.handle_heartbeat("", follower, None, gen) == E.INVALID_GROUP_ID
    join(coord, member_id=leader)  # the leader rejoining starts a rebalance
    assert coord.handle_heartbeat("g", follower, None, gen) == E.REBALANCE_IN_PROGRESS


def test_session_timeout_removes_member_and_rebalances() -> None:
    coord, time, _ = make_coordinator()
    (leader, follower), gen = stable_group(coord, time, session_ms=10_000)
    for _ in range(3):
        time.sleep(4000)
        assert coord.handle_heartbeat("g", leader, None, gen) == 0
        coord.poll()
    group = coord.manager.get_group("g")
    assert follower not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert coord.handle_heartbeat("g", leader, None, gen) == E.REBALANCE_IN_PROGRESS
    rejoin = join(coord, member_id=leader, session_ms=10_000)
    r = rejoin.value  # everyone left has rejoined: completes at once
    assert r.generation_id == gen + 1 and [m[0] for m in r.members] == [leader]


def test_members_that_do_not_rejoin_are_dropped_after_rebalance_timeout() -> None:
    coord, time, _ = make_coordinator()
    (leader, follower), gen = stable_group(coord, time, rebalance_ms=20_000, session_ms=30_000)
    rejoin = join(coord, member_id=leader, rebalance_ms=20_000, session_ms=30_000)
    assert not rejoin.done
    time.sleep(20_000)
    coord.poll()
    assert rejoin.value.generation_id == gen + 1 and [m[0] for m in rejoin.value.members] == [leader]
    assert follower not in coord.manager.get_group("g").members


def test_member_that_never_syncs_is_removed() -> None:
    coord, time, _ = make_coordinator()
    boxes = [join_new(coord, client_id=f"c{i}", rebalance_ms=5000) for i in range(2)]
    coord.poll()
    res = [b.value for b in boxes]
    leader = next(r for r in res if r.member_id == r.leader_id)
    other = next(r for r in res if r is not leader)
    assert sync(coord, "g", 1, leader.member_id, {}).value.error == 0
    time.sleep(5000)
    coord.poll()
    group = coord.manager.get_group("g")
    assert other.member_id not in group.members and group.state is GroupState.PREPARING_REBALANCE


def test_leave_group_triggers_rebalance_and_reports_per_member() -> None:
    coord, time, _ = make_coordinator()
    (leader, follower), gen = stable_group(coord, time, n=2)
    top, errors = coord.handle_leave_group("g", [(follower, None), ("ghost", None)])
    assert (top, errors) == (0, [0, E.UNKNOWN_MEMBER_ID])
    assert coord.manager.get_group("g").state is GroupState.PREPARING_REBALANCE
    r = join(coord, member_id=leader).value
    assert r.generation_id == gen + 1
    assert coord.handle_leave_group("nogroup", [("x", None)]) == (0, [E.UNKNOWN_MEMBER_ID])
    coord.handle_leave_group("g", [(leader, None)])
    coord.poll()
    group = coord.manager.get_group("g")
    assert group.state is GroupState.EMPTY and not group.members


def test_static_member_restart_keeps_generation_and_fences_old_id() -> None:
    coord, time, _ = make_coordinator()
    a = join(coord, instance="i-a", client_id="a")
    b = join(coord, instance="i-b", client_id="b")
    coord.poll()
    ra, rb = a.value, b.value
    assert ra.error == rb.error == 0 and ra.member_id.startswith("i-a-")  # static members skip MEMBER_ID_REQUIRED
    leader, gen = ra.leader_id, ra.generation_id
    ids = [ra.member_id, rb.member_id]
    assert sync(coord, "g", gen, leader, {m: m.encode() for m in ids}).value.error == 0
    assert sync(coord, "g", gen, rb.member_id if leader == ra.member_id else ra.member_id).value.error == 0
    # Instance b restarts: new member id, no rebalance, old leader id returned so it does not reassign.
    again = join(coord, instance="i-b", client_id="b").value
    assert again.error == 0 and again.generation_id == gen and again.member_id != rb.member_id
    assert again.leader_id == leader and coord.manager.get_group("g").state is GroupState.STABLE
    assert coord.handle_heartbeat("g", rb.member_id, "i-b", gen) == E.FENCED_INSTANCE_ID
    assert join(coord, member_id=rb.member_id, instance="i-b").value.error == E.FENCED_INSTANCE_ID
    assert sync(coord, "g", gen, again.member_id, instance="i-b").value.assignment == rb.member_id.encode()
    assert coord.handle_heartbeat("g", again.member_id, "i-b", gen) == 0


def test_static_member_survives_rebalance_timeout_but_not_session_timeout() -> None:
    coord, time, _ = make_coordinator()
    a = join(coord, instance="i-a", session_ms=30_000, rebalance_ms=5000)
    d = join_new(coord, client_id="d", session_ms=30_000, rebalance_ms=5000)
    coord.poll()
    gen, leader = a.value.generation_id, a.value.leader_id
    ids = [a.value.member_id, d.value.member_id]
    sync(coord, "g", gen, leader, {m: b"x" for m in ids})
    sync(coord, "g", gen, next(m for m in ids if m != leader))
    # A follower rejoining with a changed subscription forces a rebalance the static member sits out.
    rejoin = join(coord, member_id=d.value.member_id, session_ms=30_000, rebalance_ms=5000,
                  protocols=[("range", subscription("t", "u"))])
    time.sleep(5000)
    coord.poll()
    assert rejoin.value.generation_id == gen + 1 and rejoin.value.leader_id == d.value.member_id
    group = coord.manager.get_group("g")
    assert a.value.member_id in group.members  # a dynamic member would have been dropped here
    # In a stable group a static member that stops heartbeating is removed after its session timeout.
    coord2, time2, _ = make_coordinator()
    s = join(coord2, instance="i-s", session_ms=30_000)
    coord2.poll()
    assert sync(coord2, "g", 1, s.value.member_id, {}).value.error == 0
    time2.sleep(29_999)
    coord2.poll()
    assert s.value.member_id in coord2.manager.get_group("g").members
    time2.sleep(1)
    coord2.poll()
    assert not coord2.manager.get_group("g").members


def test_leave_static_member_by_instance_id() -> None:
    coord, time, _ = make_coordinator()
    a = join(coord, instance="i-a")
    coord.poll()
    assert coord.handle_leave_group("g", [("", "i-a"), ("", "i-zz")]) == (0, [0, E.UNKNOWN_MEMBER_ID])
    assert a.value.member_id not in coord.manager.get_group("g").members


def test_pending_member_expires_after_session_timeout() -> None:
    coord, time, _ = make_coordinator()
    first = join(coord, session_ms=5000)
    group = coord.manager.get_group("g")
    assert first.value.member_id in group.pending_members
    time.sleep(5000)
    coord.poll()
    assert not group.pending_members
    assert join(coord, member_id=first.value.member_id).value.error == E.UNKNOWN_MEMBER_ID


def test_protocol_selected_by_vote_and_inconsistent_protocols_rejected() -> None:
    coord, time, _ = make_coordinator()
    meta = subscription("t")
    rr_first = [("roundrobin", meta), ("range", meta)]
    boxes = [join_new(coord, protocols=rr_first, client_id="a"), join_new(coord, protocols=rr_first, client_id="b"),
             join_new(coord, protocols=[("range", meta), ("roundrobin", meta)], client_id="c")]
    bad = join(coord, protocols=[("sticky", meta)])
    assert bad.value.error == E.INCONSISTENT_GROUP_PROTOCOL
    coord.poll()
    assert {b.value.protocol_name for b in boxes} == {"roundrobin"}
    assert coord.manager.get_group("g").subscribed_topics == {"t"}


def test_invalid_session_timeout_and_group_id() -> None:
    coord, time, _ = make_coordinator()
    assert join(coord, session_ms=10).value.error == E.INVALID_SESSION_TIMEOUT
    assert join(coord, group="").value.error == E.INVALID_GROUP_ID
    assert join(coord, group="g2", member_id="made-up").value.error == E.UNKNOWN_MEMBER_ID


def test_join_retry_during_completing_rebalance_returns_current_generation() -> None:
    coord, time, _ = make_coordinator()
    boxes = [join_new(coord, client_id=f"c{i}") for i in range(2)]
    coord.poll()
    r = boxes[1].value
    again = join(coord, member_id=r.member_id).value
    assert (again.generation_id, again.leader_id) == (r.generation_id, r.leader_id)
    assert coord.manager.get_group("g").state is GroupState.COMPLETING_REBALANCE


def test_sync_errors() -> None:
    coord, time, _ = make_coordinator()
    (leader, follower), gen = stable_group(coord, time)
    assert sync(coord, "g", gen + 1, follower).value.error == E.ILLEGAL_GENERATION
    assert sync(coord, "g", gen, "ghost").value.error == E.UNKNOWN_MEMBER_ID
    assert sync(coord, "nope", gen, follower).value.error == E.UNKNOWN_MEMBER_ID
    assert sync(coord, "g", gen, follower).value.assignment == follower.encode()  # Stable: current assignment
    join(coord, member_id=leader)
    assert sync(coord, "g", gen, follower).value.error == E.REBALANCE_IN_PROGRESS


def test_shutdown_answers_parked_joins() -> None:
    coord, time, _ = make_coordinator(initial_delay_ms=3000)
    box = join_new(coord)
    coord.shutdown()
    assert box.value.error == E.NOT_COORDINATOR
    assert join(coord).value.error == E.COORDINATOR_NOT_AVAILABLE


def test_group_max_size() -> None:
    coord, time, _ = make_coordinator(max_size=2)
    (leader, follower), gen = stable_group(coord, time, n=2)
    assert join(coord, require_known=False).value.error == E.GROUP_MAX_SIZE_REACHED
    assert join(coord, member_id=follower).value.error == 0  # members already in are fine


def test_a_resigned_partitions_old_group_objects_do_nothing_after_it_is_coordinated_again() -> None:
    """The coordinator resigns the group's ``__consumer_offsets`` partition; another broker coordinates the group
    for a while (a member leaves, the other rejoins alone); then leadership comes back and the group is loaded
    anew. The deadlines of the old, unloaded group object must not act afterwards (Kafka: an unloaded group is
    Dead). They did: the departed member's heartbeat deadline "rebalanced" the stale object, whose rebalance
    timeout then dropped the remaining member and wrote the group to the log as empty, and whose completion
    cancelled the join timer of the group loaded anew -- a rebalance of the real group then never completed, a
    consumer group stuck (found by tests/cluster_stress/test_consumer_groups_jepsen.py)."""
    coord, time, log = make_coordinator()
    coord.owned_partitions = set(range(5))
    (leader, follower), gen = stable_group(coord, time, session_ms=10_000, rebalance_ms=20_000)
    partition = coord.partition_for("g")
    coord.on_resignation(partition)
    assert coord.manager.get_group("g") is None
    other, _, _ = make_coordinator(time, log)  # the next coordinator, on the same log
    assert other.handle_leave_group("g", [(follower, None)]) == (0, [0])
    rejoined = join(other, "g", leader, session_ms=10_000, rebalance_ms=20_000)
    other.poll()
    assert rejoined.value.error == 0 and rejoined.value.generation_id == gen + 1
    assert sync(other, "g", gen + 1, leader, {leader: b"all"}).value.error == 0
    time.sleep(1_000)
    coord.on_election(partition)  # leadership is back: the group loaded anew, the leader its only member
    loaded = coord.manager.get_group("g")
    assert loaded is not None and loaded.state is GroupState.STABLE and set(loaded.members) == {leader}
    appends = log.appends
    for _ in range(40):  # 40 s: past the old object's session and rebalance timeouts; the leader heartbeats
        time.sleep(1_000)
        coord.poll()
        assert coord.handle_heartbeat("g", leader, None, gen + 1) == 0
    assert coord.manager.get_group("g") is loaded and loaded.state is GroupState.STABLE
    assert log.appends == appends  # before: the stale object written to the log as an empty group
    newcomer = join_new(coord, "g", session_ms=10_000, rebalance_ms=20_000)
    again = join(coord, "g", leader, session_ms=10_000, rebalance_ms=20_000)
    coord.poll()
    assert newcomer.value.error == 0 and again.value.generation_id == gen + 2  # the real group rebalances


def test_a_resigned_partitions_pending_transactional_offsets_are_forgotten() -> None:
    """A TxnOffsetCommit's offsets wait for their transaction's marker. The coordinator resigns the partition; the
    marker is written under the next coordinator; leadership comes back. The offsets pending here before must
    not be: kept, OffsetFetch with require_stable (KIP-447, read_committed consumers) answered
    UNSTABLE_OFFSET_COMMIT for ever, and the group's consumers never started."""
    from strom.common.error_codes import ErrorCode
    from strom.common.structs import TopicPartition
    from strom.server.coordinator.group_metadata import CommittedOffset

    coord, _time, _log = make_coordinator()
    coord.owned_partitions = set(range(5))
    tp = TopicPartition("t", 0)
    partition = coord.partition_for("g")
    assert coord.txn_offsets.commit("g", 7, 0, "", None, -1, {tp: CommittedOffset(offset=5)}) == {tp: 0}
    assert coord.handle_fetch_offsets("g", [tp], require_stable=True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    coord.on_resignation(partition)
    coord.on_election(partition)  # (the transaction ended meanwhile, under another coordinator)
    assert coord.handle_fetch_offsets("g", [tp], require_stable=True)[0] == ErrorCode.NONE
