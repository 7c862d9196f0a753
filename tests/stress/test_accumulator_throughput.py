"""Single-threaded ``RecordAccumulator.append`` throughput with 100-byte values (DESIGN §5 hot path)."""

from __future__ import annotations

import time

import pytest

from strom.common.structs import TopicPartition
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.record_accumulator import RecordAccumulator
from strom.testing.mock_time import MockTime

pytestmark = [pytest.mark.stress, pytest.mark.timeout(60)]


def measure(records: int = 200_000, partitions: int = 1) -> float:
    clock = MockTime()
    pool = BufferPool(64 * 1024 * 1024, 16384, time=clock)
    acc = RecordAccumulator(16384, 0, 0, 100, 120_000, pool, clock)
    tps = [TopicPartition("bench", p) for p in range(partitions)]
    value = b"v" * 100
    now = clock.milliseconds()
    append = acc.append
    started = time.perf_counter()
    for i in range(records):
        append(tps[i % partitions], now, None, value, None, None, 1000, False, now)
    elapsed = time.perf_counter() - started
    return records / elapsed


def test_append_throughput() -> None:
    """Reports appends/s (one partition and 100 partitions); a loose floor guards against regressions."""
    one = max(measure() for _ in range(3))
    many = max(measure(partitions=100) for _ in range(3))
    print(f"\nRecordAccumulator.append, 100-byte values, no callback: {one:,.0f}/s (1 partition), "
          f"{many:,.0f}/s (100 partitions)")
    assert one > 50_000 and many > 50_000
