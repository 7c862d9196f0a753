"""The broker's producer state: duplicates answered with the original offset, sequence gaps refused, state kept
across clean restarts (snapshot) and crashes (rebuilt from the log)."""

from __future__ import annotations

import time

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.messages.list_offsets import ListOffsetsRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    b = MemoryRecordsBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(int(time.time() * 1000), None, b"seq-%d" % (seq + i))
    return b.build()


def _produce(c: RawClient, records: bytes) -> tuple[int, int]:
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="idem", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    p = c.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def _end_offset(c: RawClient) -> int:
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="idem", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    return c.request(ApiKey.LIST_OFFSETS, 5, req).topics[0].partitions[0].offset


def test_producer_state(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    with RawClient(b.bootstrap) as c:
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                           transaction_timeout_ms=60000))
        assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
        pid = init.producer_id
        second = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                             transaction_timeout_ms=60000))
        assert second.producer_id != pid
        assert _produce(c, _batch(pid, 0, 0)) == (0, 0)
        assert _produce(c, _batch(pid, 0, 2)) == (0, 2)
        # A retry of the second batch: same answer, nothing written.
        assert _produce(c, _batch(pid, 0, 2)) == (0, 2)
        assert _end_offset(c) == 4
        # A gap in the sequence is refused.
        assert _produce(c, _batch(pid, 0, 9))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # An older epoch is fenced once a newer one has written.
        assert _produce(c, _batch(pid, 1, 0)) == (0, 4)
        assert _produce(c, _batch(pid, 0, 4))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _end_offset(c) == 6
    assert b.stop() == 0
    b.start()  # clean restart: state from the snapshot
    with RawClient(b.bootstrap) as c:
        assert _produce(c, _batch(pid, 1, 0)) == (0, 4)  # still recognised as a duplicate
        assert _produce(c, _batch(pid, 1, 2)) == (0, 6)
        new_pid = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                              transaction_timeout_ms=60000))
        assert new_pid.producer_id > second.producer_id  # ids are never reused after a restart
    b.kill()
    b.start()  # crash: state rebuilt from the log (the snapshot predates the last append)
    with RawClient(b.bootstrap) as c:
        assert _produce(c, _batch(pid, 1, 2)) == (0, 6)
        assert _produce(c, _batch(pid, 1, 5))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(c, _batch(pid, 1, 4)) == (0, 8)
        assert _end_offset(c) == 10


def test_librdkafka_idempotent_producer(broker: BrokerProcess) -> None:
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked: list[tuple[int, int]] = []
    for i in range(5000):
        p.produce("idem-rd", key=b"%d" % (i % 10), value=b"v%d" % i,
                  on_delivery=lambda err, m: acked.append((m.partition(), m.offset())) if err is None else None)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == 5000 and len(set(acked)) == 5000
