"""Bounded memory for the producer's record batches.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.BufferPool`` (SPEC §7.2-7.3).

The pool hands out ``bytearray`` buffers against a budget of ``total_memory`` bytes (``buffer.memory``).
Buffers of exactly ``poolable_size`` bytes (``batch.size``) are kept on a free list when returned and reused;
other sizes are only accounted (``non_pooled_available_memory``) and left to the garbage collector. When the
budget is exhausted, ``allocate`` blocks FIFO: each waiter has its own condition, collects memory piecewise as
it is released, and gives back what it collected if it times out (``max.block.ms``) or the pool closes.

The record builder of a batch keeps its own buffer; the pooled ``bytearray`` is the batch's *claim* on
``buffer.memory`` (what Kafka's ``ByteBuffer`` is) and is returned with ``deallocate`` when the batch is done.

Time comes from the injected :class:`~strom.common.time.Time` (``wait_on`` for the blocking wait), so with
``MockTime`` an exhausted pool times out at once, without sleeping.

Thread-safety: thread-safe; one lock guards all state.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from typing import Any, Protocol

from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.time import SYSTEM_TIME, Time

__all__ = ["BufferPool", "BufferPoolMetrics", "CLOSED_MESSAGE"]

log = logging.getLogger(__name__)

CLOSED_MESSAGE = "Producer closed while allocating memory"
_MAX_WAIT_MS = 24 * 3600 * 1000  # one wait at most (a huge max.block.ms would overflow Condition.wait)


class BufferPoolMetrics(Protocol):
    """Optional metrics sink (``metrics`` argument): receives Kafka's ``bufferpool-wait-time`` samples (ns) and a
    ``buffer-exhausted-records`` of 1 for each allocation that timed out."""

    def record(self, group: str, name: str, value: float) -> None:
        """Record ``value`` for metric ``name`` of ``group``."""


class _Waiter:
    """A blocked allocator: its condition (on the pool lock) and whether it was signalled."""

    __slots__ = ("cond", "signalled")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.signalled = False

    def signal(self) -> None:  # pool lock held
        self.signalled = True
        self.cond.notify()


class BufferPool:
    """A pool of ``bytearray`` buffers bounded by ``total_memory`` (Kafka's ``BufferPool``). Thread-safe."""

    def __init__(
        self,
        total_memory: int,
        pool_size: int,
        metrics: BufferPoolMetrics | None = None,
        time: Time = SYSTEM_TIME,
        metric_grp_name: str = "producer-metrics",
    ) -> None:
        self._poolable_size = pool_size
        self._total_memory = total_memory
        self._lock = threading.Lock()
        self._free: deque[bytearray] = deque()
        self._waiters: deque[_Waiter] = deque()
        self._non_pooled_available_memory = total_memory
        self._metrics = metrics
        self._time = time
        self._metric_grp_name = metric_grp_name
        self._closed = False
        self.wait_time_ns_total = 0
        """Total ns callers spent blocked in ``allocate`` (Kafka's ``bufferpool-wait-time-ns-total``)."""

    # ------------------------------------------------------------------------------------------ allocate

    def allocate(self, size: int, max_time_to_block_ms: int) -> bytearray:
        """A buffer of ``size`` bytes, blocking up to ``max_time_to_block_ms`` for memory.

        Raises ``ValueError`` if ``size`` exceeds the whole pool, :class:`KafkaTimeoutError` ("Failed to
        allocate memory within the configured max blocking time N ms.") when the wait runs out, and
        :class:`KafkaError` ("Producer closed while allocating memory") when the pool is or gets closed.
        """
        if size > self._total_memory:
            raise ValueError(
                f"Attempt to allocate {size} bytes, but there is a hard limit of {self._total_memory} on memory "
                "allocations."
            )
        buffer: bytearray | None = None
        self._lock.acquire()
        if self._closed:
            self._lock.release()
            raise KafkaError(CLOSED_MESSAGE)
        try:
            # Fast path: a pooled buffer of the standard size.
            if size == self._poolable_size and self._free:
                return self._free.popleft()
            free_list_size = len(self._free) * self._poolable_size
            if self._non_pooled_available_memory + free_list_size >= size:
                # Enough memory on hand: break up pooled buffers if needed, allocate outside the lock.
                self._free_up(size)
                self._non_pooled_available_memory -= size
            else:
                buffer = self._wait_for_memory(size, max_time_to_block_ms)
        finally:
            try:
                # Memory left over? Let the next waiter have a go.
                if not (self._non_pooled_available_memory == 0 and not self._free) and self._waiters:
                    self._waiters[0].signal()
            finally:
                self._lock.release()
        if buffer is None:
            return self._safe_allocate(size)
        return buffer

    def _wait_for_memory(self, size: int, max_time_to_block_ms: int) -> bytearray | None:
        """Block FIFO until ``size`` bytes are reserved (lock held). Returns a pooled buffer or ``None`` when
        the memory was reserved as non-pooled."""
        accumulated = 0
        buffer: bytearray | None = None
        waiter = _Waiter(self._lock)
        self._waiters.append(waiter)
        try:
            remaining_ns = max_time_to_block_ms * 1_000_000
            while accumulated < size:
                start_ns = self._time.nanoseconds()
                waiter.signalled = False
                try:
                    wait_ms = min(_MAX_WAIT_MS, max(0, math.ceil(remaining_ns / 1_000_000)))
                    self._time.wait_on(waiter.cond, wait_ms)
                finally:
                    elapsed_ns = max(0, self._time.nanoseconds() - start_ns)
                    self._record_wait_time(elapsed_ns)
                if self._closed:
                    raise KafkaError(CLOSED_MESSAGE)
                if not waiter.signalled and elapsed_ns >= remaining_ns:
                    self._record_metric("buffer-exhausted-records", 1)
                    raise KafkaTimeoutError(
                        f"Failed to allocate memory within the configured max blocking time "
                        f"{max_time_to_block_ms} ms."
                    )
                remaining_ns -= elapsed_ns
                if accumulated == 0 and size == self._poolable_size and self._free:
                    buffer = self._free.popleft()
                    accumulated = size
                else:
                    # Take what is there now; we may need several rounds to get all of it.
                    self._free_up(size - accumulated)
                    got = min(size - accumulated, self._non_pooled_available_memory)
                    self._non_pooled_available_memory -= got
                    accumulated += got
            accumulated = 0  # success: nothing to hand back
            return buffer
        finally:
            # On failure give back what we collected, so no memory is lost.
            self._non_pooled_available_memory += accumulated
            self._waiters.remove(waiter)

    def _free_up(self, size: int) -> None:
        """Turn pooled buffers into non-pooled memory until ``size`` bytes are available (lock held)."""
        while self._free and self._non_pooled_available_memory < size:
            self._non_pooled_available_memory += len(self._free.pop())

    def _safe_allocate(self, size: int) -> bytearray:
        """Allocate outside the lock; if that fails, give the reservation back (Kafka's
        ``safeAllocateByteBuffer``)."""
        try:
            return bytearray(size)
        except BaseException:
            with self._lock:
                self._non_pooled_available_memory += size
                if self._waiters:
                    self._waiters[0].signal()
            raise

    def _record_wait_time(self, time_ns: int) -> None:
        self.wait_time_ns_total += time_ns
        self._record_metric("bufferpool-wait-time-ns-total", time_ns)

    def _record_metric(self, name: str, value: float) -> None:
        if self._metrics is not None:
            try:
                self._metrics.record(self._metric_grp_name, name, value)
            except Exception:  # a broken metrics sink must not break allocation
                log.debug("metrics sink failed", exc_info=True)

    # ---------------------------------------------------------------------------------------- deallocate

    def deallocate(self, buffer: bytearray, size: int | None = None) -> None:
        """Return memory: a ``poolable_size`` buffer goes back on the free list, anything else is only
        accounted. The first waiter (if any) is signalled."""
        if size is None:
            size = len(buffer)
        with self._lock:
            if size == self._poolable_size and size == len(buffer):
                self._free.append(buffer)
            else:
                self._non_pooled_available_memory += size
            if self._waiters:
                self._waiters[0].signal()

    # -------------------------------------------------------------------------------------------- state

    def may_block(self) -> bool:
        """Whether an allocation of a batch could wait now: less than ``poolable_size`` free (read without the
        lock: a hint, which the allocation itself may contradict a moment later)."""
        return not self._free and self._non_pooled_available_memory < self._poolable_size

    def available_memory(self) -> int:
        """Unallocated plus pooled free memory."""
        with self._lock:
            return self._non_pooled_available_memory + len(self._free) * self._poolable_size

    def unallocated_memory(self) -> int:
        """Memory not held by any buffer, pooled or not (Kafka's ``unallocatedMemory``)."""
        with self._lock:
            return self._non_pooled_available_memory

    @property
    def non_pooled_available_memory(self) -> int:
        return self.unallocated_memory()

    def queued(self) -> int:
        """Number of threads blocked waiting for memory."""
        with self._lock:
            return len(self._waiters)

    def free_size(self) -> int:
        """Number of pooled buffers on the free list (Kafka's ``freeSize``)."""
        with self._lock:
            return len(self._free)

    def poolable_size(self) -> int:
        return self._poolable_size

    def total_memory(self) -> int:
        return self._total_memory

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the pool: blocked allocators wake up and fail; later allocations fail at once."""
        with self._lock:
            self._closed = True
            for waiter in self._waiters:
                waiter.signal()

    def metric_values(self) -> dict[str, Any]:
        """Kafka's producer buffer metrics: buffer-total-bytes, buffer-available-bytes, waiting-threads,
        bufferpool-wait-time-ns-total."""
        return {
            "buffer-total-bytes": self._total_memory,
            "buffer-available-bytes": self.available_memory(),
            "waiting-threads": self.queued(),
            "bufferpool-wait-time-ns-total": self.wait_time_ns_total,
        }

    def __repr__(self) -> str:
        return (
            f"BufferPool(total={self._total_memory}, poolable={self._poolable_size}, "
            f"available={self.available_memory()}, waiters={self.queued()})"
        )
