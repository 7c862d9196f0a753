"""A client batch bound for a topic with another ``compression.type`` is checked and recompressed in a worker
thread, and a gzip batch on any topic decompressed there for its records to be checked: while it is, the broker's
event loop answers other connections; a check that fails there for a bug falls
back to the append's own (the request still succeeds, or gets the validator's error code).

The broker runs in-process on a thread (the standard asyncio loop and uvloop); the clients are raw sockets."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType
from strom.record.records import MemoryRecords
from strom.server import replica_manager as replica_manager_module
from strom.server.broker import BrokerServer
from tests.integration.test_fetch_zero_copy import _Client, _LoopThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _produce(topic: str, codec: CompressionType = CompressionType.NONE) -> ProduceRequest:
    b = MemoryRecordsBuilder(codec)
    for i in range(200):
        b.append(1_700_000_000_000 + i, b"k%d" % i, b"value %d " % i * 50 + os.urandom(16))
    return ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(b.build()))])])


def _create_gzip_topic(c: _Client, topic: str, codec: str = "gzip") -> None:
    c.send(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, configs=[
            CreateTopicsRequest.CreatableTopicConfig(name="compression.type", value=codec)])]))
    assert c.receive().topics[0].error_code == ErrorCode.NONE


def _codecs_stored(b: BrokerServer, topic: str) -> list[int]:
    log = b.replica_manager.get_log(TopicPartition(topic, 0))
    assert log is not None
    return [batch.compression_type for s in log.segments for batch in MemoryRecords(Path(s.log.path).read_bytes())]


@pytest.mark.parametrize(("topic_codec", "batch_codec"), [("gzip", CompressionType.NONE),
                                                         ("gzip", CompressionType.ZSTD),
                                                         ("producer", CompressionType.GZIP)])
def test_the_loop_serves_other_connections_while_a_batch_is_recompressed_or_gunzipped(
        loop_broker: tuple[BrokerServer, _LoopThread], monkeypatch: pytest.MonkeyPatch, topic_codec: str,
        batch_codec: CompressionType) -> None:
    b, runner = loop_broker
    port = int(next(s for s in b.socket_servers if s.listener.name == "PLAINTEXT").bound_port or 0)
    started, release = threading.Event(), threading.Event()
    threads: list[int] = []
    real = replica_manager_module.check_client_records

    def held_recompression(records: Any, config: Any, now_ms: int) -> Any:
        threads.append(threading.get_ident())
        started.set()
        release.wait(30)  # held until the other connection has been answered (or for 30 s: the test then fails)
        return real(records, config, now_ms)

    monkeypatch.setattr(replica_manager_module, "check_client_records", held_recompression)
    producer, other = _Client(port), _Client(port)
    try:
        _create_gzip_topic(producer, "gz", topic_codec)
        producer.send(ApiKey.PRODUCE, 9, _produce("gz", batch_codec))
        assert started.wait(30), "the check never started"
        other.sock.settimeout(10)
        other.send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        answered = other.receive()  # a loop blocked in the recompression would not answer: a timeout here
        release.set()
        assert answered.error_code == ErrorCode.NONE
        part = producer.receive().responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.NONE
    finally:
        release.set()
        producer.close()
        other.close()
    assert threads and threads[0] != runner.thread.ident
    assert _codecs_stored(b, "gz") == [CompressionType.GZIP]


def test_a_recompression_that_fails_in_the_worker_falls_back_to_the_append(
        loop_broker: tuple[BrokerServer, _LoopThread], monkeypatch: pytest.MonkeyPatch) -> None:
    b, _ = loop_broker
    port = int(next(s for s in b.socket_servers if s.listener.name == "PLAINTEXT").bound_port or 0)

    def broken(records: Any, config: Any, now_ms: int) -> Any:
        raise RuntimeError("a bug in the worker")

    monkeypatch.setattr(replica_manager_module, "check_client_records", broken)
    c = _Client(port)
    try:
        _create_gzip_topic(c, "gz2")
        c.send(ApiKey.PRODUCE, 9, _produce("gz2"))
        assert c.receive().responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        c.close()
    assert _codecs_stored(b, "gz2") == [CompressionType.GZIP]
