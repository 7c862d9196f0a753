"""confluent-kafka (librdkafka) against a strom broker subprocess: admin, produce with every codec, group consume."""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 100_000


def _value(codec: str, i: int) -> bytes:
    return f"{codec}:{i:07d}:".encode() + bytes((i * 7 + j) % 256 for j in range(i % 23))


def _wait_futures(fs: dict, timeout: float = 30) -> None:  # type: ignore[type-arg]
    for f in fs.values():
        f.result(timeout)


def test_admin_create_describe_delete(broker) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _wait_futures(admin.create_topics([NewTopic("ck-admin", num_partitions=3, replication_factor=1,
                                                config={"retention.ms": "3600000"})]))
    md = admin.list_topics(timeout=10)
    assert len(md.topics["ck-admin"].partitions) == 3
    # Creating it again is refused with TOPIC_ALREADY_EXISTS.
    fs = admin.create_topics([NewTopic("ck-admin", num_partitions=3, replication_factor=1)])
    with pytest.raises(ck.KafkaException) as ei:
        fs["ck-admin"].result(10)
    assert ei.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    _wait_futures(admin.create_partitions([NewPartitions("ck-admin", 5)]))
    assert len(admin.list_topics(timeout=10).topics["ck-admin"].partitions) == 5
    _wait_futures(admin.delete_topics(["ck-admin"]))
    deadline = time.monotonic() + 10
    while "ck-admin" in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "ck-admin" not in admin.list_topics(timeout=10).topics


def test_produce_every_codec_and_consume_in_group(broker) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _wait_futures(admin.create_topics([NewTopic(f"ck-{c}", num_partitions=4, replication_factor=1) for c in CODECS]))
    for codec in CODECS:
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5,
                         "acks": "all", "enable.idempotence": False})
        errors: list[object] = []

        def on_delivery(err, msg, errors: list[object] = errors) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)

        for i in range(N):
            while True:
                try:
                    p.produce(f"ck-{codec}", value=_value(codec, i), key=f"k{i % 1000}".encode(),
                              headers=[("h", str(i).encode()), ("codec", codec.encode())], on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10_000 == 0:
                p.poll(0)
        assert p.flush(120) == 0
        assert not errors, errors[:3]

    for codec in CODECS:
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{codec}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
        c.subscribe([f"ck-{codec}"])
        seen: dict[int, tuple[bytes, bytes, list]] = {}  # type: ignore[type-arg]
        last_offset: dict[int, int] = {}
        deadline = time.monotonic() + 120
        while len(seen) < N and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                assert m.error() is None, m.error()
                i = int(m.value().split(b":")[1])
                assert m.offset() > last_offset.get(m.partition(), -1)
                last_offset[m.partition()] = m.offset()
                seen[i] = (m.key(), m.value(), m.headers())
        c.close()
        assert len(seen) == N
        for i in (0, 1, 22, 12345, N - 1):
            key, value, headers = seen[i]
            assert key == f"k{i % 1000}".encode()
            assert value == _value(codec, i)
            assert headers == [("h", str(i).encode()), ("codec", codec.encode())]
        assert all(seen[i][1] == _value(codec, i) for i in range(N))


def test_admin_group_offsets_alter_list_delete(broker) -> None:  # type: ignore[no-untyped-def]
    """Group-offset admin calls of other clients against strom's coordinator: librdkafka's
    AlterConsumerGroupOffsets (a simple commit) and ListConsumerGroupOffsets (OffsetFetch); kafka-python's
    delete_group_offsets (OffsetDelete, KIP-496; confluent-kafka's Python binding has no such call)."""
    import kafka
    import kafka.errors
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _wait_futures(admin.create_topics([NewTopic("ck-offsets", num_partitions=2, replication_factor=1)]))
    group = "ck-offsets-group"
    tps = [TopicPartition("ck-offsets", 0, 5), TopicPartition("ck-offsets", 1, 9)]
    _wait_futures(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)]))

    def listed() -> dict[int, int]:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition("ck-offsets", p) for p in (0, 1)])]
        result = admin.list_consumer_group_offsets(request)[group].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions}

    assert listed() == {0: 5, 1: 9}
    kp = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        deleted = kp.delete_group_offsets(group, [kafka.TopicPartition("ck-offsets", 1)])
        assert deleted == {kafka.TopicPartition("ck-offsets", 1): kafka.errors.NoError}
        assert listed() == {0: 5, 1: ck.OFFSET_INVALID}
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            kp.delete_group_offsets("no-such-group", [kafka.TopicPartition("ck-offsets", 0)])
    finally:
        kp.close()
