"""ReplicationQuotaManager (KIP-73) with a mock clock: which replicas a topic's list throttles on this broker, the
rate over the quota window, and a rate changed at runtime."""

from __future__ import annotations

from strom.common.structs import TopicPartition
from strom.server.replication_quota import LEADER, ReplicationQuotaManager, is_listed
from strom.testing.mock_time import MockTime

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_a_list_names_partitions_on_brokers() -> None:
    assert is_listed(("0:1", "1:2"), 0, 1) and is_listed(("0:1", "1:2"), 1, 2)
    assert not is_listed(("0:1",), 0, 2) and not is_listed((), 0, 1)
    assert is_listed(("*",), 7, 3)


def test_throttled_replicas_are_held_to_the_rate_over_the_window() -> None:
    time = MockTime()
    quota = ReplicationQuotaManager(LEADER, 1, lambda topic: ("0:1",), rate=1000, time=time)
    assert quota.is_throttled(TP0) and not quota.is_throttled(TP1)
    assert not quota.should_throttle(TP0, in_sync=False)  # nothing sent yet
    quota.record(50_000)
    assert quota.should_throttle(TP0, in_sync=False)
    assert not quota.should_throttle(TP0, in_sync=True)  # in the ISR: never held back
    assert not quota.should_throttle(TP1, in_sync=False)  # not listed
    time.sleep(12_000)  # the samples of the 11 one-second windows have expired
    assert not quota.is_quota_exceeded()
    quota.record(5_000)  # over at least ten windows (Kafka's Rate): 500 B/s
    assert not quota.is_quota_exceeded()
    quota.record(10_000)
    assert quota.is_quota_exceeded()
    quota.update_quota(10_000_000)  # raised at runtime: the same bytes are within it
    assert not quota.is_quota_exceeded()


def test_unlimited_throttles_nothing() -> None:
    quota = ReplicationQuotaManager(LEADER, 1, lambda topic: ("*",), time=MockTime())
    quota.record(10**12)
    assert not quota.is_throttled(TP0) and not quota.is_quota_exceeded()
