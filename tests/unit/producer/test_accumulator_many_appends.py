"""Many single-threaded ``RecordAccumulator.append`` calls (the producer's hot path), checked for what they
must do; the speed of the same loop is measured beside kafka-python's in ``bench/accumulator.py``."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from strom.common.structs import Node, TopicPartition
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.cluster_view import StaticCluster
from strom.producer.internals.record_accumulator import RecordAccumulator
from strom.record.records import MemoryRecords
from strom.testing.mock_time import MockTime

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

RECORDS = 20_000
BATCH_SIZE = 16384
MEMORY = 64 * 1024 * 1024


@pytest.mark.parametrize("partitions", [1, 100])
def test_many_appends_land_once_in_order_in_full_batches(partitions: int) -> None:
    """Every appended record is drained exactly once, per partition in append order; a partition's batches
    are filled up to batch.size before the next one starts (only its last batch may be short); completing
    the batches completes each record's future with its own offset; all memory returns to the pool."""
    clock = MockTime()
    pool = BufferPool(MEMORY, BATCH_SIZE, time=clock)
    acc = RecordAccumulator(BATCH_SIZE, 0, 0, 100, 120_000, pool, clock)
    tps = [TopicPartition("bulk", p) for p in range(partitions)]
    node = Node(0, "h", 9092)
    cluster = StaticCluster(dict.fromkeys(tps, node))
    now = clock.milliseconds()
    futures: list[tuple[TopicPartition, int, Any]] = []
    appended: dict[TopicPartition, list[bytes]] = {tp: [] for tp in tps}
    for i in range(RECORDS):
        tp = tps[i % partitions]
        value = struct.pack(">I", i) + b"v" * 96
        result = acc.append(tp, now, None, value, None, None, 1000, False, now)
        futures.append((tp, len(appended[tp]), result.future))
        appended[tp].append(value)

    drained: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
    while acc.has_undrained():
        for batches in acc.drain(cluster, [node], 1024 * 1024, now).values():
            for batch in batches:
                drained[batch.topic_partition].append(batch)
    for tp in tps:
        batches = drained[tp]
        values = [r.value for b in batches for r in MemoryRecords(bytes(b.records_builder.build())).records()]
        assert values == appended[tp]
        full = [b.record_count for b in batches[:-1]]
        assert all(n == full[0] for n in full) and (not full or batches[-1].record_count <= full[0])
        assert all(b.estimated_size_in_bytes() > BATCH_SIZE - 200 for b in batches[:-1])
        base = 1000 * tp.partition
        for b in batches:
            assert b.complete(base, -1)
            base += b.record_count
            acc.deallocate(b)
    for tp, index, future in futures:
        assert future.done() and future.get(0).offset == 1000 * tp.partition + index
    assert pool.available_memory() == MEMORY
