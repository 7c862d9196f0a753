"""`strom dump-log` (kafka-dump-log.sh) on the segment and index files a real broker wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strom.admin import AdminClient, NewTopic
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def dump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "dump-log", *args], capture_output=True,
                          text=True, timeout=60)


def test_segments_and_indexes_of_a_real_broker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data_dir=data, overrides={"log.index.interval.bytes": "1"}) as broker:
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("dumped", 1, 1)]).all().result(30)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "compression.type": "gzip"},
                           key_serializer="str", value_serializer="str") as producer:
            for i in range(3):
                producer.send("dumped", key=f"k{i}", value=f"hello {i}", timestamp=1_700_000_000_000 + i).get(30)
        broker.stop()
    segment = data / "dumped-0" / "00000000000000000000.log"
    out = dump("--files", str(segment), "--print-data-log")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batches = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert len(batches) == 3  # one synchronous send per batch
    assert all("compresscodec: gzip" in b and "isvalid: true" in b and "count: 1" in b for b in batches)
    assert "CreateTime: 1700000000001" in batches[1] and "position: 0 " in batches[0]
    records = [ln for ln in lines if ln.startswith("| offset:")]
    assert records[2].startswith("| offset: 2 CreateTime: 1700000000002 keySize: 2 valueSize: 7")
    assert records[2].endswith("key: k2 payload: hello 2")
    deep = dump("--files", str(segment), "--deep-iteration").stdout
    assert "| offset: 1 " in deep and "payload" not in deep
    index = dump("--files", f"{segment.with_suffix('.index')},{segment.with_suffix('.timeindex')}").stdout
    assert "offset: 2 position: " in index and "timestamp: 1700000000002 offset: 2" in index

    # a torn tail is reported, not raised; a corrupted batch is isvalid: false
    raw = bytearray(segment.read_bytes())
    raw[-3] ^= 0xFF
    torn = tmp_path / "00000000000000000000.log"
    torn.write_bytes(bytes(raw) + b"\x00\x00\x00")
    lines = dump("--files", str(torn)).stdout.splitlines()
    assert lines[-2].endswith("isvalid: false")
    assert lines[-1] == "Found 3 invalid bytes at the end of 00000000000000000000.log"
    torn.write_bytes(bytes(raw) + raw[:40])  # a batch header whose batch is cut short
    assert dump("--files", str(torn)).stdout.splitlines()[-1] == (
        f"Found 40 invalid bytes at the end of 00000000000000000000.log (a torn batch at position {len(raw)})")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    out = dump("--files", str(tmp_path / "missing.log"))
    assert out.returncode == 1 and out.stderr.startswith("Error: Cannot read")
    out = dump("--files", str(tmp_path / "notes.txt"))
    assert out.returncode == 2 and out.stderr.strip().endswith("not a .log, .index or .timeindex file")


def test_the_offsets_and_transaction_log_decoders_and_transaction_markers(tmp_path: Path) -> None:
    """--offsets-decoder and --transaction-log-decoder print __consumer_offsets and __transaction_state records as
    Kafka 3.x's tool does; a data segment's transaction markers print as endTxnMarker lines."""
    from strom.common.structs import OffsetAndMetadata, TopicPartition
    from strom.consumer import KafkaConsumer

    data = tmp_path / "data"
    overrides = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                 "group.initial.rebalance.delay.ms": "0"}
    with BrokerProcess(data_dir=data, overrides=overrides) as broker:
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("txn-dumped", 1, 1)]).all().result(30)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "dumper"},
                           key_serializer="str", value_serializer="str") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("txn-dumped", key="k", value="committed", partition=0)
            producer.commit_transaction()
            producer.begin_transaction()
            producer.send("txn-dumped", value="aborted", partition=0).get(30)  # written, then aborted
            producer.abort_transaction()
        with KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "dump-g",
                            "enable.auto.commit": False}, key_deserializer="str", value_deserializer="str") as c:
            c.subscribe(["txn-dumped"])
            while not c.assignment():
                c.poll(0.2)
            c.commit_sync({TopicPartition("txn-dumped", 0): OffsetAndMetadata(3, "checkpoint")})
        broker.stop()

    offsets = dump("--files", str(data / "__consumer_offsets-0" / "00000000000000000000.log"), "--offsets-decoder")
    assert offsets.returncode == 0, offsets.stderr
    assert any(ln.endswith("key: offset_commit::group=dump-g,partition=txn-dumped-0 payload: "
                           "offset=3,metadata=checkpoint") for ln in offsets.stdout.splitlines())
    group_lines = [ln for ln in offsets.stdout.splitlines() if "key: group_metadata::group=dump-g payload: {" in ln]
    assert group_lines and '"protocolType":"consumer"' in group_lines[0] and "=[txn-dumped-0]}" in group_lines[0]

    state = dump("--files", str(data / "__transaction_state-0" / "00000000000000000000.log"),
                 "--transaction-log-decoder").stdout.splitlines()
    keyed = [ln for ln in state if "key: transaction_metadata::transactionalId=dumper payload: producerId:" in ln]
    assert any("state=CompleteCommit,partitions=[]" in ln for ln in keyed)
    assert any("state=PrepareAbort,partitions=[txn-dumped-0]" in ln for ln in keyed)

    segment = dump("--files", str(data / "txn-dumped-0" / "00000000000000000000.log"), "--print-data-log").stdout
    records = [ln for ln in segment.splitlines() if ln.startswith("| offset:")]
    assert records[0].endswith("key: k payload: committed")
    assert records[1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert records[2].endswith("payload: aborted") and " key:" not in records[2]  # no key: no key field
    assert records[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 0")
    bad = dump("--files", str(data / "txn-dumped-0" / "00000000000000000000.log"), "--offsets-decoder")
    undecodable = [ln for ln in bad.stdout.splitlines() if ln.startswith("| offset: 0 ")]
    assert bad.returncode == 0 and undecodable[0].split(" key: ")[1].startswith("Error at offset 0, skipping. ")
