"""The group APIs on the wire at old and new versions, with hand-built requests (no client library in between)."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey as K
from strom.protocol.messages.consumer_protocol import ConsumerProtocolSubscription
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.delete_groups import DeleteGroupsRequest
from strom.protocol.messages.describe_groups import DescribeGroupsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.heartbeat import HeartbeatRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.leave_group import LeaveGroupRequest
from strom.protocol.messages.list_groups import ListGroupsRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from strom.protocol.messages.sync_group import SyncGroupRequest
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SUB = struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=["w"]).encode(0)
JG = JoinGroupRequest
OC = OffsetCommitRequest
OF = OffsetFetchRequest


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("groups-wire") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                                 "offsets.topic.num.partitions": "4"})
    b.start()
    with RawClient(b.bootstrap) as c:
        c.request(K.CREATE_TOPICS, 4, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="w", num_partitions=2, replication_factor=1)], timeout_ms=5000))
        # what a client does before it joins a group (and creates __consumer_offsets): each test may then run alone
        assert c.request(K.FIND_COORDINATOR, 0, FindCoordinatorRequest(key="g")).error_code == E.NONE
    yield b
    assert b.proc is not None and b.proc.poll() is None, "the broker died"
    b.stop()
    b.cleanup()


def join(c: RawClient, version: int, group: str, member_id: str = "", instance: str | None = None):  # type: ignore[no-untyped-def]
    return c.request(K.JOIN_GROUP, version, JG(
        group_id=group, session_timeout_ms=5000, rebalance_timeout_ms=5000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=SUB)]))


def commit(c: RawClient, version: int, group: str, generation: int, member: str, offset: int, topic: str = "w",
           **extra: object):  # type: ignore[no-untyped-def]
    return c.request(K.OFFSET_COMMIT, version, OC(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, topics=[OC.OffsetCommitRequestTopic(
            name=topic, partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                    committed_metadata="md")])], **extra))


def test_find_coordinator_versions(wire: BrokerProcess) -> None:
    with RawClient(wire.bootstrap) as c:
        r0 = c.request(K.FIND_COORDINATOR, 0, FindCoordinatorRequest(key="g"))
        assert (r0.error_code, r0.node_id, r0.host, r0.port) == (0, 1, "127.0.0.1", wire.port)
        r3 = c.request(K.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="txn", key_type=1))
        assert (r3.error_code, r3.port) == (0, wire.port)
        r4 = c.request(K.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]))
        assert [(x.key, x.error_code, x.port) for x in r4.coordinators] == [("a", 0, wire.port), ("b", 0, wire.port)]
        r6 = c.request(K.FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=2, coordinator_keys=["s"]))
        assert r6.coordinators[0].error_code == E.INVALID_REQUEST and r6.coordinators[0].node_id == -1


def test_v0_member_lifecycle_and_old_offset_versions(wire: BrokerProcess) -> None:
    with RawClient(wire.bootstrap, client_id="old") as c:
        j = join(c, 0, "g0")  # v0: no MEMBER_ID_REQUIRED round, no rebalance timeout
        assert (j.error_code, j.generation_id, j.protocol_name) == (0, 1, "range")
        assert j.member_id.startswith("old-") and j.leader == j.member_id and len(j.members) == 1
        s = c.request(K.SYNC_GROUP, 0, SyncGroupRequest(group_id="g0", generation_id=1, member_id=j.member_id,
                      assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"A")]))
        assert (s.error_code, s.assignment) == (0, b"A")
        hb = c.request(K.HEARTBEAT, 0, HeartbeatRequest(group_id="g0", generation_id=1, member_id=j.member_id))
        assert hb.error_code == 0
        assert commit(c, 2, "g0", 1, j.member_id, 42, retention_time_ms=60_000).topics[0].partitions[0].error_code == 0
        assert commit(c, 2, "g0", 7, j.member_id, 43).topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
        assert commit(c, 0, "g0", -1, "", 44).topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
        assert commit(c, 3, "g0", 1, j.member_id, 1, topic="nope").topics[0].partitions[0].error_code == \
            E.UNKNOWN_TOPIC_OR_PARTITION
        f1 = c.request(K.OFFSET_FETCH, 1, OF(group_id="g0", topics=[OF.OffsetFetchRequestTopic(name="w",
                                                                                             partition_indexes=[0, 1])]))
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in f1.topics[0].partitions] \
            == [(0, 42, "md", 0), (1, -1, "", 0)]
        d = c.request(K.DESCRIBE_GROUPS, 0, DescribeGroupsRequest(groups=["g0", "missing"]))
        g0, missing = d.groups
        assert (g0.group_state, g0.protocol_data, g0.members[0].client_id, g0.members[0].member_assignment) == \
            ("Stable", "range", "old", b"A")
        assert g0.members[0].client_host == "/127.0.0.1" and (missing.error_code, missing.group_state) == (0, "Dead")
        lv = c.request(K.LEAVE_GROUP, 0, LeaveGroupRequest(group_id="g0", member_id=j.member_id))
        assert lv.error_code == 0
        lv = c.request(K.LEAVE_GROUP, 0, LeaveGroupRequest(group_id="g0", member_id=j.member_id))
        assert lv.error_code == E.UNKNOWN_MEMBER_ID
        # Empty now: a simple (v0) commit is accepted.
        assert commit(c, 0, "g0", -1, "", 50).topics[0].partitions[0].error_code == 0


def test_new_versions_member_id_required_and_batched_calls(wire: BrokerProcess) -> None:
    with RawClient(wire.bootstrap, client_id="new") as c:
        first = join(c, 9, "g9")
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("new-")
        j = join(c, 9, "g9", member_id=first.member_id)
        assert (j.error_code, j.generation_id, j.protocol_type, j.protocol_name) == (0, 1, "consumer", "range")
        s = c.request(K.SYNC_GROUP, 5, SyncGroupRequest(
            group_id="g9", generation_id=1, member_id=j.member_id, protocol_type="consumer", protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"B")]))
        assert (s.error_code, s.protocol_name, s.assignment) == (0, "range", b"B")
        bad = c.request(K.SYNC_GROUP, 5, SyncGroupRequest(group_id="g9", generation_id=1, member_id=j.member_id,
                                                          protocol_type="connect", protocol_name="range"))
        assert bad.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert commit(c, 9, "g9", 1, j.member_id, 9).topics[0].partitions[0].error_code == 0
        st = join(c, 9, "gs", instance="inst")  # static members skip MEMBER_ID_REQUIRED
        assert (st.error_code, st.generation_id) == (0, 1) and st.member_id.startswith("inst-")
        lv = c.request(K.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="gs", members=[
            LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="inst"),
            LeaveGroupRequest.MemberIdentity(member_id="ghost")]))
        assert [(m.group_instance_id, m.error_code) for m in lv.members] == [("inst", 0), (None, E.UNKNOWN_MEMBER_ID)]
        lg = c.request(K.LIST_GROUPS, 4, ListGroupsRequest(states_filter=["empty"]))
        empty = {g.group_id for g in lg.groups}
        lg5 = c.request(K.LIST_GROUPS, 5, ListGroupsRequest(types_filter=["classic"]))
        assert "gs" in empty and empty <= {g.group_id for g in lg5.groups} and "g9" in {g.group_id for g in lg5.groups}
        f8 = c.request(K.OFFSET_FETCH, 8, OF(groups=[OF.OffsetFetchRequestGroup(group_id="g0", topics=None),
                                                     OF.OffsetFetchRequestGroup(group_id="none", topics=None)]))
        by_group = {g.group_id: g for g in f8.groups}
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in by_group["g0"].topics] == [("w", [50])]
        assert by_group["none"].topics == [] and by_group["none"].error_code == 0


def test_delete_groups_and_retention_of_deleted_state(wire: BrokerProcess) -> None:
    with RawClient(wire.bootstrap) as c:
        assert commit(c, 5, "del-me", -1, "", 3).topics[0].partitions[0].error_code == 0
        j = join(c, 3, "busy")
        r = c.request(K.DELETE_GROUPS, 1, DeleteGroupsRequest(groups_names=["del-me", "busy", "never"]))
        assert {x.group_id: x.error_code for x in r.results} == {
            "del-me": 0, "busy": E.NON_EMPTY_GROUP, "never": E.GROUP_ID_NOT_FOUND}
        f = c.request(K.OFFSET_FETCH, 5, OF(group_id="del-me", topics=None))
        assert f.error_code == 0 and f.topics == []
        c.request(K.LEAVE_GROUP, 2, LeaveGroupRequest(group_id="busy", member_id=j.member_id))
        deadline = time.monotonic() + 10
        while True:
            r = c.request(K.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["busy"]))
            if r.results[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.results[0].error_code == 0
