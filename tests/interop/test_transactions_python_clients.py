"""kafka-python's and aiokafka's transactional producers and read_committed consumers against a strom broker."""

from __future__ import annotations

import asyncio
import time

import pytest

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics]).values():
        f.result(30)


def _kp_read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
             timeout_s: float = 30) -> list[bytes]:
    """kafka-python reading every partition of ``topic`` from the start. The partitions are assigned: this test is
    about isolation levels, and a kafka-python 3.0.12 group member that joins before its first metadata of the topic
    arrives assigns itself nothing, and can keep nothing for good (see ``tests/interop/test_fetch_sessions_clients.py``;
    it read nothing for 30 s once in a ``make test`` run, where ``group.initial.rebalance.delay.ms`` is 0)."""
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                            isolation_level=isolation)
    c.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=200).values():
                out.extend(r.value for r in records)
        for records in c.poll(timeout_ms=1000).values():  # and nothing more
            out.extend(r.value for r in records)
    finally:
        c.close()
    return out


def test_kafka_python_transactions(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("kp-txn", 2))
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-tx")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send("kp-txn", value=b"c-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send("kp-txn", value=b"a-%d" % i, partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert sorted(_kp_read(broker.bootstrap, "kp-txn", 2, "read_committed", 10)) == sorted(b"c-%d" % i
                                                                                        for i in range(10))
    assert len(_kp_read(broker.bootstrap, "kp-txn", 2, "read_uncommitted", 20)) == 20


def test_aiokafka_consume_transform_produce(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("ak-in", 1), ("ak-out", 1))
    src = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(50):
        src.produce("ak-in", value=b"%d" % i, partition=0)
    src.flush(30)

    async def run() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer("ak-in", bootstrap_servers=broker.bootstrap, group_id="ak-group",
                                             auto_offset_reset="earliest", enable_auto_commit=False,
                                             isolation_level="read_committed")
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="ak-tx")
        await consumer.start()
        await producer.start()
        done = 0
        aborted_once = False
        try:
            while done < 50:
                batch = await consumer.getmany(timeout_ms=1000)
                for tp, records in batch.items():
                    if not aborted_once:
                        try:
                            async with producer.transaction():
                                for r in records:
                                    await producer.send("ak-out", b"z" + r.value, partition=0)
                                raise RuntimeError("abort this one")
                        except RuntimeError:
                            aborted_once = True
                        consumer.seek(tp, records[0].offset)
                        continue
                    async with producer.transaction():
                        for r in records:
                            await producer.send("ak-out", b"z" + r.value, partition=0)
                        await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, "ak-group")
                    done += len(records)
        finally:
            await producer.stop()
            await consumer.stop()
        reader = aiokafka.AIOKafkaConsumer("ak-out", bootstrap_servers=broker.bootstrap, group_id=None,
                                           auto_offset_reset="earliest", isolation_level="read_committed")
        await reader.start()
        out: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(out) < 50 and time.monotonic() < deadline:
                for records in (await reader.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in records)
            for records in (await reader.getmany(timeout_ms=1000)).values():
                out.extend(r.value for r in records)
        finally:
            await reader.stop()
        return out

    out = asyncio.run(run())
    assert out == [b"z%d" % i for i in range(50)]
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ak-group"})
    try:
        committed = c.committed([ck.TopicPartition("ak-in", 0)], timeout=10)
    finally:
        c.close()
    assert committed[0].offset == 50
