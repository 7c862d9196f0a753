"""The broker reads every produced record before storing it, as Kafka's does: a batch whose CRC matches but whose
records do not parse (a buggy client's) is refused with INVALID_RECORD and nothing of it is stored, so the clients
that read the partition afterwards (confluent-kafka, kafka-python) see only the good records; a compressed batch
is decompressed for it, on a topic that keeps the producer's codec too."""

from __future__ import annotations

import struct

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType, compress, decompress
from strom.record.header import HEADER_SIZE, LOG_OVERHEAD, compute_crc
from strom.testing.raw_client import RawClient

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


def _damaged(codec: str) -> bytes:
    """Three records in ``codec`` whose second record claims a key longer than itself, the CRC set to match."""
    b = MemoryRecordsBuilder(CompressionType.from_name(codec))
    for i in range(3):
        b.append(1_700_000_000_000 + i, b"k%d" % i, b"bad-%d" % i)
    batch = bytearray(b.build())
    block = bytearray(decompress(CompressionType.from_name(codec), memoryview(batch)[HEADER_SIZE:]))
    second = block.index(b"k1")
    block[second - 1] = 0x7E  # the key's length varint: 63 bytes, past the end of the record
    data = compress(CompressionType.from_name(codec), bytes(block)) if codec != "none" else bytes(block)
    out = bytearray(batch[:HEADER_SIZE] + data)
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _produce_good(bootstrap: str, topic: str, start: int, codec: str = "none") -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(start, start + 5):
        p.produce(topic, key=b"k%d" % i, value=b"good-%d" % i, partition=0)
    assert p.flush(30) == 0


@pytest.mark.parametrize("codec", ["none", "zstd", "gzip"])
def test_a_batch_that_does_not_parse_is_refused_and_readers_see_only_good_records(  # type: ignore[no-untyped-def]
        broker, codec: str) -> None:
    topic = f"rv-{codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    _produce_good(broker.bootstrap, topic, 0, codec)
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=_damaged(codec))])])
    with RawClient(broker.bootstrap) as c:
        part = c.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert "record 1 of the 3" in (part.error_message or "")
    _produce_good(broker.bootstrap, topic, 5, codec)

    want = [(b"k%d" % i, b"good-%d" % i, i) for i in range(10)]
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, bytes, int]] = []
    try:
        for _ in range(300):
            if len(got) >= 10:
                break
            for m in c.consume(100, 0.1):
                assert m.error() is None, m.error()
                got.append((m.key(), m.value(), m.offset()))
    finally:
        c.close()
    assert got == want
    k = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000)
    k.assign([kafka.TopicPartition(topic, 0)])
    k.seek(kafka.TopicPartition(topic, 0), 0)
    try:
        got_kp = [(m.key, m.value, m.offset) for _, m in zip(range(10), k, strict=False)]  # (k last: no 11th wait)
    finally:
        k.close()
    assert got_kp == want


def test_a_compacted_topic_refuses_a_compressed_record_without_a_key(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "rv-compacted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]).values():
        f.result(20)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 100,
                     "retries": 0})
    errors: list[object] = []
    p.produce(topic, key=b"k", value=b"kept", partition=0)
    assert p.flush(30) == 0
    p.produce(topic, key=None, value=b"no key", partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None and errors[0].code() == ck.KafkaError.INVALID_RECORD
