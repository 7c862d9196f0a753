"""A broker losing one of its log dirs (JBOD, KIP-112) on a real 3-broker cluster while an acks=all producer
writes: the broker keeps running and serving the partitions of its other dir, the partitions of the failed dir get
new leaders and leave broker 1 out of their ISR (listed as offline replicas), the producer is told of no loss, and
every acknowledged record is there once, in order. Repaired and restarted, the broker's replicas catch up and come
back into the ISR. Losing every log dir halts the broker, and its partitions move on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from strom.admin import AdminClient
from strom.common.error_codes import KafkaStorageError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.metadata import MetadataRequest
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.log_dirs import fail_log_dir, mount_tmpfs, repair_log_dir, unmount
from strom.testing.raw_client import RawClient
from strom.testing.writer import BackgroundWriter
from tests.cluster.test_replication import create_topic, read_all

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TOPIC = "jbod"
PARTITIONS = 6


def hosted(log_dir: Path) -> set[int]:
    return {int(n.rsplit("-", 1)[1]) for n in os.listdir(log_dir) if n.startswith(f"{TOPIC}-")}


def partitions(cluster: LocalCluster, node: int) -> dict[int, tuple[int, set[int], set[int]]]:
    """partition -> (leader, ISR, offline replicas), as broker ``node`` answers Metadata."""
    with RawClient(cluster.brokers[node].bootstrap, timeout=10) as c:
        md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
    (t,) = md.topics
    return {p.partition_index: (p.leader_id, set(p.isr_nodes), set(p.offline_replicas)) for p in t.partitions}


def test_a_failed_log_dir_moves_its_partitions_and_the_broker_keeps_the_others() -> None:
    cluster = LocalCluster(3, overrides={"log.flush.offset.checkpoint.interval.ms": "300"})
    b1 = cluster.brokers[1]
    disk_a, disk_b = Path(b1.data_dir), Path(f"{b1.data_dir}-disk2")
    b1.overrides["log.dirs"] = f"{disk_a},{disk_b}"
    with cluster:
        create_topic(cluster, TOPIC, partitions=PARTITIONS, rf=3)
        wait_until(lambda: len(hosted(disk_a) | hosted(disk_b)) == PARTITIONS, 30, "broker 1's replicas")
        in_a, in_b = hosted(disk_a), hosted(disk_b)
        assert in_a and in_b, f"broker 1's replicas should be in both dirs: {in_b} in the second"
        writer = BackgroundWriter(cluster.bootstrap, TOPIC, value_size=8, **{"enable.idempotence": True}).start()
        acked = writer.acked
        admin = AdminClient(bootstrap_servers=cluster.bootstrap_of(1))
        try:
            wait_until(lambda: len(acked) > 5_000, 60, "records before the failure")
            fail_log_dir(disk_b)

            def moved() -> bool:
                state = partitions(cluster, 2)
                return all(state[p][0] != 1 and 1 not in state[p][1] and 1 in state[p][2] for p in in_b)

            wait_until(moved, 60, f"partitions {sorted(in_b)} led without broker 1, which is offline there")
            count = len(acked)
            wait_until(lambda: len(acked) > count + 5_000, 60, "records after the failure")
            state = partitions(cluster, 1)  # broker 1 answers, and still holds the partitions of its other dir
            assert all(1 in state[p][1] and not state[p][2] for p in in_a), state
            dirs = admin.describe_log_dirs([1]).values()[1].result(30)
            assert isinstance(dirs[str(disk_b)].error, KafkaStorageError)
            assert dirs[str(disk_a)].error is None
            assert {tp.partition for tp in dirs[str(disk_a)].replica_infos if tp.topic == TOPIC} == in_a
        finally:
            writer.stop()
            admin.close()
        assert not writer.errors, writer.errors[:5]
        assert cluster.brokers[1].proc is not None and cluster.brokers[1].proc.poll() is None
        got = read_all(cluster.bootstrap_of(2, 3), TOPIC, PARTITIONS)
        values = [v for p in range(PARTITIONS) for _o, v in got[p]]
        for p in range(PARTITIONS):
            in_order = [v for _o, v in got[p]]
            assert in_order == sorted(in_order), f"partition {p} out of order"
        assert len(values) == len(set(values)), "a record was written twice"
        assert {int(v) for v in acked} <= set(values), "an acknowledged record is missing"

        # repaired and restarted: broker 1's replicas in that dir catch up and come back into the ISR
        b1.stop()
        repair_log_dir(disk_b)
        b1.start()
        wait_until(lambda: all(isr == {1, 2, 3} and not off for _l, isr, off in partitions(cluster, 2).values()),
                   90, "every replica back in the ISR")
        assert hosted(disk_b) == in_b


def test_a_broker_whose_every_log_dir_failed_halts() -> None:
    cluster = LocalCluster(3, overrides={"log.flush.offset.checkpoint.interval.ms": "300"})
    with cluster:
        create_topic(cluster, TOPIC, partitions=3, rf=3)
        b3 = cluster.brokers[3]
        fail_log_dir(Path(b3.data_dir))
        assert b3.proc is not None
        assert b3.proc.wait(60) == 1
        wait_until(lambda: all(leader in (1, 2) and isr <= {1, 2} for leader, isr, _o in
                               partitions(cluster, 1).values()), 60, "every partition led by brokers 1 and 2")
        assert "Shutdown broker because all log dirs in" in b3.read_log()
        repair_log_dir(Path(b3.data_dir))



def _values(bootstrap: str, partitions: int) -> dict[int, list[int]]:
    """Every record's number (the writer's first 8 bytes), per partition, up to the high watermarks."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"full-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(CTP(TOPIC, p), timeout=10)[1] for p in range(partitions)}
        c.assign([CTP(TOPIC, p, 0) for p in range(partitions)])
        out: dict[int, list[int]] = {p: [] for p in range(partitions)}
        got = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 120
        while any(got[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"read {got} of {ends}"
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    out[m.partition()].append(int(m.value()[:8]))
                    got[m.partition()] = m.offset() + 1
        return out
    finally:
        c.close()


def test_a_full_disk_moves_its_partitions_to_the_other_replicas(tmp_path: Path) -> None:
    """Broker 1's second log dir is a 6 MiB tmpfs (a real disk that fills up: ENOSPC from the kernel) while an
    acks=all producer writes 1 KiB records: the dir goes offline when it is full, its partitions are led elsewhere,
    no acknowledged record is lost. A new empty disk in its place: the replicas there are rebuilt from the leaders
    and rejoin the ISR. (Without the permission to mount a tmpfs the dir fails as in the test above.)"""
    cluster = LocalCluster(3, overrides={"log.flush.offset.checkpoint.interval.ms": "300"})
    b1 = cluster.brokers[1]
    disk_a, disk_b = Path(b1.data_dir), tmp_path / "small-disk"
    mounted = mount_tmpfs(disk_b, "6m")
    b1.overrides["log.dirs"] = f"{disk_a},{disk_b}"
    try:
        with cluster:
            create_topic(cluster, TOPIC, partitions=4, rf=3)
            wait_until(lambda: len(hosted(disk_a) | hosted(disk_b)) == 4, 30, "broker 1's replicas")
            in_b = hosted(disk_b)
            assert in_b
            writer = BackgroundWriter(cluster.bootstrap, TOPIC, value_size=1024, **{"enable.idempotence": True})
            writer.start()
            try:
                if not mounted:
                    wait_until(lambda: len(writer.acked) > 2_000, 60, "records before the failure")
                    fail_log_dir(disk_b)

                def moved() -> bool:
                    state = partitions(cluster, 2)
                    return all(state[p][0] != 1 and 1 not in state[p][1] and 1 in state[p][2] for p in in_b)

                wait_until(moved, 120, "the full dir's partitions led without broker 1")
                count = len(writer.acked)
                wait_until(lambda: len(writer.acked) > count + 2_000, 60, "records after the disk filled up")
            finally:
                writer.stop()
            assert not writer.errors, writer.errors[:5]
            if mounted:
                assert "No space left on device" in b1.read_log()
            got = _values(cluster.bootstrap_of(2, 3), 4)
            values = [v for p in range(4) for v in got[p]]
            assert all(got[p] == sorted(got[p]) for p in got), "a partition out of order"
            assert len(values) == len(set(values)), "a record was written twice"
            assert {int(v[:8]) for v in writer.acked} <= set(values), "an acknowledged record is missing"

            # a new, empty disk in place of the full one: its replicas are rebuilt from the leaders
            b1.stop()
            if mounted:
                unmount(disk_b)
                mounted = mount_tmpfs(disk_b, "64m")
            else:
                os.unlink(disk_b)
                disk_b.mkdir()
            b1.start()
            wait_until(lambda: all(isr == {1, 2, 3} and not off for _l, isr, off in partitions(cluster, 2).values()),
                       120, "every replica back in the ISR")
    finally:
        if mounted:
            unmount(disk_b)
