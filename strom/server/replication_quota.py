"""Replication throttles (Kafka's ``ReplicationQuotaManager``, KIP-73): the byte rate at which a broker serves
(leader side) or fetches (follower side) the replicas a topic marks as throttled.

A topic names its throttled replicas in ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` (``partition:broker,...`` or ``*``): on broker B, partition p is
throttled when ``p:B`` (or ``*``) is listed. The rates are the dynamic per-broker configs
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (bytes per second, unlimited by
default), set by ``strom reassign-partitions --throttle`` as Kafka's tool sets them. Only replicas outside the
ISR are held back (a reassignment's new replicas), as in Kafka: once the rate over the quota window
(``replication.quota.window.num`` × ``replication.quota.window.size.seconds``) is over the limit, a leader sends
throttled partitions no records and a follower leaves them out of its fetches until the rate falls back.
Thread-safe (the sensor's lock); used on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import MetricConfig, Metrics, Rate, Sensor
from strom.metrics.quota import Quota, QuotaViolationError

__all__ = ["LEADER", "FOLLOWER", "ReplicationQuotaManager", "is_listed"]

LEADER, FOLLOWER = "LeaderReplication", "FollowerReplication"
ALTER_LOG_DIRS = "AlterLogDirsReplication"  # replica moves between log dirs: every partition counts
UNLIMITED = float(2**63 - 1)


def is_listed(replicas: tuple[str, ...], partition: int, broker_id: int) -> bool:
    """Whether ``partition`` on ``broker_id`` is in a ``*.replication.throttled.replicas`` list."""
    return "*" in replicas or f"{partition}:{broker_id}" in replicas


class ReplicationQuotaManager:
    """One side's throttle (``LEADER`` or ``FOLLOWER``). ``throttled_replicas(topic)`` gives the topic's list of
    that side."""

    def __init__(self, side: str, broker_id: int, throttled_replicas: Callable[[str], tuple[str, ...]],
                 rate: float = UNLIMITED, *, metrics: Metrics | None = None, window_num: int = 11,
                 window_size_seconds: int = 1, time: Time = SYSTEM_TIME) -> None:
        self.side = side
        self.broker_id = broker_id
        self._throttled_replicas = throttled_replicas
        self._time = time
        self._metrics = metrics if metrics is not None else Metrics(time=time)
        self._window = (window_num, window_size_seconds * 1000)
        self._sensor: Sensor | None = None
        self.rate = UNLIMITED
        self.update_quota(rate)

    def _config(self) -> MetricConfig:
        return MetricConfig(samples=self._window[0], time_window_ms=self._window[1],
                            quota=Quota.upper_bound(self.rate))

    def update_quota(self, rate: float) -> None:
        """A new ``*.replication.throttled.rate`` (bytes per second)."""
        self.rate = float(rate)
        if self._sensor is None:
            self._sensor = self._metrics.sensor(f"{self.side}ReplicationThrottle", self._config())
            self._sensor.add(self._metrics.metric_name("byte-rate", self.side, "Throttled replication bytes per "
                                                                               "second", {}), Rate(), self._config())
        for metric in self._sensor.metrics():
            metric.config = self._config()

    def is_throttled(self, tp: TopicPartition) -> bool:
        return self.rate < UNLIMITED and is_listed(self._throttled_replicas(tp.topic), tp.partition, self.broker_id)

    def is_quota_exceeded(self) -> bool:
        if self.rate >= UNLIMITED:
            return False
        assert self._sensor is not None
        try:
            self._sensor.check_quotas(self._time.milliseconds())
        except QuotaViolationError:
            return True
        return False

    def should_throttle(self, tp: TopicPartition, in_sync: bool) -> bool:
        """Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``."""
        return not in_sync and self.is_throttled(tp) and self.is_quota_exceeded()

    def record(self, nbytes: int) -> None:
        """Bytes of throttled partitions that were sent (leader) or fetched (follower)."""
        if nbytes and self.rate < UNLIMITED:
            assert self._sensor is not None
            self._sensor.record(float(nbytes), self._time.milliseconds())
