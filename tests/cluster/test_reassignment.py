"""Partition reassignment (KIP-455) on a real 3-broker cluster: moving a partition's replicas to other brokers
keeps every record, the new replicas end up in the ISR, the old one drops its copy."""

from __future__ import annotations

import json
import subprocess
import sys
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


def strom_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_reassign_partitions_tool(tmp_path: Path) -> None:
    """The kafka-reassign-partitions.sh flow: --generate, --execute, --verify (in progress, then complete)."""
    with LocalCluster(3) as cluster:
        create_topic(cluster, "tool", partitions=2, rf=2)
        acked, errors = produce(cluster.bootstrap, "tool", list(range(50)), acks="all")
        assert len(acked) == 50 and not errors
        (tmp_path / "topics.json").write_text('{"version":1,"topics":[{"topic":"tool"}]}')
        gen = strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
                        "--topics-to-move-json-file", str(tmp_path / "topics.json"), "--broker-list", "1,2,3")
        assert gen.returncode == 0, gen.stderr
        lines = gen.stdout.splitlines()
        assert lines[0] == "Current partition replica assignment"
        assert lines[3] == "Proposed partition reassignment configuration"
        proposed = json.loads(lines[4])
        assert len(proposed["partitions"]) == 2 and all(len(p["replicas"]) == 2 for p in proposed["partitions"])
        # Move both partitions onto brokers 2 and 3 in a fixed order.
        plan = {"version": 1, "partitions": [{"topic": "tool", "partition": p, "replicas": [3, 2]} for p in (0, 1)]}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        ex = strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
                       "--reassignment-json-file", str(tmp_path / "plan.json"))
        assert ex.returncode == 0, ex.stderr
        assert "Save this to use as the --reassignment-json-file option during rollback" in ex.stdout
        assert "Successfully started partition reassignment(s) for tool-0,tool-1" in ex.stdout

        def verified() -> bool:
            v = strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                          "--reassignment-json-file", str(tmp_path / "plan.json"))
            return v.returncode == 0 and "Reassignment of partition tool-1 is completed." in v.stdout

        wait_until(verified, 120, "--verify to report both moves complete")
        lst = strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--list")
        assert lst.returncode == 0 and "No partition reassignments found." in lst.stdout
        # Every broker learns the new replica lists (UpdateMetadata reaches them one after another).
        for n in (1, 2, 3):
            wait_until(lambda n=n: [list(partition_meta(cluster, "tool", p, nodes=(n,)).replicas) for p in (0, 1)]
                       == [[3, 2], [3, 2]], 30, f"broker {n} to show the new replicas")
        assert [v for _, v in read_all(cluster.bootstrap, "tool", partitions=2)[0]] == \
            [v for _, _, v in sorted(a for a in acked if a[0] == 0)]
        bad = strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute")
        assert bad.returncode != 0 and "--reassignment-json-file" in bad.stderr


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
        # Reordering the same replicas moves no data but changes the preferred leader on every broker.
        reordered = list(reversed(target))
        with controller_client(cluster) as c:
            r = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, Alter(timeout_ms=30000, topics=[
                Alter.ReassignableTopic(name="moving", partitions=[
                    Alter.ReassignablePartition(partition_index=0, replicas=reordered)])]))
            assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.NONE]
        for n in (1, 2, 3):
            wait_until(lambda n=n: list(partition_meta(cluster, "moving", nodes=(n,)).replicas) == reordered, 30,
                       f"broker {n} to show the reordered replicas")
        # The old replica deleted its copy.
        old_dir = Path(cluster.brokers[old[0]].data_dir) / "moving-0"
        wait_until(lambda: not old_dir.exists(), 60, "the removed replica's log to be deleted")
