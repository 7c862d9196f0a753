"""GroupCoordinator offsets and admin APIs: commit checks, fetch, replay of __consumer_offsets, retention,
DeleteGroups, OffsetDelete, ListGroups, DescribeGroups (MockTime, in-memory log)."""

from __future__ import annotations

import pytest

from strom.common.error_codes import ErrorCode as E
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.group_metadata import CommittedOffset, GroupState

from .helpers import join, join_new, make_coordinator, sync, tp

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def stable(coord: GroupCoordinator, group: str = "g", **kw: object) -> tuple[str, int]:
    box = join_new(coord, group, **kw)  # type: ignore[arg-type]
    coord.poll()
    r = box.value
    assert sync(coord, group, r.generation_id, r.member_id, {r.member_id: b"a"}).value.error == 0
    return r.member_id, r.generation_id


def offs(*items: tuple[str, int, int]) -> dict:  # type: ignore[type-arg]
    return {tp(t, p): CommittedOffset(offset=o, metadata="m") for t, p, o in items}


def test_commit_checks_generation_and_member() -> None:
    coord, time, _ = make_coordinator()
    member, gen = stable(coord)
    assert coord.handle_commit_offsets("g", member, None, gen, offs(("t", 0, 5))) == {tp("t", 0): 0}
    assert coord.handle_commit_offsets("g", member, None, gen + 1, offs(("t", 0, 6))) == {tp("t", 0): E.ILLEGAL_GENERATION}
    assert coord.handle_commit_offsets("g", "ghost", None, gen, offs(("t", 0, 6))) == {tp("t", 0): E.UNKNOWN_MEMBER_ID}
    # A simple (generation -1) commit is refused while the group has members...
    assert coord.handle_commit_offsets("g", "", None, -1, offs(("t", 0, 6))) == {tp("t", 0): E.UNKNOWN_MEMBER_ID}
    # ...and a member id of a group the coordinator does not know means an old generation.
    assert coord.handle_commit_offsets("other", "m", None, 3, offs(("t", 0, 1))) == {tp("t", 0): E.ILLEGAL_GENERATION}
    err, got = coord.handle_fetch_offsets("g", [tp("t", 0), tp("t", 1)])
    assert err == 0 and got[tp("t", 0)].offset == 5 and got[tp("t", 1)] is None


def test_simple_commit_creates_group_and_fetch_all() -> None:
    coord, time, _ = make_coordinator()
    res = coord.handle_commit_offsets("solo", "", None, -1, offs(("a", 0, 1), ("a", 1, 2), ("b", 0, 3)))
    assert set(res.values()) == {0}
    group = coord.manager.get_group("solo")
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    err, got = coord.handle_fetch_offsets("solo", None)
    assert {k: v.offset for k, v in got.items()} == {tp("a", 0): 1, tp("a", 1): 2, tp("b", 0): 3}
    assert coord.handle_fetch_offsets("unknown", [tp("a", 0)]) == (0, {tp("a", 0): None})


def test_commit_during_completing_rebalance_and_metadata_limit() -> None:
    coord, time, _ = make_coordinator()
    box = join_new(coord)
    coord.poll()
    r = box.value
    assert coord.handle_commit_offsets("g", r.member_id, None, r.generation_id, offs(("t", 0, 1))) == {
        tp("t", 0): E.REBALANCE_IN_PROGRESS}
    sync(coord, "g", r.generation_id, r.member_id, {})
    big = {tp("t", 0): CommittedOffset(1, metadata="x" * 5000), tp("t", 1): CommittedOffset(2)}
    assert coord.handle_commit_offsets("g", r.member_id, None, r.generation_id, big) == {
        tp("t", 0): E.OFFSET_METADATA_TOO_LARGE, tp("t", 1): 0}


def test_append_failure_maps_to_coordinator_error() -> None:
    coord, time, log = make_coordinator()
    log.fail_with = E.UNKNOWN_TOPIC_OR_PARTITION
    assert coord.handle_commit_offsets("g", "", None, -1, offs(("t", 0, 1))) == {tp("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert coord.handle_fetch_offsets("g", [tp("t", 0)])[1] == {tp("t", 0): None}  # not visible when not written


def test_replay_restores_offsets_groups_and_honours_tombstones() -> None:
    coord, time, log = make_coordinator()
    member, gen = stable(coord, "live", session_ms=10_000)
    coord.handle_commit_offsets("live", member, None, gen, offs(("t", 0, 10)))
    coord.handle_commit_offsets("live", member, None, gen, offs(("t", 0, 11)))
    coord.handle_commit_offsets("gone", "", None, -1, offs(("t", 0, 7)))
    assert coord.handle_delete_groups(["gone"]) == {"gone": 0}
    coord2, _, _ = make_coordinator(time, log)
    group = coord2.manager.get_group("live")
    assert group.state is GroupState.STABLE and group.generation_id == gen and member in group.members
    assert group.get(member).assignment == b"a" and group.protocol_name == "range"
    assert coord2.handle_fetch_offsets("live", [tp("t", 0)])[1][tp("t", 0)].offset == 11
    assert coord2.manager.get_group("gone") is None
    # The restored member can carry on with its generation...
    assert coord2.handle_heartbeat("live", member, None, gen) == 0
    # ...and is dropped once it stops heartbeating; the group becomes Empty but keeps its offsets.
    time.sleep(10_000)
    coord2.poll()
    assert group.state is GroupState.EMPTY and group.generation_id == gen + 1
    coord3, _, _ = make_coordinator(time, log)
    g3 = coord3.manager.get_group("live")
    assert g3.state is GroupState.EMPTY and g3.generation_id == gen + 1 and g3.offsets[tp("t", 0)].offset == 11


def test_offset_retention() -> None:
    coord, time, log = make_coordinator(retention_ms=100_000)
    coord.handle_commit_offsets("simple", "", None, -1, offs(("t", 0, 1)))
    member, gen = stable(coord, "busy", session_ms=60_000)
    coord.handle_commit_offsets("busy", member, None, gen, offs(("t", 0, 1), ("old-topic", 0, 1)))
    time.sleep(60_000)
    coord.handle_heartbeat("busy", member, None, gen)
    coord.handle_commit_offsets("simple", "", None, -1, offs(("t", 1, 1)))
    time.sleep(40_000)
    coord.handle_heartbeat("busy", member, None, gen)
    assert coord.manager.cleanup_expired_offsets() == 2
    assert set(coord.manager.get_group("simple").offsets) == {tp("t", 1)}
    # A stable consumer group keeps offsets of topics it subscribes to.
    assert set(coord.manager.get_group("busy").offsets) == {tp("t", 0)}
    coord.handle_leave_group("busy", [(member, None)])
    coord.poll()
    time.sleep(100_000)
    coord.manager.cleanup_expired_offsets()
    assert coord.manager.get_group("busy") is None and coord.manager.get_group("simple") is None
    coord2, _, _ = make_coordinator(time, log)
    assert coord2.manager.groups == {}


def test_delete_groups() -> None:
    coord, time, _ = make_coordinator()
    stable(coord, "active")
    coord.handle_commit_offsets("idle", "", None, -1, offs(("t", 0, 1)))
    assert coord.handle_delete_groups(["active", "idle", "missing"]) == {
        "active": E.NON_EMPTY_GROUP, "idle": 0, "missing": E.GROUP_ID_NOT_FOUND}
    assert coord.manager.get_group("idle") is None


def test_delete_offsets() -> None:
    coord, time, _ = make_coordinator()
    member, gen = stable(coord, "g")  # subscribed to topic "t"
    coord.handle_commit_offsets("g", member, None, gen, offs(("t", 0, 1), ("u", 0, 1)))
    assert coord.handle_delete_offsets("g", [tp("t", 0), tp("u", 0)]) == (
        0, {tp("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, tp("u", 0): 0})
    assert set(coord.manager.get_group("g").offsets) == {tp("t", 0)}
    assert coord.handle_delete_offsets("nope", [tp("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
    coord.handle_commit_offsets("e", "", None, -1, offs(("t", 0, 1)))
    assert coord.handle_delete_offsets("e", [tp("t", 0)]) == (0, {tp("t", 0): 0})
    assert coord.manager.get_group("e") is None  # empty without offsets: dead


def test_list_and_describe_groups() -> None:
    coord, time, _ = make_coordinator()
    member, gen = stable(coord, "s")
    join(coord, "p", require_known=False)  # PreparingRebalance until poll
    coord.handle_commit_offsets("e", "", None, -1, offs(("t", 0, 1)))
    err, groups = coord.handle_list_groups()
    assert err == 0 and [(g.group_id, g.state, g.protocol_type) for g in groups] == [
        ("e", "Empty", ""), ("p", "PreparingRebalance", "consumer"), ("s", "Stable", "consumer")]
    assert [g.group_id for g in coord.handle_list_groups(["stable", "EMPTY"])[1]] == ["e", "s"]
    assert coord.handle_list_groups(types=["consumer"])[1] == []
    s, p, missing = coord.handle_describe_groups(["s", "p", "zz"])
    assert (s.state, s.protocol, [m.member_id for m in s.members]) == ("Stable", "range", [member])
    assert s.members[0].assignment == b"a" and s.members[0].metadata[:2] == b"\x00\x00"
    assert (p.state, p.protocol, p.members[0].assignment) == ("PreparingRebalance", "", b"")
    assert (missing.error, missing.state) == (0, "Dead")
