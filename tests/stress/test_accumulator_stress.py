"""Stress: 16 appending threads, 200 partitions, a small buffer.memory, one draining "sender" thread.

Checks the accumulator/BufferPool locking (SPEC §6.4, §7, DESIGN §3): every future completes exactly once,
nothing deadlocks, per-partition order is kept, and all memory returns to the pool (§18 items 38, 41, 42, 58,
59, 61, 62, 72).
"""

from __future__ import annotations

import random
import struct
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from strom.common.structs import Node, TopicPartition
from strom.common.time import SYSTEM_TIME
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.cluster_view import StaticCluster
from strom.producer.internals.record_accumulator import RecordAccumulator

pytestmark = [pytest.mark.stress, pytest.mark.timeout(60)]

THREADS = 16
PARTITIONS = 200
BATCH_SIZE = 1024
BUFFER_MEMORY = 48 * 1024  # ~47 batches for 200 partitions: appenders block on memory regularly
RUN_SECONDS = 5.0
REC = struct.Struct(">HI")  # thread id, sequence


class Outcome:
    """Per-record completion bookkeeping (callback count and the offset it reported)."""

    __slots__ = ("tp", "seq", "thread", "calls", "offset", "error")

    def __init__(self, tp: TopicPartition, thread: int, seq: int) -> None:
        self.tp, self.thread, self.seq = tp, thread, seq
        self.calls = 0
        self.offset = -2
        self.error: BaseException | None = None

    def __call__(self, metadata: Any, exception: BaseException | None) -> None:
        self.calls += 1
        if exception is not None:
            self.error = exception
        else:
            self.offset = metadata.offset


def test_concurrent_append_drain_complete() -> None:
    """§18 items 38/41/42/58/59/61/62/72 under contention: exactly-once completion, no deadlock,
    per-partition order, memory fully returned."""
    nodes = [Node(i, f"h{i}", 9092) for i in range(3)]
    cluster = StaticCluster({TopicPartition("s", p): nodes[p % 3] for p in range(PARTITIONS)})
    pool = BufferPool(BUFFER_MEMORY, BATCH_SIZE, time=SYSTEM_TIME)
    acc = RecordAccumulator(BATCH_SIZE, 0, 2, 100, 120_000, pool, SYSTEM_TIME)  # linger 2 ms
    stop = threading.Event()
    producers_done = threading.Event()
    outcomes: list[list[tuple[Outcome, Any]]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    next_offset: dict[TopicPartition, int] = defaultdict(int)
    stats = {"drains": 0, "batches": 0, "flushes": 0, "max_waiters": 0}

    def producer(tid: int) -> None:
        rng = random.Random(tid)
        seq = 0
        mine = outcomes[tid]
        try:
            while not stop.is_set():
                hot = rng.random() < 0.5  # half the records go to 10 hot partitions: multi-record batches
                tp = TopicPartition("s", rng.randrange(10) if hot else rng.randrange(PARTITIONS))
                size = 2000 if rng.random() < 0.005 else rng.randrange(10, 200)  # some non-pooled batches
                value = REC.pack(tid, seq) + b"x" * size
                outcome = Outcome(tp, tid, seq)
                now = SYSTEM_TIME.milliseconds()
                result = acc.append(tp, now, None, value, None, outcome, 30_000, False, now)
                mine.append((outcome, result.future))
                seq += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def sender() -> None:
        try:
            while True:
                now = SYSTEM_TIME.milliseconds()
                stats["max_waiters"] = max(stats["max_waiters"], pool.queued())
                ready = acc.ready(cluster, now)
                drained = acc.drain(cluster, ready.ready_nodes, 16 * BATCH_SIZE, now)
                stats["drains"] += 1
                got = 0
                for batches in drained.values():
                    for batch in batches:
                        base = next_offset[batch.topic_partition]
                        next_offset[batch.topic_partition] = base + batch.record_count
                        assert batch.complete(base, -1)
                        acc.deallocate(batch)
                        got += 1
                stats["batches"] += got
                if not got:
                    if producers_done.is_set() and not acc.has_incomplete():
                        return
                    time.sleep(0.0005)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def flusher() -> None:
        try:
            while not stop.wait(0.5):
                acc.begin_flush()
                acc.await_flush_completion(timeout_ms=20_000)
                stats["flushes"] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    producers = [threading.Thread(target=producer, args=(i,), name=f"producer-{i}") for i in range(THREADS)]
    sender_thread = threading.Thread(target=sender, name="sender")
    flusher_thread = threading.Thread(target=flusher, name="flusher")
    for t in [*producers, sender_thread, flusher_thread]:
        t.start()
    time.sleep(RUN_SECONDS)  # the run length itself, not a wait for a condition
    stop.set()
    for t in [*producers, flusher_thread]:
        t.join(20)
        assert not t.is_alive(), f"{t.name} deadlocked"
    producers_done.set()
    sender_thread.join(20)
    assert not sender_thread.is_alive(), "sender deadlocked"
    assert not errors, errors

    total = sum(len(o) for o in outcomes)
    assert total > 10_000
    # Every future completed exactly once, with the offset its callback saw.
    by_partition: dict[TopicPartition, list[Outcome]] = defaultdict(list)
    for per_thread in outcomes:
        for outcome, future in per_thread:
            assert outcome.calls == 1 and outcome.error is None
            assert future.done() and future.get(0).offset == outcome.offset
            by_partition[outcome.tp].append(outcome)
    # Offsets of each partition are exactly 0..n-1 and each thread's records keep their append order.
    for tp, recs in by_partition.items():
        assert sorted(o.offset for o in recs) == list(range(len(recs))) == list(range(next_offset[tp]))
        last: dict[int, int] = {}
        for o in sorted(recs, key=lambda o: o.seq):
            assert o.offset > last.get(o.thread, -1)
            last[o.thread] = o.offset
    assert pool.available_memory() == BUFFER_MEMORY and pool.queued() == 0
    assert not acc.has_incomplete() and not acc.has_undrained() and not acc.appends_in_progress()
    print(f"\nstress: {total} records in {stats['batches']} batches, {stats['drains']} drain loops, "
          f"{stats['flushes']} flushes, max {stats['max_waiters']} threads waiting for memory, "
          f"{pool.wait_time_ns_total / 1e9:.2f} s total allocation wait")
