"""`strom delete-records` (kafka-delete-records.sh) against a real broker: the log start offset moves, the output
is Kafka's, failures are reported per partition, bad JSON is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin import AdminClient, NewTopic, OffsetSpec
from strom.cli.delete_records import parse_offset_json
from strom.cli.errors import CliError
from strom.common.structs import TopicPartition
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("delete-records") / "data")
    b.start()
    with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic("events", 2, 1)]).all().result(30)
    with KafkaProducer({"bootstrap.servers": b.bootstrap}, key_serializer="bytes", value_serializer="bytes") as p:
        for i in range(20):
            p.send("events", value=b"e%d" % i, partition=i % 2)
        p.flush(30)
    yield b.bootstrap
    b.stop()
    b.cleanup()


def delete(bootstrap: str, path: Path, doc: object) -> subprocess.CompletedProcess[str]:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "delete-records", "--bootstrap-server", bootstrap,
                           "--offset-json-file", str(path)], capture_output=True, text=True, timeout=60)


def test_log_start_moves_and_failures_are_per_partition(bootstrap: str, tmp_path: Path) -> None:
    out = delete(bootstrap, tmp_path / "d.json", {"partitions": [{"topic": "events", "partition": 0, "offset": 4},
                                                                 {"topic": "events", "partition": 1, "offset": -1}],
                                                  "version": 1})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                       "partition: events-0\tlow_watermark: 4",
                                       "partition: events-1\tlow_watermark: 10"]
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        starts = admin.list_offsets({TopicPartition("events", p): OffsetSpec.earliest() for p in (0, 1)}).result(30)
    assert [starts[TopicPartition("events", p)].offset for p in (0, 1)] == [4, 10]
    out = delete(bootstrap, tmp_path / "d.json", {"partitions": [{"topic": "events", "partition": 0, "offset": 99}]})
    assert out.returncode == 1
    assert out.stdout.splitlines()[2].startswith("partition: events-0\terror: ")


def test_bad_json_is_one_line(bootstrap: str, tmp_path: Path) -> None:
    out = delete(bootstrap, tmp_path / "bad.json", "{not json")
    assert out.returncode == 2 and out.stderr.strip().startswith("Error: The offset JSON is not valid JSON")
    assert len(out.stderr.strip().splitlines()) == 1
    with pytest.raises(CliError, match="duplicate topic partitions: t-0"):
        parse_offset_json('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
                          ' {"topic": "t", "partition": 0, "offset": 2}]}')
    with pytest.raises(CliError, match="topic \\(string\\), partition and offset"):
        parse_offset_json('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}')
    with pytest.raises(CliError, match="non-empty"):
        parse_offset_json('{"partitions": []}')
