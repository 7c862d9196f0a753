"""strom's transactional producer against librdkafka's mock cluster (an independent implementation of the
transaction APIs): commit and abort across partitions led by different brokers, a coordinator error injected on
EndTxn, send_offsets_to_transaction.

The mock writes the COMMIT/ABORT markers but does not filter aborted records for read_committed readers (checked
with librdkafka's own transactional producer: a read_committed consumer gets the aborted record too), so the
judge here is the log: every record the producer sent is there once, followed by one marker per partition and
transaction. The mock accepts TxnOffsetCommit but never applies it (librdkafka's own producer: the group's
committed offset stays unset), so only the call sequence is exercised for send_offsets_to_transaction. Visibility is judged against
strom's broker (``test_transactions_confluent.py``, ``tests/integration/test_transactions.py``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka")
from strom.common.error_codes import ErrorCode  # noqa: E402
from strom.common.structs import OffsetAndMetadata, TopicPartition  # noqa: E402
from strom.consumer.assignors.abstract import ConsumerGroupMetadata  # noqa: E402
from strom.producer import KafkaProducer  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.testing.mock_cluster import MockCluster  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def _read(mc: MockCluster, topic: str, partitions: int, isolation: str, expected: int) -> list[Any]:
    c = ck.Consumer({"bootstrap.servers": mc.bootstrap_servers, "group.id": f"judge-{isolation}",
                     "enable.auto.commit": False, "isolation.level": isolation})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m.value() for m in c.consume(1000, 0.2) if m.error() is None)
        out.extend(m.value() for m in c.consume(1000, 1.0) if m.error() is None)
        return out
    finally:
        c.close()


def test_strom_transactions_against_librdkafka_mock() -> None:
    with MockCluster(3) as mc:
        mc.create_topic("mtx", partitions=3)
        with KafkaProducer({"bootstrap.servers": mc.bootstrap_servers, "transactional.id": "strom-mock-tx",
                            "key.serializer": "bytes", "value.serializer": "bytes"}) as p:
            p.init_transactions()
            p.begin_transaction()
            for i in range(30):
                p.send("mtx", value=b"c-%02d" % i, partition=i % 3)
            # The coordinator answers the first EndTxn with NOT_COORDINATOR: the producer looks it up and retries.
            mc.push_request_errors(ApiKey.END_TXN, [ErrorCode.NOT_COORDINATOR])
            p.commit_transaction()
            p.begin_transaction()
            for i in range(30):
                p.send("mtx", value=b"a-%02d" % i, partition=i % 3)
            p.flush()
            p.abort_transaction()
            p.begin_transaction()
            p.send("mtx", value=b"with-offsets", partition=0)
            p.send_offsets_to_transaction({TopicPartition("mtx", 1): OffsetAndMetadata(7)},
                                          ConsumerGroupMetadata("mock-group"))
            p.commit_transaction()
        records = _read(mc, "mtx", 3, "read_uncommitted", 61)
        assert sorted(records) == sorted([b"c-%02d" % i for i in range(30)] + [b"a-%02d" % i for i in range(30)]
                                         + [b"with-offsets"])
        c = ck.Consumer({"bootstrap.servers": mc.bootstrap_servers, "group.id": "wm"})
        try:
            ends = [c.get_watermark_offsets(ck.TopicPartition("mtx", p), timeout=10)[1] for p in range(3)]
        finally:
            c.close()
        # 10 committed + COMMIT + 10 aborted + ABORT on each; partition 0 also the last record and its COMMIT
        assert ends == [24, 22, 22]
