"""Partitioners: murmur2 keyed choice, sticky key-less choice and its switch on a new batch, round-robin,
custom partitioner loading."""

from __future__ import annotations

import random
from typing import Any

import pytest

from strom.common.structs import Node, TopicPartition
from strom.producer.internals.cluster_view import StaticCluster
from strom.producer.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    StickyPartitionCache,
    UniformStickyPartitioner,
    key_partition,
    make_partitioner,
)
from tests.unit.producer.helpers import NODE0, NODE1, make_accumulator

pytestmark = pytest.mark.unit


def topic_cluster(n: int, unavailable: tuple[int, ...] = (), topic: str = "t") -> StaticCluster:
    return StaticCluster({TopicPartition(topic, p): (None if p in unavailable else (NODE0, NODE1)[p % 2])
                          for p in range(n)})


@pytest.mark.parametrize("key, partition", [(b"", 1), (b"a", 4), (b"hello", 9), (b"kafka", 0), (b"123456789", 6)])
def test_keyed_records_use_java_murmur2(key: bytes, partition: int) -> None:
    """§18 item 33: keyed → toPositive(murmur2(key)) % numPartitions, same partition as the Java client
    (vectors from kafka-protocol/murmur2.txt)."""
    assert key_partition(key, 10) == partition
    p = DefaultPartitioner()
    c = topic_cluster(10)
    assert p.partition("t", "k", key, None, None, c) == partition
    assert p.partition("t", "k", key, None, None, c) == partition  # stable


def test_keyed_records_count_all_partitions_even_unavailable() -> None:
    """§18 item 33: the modulus is over all partitions, available or not."""
    c = topic_cluster(10, unavailable=tuple(range(1, 10)))
    assert DefaultPartitioner().partition("t", None, b"hello", None, None, c) == 9


def test_sticky_keyless_stays_until_new_batch() -> None:
    """§18 item 34: key-less records stick to one partition; on_new_batch switches to another."""
    p = DefaultPartitioner(random.Random(1))
    c = topic_cluster(6)
    first = p.partition("t", None, None, b"v", b"v", c)
    assert {p.partition("t", None, None, b"v", b"v", c) for _ in range(50)} == {first}
    p.on_new_batch("t", c, first)
    second = p.partition("t", None, None, b"v", b"v", c)
    assert second != first
    # A stale on_new_batch (for a partition that is no longer the sticky one) changes nothing.
    p.on_new_batch("t", c, first)
    assert p.partition("t", None, None, b"v", b"v", c) == second


def test_sticky_choice_rules() -> None:
    """§18 item 35: none available → random among all; one available → it; several → a different one."""
    cache = StickyPartitionCache(random.Random(7))
    none_available = topic_cluster(4, unavailable=(0, 1, 2, 3))
    assert 0 <= cache.partition("t", none_available) < 4
    one_available = topic_cluster(4, unavailable=(0, 1, 3))
    cache = StickyPartitionCache(random.Random(7))
    assert cache.partition("t", one_available) == 2
    assert cache.next_partition("t", one_available, 2) == 2
    several = topic_cluster(5, unavailable=(4,))
    cache = StickyPartitionCache(random.Random(3))
    current = cache.partition("t", several)
    for _ in range(30):
        nxt = cache.next_partition("t", several, current)
        assert nxt != current and nxt != 4
        current = nxt


def test_ignore_keys_option() -> None:
    """§18 item 34 variant: partitioner.ignore.keys=true spreads keyed records like key-less ones."""
    p = make_partitioner(None, {"partitioner.ignore.keys": True})
    c = topic_cluster(10)
    assert {p.partition("t", None, k, None, None, c) for k in (b"a", b"b", b"c", b"d")}.__len__() == 1


def test_uniform_sticky_ignores_keys() -> None:
    """§18 item 34 variant: UniformStickyPartitioner is sticky for keyed records too."""
    p = UniformStickyPartitioner(random.Random(2))
    c = topic_cluster(8)
    chosen = {p.partition("t", None, bytes([i]), None, None, c) for i in range(20)}
    assert len(chosen) == 1
    p.on_new_batch("t", c, chosen.pop())


def test_round_robin_over_available_partitions() -> None:
    """§18 item 36: a per-call counter modulo the available partitions; all partitions when none is."""
    p = RoundRobinPartitioner()
    c = topic_cluster(4, unavailable=(1,))
    assert [p.partition("t", None, b"k", None, None, c) for _ in range(6)] == [0, 2, 3, 0, 2, 3]
    none = topic_cluster(3, unavailable=(0, 1, 2), topic="u")
    assert [p.partition("u", None, None, None, None, none) for _ in range(4)] == [0, 1, 2, 0]


def test_round_robin_new_batch_does_not_skip() -> None:
    """§18 item 36: the re-partition after on_new_batch returns the same partition (no skipped partition)."""
    p = RoundRobinPartitioner()
    c = topic_cluster(3)
    first = p.partition("t", None, None, None, None, c)
    p.on_new_batch("t", c, first)
    assert p.partition("t", None, None, None, None, c) == first
    assert p.partition("t", None, None, None, None, c) == (first + 1) % 3


class FixedPartitioner:
    """A custom partitioner: everything to partition 2."""

    configured: dict[str, Any] | None = None

    def configure(self, configs: dict[str, Any]) -> None:
        self.configured = configs

    def partition(self, topic: str, key: Any, key_bytes: Any, value: Any, value_bytes: Any, cluster: Any) -> int:
        return 2


def test_custom_partitioner_loading() -> None:
    """§18 item 37: partitioner.class given as class, dotted path or instance is used."""
    by_class = make_partitioner(FixedPartitioner, {"client.id": "c"})
    assert isinstance(by_class, FixedPartitioner) and by_class.configured == {"client.id": "c"}
    by_path = make_partitioner(f"{__name__}.FixedPartitioner")
    assert by_path.partition("t", None, None, None, None, topic_cluster(3)) == 2
    instance = FixedPartitioner()
    assert make_partitioner(instance) is instance
    assert isinstance(make_partitioner("org.apache.kafka.clients.producer.RoundRobinPartitioner"),
                       RoundRobinPartitioner)
    with pytest.raises(TypeError):
        make_partitioner(object())


def test_sticky_switch_through_the_accumulator() -> None:
    """§18 item 34 end-to-end with the accumulator (KafkaProducer.doSend's loop): records go to the sticky
    partition until its batch is full; then append(abort_on_new_batch=True) reports abort_for_new_batch, the
    partitioner switches and the record goes to a new batch of another partition."""
    acc, pool, _ = make_accumulator(batch_size=512)
    c = topic_cluster(4)
    part = DefaultPartitioner(random.Random(5))
    sequence = []
    for _ in range(40):
        p = part.partition("t", None, None, None, b"x" * 60, c)
        result = acc.append(TopicPartition("t", p), 0, None, b"x" * 60, None, None, 0, True, 0)
        if result.abort_for_new_batch:
            assert result.future is None and not result.new_batch_created
            part.on_new_batch("t", c, p)
            new_p = part.partition("t", None, None, None, b"x" * 60, c)
            result = acc.append(TopicPartition("t", new_p), 0, None, b"x" * 60, None, None, 0, False, 0)
            assert result.new_batch_created
            p = new_p
        sequence.append(p)
    runs = [sequence[0]]
    for p in sequence[1:]:
        if p != runs[-1]:
            runs.append(p)
    assert len(runs) >= 3  # switched several times
    assert all(a != b for a, b in zip(runs, runs[1:], strict=False))
    # Every batch but the last of each partition is full: switches happen only when a batch fills up.
    for batches in acc.batches().values():
        assert all(b.is_full() for b in batches[:-1])
    assert sum(len(b) for b in acc.batches().values()) == len(runs)


def test_cluster_view_static() -> None:
    """The ClusterView used by partitioners/accumulator (SPEC §6.8-6.9 inputs; no §18 item)."""
    n = Node(5, "h", 1)
    c = StaticCluster.with_partitions([n], {"a": 2})
    assert c.partitions_for_node(5) == [TopicPartition("a", 0), TopicPartition("a", 1)]
    assert c.node_by_id(5) == n and c.leader_for(TopicPartition("a", 1)) == n
    assert c.partitions_for_topic("zz") == [] and c.available_partitions_for_topic("a") == [0, 1]
