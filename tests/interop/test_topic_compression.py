"""A topic's ``compression.type`` is what lands on disk, whatever codec the producer chose (Kafka's broker-side
recompression); confluent-kafka and kafka-python read the records back as they were sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType
from strom.record.records import MemoryRecords
from strom.testing.raw_client import RawClient

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

N = 3000


def _codecs_on_disk(data_dir: Path, topic: str, partition: int = 0) -> list[str]:
    """The codec of every batch in the partition's segment files, in log order."""
    return [batch.compression_type.config_name for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
            for batch in MemoryRecords(seg.read_bytes()).batches()]


def _produce(bootstrap: str, topic: str, codec: str, start: int, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                     "enable.idempotence": True, "batch.num.messages": 500})
    failed: list[object] = []
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % (i % 17), value=b"%s-%06d " % (codec.encode(), i) * (1 + i % 5),
                  headers=[("i", str(i).encode())], partition=0,
                  on_delivery=lambda err, _msg: failed.append(err) if err else None)
        p.poll(0)
    assert p.flush(30) == 0 and not failed


def _expected(codec: str, i: int) -> tuple[bytes, bytes, bytes]:
    return b"k%d" % (i % 17), b"%s-%06d " % (codec.encode(), i) * (1 + i % 5), str(i).encode()


def _read_confluent(bootstrap: str, topic: str, n: int) -> list[tuple[bytes, bytes, bytes]]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"tc-{topic}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes, bytes]] = []
    try:
        for _ in range(600):
            if len(out) >= n:
                break
            for m in c.consume(1000, 0.1):
                assert m.error() is None, m.error()
                out.append((m.key(), m.value(), dict(m.headers())["i"]))
    finally:
        c.close()
    return out


def _read_kafka_python(bootstrap: str, topic: str, n: int) -> list[tuple[bytes, bytes, bytes]]:
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                            consumer_timeout_ms=20_000)
    tp = kafka.TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out = []
    try:
        for m in c:
            out.append((m.key, m.value, dict(m.headers)["i"]))
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


@pytest.mark.parametrize(("topic_codec", "producer_codec"), [("zstd", "none"), ("uncompressed", "gzip"),
                                                             ("lz4", "snappy")])
def test_batches_are_stored_in_the_topics_codec_and_read_back_by_other_clients(
        broker, topic_codec: str, producer_codec: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"tc-{topic_codec}-{producer_codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_codec})]).values():
        f.result(20)
    _produce(broker.bootstrap, topic, producer_codec, 0, N)
    on_disk = _codecs_on_disk(broker.data_dir, topic)
    assert len(on_disk) >= 6 and set(on_disk) == {"none" if topic_codec == "uncompressed" else topic_codec}
    want = [_expected(producer_codec, i) for i in range(N)]
    assert _read_confluent(broker.bootstrap, topic, N) == want
    assert _read_kafka_python(broker.bootstrap, topic, N) == want


def test_altering_compression_type_applies_to_the_next_batches(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "tc-altered"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": "zstd"})]).values():
        f.result(20)
    _produce(broker.bootstrap, topic, "none", 0, 1000)
    before = len(_codecs_on_disk(broker.data_dir, topic))
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ck.admin.ConfigEntry("compression.type", "gzip", incremental_operation=ck.admin.AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(20)
    _produce(broker.bootstrap, topic, "lz4", 1000, 1000)
    on_disk = _codecs_on_disk(broker.data_dir, topic)
    assert set(on_disk[:before]) == {"zstd"} and set(on_disk[before:]) == {"gzip"} and len(on_disk) > before
    want = [_expected("none", i) for i in range(1000)] + [_expected("lz4", i) for i in range(1000, 2000)]
    assert _read_confluent(broker.bootstrap, topic, 2000) == want


def _zstd_batch() -> bytes:
    b = MemoryRecordsBuilder(CompressionType.ZSTD)
    b.append(1_700_000_000_000, b"k", b"v")
    return bytes(b.build())


@pytest.mark.parametrize(("version", "code"), [(3, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                                               (6, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), (7, ErrorCode.NONE)])
def test_zstd_batches_need_produce_v7(broker, version: int, code: int) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"tc-zstd-v{version}"
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=_zstd_batch())])])
    with RawClient(broker.bootstrap) as c:
        part = c.request(ApiKey.PRODUCE, version, request).responses[0].partition_responses[0]
    assert part.error_code == code
    assert _codecs_on_disk(broker.data_dir, topic) == ([] if code else ["zstd"])


@pytest.mark.parametrize(("topic_codec", "version", "code"), [
    ("zstd", 9, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), ("zstd", 4, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    ("zstd", 10, ErrorCode.NONE), ("lz4", 9, ErrorCode.NONE), ("producer", 9, ErrorCode.NONE)])
def test_a_zstd_topic_is_refused_to_fetches_older_than_v10(broker, topic_codec: str, version: int,  # type: ignore[no-untyped-def]
                                                           code: int) -> None:
    from strom.protocol.messages.fetch import FetchRequest

    topic = f"tc-fetch-{topic_codec}-v{version}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_codec})]).values():
        f.result(20)
    _produce(broker.bootstrap, topic, "none", 0, 10)
    request = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
        topic=topic, partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=1 << 20)])])
    with RawClient(broker.bootstrap) as c:
        part = c.request(ApiKey.FETCH, version, request).responses[0].partitions[0]
    assert part.error_code == code
    assert (len(part.records or b"") > 0) == (code == ErrorCode.NONE)


def test_offsets_for_times_finds_the_record_inside_a_compressed_batch(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "tc-times"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    t0 = 1_700_000_000_000
    b = MemoryRecordsBuilder(CompressionType.LZ4)  # (one batch for sure: librdkafka split its 100 records in two
    for i in range(100):  # under load, however long its linger)
        b.append(t0 + 10 * i, None, b"v%d" % i)
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(b.build()))])])
    with RawClient(broker.bootstrap) as raw:
        assert raw.request(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0].error_code == 0
    assert _codecs_on_disk(broker.data_dir, topic) == ["lz4"]  # one batch: the answer must come from inside it
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tc-times"})
    try:
        found = [c.offsets_for_times([ck.TopicPartition(topic, 0, t0 + 10 * i - 5)], timeout=20)[0].offset
                 for i in (1, 37, 99)]  # (one partition per call: a request names each partition once)
    finally:
        c.close()
    assert found == [1, 37, 99]


def test_the_brokers_compression_type_applies_to_topics_without_their_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from strom.broker_process import BrokerProcess

    with BrokerProcess(data_dir=tmp_path / "data", overrides={"compression.type": "gzip"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("tc-default", 1, 1), NewTopic("tc-own", 1, 1, config={
                "compression.type": "producer"})]).values():
            f.result(20)
        for topic in ("tc-default", "tc-own"):
            _produce(b.bootstrap, topic, "lz4", 0, 500)
        assert set(_codecs_on_disk(b.data_dir, "tc-default")) == {"gzip"}
        assert set(_codecs_on_disk(b.data_dir, "tc-own")) == {"lz4"}
        assert _read_confluent(b.bootstrap, "tc-default", 500) == [_expected("lz4", i) for i in range(500)]
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "tc-group", "enable.auto.commit": False})
        try:
            c.commit(offsets=[ck.TopicPartition("tc-default", 0, 500)], asynchronous=False)
        finally:
            c.close()
        offsets_codecs = [codec for d in b.data_dir.glob("__consumer_offsets-*")
                          for codec in _codecs_on_disk(b.data_dir, d.name.rsplit("-", 1)[0], int(d.name.rsplit("-", 1)[1]))]
        assert offsets_codecs and "gzip" not in offsets_codecs  # internal topics keep compression.type=producer
