"""Bad input never takes the broker down: each case gets a Kafka error code or a closed connection, and the
broker keeps serving other clients."""

from __future__ import annotations

import os
import struct

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MAX_REQUEST = 1_000_000
MAX_MESSAGE = 10_000


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("bad") / "data",
                      overrides={"socket.request.max.bytes": str(MAX_REQUEST), "message.max.bytes": str(MAX_MESSAGE)})
    b.start()
    yield b
    assert b.proc is not None and b.proc.poll() is None, "the broker died"
    assert b.stop() == 0
    b.cleanup()


def _alive(b: BrokerProcess) -> None:
    with RawClient(b.bootstrap) as c:
        resp = c.request(ApiKey.METADATA, 9, MetadataRequest(topics=None))
        assert resp.brokers[0].port == b.port


def _batch(n: int = 3, value: bytes = b"v") -> bytes:
    builder = MemoryRecordsBuilder()
    for i in range(n):
        builder.append(1_700_000_000_000 + i, b"k%d" % i, value)
    return builder.build()


def _produce(topic: str, records: bytes | None, partition: int = 0, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def _code(resp) -> int:  # type: ignore[no-untyped-def]
    return resp.responses[0].partition_responses[0].error_code


def test_oversized_frame_closes_connection(small_broker) -> None:  # type: ignore[no-untyped-def]
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", MAX_REQUEST + 1) + b"\0" * 100)
        assert c.is_closed_by_peer()
    _alive(small_broker)


def test_negative_size_closes_connection(small_broker) -> None:  # type: ignore[no-untyped-def]
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", -5))
        assert c.is_closed_by_peer()
    _alive(small_broker)


def test_garbage_and_truncated_frames(small_broker) -> None:  # type: ignore[no-untyped-def]
    rnd = os.urandom(4096)
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", len(rnd)) + rnd)
        assert c.is_closed_by_peer()
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", 500) + b"\x00\x03\x00\x09")  # promises 500 bytes, sends 4, hangs up
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(b"\x00\x00")  # half a size prefix
    _alive(small_broker)


def test_unknown_api_key_and_version(small_broker) -> None:  # type: ignore[no-untyped-def]
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">ihhih", 10, 999, 0, 7, -1))
        assert c.is_closed_by_peer()
    with RawClient(small_broker.bootstrap) as c:
        c.send_raw(struct.pack(">ihhih", 10, ApiKey.METADATA, 99, 7, -1))
        assert c.is_closed_by_peer()
    # An ApiVersions version the broker does not know gets a v0 answer with UNSUPPORTED_VERSION (KIP-511).
    with RawClient(small_broker.bootstrap) as c:
        c.send(ApiKey.API_VERSIONS, 9, ApiVersionsRequest(client_software_name="t", client_software_version="1")
               .encode(3))
        resp = c.receive()
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [k.api_key for k in resp.api_keys] == [ApiKey.API_VERSIONS]
        assert resp.api_keys[0].max_version >= 3
    _alive(small_broker)


def test_produce_errors(small_broker) -> None:  # type: ignore[no-untyped-def]
    with RawClient(small_broker.bootstrap) as c:
        good = _batch()
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", good))) == 0
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", bytes(corrupt)))) == ErrorCode.CORRUPT_MESSAGE
        huge = _batch(1, b"x" * (MAX_MESSAGE + 10))
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", huge))) == ErrorCode.MESSAGE_TOO_LARGE
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad/topic", good))) == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", good, partition=7))) == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", good, partition=-1))) == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", b"\x00" * 30))) == ErrorCode.CORRUPT_MESSAGE
        # Kafka's ProduceRequest.validateRecords: exactly one batch of magic 2 per partition
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", good + good))) == ErrorCode.INVALID_RECORD
        magic1 = bytearray(good)
        magic1[16] = 1
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", bytes(magic1)))) == ErrorCode.INVALID_RECORD
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", b""))) == ErrorCode.INVALID_RECORD
        assert _code(c.request(ApiKey.PRODUCE, 9, _produce("bad-input", good, acks=5))) == \
            ErrorCode.INVALID_REQUIRED_ACKS
        # Nothing of the rejected batches was written: the log holds exactly the first good batch.
        fetch = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
            topic="bad-input", partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                       partition_max_bytes=1 << 20)])])
        part = c.request(ApiKey.FETCH, 11, fetch).responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == 3
        assert bytes(part.records)[16:] == good[16:]  # leader epoch (12..16) is the broker's
        fetch.topics[0].partitions[0].fetch_offset = 4
        assert c.request(ApiKey.FETCH, 11, fetch).responses[0].partitions[0].error_code == \
            ErrorCode.OFFSET_OUT_OF_RANGE
    _alive(small_broker)


def test_create_topics_validation(small_broker) -> None:  # type: ignore[no-untyped-def]
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(topics=[
        T(name="ok-topic", num_partitions=2, replication_factor=1),
        T(name="bad name!", num_partitions=1, replication_factor=1),
        T(name="zero-parts", num_partitions=0, replication_factor=1),
        T(name="rf3", num_partitions=1, replication_factor=3),
        T(name="bad-config", num_partitions=1, replication_factor=1,
          configs=[CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value="ten")]),
        T(name="x" * 250, num_partitions=1, replication_factor=1),
    ], timeout_ms=5000)
    with RawClient(small_broker.bootstrap) as c:
        resp = c.request(ApiKey.CREATE_TOPICS, 7, req)
        codes = {t.name: t.error_code for t in resp.topics}
        assert codes == {"ok-topic": 0, "bad name!": ErrorCode.INVALID_TOPIC_EXCEPTION,
                         "zero-parts": ErrorCode.INVALID_PARTITIONS, "rf3": ErrorCode.INVALID_REPLICATION_FACTOR,
                         "bad-config": ErrorCode.INVALID_CONFIG, "x" * 250: ErrorCode.INVALID_TOPIC_EXCEPTION}
        again = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[req.topics[0]]))
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert "already exists" in again.topics[0].error_message
    _alive(small_broker)
