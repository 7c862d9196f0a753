"""BufferPool (SPEC §7): pooled reuse, freeUp, FIFO blocking, timeouts, close, memory accounting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.time import SYSTEM_TIME
from strom.producer.internals import buffer_pool as buffer_pool_module
from strom.producer.internals.buffer_pool import BufferPool
from strom.testing.mock_time import MockTime

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

K = 1024


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


class Allocator(threading.Thread):
    """Allocates in the background and records the outcome."""

    def __init__(self, pool: BufferPool, size: int, max_block_ms: int, order: list[str] | None = None,
                 name: str = "") -> None:
        super().__init__(daemon=True, name=name)
        self.pool, self.size, self.max_block_ms, self.order = pool, size, max_block_ms, order
        self.buffer: bytearray | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.buffer = self.pool.allocate(self.size, self.max_block_ms)
            if self.order is not None:
                self.order.append(self.name)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            self.error = e


def test_allocate_more_than_total_is_illegal_argument() -> None:
    """§18 item 55: size > buffer.memory raises IllegalArgument with Kafka's message."""
    pool = BufferPool(4 * K, K, time=MockTime())
    with pytest.raises(ValueError, match=f"Attempt to allocate {5 * K} bytes, but there is a hard limit of {4 * K} "
                                         "on memory allocations."):
        pool.allocate(5 * K, 0)


def test_pooled_buffer_reused() -> None:
    """§18 item 56: a returned batch.size buffer goes to the free list and the same object is reused."""
    pool = BufferPool(4 * K, K, time=MockTime())
    buf = pool.allocate(K, 0)
    assert len(buf) == K and pool.available_memory() == 3 * K and pool.unallocated_memory() == 3 * K
    pool.deallocate(buf)
    assert pool.free_size() == 1 and pool.available_memory() == 4 * K and pool.unallocated_memory() == 3 * K
    assert pool.allocate(K, 0) is buf
    assert pool.free_size() == 0


def test_non_poolable_sizes_not_pooled() -> None:
    """§18 items 39/56/62: other sizes are only accounted; memory returns to buffer.memory."""
    pool = BufferPool(4 * K, K, time=MockTime())
    big = pool.allocate(2 * K + 1, 0)
    assert len(big) == 2 * K + 1 and pool.available_memory() == 2 * K - 1
    pool.deallocate(big)
    assert pool.free_size() == 0 and pool.available_memory() == 4 * K
    # A poolable-size deallocation of a different-capacity buffer is not pooled either.
    odd = pool.allocate(512, 0)
    pool.deallocate(odd, 512)
    assert pool.free_size() == 0 and pool.unallocated_memory() == 4 * K


def test_free_up_breaks_pooled_buffers_without_blocking() -> None:
    """§18 item 57: when pooled + non-pooled memory suffices, allocate does not block; pooled buffers are
    released (freeUp) to make room."""
    pool = BufferPool(4 * K, K, time=MockTime())
    buffers = [pool.allocate(K, 0) for _ in range(4)]
    for b in buffers:
        pool.deallocate(b)
    assert pool.free_size() == 4 and pool.unallocated_memory() == 0
    big = pool.allocate(3 * K, 0)  # max_block 0: would time out if it had to wait
    assert len(big) == 3 * K and pool.free_size() == 1 and pool.unallocated_memory() == 0
    assert pool.queued() == 0


def test_timeout_with_mock_time_without_sleeping() -> None:
    """§18 item 58: no memory within the budget → KafkaTimeoutError with Kafka's message; the mock clock
    advances instead of sleeping; the waiter leaves the queue and the wait time is recorded."""
    clock = MockTime()
    pool = BufferPool(2 * K, K, time=clock)
    held = [pool.allocate(K, 0), pool.allocate(K, 0)]
    start_ms, started = clock.milliseconds(), time.monotonic()
    with pytest.raises(KafkaTimeoutError,
                       match="Failed to allocate memory within the configured max blocking time 2000 ms."):
        pool.allocate(K, 2000)
    assert time.monotonic() - started < 1.0
    assert clock.milliseconds() - start_ms == 2000
    assert pool.wait_time_ns_total == 2000 * 1_000_000
    assert pool.metric_values()["bufferpool-wait-time-ns-total"] == 2_000_000_000
    assert pool.queued() == 0 and pool.available_memory() == 0
    for b in held:
        pool.deallocate(b)
    assert pool.available_memory() == 2 * K


def test_zero_block_time_fails_at_once() -> None:
    """§18 item 58: with max.block.ms 0 an exhausted pool fails immediately."""
    pool = BufferPool(K, K, time=SYSTEM_TIME)
    pool.allocate(K, 0)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="max blocking time 0 ms"):
        pool.allocate(K, 0)
    assert time.monotonic() - started < 1.0


def test_partial_accumulation_returned_on_timeout() -> None:
    """§18 item 58: memory a waiter had partially accumulated is given back when it times out."""
    pool = BufferPool(4 * K, K, time=SYSTEM_TIME)
    held = [pool.allocate(K, 0) for _ in range(4)]
    waiter = Allocator(pool, 3 * K, 400)
    waiter.start()
    wait_until(lambda: pool.queued() == 1)
    pool.deallocate(held.pop())  # the waiter takes this 1 KiB and keeps waiting for 2 more
    wait_until(lambda: pool.unallocated_memory() == 0 and pool.free_size() == 0)
    waiter.join(10)
    assert isinstance(waiter.error, KafkaTimeoutError)
    assert pool.available_memory() == K  # the accumulated KiB is back
    for b in held:
        pool.deallocate(b)
    assert pool.available_memory() == 4 * K


def test_waiters_served_fifo() -> None:
    """§18 items 58/61: blocked allocators are served in arrival order, one signal at a time."""
    pool = BufferPool(2 * K, K, time=SYSTEM_TIME)
    held = [pool.allocate(K, 0), pool.allocate(K, 0)]
    order: list[str] = []
    threads = []
    for i in range(3):
        t = Allocator(pool, K, 20_000, order, name=f"w{i}")
        t.start()
        wait_until(lambda n=i + 1: pool.queued() == n)  # type: ignore[misc]
        threads.append(t)
    pool.deallocate(held.pop())
    wait_until(lambda: order == ["w0"])
    assert pool.queued() == 2
    pool.deallocate(held.pop())
    wait_until(lambda: order == ["w0", "w1"])
    pool.deallocate(threads[0].buffer)  # type: ignore[arg-type]
    wait_until(lambda: order == ["w0", "w1", "w2"])
    for t in threads:
        t.join(10)
        assert t.error is None
    assert pool.queued() == 0


def test_leftover_memory_signals_next_waiter() -> None:
    """§18 item 61: after a waiter is satisfied with memory left over, the next waiter is signalled."""
    pool = BufferPool(4 * K, K, time=SYSTEM_TIME)
    whole = pool.allocate(4 * K, 0)
    a = Allocator(pool, 2 * K, 20_000, name="a")
    b = Allocator(pool, 2 * K, 20_000, name="b")
    a.start()
    wait_until(lambda: pool.queued() == 1)
    b.start()
    wait_until(lambda: pool.queued() == 2)
    pool.deallocate(whole)  # one signal to the head; the head must pass the rest on
    a.join(10)
    b.join(10)
    assert a.error is None and b.error is None and pool.queued() == 0
    assert pool.available_memory() == 0
    pool.deallocate(a.buffer)  # type: ignore[arg-type]
    pool.deallocate(b.buffer)  # type: ignore[arg-type]
    assert pool.available_memory() == 4 * K


def test_close_wakes_blocked_allocators() -> None:
    """§18 item 60: close wakes blocked allocators, which fail with "Producer closed while allocating memory";
    later allocations fail the same way."""
    pool = BufferPool(K, K, time=SYSTEM_TIME)
    held = pool.allocate(K, 0)
    waiters = [Allocator(pool, K, 20_000) for _ in range(2)]
    for i, w in enumerate(waiters):
        w.start()
        wait_until(lambda n=i + 1: pool.queued() == n)  # type: ignore[misc]
    pool.close()
    for w in waiters:
        w.join(10)
        assert isinstance(w.error, KafkaError) and str(w.error) == "Producer closed while allocating memory"
        assert not isinstance(w.error, KafkaTimeoutError)
    with pytest.raises(KafkaError, match="Producer closed while allocating memory"):
        pool.allocate(K, 0)
    pool.deallocate(held)
    assert pool.available_memory() == K and pool.queued() == 0


def test_failed_allocation_gives_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """§18 item 62 / safeAllocateByteBuffer: if creating the buffer fails, the reservation is returned."""
    pool = BufferPool(4 * K, K, time=MockTime())

    def failing(size: int) -> Any:
        raise MemoryError("no memory")

    monkeypatch.setattr(buffer_pool_module, "bytearray", failing, raising=False)
    with pytest.raises(MemoryError):
        pool.allocate(2 * K, 0)
    monkeypatch.undo()
    assert pool.available_memory() == 4 * K


def test_metrics_sink_receives_wait_time() -> None:
    """SPEC §7.2 recordWaitTime: the bufferpool-wait-time metric receives each wait (no §18 item), and an
    allocation that timed out is counted as buffer exhaustion."""
    class Sink:
        def __init__(self) -> None:
            self.records: list[tuple[str, str, float]] = []

        def record(self, group: str, name: str, value: float) -> None:
            self.records.append((group, name, value))

    sink = Sink()
    pool = BufferPool(K, K, metrics=sink, time=MockTime(), metric_grp_name="producer-metrics")
    pool.allocate(K, 0)
    with pytest.raises(KafkaTimeoutError):
        pool.allocate(K, 5)
    # the wait, then the allocation that ran out of time (Kafka's buffer-exhausted-records)
    assert sink.records == [("producer-metrics", "bufferpool-wait-time-ns-total", 5_000_000),
                            ("producer-metrics", "buffer-exhausted-records", 1)]
    assert pool.metric_values()["buffer-total-bytes"] == K


def test_concurrent_invariant() -> None:
    """§18 item 62: under concurrent allocate/deallocate, available memory returns to buffer.memory."""
    pool = BufferPool(16 * K, K, time=SYSTEM_TIME)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(300):
                size = K if (i + seed) % 3 else 2 * K + (i % 7)
                b = pool.allocate(size, 20_000)
                assert len(b) == size
                pool.deallocate(b)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    assert not errors
    assert pool.available_memory() == 16 * K and pool.queued() == 0


def test_huge_max_block_does_not_overflow() -> None:
    """max.block.ms may be Long.MAX_VALUE: the wait is chunked instead of overflowing Condition.wait."""
    pool = BufferPool(K, K, time=SYSTEM_TIME)
    held = pool.allocate(K, 0)
    waiter = Allocator(pool, K, 2**63 - 1)
    waiter.start()
    wait_until(lambda: pool.queued() == 1)
    pool.deallocate(held)
    waiter.join(10)
    assert waiter.error is None and waiter.buffer is held
