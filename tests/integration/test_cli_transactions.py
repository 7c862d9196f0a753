"""`strom transactions` (kafka-transactions.sh) against a broker subprocess: list, describe, describe-producers,
and find-hanging + abort of a transaction its coordinator never heard of (made with the leaders' transaction
verification switched off: with it on, the broker refuses such a batch)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode
from strom.producer import KafkaProducer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
confluent_kafka = pytest.importorskip("confluent_kafka")

CLI = [sys.executable, "-m", "strom.cli.main", "transactions"]


def txns(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "--bootstrap-server", broker.bootstrap, *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def strom_configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "configs", "--bootstrap-server", broker.bootstrap,
                           *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def lso(bootstrap: str, topic: str) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "lso",
                                  "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_list_describe_find_hanging_abort(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("cli-tx", 1, 1)]).values():
        f.result(30)
    with KafkaProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-tx-id",
                        "key.serializer": "bytes", "value.serializer": "bytes"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("cli-tx", value=b"open", partition=0).get(10)
        listed = txns(broker, "list")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert any(line.split()[0] == "cli-tx-id" and line.split()[3] == "Ongoing" for line in lines[1:])
        described = txns(broker, "--describe", "--transactional-id", "cli-tx-id")
        assert described.returncode == 0, described.stderr
        assert "Ongoing" in described.stdout and "cli-tx-0" in described.stdout
        p.commit_transaction()

    # A transactional batch whose producer no coordinator knows hangs, holding back the LSO -- possible only with
    # the partition leaders' transaction verification (KIP-890) off, as on brokers before Kafka 3.6. Its earlier
    # transaction there was committed by a coordinator at epoch 3, which the partition remembers.
    with RawClient(broker.bootstrap) as c:
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                           transaction_timeout_ms=60000))

        def produce(seq: int, value: bytes, transactional_id: str | None = "nobody-knows") -> tuple[int, int]:
            b = MemoryRecordsBuilder(producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                     base_sequence=seq, is_transactional=True)
            b.append(int(time.time() * 1000), None, value)
            resp = c.request(ApiKey.PRODUCE, 9, ProduceRequest(
                acks=-1, timeout_ms=5000, transactional_id=transactional_id, topic_data=[
                    ProduceRequest.TopicProduceData(name="cli-tx", partition_data=[
                        ProduceRequest.PartitionProduceData(index=0, records=b.build())])]))
            r = resp.responses[0].partition_responses[0]
            return r.error_code, r.base_offset

        # Verification on (the default): the coordinator knows no such transaction; without a transactional id
        # the request is refused outright, as Kafka does.
        assert produce(0, b"refused") == (ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1)
        assert produce(0, b"refused", None) == (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        verification = "transaction.partition.verification.enable"
        off = strom_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                            f"{verification}=false")
        assert off.returncode == 0, off.stderr
        try:
            assert produce(0, b"committed")[0] == ErrorCode.NONE
        finally:
            on = strom_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config",
                               verification)
            assert on.returncode == 0, on.stderr
        marker = c.request(ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=init.producer_id, producer_epoch=init.producer_epoch, transaction_result=True,
                coordinator_epoch=3, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="cli-tx",
                                                                                         partition_indexes=[0])])]))
        assert marker.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE
        assert produce(1, b"hanging")[0] == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # verification is on again
        assert strom_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                             f"{verification}=false").returncode == 0
        try:
            code, start = produce(1, b"hanging")
            assert code == ErrorCode.NONE
        finally:
            assert strom_configs(broker, "--alter", "--entity-type", "brokers", "--entity-default",
                                 "--delete-config", verification).returncode == 0
    assert lso(broker.bootstrap, "cli-tx") == start
    producers = txns(broker, "describe-producers", "--topic", "cli-tx", "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    rows = [line.split() for line in producers.stdout.splitlines()[1:]]
    assert [(r[2], r[-1]) for r in rows if r[0] == str(init.producer_id)] == [("3", str(start))]  # CoordinatorEpoch
    # A marker of an older coordinator epoch is refused...
    stale = txns(broker, "abort", "--topic", "cli-tx", "--partition", "0", "--producer-id", str(init.producer_id),
                 "--producer-epoch", str(init.producer_epoch), "--coordinator-epoch", "2")
    assert stale.returncode != 0 and "no longer the current coordinator" in stale.stderr, stale.stderr
    assert lso(broker.bootstrap, "cli-tx") == start
    hanging = txns(broker, "find-hanging", "--topic", "cli-tx")
    assert hanging.returncode == 0, hanging.stderr
    rows = [line.split() for line in hanging.stdout.splitlines()[1:]]
    assert [(r[2], r[5]) for r in rows] == [(str(init.producer_id), str(start))]
    # ... so an abort by start offset takes the producer's coordinator epoch from DescribeProducers (Kafka's tool).
    aborted = txns(broker, "abort", "--topic", "cli-tx", "--partition", "0", "--start-offset", str(start))
    assert aborted.returncode == 0, aborted.stderr
    assert lso(broker.bootstrap, "cli-tx") == start + 2  # the record and the ABORT marker
    assert txns(broker, "find-hanging", "--topic", "cli-tx").stdout.splitlines()[1:] == []
    bad = txns(broker, "describe")
    assert bad.returncode != 0 and "--transactional-id" in bad.stderr
