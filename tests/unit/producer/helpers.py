"""Shared builders for the producer unit tests."""

from __future__ import annotations

from typing import Any

from strom.common.structs import Node, TopicPartition
from strom.common.time import Time
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.cluster_view import StaticCluster
from strom.producer.internals.record_accumulator import RecordAccumulator, RecordAppendResult
from strom.testing.mock_time import MockTime

NODE0 = Node(0, "h0", 9092)
NODE1 = Node(1, "h1", 9092)
VALUE = b"v" * 100


def make_accumulator(
    *,
    batch_size: int = 1024,
    total_memory: int = 64 * 1024,
    linger_ms: int = 0,
    retry_backoff_ms: int = 100,
    delivery_timeout_ms: int = 120_000,
    compression: Any = 0,
    time: Time | None = None,
    pool_time: Time | None = None,
    **kwargs: Any,
) -> tuple[RecordAccumulator, BufferPool, MockTime]:
    """An accumulator over its own BufferPool; the clock is a MockTime unless given."""
    clock = time or MockTime()
    pool = BufferPool(total_memory, batch_size, time=pool_time or clock)
    acc = RecordAccumulator(batch_size, compression, linger_ms, retry_backoff_ms, delivery_timeout_ms, pool, clock,
                            **kwargs)
    return acc, pool, clock  # type: ignore[return-value]


def append(acc: RecordAccumulator, tp: TopicPartition, value: bytes | None = VALUE, *, key: bytes | None = None,
           callback: Any = None, max_block_ms: int = 0, abort_on_new_batch: bool = False,
           timestamp: int | None = None) -> RecordAppendResult:
    now = acc.time.milliseconds()
    return acc.append(tp, now if timestamp is None else timestamp, key, value, None, callback, max_block_ms,
                      abort_on_new_batch, now)


def cluster(leaders: dict[TopicPartition, Node | None]) -> StaticCluster:
    return StaticCluster(leaders)


def fill_one_batch(acc: RecordAccumulator, tp: TopicPartition, value: bytes = VALUE) -> int:
    """Append until the partition's first batch is full (a second batch gets created); returns the number of
    records in the first batch. The deque then holds two batches."""
    n = 0
    while True:
        result = append(acc, tp, value)
        if result.new_batch_created and n > 0:
            return n
        n += 1
