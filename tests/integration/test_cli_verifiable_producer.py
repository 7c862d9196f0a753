"""`strom verifiable-producer` against a real broker: Kafka's JSON events, one success per record with its real
offset, keys repeating, the records really in the log."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from strom.admin import AdminClient, NewTopic
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("verifiable") / "data")
    b.start()
    with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic("verified", 2, 1)]).all().result(30)
    yield b.bootstrap
    b.stop()
    b.cleanup()


def test_every_record_is_reported_with_its_offset(bootstrap: str) -> None:
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "verifiable-producer", "--bootstrap-server",
                          bootstrap, "--topic", "verified", "--max-messages", "50", "--acks", "all",
                          "--value-prefix", "7", "--repeating-keys", "5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["name"] == "startup_complete" and events[-2]["name"] == "shutdown_complete"
    tool = events[-1]
    assert tool["name"] == "tool_data" and tool["sent"] == 50 and tool["acked"] == 50
    successes = [e for e in events if e["name"] == "producer_send_success"]
    assert sorted(e["value"] for e in successes) == sorted(f"7.{i}" for i in range(50))
    assert {e["key"] for e in successes} == {"0", "1", "2", "3", "4"}
    # the reported offsets are where the records are
    by_offset = {(e["partition"], e["offset"]): e["value"] for e in successes}
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap}, key_deserializer="str", value_deserializer="str",
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition("verified", 0), TopicPartition("verified", 1)])
    read: dict[tuple[int, int], str] = {}
    for _ in range(50):
        for r in consumer.poll(0.5):
            read[(r.partition, r.offset)] = r.value
        if len(read) >= 50:
            break
    consumer.close()
    assert read == by_offset


def test_bad_acks_is_one_line(bootstrap: str) -> None:
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "verifiable-producer", "--bootstrap-server",
                          bootstrap, "--topic", "verified", "--acks", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "Error: Invalid --acks '2': expected -1, 0, 1 or all"


def test_verifiable_consumer_reports_assignment_records_and_commits(bootstrap: str) -> None:
    # its own topic and records (the test does not lean on the producer test having run before it)
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic("to-verify", 2, 1)]).all().result(30)
    with KafkaProducer({"bootstrap.servers": bootstrap}, key_serializer="str", value_serializer="str") as producer:
        for i in range(50):
            producer.send("to-verify", f"v{i}", key=str(i % 5))
        producer.flush(30)
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "verifiable-consumer", "--bootstrap-server",
                          bootstrap, "--topic", "to-verify", "--group-id", "vc", "--max-messages", "50",
                          "--session-timeout", "10000"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    names = [e["name"] for e in events]
    assert names[0] == "startup_complete" and names[-1] == "shutdown_complete"
    assigned = next(e for e in events if e["name"] == "partitions_assigned")
    assert assigned["partitions"] == [{"topic": "to-verify", "partition": 0}, {"topic": "to-verify", "partition": 1}]
    consumed = [e for e in events if e["name"] == "records_consumed"]
    assert sum(e["count"] for e in consumed) == 50
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits)
    last = {(o["topic"], o["partition"]): o["offset"] for c in commits for o in c["offsets"]}
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        committed = admin.list_consumer_group_offsets("vc").partitions_to_offset_and_metadata("vc").result(30)
    assert {(tp.topic, tp.partition): om.offset for tp, om in committed.items()} == last
    assert sum(last.values()) == 50  # every record produced above, committed once consumed
