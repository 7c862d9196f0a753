"""The group coordinator's metrics: Kafka's ``AbstractCoordinator.GroupCoordinatorMetrics`` and
``ConsumerCoordinator.ConsumerCoordinatorMetrics`` in one group, ``consumer-coordinator-metrics``.

Tag ``client-id``. heartbeat-response-time-max, heartbeat-rate/total, last-heartbeat-seconds-ago;
join-time-avg/max, join-rate/total; sync-time-avg/max, sync-rate/total; rebalance-latency-avg/max/total,
rebalance-total, rebalance-rate-per-hour, failed-rebalance-total, failed-rebalance-rate-per-hour,
last-rebalance-seconds-ago (from the first JoinGroup of a rebalance to its successful SyncGroup, as in Kafka);
commit-latency-avg/max, commit-rate/total (OffsetCommit round trips); partition-revoked-latency-avg/max,
partition-assigned-latency-avg/max, partition-lost-latency-avg/max (rebalance listener calls);
assigned-partitions.

Threading: the heartbeat thread and the consumer's thread both record; the sensors are thread-safe and the
timestamps are single ints written whole.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    Meter,
    Metrics,
    Rate,
    Sensor,
    WindowedCount,
)

__all__ = ["CoordinatorMetrics", "GROUP"]

GROUP = "consumer-coordinator-metrics"
_HOUR_MS = 3_600_000


class CoordinatorMetrics:
    """Sensors of a consumer's group membership (see the module docstring). Thread-safe."""

    def __init__(self, metrics: Metrics, assigned_partitions: Callable[[], int],
                 last_heartbeat_send_ms: Callable[[], int]) -> None:
        self.metrics = m = metrics
        name = m.metric_name

        def latency(sensor_name: str, base: str, what: str, avg: bool = True) -> Sensor:
            s = m.sensor(sensor_name)
            if avg:
                s.add(name(f"{base}-avg", GROUP, f"The average time taken for {what}"), Avg())
            s.add(name(f"{base}-max", GROUP, f"The max time taken for {what}"), Max())
            return s

        def rate_total(s: Sensor, base: str, what: str) -> None:
            s.add(None, Meter(name(f"{base}-rate", GROUP, f"The number of {what} per second"),
                              name(f"{base}-total", GROUP, f"The total number of {what}"), WindowedCount()))

        self.heartbeat = latency("heartbeat-latency", "heartbeat-response-time", "a heartbeat response", avg=False)
        rate_total(self.heartbeat, "heartbeat", "heartbeats")
        self.join = latency("join-latency", "join-time", "a group rejoin")
        rate_total(self.join, "join", "group joins")
        self.sync = latency("sync-latency", "sync-time", "a group sync")
        rate_total(self.sync, "sync", "group syncs")
        self.commit = latency("commit-latency", "commit-latency", "a commit request")
        rate_total(self.commit, "commit", "commit calls")
        self.rebalance = s = latency("rebalance-latency", "rebalance-latency", "a group rebalance")
        s.add(name("rebalance-latency-total", GROUP, "The total number of milliseconds this consumer has spent in "
                                                     "successful rebalances since creation"), CumulativeSum())
        s.add(name("rebalance-total", GROUP, "The total number of successful rebalance events"), CumulativeCount())
        s.add(name("rebalance-rate-per-hour", GROUP, "The number of successful rebalance events per hour"),
              Rate(WindowedCount(), unit_ms=_HOUR_MS))
        self.failed_rebalance = s = m.sensor("failed-rebalance")
        s.add(name("failed-rebalance-total", GROUP, "The total number of failed rebalance events"), CumulativeCount())
        s.add(name("failed-rebalance-rate-per-hour", GROUP, "The number of failed rebalance events per hour"),
              Rate(WindowedCount(), unit_ms=_HOUR_MS))
        self.revoked = latency("partition-revoked-latency", "partition-revoked-latency",
                               "a partition-revoked rebalance listener callback")
        self.assigned = latency("partition-assigned-latency", "partition-assigned-latency",
                                "a partition-assigned rebalance listener callback")
        self.lost = latency("partition-lost-latency", "partition-lost-latency",
                            "a partition-lost rebalance listener callback")
        self.last_rebalance_end_ms = -1
        self.rebalance_start_ms = -1

        def seconds_ago(since: int, now: int) -> float:
            return float((now - since) // 1000) if since > 0 else -1.0

        m.add_metric(name("last-rebalance-seconds-ago", GROUP, "The number of seconds since the last successful "
                                                               "rebalance event"),
                     lambda _c, now: seconds_ago(self.last_rebalance_end_ms, now))
        m.add_metric(name("last-heartbeat-seconds-ago", GROUP, "The number of seconds since the last coordinator "
                                                               "heartbeat was sent"),
                     lambda _c, now: seconds_ago(last_heartbeat_send_ms(), now))
        m.add_metric(name("assigned-partitions", GROUP, "The number of partitions currently assigned to this "
                                                        "consumer"), lambda _c, _n: float(assigned_partitions()))

    def rebalance_started(self, now_ms: int) -> None:
        """A JoinGroup is sent; the first of a rebalance starts its latency."""
        if self.rebalance_start_ms == -1:
            self.rebalance_start_ms = now_ms

    def rebalance_succeeded(self, now_ms: int) -> None:
        start = self.rebalance_start_ms
        self.last_rebalance_end_ms = now_ms
        self.rebalance.record(now_ms - start if start != -1 else 0, now_ms)
        self.rebalance_start_ms = -1

    def rebalance_failed(self, now_ms: int) -> None:
        self.failed_rebalance.record(1, now_ms)
