"""Test helpers: topics and records on a strom broker, with strom's own clients."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from strom.admin import AdminClient, NewPartitions, NewTopic
from strom.common.structs import TopicPartition
from strom.consumer.kafka_consumer import KafkaConsumer
from strom.producer.kafka_producer import KafkaProducer


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = _admin(bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)]).all().result(30)
    finally:
        admin.close()


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = _admin(bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(total)}).all().result(30)
    finally:
        admin.close()


def delete_records(bootstrap: str, before: dict[TopicPartition, int]) -> None:
    """Advance log start offsets (the records before are gone, as after retention)."""
    admin = _admin(bootstrap)
    try:
        admin.delete_records(before).all().result(30)
    finally:
        admin.close()


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


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0,
                isolation_level: str = "read_uncommitted") -> list[Any]:
    """Every record now in the topic, read with strom's consumer (assign mode)."""
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "key.deserializer": "bytes", "value.deserializer": "bytes",
                       "auto.offset.reset": "earliest", "isolation.level": isolation_level})
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

