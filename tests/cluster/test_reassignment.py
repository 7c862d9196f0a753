"""Partition reassignment (KIP-455) on a real 3-broker cluster: moving a partition's replicas to other brokers
keeps every record, the new replicas end up in the ISR, the old one drops its copy."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as Alter
from strom.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as ListReq
from strom.protocol.messages.metadata import MetadataRequest
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient
from tests.cluster.test_replication import create_topic, isr_is, partition_meta, produce, read_all

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


def _fill(bootstrap: str, topic: str, count: int = 4000) -> None:
    """``count`` records of 1 KiB (4 MB: several of a follower's 1 MiB fetches)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, f"{i:08d}".encode() + b"x" * 1016)
        p.poll(0)
    assert p.flush(60) == 0


def _replica_bytes(admin: Any, broker: int, tp: Any) -> int:
    dirs = admin.describe_log_dirs([broker]).values()[broker].result(30)
    return sum(d.replica_infos[tp].size for d in dirs.values() if tp in d.replica_infos)


def _stalls(admin: Any, source: int, target: int, tp: Any) -> None:
    """The new replica gets a first fetch's worth, then nothing more while the throttle holds: at 1 B/s, the
    first MiB keeps the rate over the quota for the whole quota window (11 s)."""
    total = _replica_bytes(admin, source, tp)
    wait_until(lambda: _replica_bytes(admin, target, tp) > 0, 60, f"the first records on broker {target}")
    first = _replica_bytes(admin, target, tp)
    time.sleep(2.5)  # about five fetch rounds (replica.fetch.wait.max.ms 500): a rate is what is under test
    assert _replica_bytes(admin, target, tp) == first < total


def test_reassignment_throttles(tmp_path: Path) -> None:
    """KIP-73 replication throttles on a real cluster: a leader holds a new replica it serves to
    leader.replication.throttled.rate when the topic lists it in leader.replication.throttled.replicas, a follower
    holds its own fetching to follower.replication.throttled.rate likewise, and ``reassign-partitions
    --throttle`` sets the rates and lists on both sides; removing the rates lets the moves complete, and --verify
    then clears every throttle, as Kafka's tool does."""
    from strom.admin import AdminClient, ConfigResource, ConfigResourceType
    from strom.common.structs import TopicPartition

    with LocalCluster(3) as cluster:
        admin = AdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            moves = {}
            for topic in ("by-leader", "by-follower", "by-tool"):
                create_topic(cluster, topic, rf=1)
                _fill(cluster.bootstrap, topic)
                source = partition_meta(cluster, topic).replicas[0]
                moves[topic] = (source, next(b for b in (1, 2, 3) if b != source))

            def configs(*args: str) -> None:
                done = strom_cli("configs", "--bootstrap-server", cluster.bootstrap, *args)
                assert done.returncode == 0, done.stderr

            def reassign(action: str, topic: str, *extra: str) -> subprocess.CompletedProcess[str]:
                source, target = moves[topic]
                plan = tmp_path / f"{topic}.json"
                plan.write_text(json.dumps({"version": 1, "partitions": [
                    {"topic": topic, "partition": 0, "replicas": [source, target]}]}))
                return strom_cli("reassign-partitions", "--bootstrap-server", cluster.bootstrap, f"--{action}",
                                 "--reassignment-json-file", str(plan), *extra)

            # one side alone: a throttled leader sends no more however fast the follower asks, a throttled
            # follower asks for no more however much the leader would send
            for side, topic in (("leader", "by-leader"), ("follower", "by-follower")):
                source, target = moves[topic]
                broker = source if side == "leader" else target
                configs("--topic", topic, "--alter", "--add-config",
                        f"{side}.replication.throttled.replicas=0:{broker}")
                configs("--broker", str(broker), "--alter", "--add-config", f"{side}.replication.throttled.rate=1")
                assert reassign("execute", topic).returncode == 0
                _stalls(admin, source, target, TopicPartition(topic, 0))
                configs("--broker", str(broker), "--alter", "--delete-config", f"{side}.replication.throttled.rate")
                wait_until(lambda topic=topic: reassign("verify", topic, "--preserve-throttles").returncode == 0, 60,
                           f"the unthrottled move of {topic} to complete")

            # the tool: both sides, on every broker of the move
            source, target = moves["by-tool"]
            started = reassign("execute", "by-tool", "--throttle", "1")
            assert started.returncode == 0, started.stderr
            assert "The inter-broker throttle limit was set to 1 B/s" in started.stdout
            _stalls(admin, source, target, TopicPartition("by-tool", 0))
            pending = reassign("verify", "by-tool")
            assert pending.returncode == 1 and "is still in progress" in pending.stdout
            topic_configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "by-tool")]).values()
            listed = {e.name: e.value for e in next(iter(topic_configs.values())).result(30)}
            assert (listed["leader.replication.throttled.replicas"],
                    listed["follower.replication.throttled.replicas"]) == (f"0:{source}", f"0:{target}")
            for broker in (source, target):
                configs("--broker", str(broker), "--alter", "--delete-config",
                        "leader.replication.throttled.rate,follower.replication.throttled.rate")
            wait_until(lambda: reassign("verify", "by-tool").returncode == 0, 60, "the move to complete")
            assert _replica_bytes(admin, target, TopicPartition("by-tool", 0)) == \
                _replica_bytes(admin, source, TopicPartition("by-tool", 0))
            cleared = reassign("verify", "by-tool")
            assert "Clearing broker-level throttles on brokers 1,2,3" in cleared.stdout
            assert "Clearing topic-level throttles on topic by-tool" in cleared.stdout
            listed = {e.name: e.value for e in next(iter(admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "by-tool")]).values().values())).result(30)}
            assert listed["leader.replication.throttled.replicas"] == ""
        finally:
            admin.close()


def _log_values(path: Path) -> list[bytes]:
    """Every record value of the log in ``path`` (the cluster stopped)."""
    from strom.record.records import MemoryRecords
    from strom.storage.log import Log
    from strom.storage.log_config import LogConfig

    assert path.is_dir(), path
    lg = Log(str(path), LogConfig(), had_clean_shutdown=True)
    try:
        out, offset = [], lg.log_start_offset
        while offset < lg.log_end_offset:
            data = lg.read(offset, 1 << 20)
            for batch in MemoryRecords(bytes(data.records)).batches():
                out += [bytes(r.value or b"") for r in batch.records()]
                offset = batch.next_offset
        return out
    finally:
        lg.close()


def test_a_replica_moves_to_another_log_dir_while_it_replicates(tmp_path: Path) -> None:
    """KIP-113 on a replicated partition: broker 2's replica moves to its second log dir while an acks=all
    producer writes (the replica keeps following its leader, or leading, through the copy and the swap); every
    acknowledged record ends up in the same order on all three replicas, broker 2's in the new dir."""
    from strom.admin import AdminClient, TopicPartitionReplica
    from strom.common.structs import TopicPartition
    from strom.testing.writer import BackgroundWriter

    with LocalCluster(3) as cluster:
        b2 = cluster.brokers[2]
        second = Path(f"{b2.data_dir}-disk2")
        b2.overrides["log.dirs"] = f"{b2.data_dir},{second}"
        b2.restart()
        # until the controller has taken broker 2 back (its UpdateMetadata reached broker 2): before that it counts
        # two brokers and refuses a topic of three replicas
        cluster.wait_for_metadata()
        create_topic(cluster, "jbod", rf=3)
        writer = BackgroundWriter(cluster.bootstrap, "jbod", value_size=208, **{"enable.idempotence": True}).start()
        acked = writer.acked
        admin = AdminClient(bootstrap_servers=cluster.bootstrap)
        tp = TopicPartition("jbod", 0)
        try:
            wait_until(lambda: len(acked) > 20_000, 60, "records before the move")
            replica = TopicPartitionReplica("jbod", 0, 2)
            admin.alter_replica_log_dirs({replica: str(second)}).values()[replica].result(30)

            def where() -> dict[str, bool]:
                dirs = admin.describe_log_dirs([2]).values()[2].result(30)
                return {d: desc.replica_infos[tp].is_future for d, desc in dirs.items() if tp in desc.replica_infos}

            wait_until(lambda: where() == {str(second): False}, 60, "broker 2's replica only in its second dir")
            count = len(acked)
            wait_until(lambda: len(acked) > count + 5_000, 60, "records after the move")
        finally:
            writer.stop()
            admin.close()
        assert not writer.errors
        wait_until(lambda: isr_is(cluster, "jbod", {1, 2, 3}), 60, "the ISR of three")
        cluster.stop()
        logs = {n: _log_values(Path(cluster.brokers[n].data_dir) / "jbod-0") for n in (1, 3)}
        logs[2] = _log_values(second / "jbod-0")
        assert not (Path(b2.data_dir) / "jbod-0").exists()
    assert logs[1] == logs[2] == logs[3]
    values = logs[1]
    assert len(values) == len(set(values)) and values == sorted(values)  # idempotent, in order
    assert set(acked) <= set(values)
