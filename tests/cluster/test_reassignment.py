"""Partition reassignment (KIP-455) on a real 3-broker cluster: moving a partition's replicas to other brokers
keeps every record, the new replicas end up in the ISR, the old one drops its copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as Alter
from strom.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as ListReq
from strom.protocol.messages.metadata import MetadataRequest
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient
from tests.cluster.test_replication import create_topic, partition_meta, produce, read_all

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def controller_client(cluster: LocalCluster) -> RawClient:
    with RawClient(cluster.brokers[cluster.alive()[0]].bootstrap) as c:
        controller = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[])).controller_id
    return RawClient(cluster.brokers[controller].bootstrap)


def test_move_a_partition_to_other_brokers() -> None:
    with LocalCluster(3) as cluster:
        create_topic(cluster, "moving", rf=1)
        acked, errors = produce(cluster.bootstrap, "moving", list(range(300)), acks="all")
        assert len(acked) == 300 and not errors
        old = partition_meta(cluster, "moving").replicas
        assert len(old) == 1
        target = [n for n in (1, 2, 3) if n not in old]
        with controller_client(cluster) as c:
            resp = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, Alter(timeout_ms=30000, topics=[
                Alter.ReassignableTopic(name="moving", partitions=[
                    Alter.ReassignablePartition(partition_index=0, replicas=target)])]))
            assert resp.error_code == ErrorCode.NONE
            assert [p.error_code for t in resp.responses for p in t.partitions] == [ErrorCode.NONE]
            # A replica list naming a broker that does not exist is refused.
            bad = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, Alter(timeout_ms=30000, topics=[
                Alter.ReassignableTopic(name="moving", partitions=[
                    Alter.ReassignablePartition(partition_index=0, replicas=[7])])]))
            assert [p.error_code for t in bad.responses for p in t.partitions] == \
                [ErrorCode.INVALID_REPLICA_ASSIGNMENT]

            def done() -> bool:
                ongoing = c.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, ListReq(timeout_ms=30000, topics=None))
                meta = partition_meta(cluster, "moving")
                return not ongoing.topics and sorted(meta.replicas) == sorted(target) \
                    and set(meta.isrs) == set(target)

            wait_until(done, 120, "the reassignment to finish")
            no_more = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, Alter(timeout_ms=30000, topics=[
                Alter.ReassignableTopic(name="moving", partitions=[
                    Alter.ReassignablePartition(partition_index=0, replicas=None)])]))
            assert [p.error_code for t in no_more.responses for p in t.partitions] == \
                [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
        assert [v for _, v in read_all(cluster.bootstrap, "moving")[0]] == list(range(300))
        # The old replica deleted its copy.
        old_dir = Path(cluster.brokers[old[0]].data_dir) / "moving-0"
        wait_until(lambda: not old_dir.exists(), 60, "the removed replica's log to be deleted")
