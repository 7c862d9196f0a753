"""Helpers for the producer integration tests: topic creation and read-back with confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

ck = None


def confluent() -> Any:
    global ck
    if ck is None:
        import confluent_kafka

        ck = confluent_kafka
    return ck


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()])
    for f in futures.values():
        f.result(30)


def read_back(bootstrap: str, partitions: dict[str, int], expected: int, timeout: float = 30.0) -> list[Any]:
    """Every record of the given topics (topic → partition count) from the beginning, via ``assign()``."""
    k = confluent()
    consumer = k.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                           "enable.auto.commit": False, "api.version.request": True})
    try:
        consumer.assign([k.TopicPartition(t, p, k.OFFSET_BEGINNING) for t, n in partitions.items()
                         for p in range(n)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    out.append(msg)
        return out
    finally:
        consumer.close()
