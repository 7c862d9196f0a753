"""Metadata and ProducerMetadata: versions, waits, refresh scheduling, topic errors, expiry (Kafka's
``MetadataTest`` / ``ProducerMetadataTest``)."""

from __future__ import annotations

import threading
import time as _time
import uuid

import pytest

from strom.common.error_codes import InvalidTopicExceptionError, TopicAuthorizationFailedError
from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, SystemTime
from strom.network.metadata import Metadata
from strom.network.metadata_updater import DefaultMetadataUpdater
from strom.producer.internals.producer_metadata import ProducerMetadata
from strom.protocol.messages import MetadataResponse
from strom.testing.mock_client import metadata_update_with
from strom.testing.mock_time import MockTime

pytestmark = [pytest.mark.component, pytest.mark.timeout(30)]


def _producer_metadata(clock: MockTime, idle_ms: int = 300_000) -> ProducerMetadata:
    return ProducerMetadata(100, 60_000, idle_ms, clock)


def _update(md: Metadata, clock: MockTime, response: object, partial: bool = False) -> None:
    md.update(md.request_version, response, partial, clock.milliseconds())


class _CountingWaits(SystemTime):
    """The system clock, counting condition waits (entered with the condition's lock held)."""

    def __init__(self) -> None:
        self.waits = 0

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        self.waits += 1
        super().wait_on(cond, timeout_ms)


def test_update_increments_version_by_one_and_wakes_waiters() -> None:
    """§18 items 23, 24: each successful update increments updateVersion by exactly 1 and wakes every thread
    blocked in await_update(v)."""
    clock = _CountingWaits()
    md = ProducerMetadata(100, 60_000, 300_000, clock)
    version = md.update_version
    woke: list[int] = []

    def waiter() -> None:
        md.await_update(version, 10_000)
        woke.append(md.update_version)

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = _time.monotonic() + 10
    while clock.waits < 3:  # every waiter is blocked on the metadata condition (update takes its lock)
        assert _time.monotonic() < deadline, "the waiters never blocked"
        _time.sleep(0.001)
    assert not woke
    md.update(md.request_version, metadata_update_with(1, {"t": 1}), False, SYSTEM_TIME.milliseconds())
    for t in threads:
        t.join(5)
    assert woke == [version + 1] * 3


def test_await_update_timeout_and_argument_check() -> None:
    """§18 item 23: await_update(v, t) raises "Failed to update metadata after t ms." when t elapses; a
    negative t is an illegal argument; closed metadata raises."""
    clock = MockTime()
    md = _producer_metadata(clock)
    with pytest.raises(KafkaTimeoutError, match=r"^Failed to update metadata after 250 ms\.$"):
        md.await_update(md.update_version, 250)
    with pytest.raises(ValueError, match="should not be < 0"):
        md.await_update(0, -1)
    md.close()
    with pytest.raises(KafkaError, match="after close"):
        md.await_update(md.update_version, 10)


def test_empty_broker_list_is_failed_update() -> None:
    """§18 item 24: a response with no brokers is a failed update: no version bump, refresh backoff applies."""
    clock = MockTime()
    md = Metadata(100, 60_000, clock)
    updater = DefaultMetadataUpdater(md)
    md.request_update()
    version = md.update_version
    updater.handle_successful_response(type("H", (), {"correlation_id": 1})(), clock.milliseconds(),
                                       MetadataResponse(brokers=[], topics=[]))
    assert md.update_version == version
    assert md.time_to_next_update(clock.milliseconds()) == 100


def test_periodic_refresh_after_max_age() -> None:
    """§18 item 25: without any request an update is due metadata.max.age.ms after the last success."""
    clock = MockTime()
    md = Metadata(100, 60_000, clock)
    _update(md, clock, metadata_update_with(1, {}))
    assert md.time_to_next_update(clock.milliseconds()) == 60_000
    clock.sleep(59_999)
    assert md.time_to_next_update(clock.milliseconds()) == 1
    clock.sleep(1)
    assert md.time_to_next_update(clock.milliseconds()) == 0


def test_refresh_backoff_after_failed_or_recent_update() -> None:
    """§18 item 31: after a failed refresh, even a forced update waits retry.backoff.ms."""
    clock = MockTime()
    md = Metadata(100, 60_000, clock)
    _update(md, clock, metadata_update_with(1, {}))
    clock.sleep(1000)
    md.failed_update(clock.milliseconds())
    md.request_update()
    assert md.time_to_next_update(clock.milliseconds()) == 100
    clock.sleep(100)
    assert md.time_to_next_update(clock.milliseconds()) == 0


def test_new_topic_partial_update_skips_backoff() -> None:
    """§18 item 18 / §4.2: a topic's first use requests an immediate partial update asking for the new topics
    only; later full updates ask for every topic in use."""
    clock = MockTime()
    md = _producer_metadata(clock)
    _update(md, clock, metadata_update_with(1, {}))
    md.add("a", clock.milliseconds())
    _update(md, clock, metadata_update_with(1, {"a": 1}), partial=True)
    md.add("b", clock.milliseconds())
    assert md.update_requested()
    assert md.time_to_next_update(clock.milliseconds()) == 0  # the refresh backoff is skipped
    request, _version, partial = md.new_metadata_request_and_version(clock.milliseconds())
    assert partial and [t.name for t in request.topics] == ["b"]
    md.request_update()
    request, _version, partial = md.new_metadata_request_and_version(clock.milliseconds())
    assert not partial and sorted(t.name for t in request.topics) == ["a", "b"]
    _update(md, clock, metadata_update_with(1, {"b": 2}), partial=True)
    cluster = md.fetch()
    assert cluster.partition_count_for_topic("a") == 1 and cluster.partition_count_for_topic("b") == 2


def test_unused_topic_expires() -> None:
    """§18 item 30: a topic unused for metadata.max.idle.ms leaves the topic set at the next update; using it
    resets the expiry."""
    clock = MockTime()
    md = _producer_metadata(clock, idle_ms=5000)
    md.add("keep", clock.milliseconds())
    md.add("drop", clock.milliseconds())
    _update(md, clock, metadata_update_with(1, {"keep": 1, "drop": 1}))
    clock.sleep(4000)
    md.add("keep", clock.milliseconds())
    clock.sleep(1001)
    _update(md, clock, metadata_update_with(1, {"keep": 1, "drop": 1}))
    assert md.topics() == {"keep"}
    assert md.fetch().partition_count_for_topic("drop") is None


def test_invalid_and_unauthorized_topics_raised_once() -> None:
    """§18 item 21: an invalid topic in metadata is raised (InvalidTopicException) to callers waiting for it;
    an unauthorized one as TopicAuthorizationException; errors are cleared once raised."""
    clock = MockTime()
    md = _producer_metadata(clock)
    md.add("bad", clock.milliseconds())
    md.add("secret", clock.milliseconds())
    _update(md, clock, metadata_update_with(1, {}, topic_errors={"bad": 17, "secret": 29}))
    assert "bad" in md.fetch().invalid_topics
    with pytest.raises(InvalidTopicExceptionError, match=r"Invalid topics: \[bad\]"):
        md.maybe_throw_exception_for_topic("bad")
    md.maybe_throw_exception_for_topic("bad")  # cleared
    _update(md, clock, metadata_update_with(1, {}, topic_errors={"secret": 29}))
    with pytest.raises(TopicAuthorizationFailedError, match=r"Not authorized to access topics: \[secret\]"):
        md.maybe_throw_exception_for_topic("secret")


def test_unknown_topic_error_requests_another_update() -> None:
    """§4.4: a topic error of the invalid-metadata kind (UNKNOWN_TOPIC_OR_PARTITION) asks for a new update."""
    clock = MockTime()
    md = _producer_metadata(clock)
    md.add("t", clock.milliseconds())
    _update(md, clock, metadata_update_with(1, {}, topic_errors={"t": 3}))
    assert md.update_requested()


def test_stale_leader_epoch_is_ignored_and_topic_ids_kept() -> None:
    """§4.4: partition metadata with an older leader epoch than already seen is ignored; topic ids are
    exposed."""
    clock = MockTime()
    md = _producer_metadata(clock)
    md.add("t", clock.milliseconds())
    tid = uuid.uuid4()
    _update(md, clock, metadata_update_with(2, {"t": 1}, leader_for=lambda t, p: 1, leader_epoch=5,
                                            topic_ids={"t": tid}))
    tp = TopicPartition("t", 0)
    assert md.fetch().leader_for(tp).node_id == 1
    _update(md, clock, metadata_update_with(2, {"t": 1}, leader_for=lambda t, p: 0, leader_epoch=4))
    assert md.fetch().leader_for(tp).node_id == 1
    assert md.last_seen_leader_epoch(tp) == 5
    _update(md, clock, metadata_update_with(2, {"t": 1}, leader_for=lambda t, p: 0, leader_epoch=6,
                                            topic_ids={"t": tid}))
    assert md.fetch().leader_for(tp).node_id == 0
    assert md.fetch().topic_id("t") == tid and md.topic_ids() == {"t": tid}


def test_cluster_view_for_producer() -> None:
    """§4.1 / §18 items 4, 69: the Cluster snapshot serves the producer's ClusterView: leaders, partitions, available partitions,
    partitions per node; bootstrap clusters carry negative ids and no topics."""
    clock = MockTime()
    md = _producer_metadata(clock)
    md.bootstrap([("h1", 9092), ("h2", 9093)])
    boot = md.fetch()
    assert boot.is_bootstrap_configured and [n.node_id for n in boot.nodes] == [-1, -2]
    md.add("t", clock.milliseconds())
    _update(md, clock, metadata_update_with(2, {"t": 3}, leader_for=lambda t, p: None if p == 2 else p))
    cluster = md.fetch()
    assert cluster.partitions_for_topic("t") == [0, 1, 2]
    assert cluster.available_partitions_for_topic("t") == [0, 1]
    assert cluster.partitions_for_node(1) == [TopicPartition("t", 1)]
    assert cluster.leader_for(TopicPartition("t", 2)) is None
    assert [p.partition for p in cluster.partition_infos_for_topic("t")] == [0, 1, 2]
    assert cluster.node_by_id(0).port == 1969
