"""A standalone broker with two log dirs loses one (JBOD, KIP-112): the partitions of the failed dir answer
KAFKA_STORAGE_ERROR to Produce and Fetch, the others go on taking and serving records, DescribeLogDirs and the
LogManager metrics show the dir offline. Restarted with the dir still gone, the broker starts and does not recreate
those partitions empty elsewhere; with the dir repaired, every record written before the failure is back."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.admin import AdminClient
from strom.common.error_codes import ErrorCode, KafkaStorageError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.cluster import wait_until
from strom.testing.log_dirs import fail_log_dir, mount_tmpfs, repair_log_dir, unmount
from strom.testing.raw_client import RawClient

ck = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "disks"


def produce_code(bootstrap: str, partition: int) -> int:
    builder = MemoryRecordsBuilder()
    builder.append(1_700_000_000_000, b"k", b"v")
    req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=builder.build())])])
    with RawClient(bootstrap) as c:
        return int(c.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0].error_code)


def fetch_code(bootstrap: str, partition: int) -> int:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
            partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])])
    with RawClient(bootstrap) as c:
        return int(c.request(ApiKey.FETCH, 11, req).responses[0].partitions[0].error_code)


def partition_states(bootstrap: str) -> dict[int, tuple[int, list[int]]]:
    from strom.protocol.messages.metadata import MetadataRequest

    with RawClient(bootstrap) as c:
        md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
    return {p.partition_index: (p.leader_id, list(p.offline_replicas)) for p in md.topics[0].partitions}


def metric(url: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def produce_each(bootstrap: str, partitions: list[int], n: int, prefix: str) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for part in partitions:
        for i in range(n):
            p.produce(TOPIC, f"{prefix}-{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def read_partition(bootstrap: str, partition: int) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-check", "enable.auto.commit": False})
    try:
        _low, high = c.get_watermark_offsets(ck.TopicPartition(TOPIC, partition), timeout=10)
        c.assign([ck.TopicPartition(TOPIC, partition, 0)])
        out: list[bytes] = []
        while len(out) < high:
            m = c.poll(10)
            assert m is not None and m.error() is None, (len(out), high, m and m.error())
            out.append(m.value())
        return out
    finally:
        c.close()


def hosted(log_dir: Path) -> list[int]:
    return sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(log_dir) if n.startswith(f"{TOPIC}-"))


def test_a_failed_log_dir_takes_only_its_partitions_offline(tmp_path: Path) -> None:
    disk_a, disk_b = tmp_path / "disk-a", tmp_path / "disk-b"
    metrics_url = f"http://127.0.0.1:{free_port()}"
    broker = BrokerProcess(data_dir=disk_a, overrides={
        "log.dirs": f"{disk_a},{disk_b}", "num.partitions": "4", "log.flush.offset.checkpoint.interval.ms": "300",
        "metrics.prometheus.listener": metrics_url})
    broker.start()
    try:
        produce_each(broker.bootstrap, [0, 1, 2, 3], 50, "before")
        in_a, in_b = hosted(disk_a), hosted(disk_b)
        assert in_a and in_b and sorted(in_a + in_b) == [0, 1, 2, 3]
        assert metric(metrics_url + "/metrics", "kafka_log_logmanager_offlinelogdirectorycount") == 0

        fail_log_dir(disk_b)
        admin = AdminClient(bootstrap_servers=broker.bootstrap)
        try:
            wait_until(lambda: isinstance(admin.describe_log_dirs([1]).values()[1].result(30)[str(disk_b)].error,
                                          KafkaStorageError), 30, "the second dir offline")
        finally:
            admin.close()
        for p in in_b:
            assert produce_code(broker.bootstrap, p) == ErrorCode.KAFKA_STORAGE_ERROR
            assert fetch_code(broker.bootstrap, p) == ErrorCode.KAFKA_STORAGE_ERROR
        assert partition_states(broker.bootstrap) == {
            p: (-1, [1]) if p in in_b else (1, []) for p in range(4)}  # (leader, offline replicas), as Kafka's
        produce_each(broker.bootstrap, in_a, 50, "after")
        for p in in_a:
            assert len(read_partition(broker.bootstrap, p)) == 100
        url = metrics_url + "/metrics"
        assert metric(url, "kafka_log_logmanager_offlinelogdirectorycount") == 1
        assert metric(url, "kafka_log_logmanager_logdirectoryoffline", logdirectory=str(disk_b)) == 1
        assert metric(url, "kafka_log_logmanager_logdirectoryoffline", logdirectory=str(disk_a)) == 0
        assert metric(url, "kafka_server_replicamanager_offlinereplicacount") == len(in_b)
        assert broker.proc is not None and broker.proc.poll() is None

        # restarted with the dir still gone: it starts, and the partitions of that dir stay offline (they are not
        # recreated empty in the other dir)
        broker.restart()
        for p in in_b:
            assert produce_code(broker.bootstrap, p) == ErrorCode.KAFKA_STORAGE_ERROR
        assert hosted(disk_a) == in_a

        # repaired: everything written before the failure is back
        broker.stop()
        repair_log_dir(disk_b)
        broker.start()
        for p in in_b:
            assert read_partition(broker.bootstrap, p) == [f"before-{p}-{i}".encode() for i in range(50)]
        for p in in_a:
            assert len(read_partition(broker.bootstrap, p)) == 100
    finally:
        broker.stop()


def test_a_broker_with_no_usable_log_dir_does_not_start(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-dir"
    bad.write_bytes(b"")
    broker = BrokerProcess(data_dir=tmp_path / "data", overrides={"log.dirs": str(bad)})
    with pytest.raises(Exception):  # noqa: B017,PT011 - the start fails; the message is checked in the log
        broker.start(timeout=30)
    assert broker.proc is not None and broker.proc.wait(30) != 0
    assert "every log dir has failed" in broker.read_log()


def test_a_standalone_broker_does_not_start_without_the_dir_of_its_topic_registry(tmp_path: Path) -> None:
    """The first log dir holds a standalone broker's topics.json: without it every topic would look deleted and the
    logs of the other dirs would go. The broker refuses to start instead, and the other dir keeps its data."""
    disk_a, disk_b = tmp_path / "disk-a", tmp_path / "disk-b"
    broker = BrokerProcess(data_dir=tmp_path / "home", overrides={"log.dirs": f"{disk_a},{disk_b}",
                                                                  "num.partitions": "2"})
    broker.start()
    produce_each(broker.bootstrap, [0, 1], 10, "kept")
    broker.stop()
    in_b = hosted(disk_b)
    assert in_b
    fail_log_dir(disk_a)
    with pytest.raises(Exception):  # noqa: B017,PT011 - the start fails; the message is checked in the log
        broker.start(timeout=30)
    assert broker.proc is not None and broker.proc.wait(30) != 0
    assert "holds this standalone broker's topic registry" in broker.read_log()
    assert hosted(disk_b) == in_b
    repair_log_dir(disk_a)
    broker.start()
    try:
        for p in in_b:
            assert read_partition(broker.bootstrap, p) == [f"kept-{p}-{i}".encode() for i in range(10)]
    finally:
        broker.stop()


class _SizeLimitedBroker(BrokerProcess):
    """A broker whose files may not grow past ``limit`` bytes (RLIMIT_FSIZE: the kernel writes up to the limit,
    then fails with EFBIG), for machines where a small tmpfs cannot be mounted."""

    limit = 2 << 20

    def command(self) -> list[str]:
        return ["prlimit", f"--fsize={self.limit}", "--", *super().command()]



def test_a_standalone_broker_on_a_full_disk_fails_writes_and_recovers_when_space_is_freed(tmp_path: Path) -> None:
    """Issue 15's full disk, with failed log dirs in place: a standalone broker has no other replica to hand its
    partitions to, so a full disk does not take its only dir offline (Kafka would halt): produce answers
    KAFKA_STORAGE_ERROR, what was written stays readable, and once a topic is deleted (its space freed) writes
    succeed again. The disk is a 16 MiB tmpfs (or, where mounting is not allowed, a file size limit)."""

    disk = tmp_path / "disk"
    mounted = mount_tmpfs(disk, "16m")
    cls = BrokerProcess if mounted else _SizeLimitedBroker
    broker = cls(data_dir=tmp_path / "home", overrides={"log.dirs": str(disk), "num.partitions": "1",
                                                        "log.segment.bytes": str(1 << 30)})
    broker.start()
    admin = AdminClient(bootstrap_servers=broker.bootstrap)
    try:
        builder = MemoryRecordsBuilder()
        for i in range(100):
            builder.append(1_700_000_000_000 + i, None, b"x" * 1000)
        batch = builder.build()
        req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="filler", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        codes = []
        with RawClient(broker.bootstrap) as c:
            for _ in range(400):  # up to 40 MB: more than the disk holds
                code = int(c.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0].error_code)
                codes.append(code)
                if code:
                    break
        assert codes[-1] == ErrorCode.KAFKA_STORAGE_ERROR and set(codes[:-1]) == {ErrorCode.NONE}, codes[-3:]
        written = 100 * (len(codes) - 1)
        assert broker.proc is not None and broker.proc.poll() is None
        assert admin.describe_log_dirs([1]).values()[1].result(30)[str(disk)].error is None  # still online
        assert fetch_code_of(broker.bootstrap, "filler") == ErrorCode.NONE  # what was written is readable
        c2 = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "full", "enable.auto.commit": False})
        _low, high = c2.get_watermark_offsets(ck.TopicPartition("filler", 0), timeout=10)
        c2.close()
        assert high == written

        admin.delete_topics(["filler"]).all().result(30)  # frees its space
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
        p.produce("after", b"space again")
        assert p.flush(30) == 0
        assert read_topic(broker.bootstrap, "after") == [b"space again"]
    finally:
        admin.close()
        broker.stop()
        if mounted:
            unmount(disk)


def fetch_code_of(bootstrap: str, topic: str) -> int:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    with RawClient(bootstrap) as c:
        return int(c.request(ApiKey.FETCH, 11, req).responses[0].partitions[0].error_code)


def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "after", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while not out and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()
