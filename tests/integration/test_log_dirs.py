"""DescribeLogDirs (kafka-log-dirs.sh) on a broker with two log directories: strom's AdminClient, the
``strom log-dirs`` command and kafka-python's ``describe_log_dirs`` report each partition in the directory that
holds it, with its size on disk; the directories' total and usable bytes come with v4."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin import AdminClient, NewTopic
from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.producer import KafkaProducer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("log-dirs")
    second = root / "second"
    b = BrokerProcess(data_dir=root / "first", overrides={"log.dirs": f"{root / 'first'},{second}"}).start()
    try:
        with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic("orders", 4, 1), NewTopic("other", 1, 1)]).all().result(30)
        with KafkaProducer({"bootstrap.servers": b.bootstrap, "key.serializer": "bytes",
                            "value.serializer": "bytes"}) as p:
            for i in range(400):
                p.send("orders", value=b"x" * 100, partition=i % 4)
            p.flush(30)
        yield b
    finally:
        b.stop()
        b.cleanup()


def _on_disk(b: BrokerProcess) -> dict[str, dict[TopicPartition, int]]:
    """What the directories hold: per log dir, each partition's segment bytes."""
    root = Path(b.data_dir).parent
    out: dict[str, dict[TopicPartition, int]] = {}
    for d in (root / "first", root / "second"):
        parts = {}
        for sub in d.iterdir():
            topic, _, partition = sub.name.rpartition("-")
            if sub.is_dir() and topic in ("orders", "other"):
                parts[TopicPartition(topic, int(partition))] = sum(f.stat().st_size for f in sub.glob("*.log"))
        out[str(d)] = parts
    return out


def test_admin_client_reports_each_directory_and_partition_size(broker: BrokerProcess) -> None:
    on_disk = _on_disk(broker)
    assert all(on_disk.values())  # the partitions are spread over both directories
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        node = admin.describe_cluster().nodes().result(30)[0].node_id
        described = admin.describe_log_dirs([node]).all().result(30)[node]
    assert set(described) == set(on_disk)
    for log_dir, d in described.items():
        assert d.error is None
        assert {tp: r.size for tp, r in d.replica_infos.items()} == on_disk[log_dir]
        assert {(r.offset_lag, r.is_future) for r in d.replica_infos.values()} == {(0, False)}
        assert d.total_bytes is not None and 0 < d.usable_bytes <= d.total_bytes
    sizes = {tp: r.size for d in described.values() for tp, r in d.replica_infos.items()}
    assert all(sizes[TopicPartition("orders", p)] > 100 * 100 for p in range(4))
    assert sizes[TopicPartition("other", 0)] == 0


def test_the_log_dirs_command_prints_kafkas_json(broker: BrokerProcess) -> None:
    done = subprocess.run([sys.executable, "-m", "strom.cli.main", "log-dirs", "--bootstrap-server",
                           broker.bootstrap, "--describe", "--topic-list", "orders"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second, document = done.stdout.splitlines()
    assert first == "Querying brokers for log directories information"
    assert second == "Received log directory information from brokers 1"
    doc = json.loads(document)
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [1]
    on_disk = _on_disk(broker)
    for log_dir in doc["brokers"][0]["logDirs"]:
        assert log_dir["error"] is None
        expected = {f"{tp.topic}-{tp.partition}": size for tp, size in on_disk[log_dir["logDir"]].items()
                    if tp.topic == "orders"}
        assert {p["partition"]: p["size"] for p in log_dir["partitions"]} == expected
    refused = subprocess.run([sys.executable, "-m", "strom.cli.main", "log-dirs", "--bootstrap-server",
                              broker.bootstrap, "--describe", "--broker-list", "1,9"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip() == ("Error: The given brokers do not exist from --broker-list: 9. Current "
                                      "existent brokers: 1")


def test_kafka_python_describes_the_log_dirs(broker: BrokerProcess) -> None:
    import kafka

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (result,) = admin.describe_log_dirs()
    finally:
        admin.close()
    on_disk = _on_disk(broker)
    assert {d["log_dir"]: {TopicPartition(t["name"], p["partition_index"]): p["partition_size"]
                           for t in d["topics"] for p in t["partitions"]}
            for d in result["log_dirs"]} == on_disk
