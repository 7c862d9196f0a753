"""Test helpers: topics and records on a strom broker, with strom's own clients."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from strom.common.structs import TopicPartition
from strom.consumer.kafka_consumer import KafkaConsumer
from strom.producer.kafka_producer import KafkaProducer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.testing.raw_client import RawClient


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with RawClient(bootstrap) as c:
        resp = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10_000))
        assert resp.topics[0].error_code == 0, resp


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes]],
            timestamp: int | None = None) -> None:
    """``(partition, key, value)`` records, all acknowledged on return."""
    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "linger.ms": "2"})
    try:
        futures = [p.send(topic, value=v, key=k, partition=part, timestamp=timestamp) for part, k, v in records]
        p.flush()
        for f in futures:
            f.get(30)
    finally:
        p.close()


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[Any]:
    """Every record now in the topic, read with strom's consumer (assign mode)."""
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "key.deserializer": "bytes", "value.deserializer": "bytes",
                       "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning(tps)
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "timed out consuming"
            out.extend(c.poll(timeout=0.5))
        return out
    finally:
        c.close()


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    from strom.protocol.messages.create_partitions import CreatePartitionsRequest

    with RawClient(bootstrap) as c:
        resp = c.request(ApiKey.CREATE_PARTITIONS, 1, CreatePartitionsRequest(topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=total, assignments=None)],
            timeout_ms=10_000, validate_only=False))
        assert resp.results[0].error_code == 0, resp
