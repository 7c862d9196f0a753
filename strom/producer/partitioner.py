"""Partitioners: which partition a record without an explicit partition goes to.

Kafka counterparts: ``Partitioner``, ``internals.DefaultPartitioner`` (+ ``StickyPartitionCache``),
``RoundRobinPartitioner``, ``UniformStickyPartitioner``.

Version choice (SPEC §15 #2): the default is the Kafka **2.4+ sticky** partitioner — keyed records go to
``to_positive(murmur2(key)) % all_partitions``, key-less records stick to one partition until the accumulator
needs a new batch for it, then ``on_new_batch`` moves them to a random *other* available partition. Kafka 3.3+
moved this logic into the accumulator (``BuiltInPartitioner``) and added adaptive, load-aware switching; strom
keeps the 2.4 form (``partitioner.adaptive.partitioning.enable`` / ``partitioner.availability.timeout.ms`` are
accepted and have no effect; ``partitioner.ignore.keys`` is honoured).

Custom partitioners: any object with ``partition(topic, key, key_bytes, value, value_bytes, cluster)``; optional
``on_new_batch(topic, cluster, prev_partition)``, ``configure(configs)`` and ``close()``. Configure one with
``partitioner.class`` = a class, a dotted class path, or an instance (:func:`make_partitioner`).

Thread-safety: all partitioners here are thread-safe (``send`` is called from many threads).
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from strom.common.murmur2 import murmur2, to_positive
from strom.producer.internals.cluster_view import ClusterView

__all__ = [
    "Partitioner",
    "StickyPartitionCache",
    "DefaultPartitioner",
    "RoundRobinPartitioner",
    "UniformStickyPartitioner",
    "make_partitioner",
    "key_partition",
]


@runtime_checkable
class Partitioner(Protocol):
    """Chooses a partition (Kafka's ``org.apache.kafka.clients.producer.Partitioner``)."""

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any, value_bytes: bytes | None,
                  cluster: ClusterView) -> int:
        """The partition number for the record."""

    def on_new_batch(self, topic: str, cluster: ClusterView, prev_partition: int) -> None:
        """The accumulator is about to create a new batch for ``prev_partition`` (sticky partitioners switch)."""

    def close(self) -> None:
        """Release resources."""


def key_partition(key_bytes: bytes, num_partitions: int) -> int:
    """Kafka's keyed choice: ``toPositive(murmur2(keyBytes)) % numPartitions`` (same as the Java client)."""
    return to_positive(murmur2(key_bytes)) % num_partitions


def _num_partitions(topic: str, cluster: ClusterView) -> int:
    count = len(cluster.partitions_for_topic(topic))
    if count == 0:
        raise ValueError(f"Topic {topic} has no known partitions")
    return count


class StickyPartitionCache:
    """Topic → current sticky partition (Kafka's ``StickyPartitionCache``). Thread-safe.

    Choice rules (SPEC §5.3): no available partition → random among all; exactly one available → that one;
    several → random available one different from the current one. ``next_partition`` only changes the cached
    partition when it still equals ``prev_partition`` so racing threads switch it once.
    """

    __slots__ = ("_cache", "_lock", "_random")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._cache: dict[str, int] = {}
        self._lock = threading.Lock()
        self._random = rng or random.Random()

    def partition(self, topic: str, cluster: ClusterView) -> int:
        part = self._cache.get(topic)
        if part is None:
            return self.next_partition(topic, cluster, -1)
        return part

    def next_partition(self, topic: str, cluster: ClusterView, prev_partition: int) -> int:
        with self._lock:
            old = self._cache.get(topic)
            if old is not None and old != prev_partition:
                return old  # someone already switched away from prev_partition
            available = cluster.available_partitions_for_topic(topic)
            if not available:
                new = self._random.randrange(_num_partitions(topic, cluster))
            elif len(available) == 1:
                new = available[0]
            else:
                new = old
                while new is None or new == old:
                    new = available[self._random.randrange(len(available))]
            self._cache[topic] = new
            return new


class DefaultPartitioner:
    """Kafka 2.4+ ``DefaultPartitioner``: murmur2 for keyed records, sticky for key-less ones. Thread-safe.

    With ``partitioner.ignore.keys=true`` (Kafka 3.3 built-in partitioner option) keys are ignored.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.sticky_partition_cache = StickyPartitionCache(rng)
        self.ignore_keys = False

    def configure(self, configs: Mapping[str, Any]) -> None:
        self.ignore_keys = bool(configs.get("partitioner.ignore.keys", False))

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any, value_bytes: bytes | None,
                  cluster: ClusterView) -> int:
        if key_bytes is None or self.ignore_keys:
            return self.sticky_partition_cache.partition(topic, cluster)
        return key_partition(key_bytes, _num_partitions(topic, cluster))

    def on_new_batch(self, topic: str, cluster: ClusterView, prev_partition: int) -> None:
        self.sticky_partition_cache.next_partition(topic, cluster, prev_partition)

    def close(self) -> None:
        """Nothing to release."""


class UniformStickyPartitioner:
    """Sticky for every record, keyed or not (Kafka's ``UniformStickyPartitioner``). Thread-safe."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.sticky_partition_cache = StickyPartitionCache(rng)

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any, value_bytes: bytes | None,
                  cluster: ClusterView) -> int:
        return self.sticky_partition_cache.partition(topic, cluster)

    def on_new_batch(self, topic: str, cluster: ClusterView, prev_partition: int) -> None:
        self.sticky_partition_cache.next_partition(topic, cluster, prev_partition)

    def close(self) -> None:
        """Nothing to release."""


class RoundRobinPartitioner:
    """Each record (keyed or not) goes to the next available partition (Kafka's ``RoundRobinPartitioner``).

    Per-topic counter; ``to_positive(counter) % len(available)`` over the available partitions, or over all
    partitions when none is available (SPEC §5.3 / §18 item 36). Because the producer asks again after
    ``on_new_batch``, the partition chosen just before a new batch is remembered and handed out once more, so
    the retry does not skip a partition (a per-topic queue, as Kafka's fix for KAFKA-9965). Thread-safe.
    """

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}
        self._queued: dict[str, deque[int]] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any, value_bytes: bytes | None,
                  cluster: ClusterView) -> int:
        with self._lock:
            queued = self._queued.get(topic)
            if queued:
                return queued.popleft()
            next_value = self._counters.get(topic, 0)
            self._counters[topic] = (next_value + 1) & 0xFFFFFFFF
        available = cluster.available_partitions_for_topic(topic)
        if available:
            return available[to_positive(next_value) % len(available)]
        return to_positive(next_value) % _num_partitions(topic, cluster)

    def on_new_batch(self, topic: str, cluster: ClusterView, prev_partition: int) -> None:
        with self._lock:
            self._queued.setdefault(topic, deque()).append(prev_partition)

    def close(self) -> None:
        """Nothing to release."""


def make_partitioner(spec: Any, configs: Mapping[str, Any] | None = None) -> Partitioner:
    """Build the partitioner for ``partitioner.class``: ``None`` → :class:`DefaultPartitioner`; a class (or
    dotted path) is instantiated without arguments and ``configure(configs)`` is called when present; an
    instance is used as given."""
    from strom.config.config_def import get_configured_instance

    if spec is None:
        spec = DefaultPartitioner
    return get_configured_instance(spec, "partitioner.class", configs, "partition", "Partitioner")
