"""Moving a replica between a broker's log dirs while it takes writes (KIP-113, AlterReplicaLogDirs), on a broker
subprocess with two log dirs: a confluent-kafka producer keeps writing through the move, and a confluent-kafka
consumer then reads every acknowledged record once, in order, from the new dir, also after a restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strom.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    TopicPartitionReplica,
)
from strom.broker_process import BrokerProcess
from strom.common.error_codes import LogDirNotFoundError, UnknownTopicOrPartitionError
from strom.common.structs import TopicPartition
from strom.testing.cluster import wait_until
from strom.testing.writer import BackgroundWriter

ck = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TP = TopicPartition("movers", 0)


def _where(admin: AdminClient) -> dict[str, bool]:
    """log dir -> whether the replica there is the future one, for every dir holding a replica of TP."""
    dirs = admin.describe_log_dirs([1]).values()[1].result(30)
    return {d: desc.replica_infos[TP].is_future for d, desc in dirs.items() if TP in desc.replica_infos}


def _read_all(bootstrap: str) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "movers-check", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition("movers", 0, 0)])
    _low, high = c.get_watermark_offsets(ck.TopicPartition("movers", 0), timeout=10)
    out: list[bytes] = []
    while len(out) < high:
        m = c.poll(10)
        assert m is not None, f"read {len(out)} of {high}"
        assert m.error() is None, m.error()
        out.append(m.value())
    c.close()
    return out


def test_a_replica_moves_to_another_log_dir_while_it_takes_writes(tmp_path: Path) -> None:
    first, second = tmp_path / "disk-a", tmp_path / "disk-b"
    broker = BrokerProcess(data_dir=first, overrides={"log.dirs": f"{first},{second}", "num.partitions": "1",
                                                      "log.segment.bytes": "1048576"})
    broker.start()
    admin = AdminClient(bootstrap_servers=broker.bootstrap)
    try:
        writer = BackgroundWriter(broker.bootstrap, "movers", at_least=30_000).start()
        acked = writer.acked
        wait_until(lambda: len(acked) > 10_000, 60, "records before the move")
        (source,) = _where(admin)
        target = str(second if source == str(first) else first)
        admin.alter_replica_log_dirs({TopicPartitionReplica("movers", 0, 1): target}).values()[
            TopicPartitionReplica("movers", 0, 1)].result(30)
        wait_until(lambda: _where(admin) == {target: False}, 60, "the replica only in the other dir")
        writer.stop()
        assert not writer.errors
        expected = [writer.value(i) for i in range(len(acked))]
        assert acked == expected  # acknowledged in order (one partition)
        assert _read_all(broker.bootstrap) == expected
        assert os.path.isdir(os.path.join(target, "movers-0")) and not os.path.exists(os.path.join(source,
                                                                                                  "movers-0"))
        # errors: a dir the broker does not have, a topic it does not know
        bad = admin.alter_replica_log_dirs({TopicPartitionReplica("movers", 0, 1): str(tmp_path / "elsewhere"),
                                            TopicPartitionReplica("nosuch", 0, 1): target}).values()
        with pytest.raises(LogDirNotFoundError):
            bad[TopicPartitionReplica("movers", 0, 1)].result(30)
        with pytest.raises(UnknownTopicOrPartitionError):
            bad[TopicPartitionReplica("nosuch", 0, 1)].result(30)
        admin.close()
        broker.restart()
        admin = AdminClient(bootstrap_servers=broker.bootstrap)
        assert _where(admin) == {target: False}
        assert _read_all(broker.bootstrap) == expected

        # back again with Kafka's tool: a reassignment file naming the log dir, then --verify
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "movers", "partition": 0, "replicas": [1], "log_dirs": [source]}]}))

        def tool(action: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "strom.cli.main", "reassign-partitions", "--bootstrap-server",
                                   broker.bootstrap, f"--{action}", "--reassignment-json-file", str(plan)],
                                  capture_output=True, text=True, timeout=60)

        started = tool("execute")
        assert started.returncode == 0, started.stderr
        assert "Successfully started log directory move(s) for: movers-0-1" in started.stdout
        wait_until(lambda: "Reassignment of replica movers-0-1 is completed." in tool("verify").stdout, 60,
                   "--verify to report the move complete")
        assert _where(admin) == {source: False}
        assert _read_all(broker.bootstrap) == expected
    finally:
        admin.close()
        broker.stop()


def test_a_throttled_move_resumes_after_a_restart(tmp_path: Path) -> None:
    """``--replica-alter-log-dirs-throttle`` holds a move to its rate (1 B/s: one 1 MiB copy step, then nothing
    within the quota window); a restart in the middle keeps what was copied and the move goes on from there; once the
    throttle goes, the move completes and ``--verify`` clears the throttle."""
    first, second = tmp_path / "disk-a", tmp_path / "disk-b"
    broker = BrokerProcess(data_dir=tmp_path / "home", overrides={"log.dirs": f"{first},{second}",
                                                                  "num.partitions": "1"})
    broker.start()
    admin = AdminClient(bootstrap_servers=broker.bootstrap)
    try:
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(4_000):
            p.produce("movers", f"{i:08d}".encode() + b"." * 1016)
        assert p.flush(30) == 0
        del p  # (no reconnection attempts across the restart below)
        expected = _read_all(broker.bootstrap)
        (source,) = _where(admin)
        target = str(second if source == str(first) else first)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "movers", "partition": 0, "replicas": [1], "log_dirs": [target]}]}))

        def tool(*flags: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "strom.cli.main", "reassign-partitions", "--bootstrap-server",
                                   broker.bootstrap, "--reassignment-json-file", str(plan), *flags],
                                  capture_output=True, text=True, timeout=60)

        started = tool("--execute", "--replica-alter-log-dirs-throttle", "1")
        assert started.returncode == 0, started.stderr
        assert "The replica-alter-dir throttle limit was set to 1 B/s" in started.stdout

        def future_lag() -> int | None:
            dirs = admin.describe_log_dirs([1]).values()[1].result(30)
            info = dirs[target].replica_infos.get(TP)
            return info.offset_lag if info is not None and info.is_future else None

        wait_until(lambda: (future_lag() or 0) > 0, 30, "the future replica with a first step copied")
        lag = future_lag()
        assert lag is not None and 1_000 < lag < 4_000  # one 1 MiB step of 4 MB, then held by the throttle
        assert "is still in progress" in tool("--verify").stdout  # a move not done: the throttle stays

        admin.close()
        broker.restart()
        admin = AdminClient(bootstrap_servers=broker.bootstrap)
        # resumed where it was: the next step starts from what the future log holds, not from offset 0
        wait_until(lambda: (future_lag() or lag) < lag - 500, 30, "the move to go on after the restart")
        assert (future_lag() or 0) > 0  # and then the throttle holds it again

        broker_1 = ConfigResource(ConfigResourceType.BROKER, "1")
        admin.incremental_alter_configs({broker_1: [AlterConfigOp(
            "replica.alter.log.dirs.io.max.bytes.per.second", None, AlterConfigOpType.DELETE)]}).all().result(30)
        wait_until(lambda: _where(admin) == {target: False}, 60, "the move to complete without the throttle")
        verified = tool("--verify")
        assert "Reassignment of replica movers-0-1 is completed." in verified.stdout, verified.stdout
        rate = admin.describe_configs([broker_1])[broker_1].result(30).get(
            "replica.alter.log.dirs.io.max.bytes.per.second")
        assert rate is not None and rate.is_default  # cleared
        assert _read_all(broker.bootstrap) == expected
    finally:
        admin.close()
        broker.stop()
