"""Batches created but not yet completed and released.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.IncompleteBatches``. The accumulator adds every
batch it creates and removes it on deallocation; flush waits on their results and a forced close aborts them.

Thread-safety: thread-safe (one lock; never calls out while holding it).
"""

from __future__ import annotations

import threading

from strom.common.errors import IllegalStateError
from strom.producer.internals.future_record_metadata import ProduceRequestResult
from strom.producer.internals.producer_batch import ProducerBatch

__all__ = ["IncompleteBatches"]


class IncompleteBatches:
    """Batches created but not yet completed and deallocated (Kafka's ``IncompleteBatches``). Thread-safe."""

    __slots__ = ("_batches", "_lock")

    def __init__(self) -> None:
        self._batches: dict[ProducerBatch, None] = {}  # insertion-ordered set
        self._lock = threading.Lock()

    def add(self, batch: ProducerBatch) -> None:
        with self._lock:
            self._batches[batch] = None

    def remove(self, batch: ProducerBatch) -> None:
        with self._lock:
            if self._batches.pop(batch, 0) == 0:
                raise IllegalStateError("Remove from the incomplete set failed. This should be impossible.")

    def copy_all(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._batches)

    def request_results(self) -> list[ProduceRequestResult]:
        with self._lock:
            return [b.produce_future for b in self._batches]

    def is_empty(self) -> bool:
        with self._lock:
            return not self._batches

    def __len__(self) -> int:
        with self._lock:
            return len(self._batches)
