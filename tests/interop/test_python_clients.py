"""kafka-python and aiokafka against a strom broker subprocess."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]


def test_kafka_python_produce_consume(broker) -> None:  # type: ignore[no-untyped-def]
    kafka = pytest.importorskip("kafka")
    from kafka.admin import NewTopic

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp-topic", num_partitions=3, replication_factor=1)])
    admin.close()
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, acks="all")
        futs = [p.send("kp-topic", key=f"k{i}".encode(), value=f"{codec}-{i}".encode(), headers=[("n", b"%d" % i)])
                for i in range(500)]
        p.flush()
        offsets = [f.get(10) for f in futs]
        assert all(md.offset >= 0 for md in offsets)
        p.close()
    c = kafka.KafkaConsumer("kp-topic", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                            group_id="kp-group", consumer_timeout_ms=10_000)
    assert c.partitions_for_topic("kp-topic")  # metadata before the first join (kafka-python 3.0's join race)
    values = []
    for m in c:
        values.append(m.value)
        if len(values) == 2500:
            break
    c.commit()
    c.close()
    assert sorted(values) == sorted(f"{codec}-{i}".encode() for codec in (None, "gzip", "snappy", "lz4", "zstd")
                                    for i in range(500))


def test_aiokafka_produce_consume(broker) -> None:  # type: ignore[no-untyped-def]
    aiokafka = pytest.importorskip("aiokafka")

    async def main() -> list[bytes]:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
        await p.start()
        try:
            for i in range(300):
                await p.send("aio-topic", key=b"k%d" % (i % 5), value=b"aio-%d" % i)
            await p.flush()
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer("aio-topic", bootstrap_servers=broker.bootstrap, group_id="aio-group",
                                      auto_offset_reset="earliest")
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < 300:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            await c.commit()
        finally:
            await c.stop()
        return got

    got = asyncio.run(main())
    assert sorted(got) == sorted(b"aio-%d" % i for i in range(300))
