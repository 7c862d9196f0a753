"""RecordAccumulator (SPEC §6): append/two-block design, ready, drain, backoff, muting, flush, expiry,
abort, split — deterministic with MockTime."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from strom.common.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.structs import Node, TopicPartition
from strom.common.time import SYSTEM_TIME
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.cluster_view import StaticCluster
from strom.producer.internals.producer_batch import ProducerBatch
from strom.producer.internals.producer_id_and_epoch import ProducerIdAndEpoch
from strom.producer.internals.record_accumulator import LONG_MAX, RecordAccumulator
from strom.record.records import CompressionType, RecordBatch
from tests.unit.producer.helpers import NODE0, NODE1, VALUE, append, fill_one_batch, make_accumulator

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("t", 2)
TP3 = TopicPartition("t", 3)
ONE_NODE = StaticCluster({TP0: NODE0, TP1: NODE0, TP2: NODE0})


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


def complete_all(acc: RecordAccumulator, batches: dict[int, list[ProducerBatch]], base: int = 0) -> None:
    for node_batches in batches.values():
        for b in node_batches:
            b.complete(base, -1)
            base += b.record_count
            acc.deallocate(b)


# ------------------------------------------------------------------------------------------------ append


def test_append_fills_last_batch_then_creates_new_one() -> None:
    """§18 items 38/40: appends go to the deque's last batch; a record that does not fit creates a new batch at
    the tail; new_batch_created / batch_is_full tell the producer to wake the Sender."""
    acc, pool, _ = make_accumulator(batch_size=1024)
    first = append(acc, TP0)
    assert first.new_batch_created and not first.batch_is_full and not first.abort_for_new_batch
    n = 1
    while True:
        r = append(acc, TP0)
        if r.new_batch_created:
            break
        assert not r.batch_is_full or acc.get_deque(TP0)[0].is_full()  # type: ignore[index]
        n += 1
    assert r.batch_is_full  # two batches in the deque
    dq = acc.get_deque(TP0)
    assert dq is not None and len(dq) == 2 and dq[0].record_count == n and dq[1].record_count == 1
    assert dq[0].is_full()
    assert pool.available_memory() == 64 * 1024 - 2 * 1024
    # Later appends keep reporting batch_is_full (more than one batch queued) without a new batch.
    r = append(acc, TP0)
    assert r.batch_is_full and not r.new_batch_created


def test_batch_is_full_when_single_batch_fills() -> None:
    """§18 item 40: batch_is_full is true when the batch just appended to is full, even alone in the deque."""
    acc, _, _ = make_accumulator(batch_size=253)
    # 61-byte batch header + 3 records of 64 bytes (57-byte value, 1-byte varints) = exactly 253 bytes.
    results = [append(acc, TP0, b"x" * 57) for _ in range(3)]
    dq = acc.get_deque(TP0)
    assert dq is not None and len(dq) == 1 and dq[0].estimated_size_in_bytes() == 253
    assert [r.batch_is_full for r in results] == [False, False, True]
    assert [r.new_batch_created for r in results] == [True, False, False]


def test_oversized_record_gets_dedicated_non_pooled_batch() -> None:
    """§18 item 39: buffer = max(batch.size, record estimate); a big record gets its own batch whose memory
    is not pooled when released."""
    acc, pool, clock = make_accumulator(batch_size=1024)
    big = append(acc, TP0, b"x" * 5000)
    dq = acc.get_deque(TP0)
    assert big.new_batch_created and dq is not None and len(dq) == 1
    batch = dq[0]
    assert batch.initial_capacity > 5000 and len(batch.buffer) == batch.initial_capacity  # type: ignore[arg-type]
    assert pool.available_memory() == 64 * 1024 - batch.initial_capacity
    drained = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())
    complete_all(acc, drained)
    assert pool.free_size() == 0 and pool.available_memory() == 64 * 1024


def test_poolable_buffers_return_to_free_list() -> None:
    """§18 items 56/62: a batch.size batch's buffer goes back on the free list and is reused."""
    acc, pool, clock = make_accumulator(batch_size=1024)
    append(acc, TP0)
    buffer = acc.get_deque(TP0)[0].buffer  # type: ignore[index]
    complete_all(acc, acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()))
    assert pool.free_size() == 1 and pool.available_memory() == 64 * 1024
    append(acc, TP1)
    assert acc.get_deque(TP1)[0].buffer is buffer  # type: ignore[index]


def test_abort_on_new_batch_allocates_nothing() -> None:
    """§18 item 34 (accumulator part): with abort_on_new_batch, a record needing a new batch is not appended."""
    acc, pool, _ = make_accumulator()
    r = append(acc, TP0, abort_on_new_batch=True)
    assert r.abort_for_new_batch and r.future is None and not r.new_batch_created
    assert pool.available_memory() == 64 * 1024 and not acc.has_undrained()
    append(acc, TP0)
    r = append(acc, TP0, abort_on_new_batch=True)  # fits in the existing batch: appended normally
    assert not r.abort_for_new_batch and r.future is not None


def test_append_after_close_fails() -> None:
    """§18 item 43: appends after close fail with "Producer closed while send in progress"."""
    acc, _, _ = make_accumulator()
    append(acc, TP0)
    acc.close()
    with pytest.raises(KafkaError, match="Producer closed while send in progress"):
        append(acc, TP0)
    with pytest.raises(KafkaError, match="Producer closed while send in progress"):
        append(acc, TP1)
    assert not acc.appends_in_progress()


def test_allocation_timeout_propagates_and_frees_nothing() -> None:
    """§18 items 22/58: the append's allocation uses the remaining max.block.ms and times out cleanly."""
    acc, pool, clock = make_accumulator(batch_size=1024, total_memory=2048)
    append(acc, TP0, b"x" * 900)
    append(acc, TP1, b"x" * 900)
    before = clock.milliseconds()
    with pytest.raises(KafkaTimeoutError, match="max blocking time 1500 ms"):
        append(acc, TP2, max_block_ms=1500)
    assert clock.milliseconds() - before == 1500 and pool.available_memory() == 0
    assert acc.get_deque(TP2) is not None and not acc.get_deque(TP2)


class GatedPool(BufferPool):
    """A BufferPool whose allocate blocks the chosen thread until released (to stage races)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate_thread: str | None = None
        self.entered = threading.Event()
        self.release = threading.Event()

    def allocate(self, size: int, max_time_to_block_ms: int) -> bytearray:
        buffer = super().allocate(size, max_time_to_block_ms)
        if threading.current_thread().name == self.gate_thread:
            self.entered.set()
            assert self.release.wait(10)
        return buffer


def gated_accumulator() -> tuple[RecordAccumulator, GatedPool]:
    pool = GatedPool(64 * 1024, 1024, time=SYSTEM_TIME)
    acc = RecordAccumulator(1024, CompressionType.NONE, 0, 100, 120_000, pool, SYSTEM_TIME)
    return acc, pool


def test_racing_batch_creation_makes_one_batch_and_returns_buffer() -> None:
    """§18 item 42: two threads race to create a batch: one batch results, the loser appends to it and its
    buffer goes back to the pool (available memory unchanged)."""
    acc, pool = gated_accumulator()
    pool.gate_thread = "loser"
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(append(acc, TP0, b"a")), name="loser")
    t.start()
    assert pool.entered.wait(10)  # the loser holds a buffer, outside the deque lock
    winner = append(acc, TP0, b"b")
    assert winner.new_batch_created
    pool.release.set()
    t.join(10)
    loser = results[0]
    assert not loser.new_batch_created and loser.future is not None
    dq = acc.get_deque(TP0)
    assert dq is not None and len(dq) == 1 and dq[0].record_count == 2
    assert pool.available_memory() == 64 * 1024 - 1024  # only the winner's batch holds memory
    assert not acc.appends_in_progress()


def test_blocked_allocation_does_not_block_other_appends() -> None:
    """§18 item 41: while a thread waits for memory for one partition, other threads append to that partition
    and to other partitions without waiting (no deque lock is held during allocation)."""
    acc, pool = gated_accumulator()
    pool.gate_thread = "slow"
    t = threading.Thread(target=lambda: append(acc, TP0, b"slow"), name="slow")
    t.start()
    assert pool.entered.wait(10)
    assert acc.appends_in_progress()
    started = time.monotonic()
    assert append(acc, TP1).new_batch_created
    assert append(acc, TP0).new_batch_created  # same partition: not blocked either
    assert not append(acc, TP0).new_batch_created
    assert time.monotonic() - started < 2
    pool.release.set()
    t.join(10)
    assert acc.get_deque(TP0)[0].record_count == 3  # type: ignore[index]


# ------------------------------------------------------------------------------------------------- ready


def test_linger_expiry_makes_partition_ready() -> None:
    """§18 items 45/47: a lone non-full batch becomes sendable linger.ms after creation; before that ready()
    reports the time left."""
    acc, _, clock = make_accumulator(linger_ms=10)
    append(acc, TP0)
    now = clock.milliseconds()
    r = acc.ready(ONE_NODE, now)
    assert r.ready_nodes == set() and r.next_ready_check_delay_ms == 10 and r.unknown_leader_topics == set()
    clock.sleep(9)
    assert acc.ready(ONE_NODE, clock.milliseconds()).next_ready_check_delay_ms == 1
    clock.sleep(1)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}


def test_linger_zero_is_immediately_ready() -> None:
    """§18 item 45: with linger.ms 0 any non-empty partition is sendable at once."""
    acc, _, clock = make_accumulator(linger_ms=0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == set()
    append(acc, TP0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}


def test_full_batch_is_ready_before_linger() -> None:
    """§18 item 44: deque size > 1 (or full head) makes the partition sendable regardless of linger."""
    acc, _, clock = make_accumulator(linger_ms=60_000)
    fill_one_batch(acc, TP0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}


def test_next_ready_check_delay_is_minimum_over_partitions() -> None:
    """§18 item 47: nextReadyCheckDelay = min over non-sendable heads of (linger − waited)."""
    two_nodes = StaticCluster({TP0: NODE0, TP1: NODE1})
    acc, _, clock = make_accumulator(linger_ms=100)
    append(acc, TP0)
    clock.sleep(30)
    append(acc, TP1)
    r = acc.ready(two_nodes, clock.milliseconds())
    assert r.ready_nodes == set() and r.next_ready_check_delay_ms == 70
    clock.sleep(70)
    r = acc.ready(two_nodes, clock.milliseconds())
    assert r.ready_nodes == {NODE0} and r.next_ready_check_delay_ms == 30


def test_unknown_leader_reported_and_batches_kept() -> None:
    """§18 items 47/69: queued data whose leader is unknown is reported by topic and stays queued."""
    cluster = StaticCluster({TP0: None, TopicPartition("u", 0): NODE0})
    acc, _, clock = make_accumulator()
    append(acc, TP0)
    append(acc, TopicPartition("u", 0))
    r = acc.ready(cluster, clock.milliseconds())
    assert r.unknown_leader_topics == {"t"} and r.ready_nodes == {NODE0}
    assert acc.get_deque(TP0) and len(acc.get_deque(TP0)) == 1  # type: ignore[arg-type]
    assert acc.ready(StaticCluster({TP0: NODE1}), clock.milliseconds()).ready_nodes == {NODE1}


def test_retry_backoff_delays_readiness_and_drain() -> None:
    """§18 item 46: a re-enqueued batch is neither ready nor drained until retry.backoff.ms after its last
    attempt, even during a flush; it goes back to the head of its deque."""
    acc, _, clock = make_accumulator(linger_ms=0, retry_backoff_ms=100)
    append(acc, TP0, b"first")
    batch = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    append(acc, TP0, b"second")
    acc.reenqueue(batch, clock.milliseconds())
    assert acc.get_deque(TP0)[0] is batch and batch.attempts == 1  # type: ignore[index]
    r = acc.ready(ONE_NODE, clock.milliseconds())
    assert r.ready_nodes == set() and r.next_ready_check_delay_ms == 100  # deque >1 would be "full": backoff wins
    acc.begin_flush()
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == set()
    assert acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()) == {0: []}
    clock.sleep(99)
    assert acc.ready(ONE_NODE, clock.milliseconds()).next_ready_check_delay_ms == 1
    clock.sleep(1)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}
    drained = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0]
    assert drained == [batch]  # the retried batch first, one batch per partition


def test_exhausted_pool_makes_everything_ready() -> None:
    """§18 item 59: while a thread is blocked waiting for memory, every queued batch is sendable."""
    pool = BufferPool(2048, 1024, time=SYSTEM_TIME)
    from strom.testing.mock_time import MockTime

    clock = MockTime()
    acc = RecordAccumulator(1024, 0, 60_000, 100, 120_000, pool, clock)
    append(acc, TP0)
    append(acc, TP1)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == set()  # linger 60 s
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            append(acc, TP2, max_block_ms=20_000)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    wait_until(lambda: pool.queued() == 1)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}
    complete_all(acc, acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()))
    t.join(10)
    assert not errors and pool.queued() == 0


def test_closed_and_flush_make_ready() -> None:
    """§18 items 44/72: a flush in progress or closing makes batches sendable regardless of linger.ms."""
    acc, _, clock = make_accumulator(linger_ms=60_000)
    append(acc, TP0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == set()
    acc.begin_flush()
    assert acc.flush_in_progress()
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}
    drained = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())
    waiter = threading.Thread(target=acc.await_flush_completion)
    waiter.start()
    complete_all(acc, drained)
    waiter.join(10)
    assert not waiter.is_alive() and not acc.flush_in_progress()
    acc2, _, clock2 = make_accumulator(linger_ms=60_000)
    append(acc2, TP0)
    acc2.close()
    assert acc2.ready(ONE_NODE, clock2.milliseconds()).ready_nodes == {NODE0}


def test_await_flush_completion_timeout() -> None:
    """§18 item 72: the flush waits for the batches incomplete when it started; a timeout ends the flush."""
    acc, _, _ = make_accumulator(linger_ms=60_000)
    append(acc, TP0)
    acc.begin_flush()
    with pytest.raises(KafkaTimeoutError):
        acc.await_flush_completion(timeout_ms=20)
    assert not acc.flush_in_progress()
    acc.begin_flush()
    acc2, _, _ = make_accumulator()
    acc2.begin_flush()
    acc2.await_flush_completion(0)  # nothing incomplete: returns at once


# ------------------------------------------------------------------------------------------------- drain


def sized_batches(acc: RecordAccumulator, tps: list[TopicPartition]) -> int:
    for tp in tps:
        append(acc, tp, b"x" * 300)
    return acc.get_deque(tps[0])[0].estimated_size_in_bytes()  # type: ignore[index]


def test_drain_one_head_batch_per_partition() -> None:
    """§18 items 38/48: drain takes only the head batch of each partition (FIFO)."""
    acc, _, clock = make_accumulator(batch_size=512)
    for _ in range(8):
        append(acc, TP0, b"x" * 200)
    dq = acc.get_deque(TP0)
    assert dq is not None and len(dq) > 2
    head = dq[0]
    drained = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())
    assert drained == {0: [head]} and head.is_closed() and head.drained_ms == clock.milliseconds()
    assert acc.get_deque(TP0)[0] is not head  # type: ignore[index]


def test_drain_respects_max_size_but_always_takes_one() -> None:
    """§18 item 48: the request stops before exceeding max.request.size, but its first batch is always taken
    even when that batch alone is larger."""
    acc, _, clock = make_accumulator(batch_size=1024)
    size = sized_batches(acc, [TP0, TP1, TP2])
    now = clock.milliseconds()
    drained = acc.drain(ONE_NODE, [NODE0], 2 * size, now)[0]
    assert [b.topic_partition for b in drained] == [TP0, TP1]
    acc2, _, clock2 = make_accumulator(batch_size=1024)
    sized_batches(acc2, [TP0, TP1])
    drained = acc2.drain(ONE_NODE, [NODE0], 10, clock2.milliseconds())[0]
    assert [b.topic_partition for b in drained] == [TP0]


def test_drain_rotates_across_calls() -> None:
    """§18 item 49: each node's drain starts where the previous one stopped, so partitions are served
    round-robin when max.request.size limits a request (no starvation)."""
    acc, _, clock = make_accumulator(batch_size=1024)
    size = sized_batches(acc, [TP0, TP1, TP2])
    served = []
    for _ in range(6):
        drained = acc.drain(ONE_NODE, [NODE0], size, clock.milliseconds())[0]
        assert len(drained) == 1
        served.append(drained[0].topic_partition.partition)
        append(acc, drained[0].topic_partition, b"x" * 300)  # refill the served partition
    assert served == [0, 1, 2, 0, 1, 2]


def test_drain_index_is_per_node() -> None:
    """§18 item 49 (3.x form): each node keeps its own drain index."""
    cluster = StaticCluster({TP0: NODE0, TP1: NODE0, TP2: NODE1, TP3: NODE1})
    acc, _, clock = make_accumulator(batch_size=1024)
    size = sized_batches(acc, [TP0, TP1, TP2, TP3])
    first = acc.drain(cluster, [NODE0, NODE1], size, clock.milliseconds())
    assert [b.topic_partition for b in first[0]] == [TP0] and [b.topic_partition for b in first[1]] == [TP2]
    second = acc.drain(cluster, [NODE0], size, clock.milliseconds())
    assert [b.topic_partition for b in second[0]] == [TP1]
    third = acc.drain(cluster, [NODE1], size, clock.milliseconds())
    assert [b.topic_partition for b in third[1]] == [TP3]


def test_drain_includes_non_ready_partitions() -> None:
    """§18 item 50: drain also takes head batches that are not themselves ready (to fill the request)."""
    acc, _, clock = make_accumulator(linger_ms=60_000)
    fill_one_batch(acc, TP0)  # TP0 ready (full)
    append(acc, TP1)  # TP1 not ready (lingering)
    r = acc.ready(ONE_NODE, clock.milliseconds())
    assert r.ready_nodes == {NODE0}
    drained = acc.drain(ONE_NODE, r.ready_nodes, 1 << 20, clock.milliseconds())[0]
    assert {b.topic_partition for b in drained} == {TP0, TP1}
    assert acc.drain(ONE_NODE, [], 1 << 20, clock.milliseconds()) == {}


def test_muted_partition_skipped_until_unmuted() -> None:
    """§18 item 51: a muted partition (batch in flight, max.in.flight=1) is skipped by ready and drain."""
    acc, _, clock = make_accumulator()
    append(acc, TP0)
    first = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    acc.mute_partition(TP0)
    assert acc.is_muted(TP0)
    append(acc, TP0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == set()
    assert acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()) == {0: []}
    append(acc, TP1)  # other partitions of the node are unaffected
    assert [b.topic_partition for b in acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0]] == [TP1]
    first.complete(0, -1)
    acc.deallocate(first)
    acc.unmute_partition(TP0)
    assert acc.ready(ONE_NODE, clock.milliseconds()).ready_nodes == {NODE0}
    assert [b.topic_partition for b in acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0]] == [TP0]


def test_without_muting_retries_can_reorder() -> None:
    """§18 item 52: with max.in.flight > 1 (no muting) a second batch of a partition can be drained while the
    first is in flight; if the first is retried it is written after the second — order is not guaranteed."""
    acc, _, clock = make_accumulator(retry_backoff_ms=10)
    append(acc, TP0, b"a")
    first = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    append(acc, TP0, b"b")
    second = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]  # not muted: drained too
    second.complete(0, -1)  # written first
    acc.deallocate(second)
    acc.reenqueue(first, clock.milliseconds())  # the first request failed and is retried
    clock.sleep(10)
    retried = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    assert retried is first
    first.complete(1, -1)
    assert RecordBatch(first.records()).records()[0].value == b"a"  # "a" lands at offset 1, after "b"


def test_compression_applied_and_batch_closed_on_drain() -> None:
    """§18 item 54: compression is applied to the batch's records; the batch is finalised when drained."""
    acc, _, clock = make_accumulator(compression=CompressionType.LZ4, batch_size=4096)
    for i in range(30):
        append(acc, TP0, b"%03d" % i + b"y" * 100, timestamp=1000 + i)
    batch = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    assert batch.is_closed() and batch.is_full()
    rb = RecordBatch(batch.records())
    assert rb.compression_type == CompressionType.LZ4 and len(batch.records()) < 30 * 100
    assert [r.value[:3] for r in rb] == [b"%03d" % i for i in range(30)]
    assert [r.timestamp for r in rb] == list(range(1000, 1030))


# ------------------------------------------------------------------------------------------ expiry, abort


def test_expired_batches_after_delivery_timeout() -> None:
    """§18 item 53: queued batches older than delivery.timeout.ms are removed (in order) for the Sender to
    fail; the next expiry time is tracked."""
    acc, pool, clock = make_accumulator(delivery_timeout_ms=1000, linger_ms=60_000)
    fill_one_batch(acc, TP0)
    clock.sleep(500)
    append(acc, TP1)
    acc.reset_next_batch_expiry_time()
    assert acc.expired_batches(clock.milliseconds()) == []
    assert acc.next_expiry_time_ms() == clock.milliseconds() - 500 + 1000
    clock.sleep(500)
    expired = acc.expired_batches(clock.milliseconds())
    assert [b.topic_partition for b in expired] == [TP0, TP0]  # both TP0 batches (same creation time)
    assert all(b.has_reached_delivery_timeout(1000, clock.milliseconds()) for b in expired)
    assert not acc.get_deque(TP0) and len(acc.get_deque(TP1)) == 1  # type: ignore[arg-type]
    for b in expired:
        b.complete_exceptionally(KafkaTimeoutError("Expiring"))
        acc.deallocate(b)
    assert pool.available_memory() == 64 * 1024 - 1024
    acc.reset_next_batch_expiry_time()
    assert acc.next_expiry_time_ms() == LONG_MAX


def test_abort_incomplete_batches_fails_everything() -> None:
    """§18 item 71: forced close fails every incomplete batch (queued or in flight), wakes futures and frees
    memory."""
    acc, pool, clock = make_accumulator()
    calls: list[Any] = []
    futures = [append(acc, tp, callback=lambda m, e: calls.append(e)).future for tp in (TP0, TP1, TP2)]
    in_flight = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0]
    append(acc, TP0, callback=lambda m, e: calls.append(e))
    acc.close()
    acc.abort_incomplete_batches()
    assert len(calls) == 4 and all(str(e) == "Producer is closed forcefully." for e in calls)
    assert all(f.done() and isinstance(f.exception(), KafkaError) for f in futures)  # type: ignore[union-attr]
    assert all(b.is_done() for b in in_flight)
    assert pool.available_memory() == 64 * 1024 and not acc.has_incomplete() and not acc.has_undrained()


def test_abort_undrained_batches_spares_in_flight() -> None:
    """SPEC §6.11 abortUndrainedBatches: queued batches fail, in-flight ones are left to their response."""
    acc, pool, clock = make_accumulator()
    append(acc, TP0)
    sent = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    queued = append(acc, TP1).future
    acc.abort_undrained_batches(KafkaError("Aborting"))
    assert str(queued.exception(0)) == "Aborting" and not sent.is_done()  # type: ignore[union-attr]
    assert acc.has_incomplete() and not acc.has_undrained()
    sent.complete(0, -1)
    acc.deallocate(sent)
    assert pool.available_memory() == 64 * 1024 and not acc.has_incomplete()


def test_deallocate_unknown_batch_is_illegal() -> None:
    """SPEC §6.11 IncompleteBatches: a batch is deallocated once (no double free)."""
    acc, _, clock = make_accumulator()
    append(acc, TP0)
    b = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    acc.deallocate(b)
    with pytest.raises(IllegalStateError):
        acc.deallocate(b)


def test_split_and_reenqueue() -> None:
    """§11.2 / MESSAGE_TOO_LARGE: the drained batch is split into batch.size parts put back at the head (as
    never tried); all records complete through them, and memory is fully returned."""
    acc, pool, clock = make_accumulator(batch_size=8192)
    big_tp = TP0
    futures = [append(acc, big_tp, b"x" * 100).future for _ in range(30)]
    big = acc.drain(ONE_NODE, [NODE0], 1 << 20, 0)[0][0]
    append(acc, big_tp, b"later")
    acc.batch_size = 512  # split into parts smaller than the original batch
    count = acc.split_and_reenqueue(big)
    dq = acc.get_deque(big_tp)
    assert count > 2 and dq is not None and len(dq) == count + 1 and dq[-1].record_count == 1
    assert all(b.attempts == 0 and b.is_split_batch() for b in list(dq)[:-1])
    acc.deallocate(big)  # the Sender frees the original batch's memory
    offset = 0
    while acc.has_undrained():
        for b in acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0]:
            b.complete(offset, -1)
            offset += b.record_count
            acc.deallocate(b)
    assert [f.get(0).offset for f in futures] == list(range(30))  # type: ignore[union-attr]
    assert pool.available_memory() == 64 * 1024


# ------------------------------------------------------------------------------------------- idempotence


class FakeTransactionManager:
    def __init__(self) -> None:
        self.pid = ProducerIdAndEpoch(1000, 2)
        self.sequences: dict[TopicPartition, int] = {}
        self.in_flight: list[ProducerBatch] = []
        self.allowed = True

    def is_transactional(self) -> bool:
        return False

    def is_completing(self) -> bool:
        return False

    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        return self.pid

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        return self.allowed

    def has_inflight_batches(self, tp: TopicPartition) -> bool:
        return any(b.topic_partition == tp for b in self.in_flight)

    def has_request_outstanding_elsewhere(self, tp: TopicPartition, node_id: int) -> bool:
        return any(b.topic_partition == tp and b.in_flight and b.sent_to != node_id for b in self.in_flight)

    def has_stale_producer_id_and_epoch(self, tp: TopicPartition) -> bool:
        return False

    def has_unresolved_sequence(self, tp: TopicPartition) -> bool:
        return False

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        seqs = [b.base_sequence for b in self.in_flight if b.topic_partition == tp]
        return min(seqs) if seqs else -1

    def maybe_update_producer_id_and_epoch(self, tp: TopicPartition) -> None:
        pass

    def sequence_number(self, tp: TopicPartition) -> int:
        return self.sequences.get(tp, 0)

    def increment_sequence_number(self, tp: TopicPartition, increment: int) -> None:
        self.sequences[tp] = self.sequences.get(tp, 0) + increment

    def add_in_flight_batch(self, batch: ProducerBatch) -> None:
        self.in_flight.append(batch)


def test_drain_assigns_producer_state_once() -> None:
    """§12 idempotence hooks: drain assigns pid/epoch/sequence to batches without one, incrementing the
    partition's sequence by the record count; a retried batch keeps its sequence and is re-queued in order."""
    tm = FakeTransactionManager()
    acc, _, clock = make_accumulator(batch_size=512, transaction_manager=tm, retry_backoff_ms=0)
    for _ in range(6):
        append(acc, TP0, b"x" * 150)
    first = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    second = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (1000, 2, 0)
    assert second.base_sequence == first.record_count
    assert RecordBatch(first.records()).base_sequence == 0
    # Both fail; re-enqueue out of order: the deque must end up ordered by sequence.
    acc.reenqueue(second, clock.milliseconds())
    acc.reenqueue(first, clock.milliseconds())
    dq = acc.get_deque(TP0)
    assert dq is not None and dq[0] is first and dq[1] is second
    retried = acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds())[0][0]
    assert retried is first and retried.base_sequence == 0  # not re-assigned
    tm.in_flight.remove(first)
    tm.pid = ProducerIdAndEpoch(-1, -1)
    assert acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()) == {0: []}  # no valid producer id
    tm.pid = ProducerIdAndEpoch(1000, 2)
    tm.allowed = False
    assert acc.drain(ONE_NODE, [NODE0], 1 << 20, clock.milliseconds()) == {0: []}


def test_reenqueue_without_sequence_is_illegal_when_idempotent() -> None:
    """SPEC §12 idempotence: a re-enqueued batch must carry a sequence."""
    tm = FakeTransactionManager()
    acc, _, clock = make_accumulator(transaction_manager=tm)
    append(acc, TP0)
    batch = acc.get_deque(TP0)[0]  # type: ignore[index]
    with pytest.raises(IllegalStateError, match="doesn't have a sequence"):
        acc.reenqueue(batch, clock.milliseconds())


def test_snapshot_accessors() -> None:
    """Diagnostics accessors; drain of a node without partitions (§18 item 48 edge case)."""
    acc, pool, _ = make_accumulator()
    append(acc, TP0)
    snap = acc.batches()
    assert list(snap) == [TP0] and len(snap[TP0]) == 1
    assert acc.buffer_pool_available_memory() == pool.available_memory()
    assert "RecordAccumulator" in repr(acc) and acc.get_deque(TopicPartition("x", 0)) is None
    node = Node(9, "h", 1)
    assert acc.drain(StaticCluster({}, [node]), [node], 100, 0) == {9: []}
    assert VALUE
