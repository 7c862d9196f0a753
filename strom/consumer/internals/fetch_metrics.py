"""The consumer's fetch metrics: Kafka's ``FetchMetricsManager`` / ``FetchMetricsRegistry``.

Group ``consumer-fetch-manager-metrics`` (tag ``client-id``): fetch-latency-avg/max and fetch-rate/total (per
FetchRequest, from send to response), records-per-request-avg (records of a response handed out, recorded
once all its partitions are consumed, as Kafka's ``FetchMetricsAggregator`` does), fetch-size-avg/max and bytes-consumed-rate/total (record bytes per
response), records-consumed-rate/total (records handed to the application), records-lag-max,
records-lead-min, fetch-throttle-time-avg/max. Per topic (tags ``client-id``, ``topic``): fetch-size-avg/max,
bytes-consumed-rate/total, records-consumed-rate/total. Per partition (tags ``client-id``, ``topic``,
``partition``): records-lag, records-lag-avg, records-lag-max, records-lead, records-lead-avg,
records-lead-min — recorded, as in Kafka, each time the application is handed a partition's fetched data
(lag = high watermark, or last stable offset under read_committed, minus the new position), and removed
when the partition is no longer assigned; preferred-read-replica (the replica the partition is read from, -1
for its leader: KIP-392), from the moment the partition is assigned until it is not.

Kafka counts bytes when a partition's data is consumed; here bytes are counted when the response arrives
(the consumer keeps whole responses, so the two differ only while a response is buffered).

Threading: responses are recorded on whichever thread polls the network (the consumer's or the heartbeat
thread), records and lag on the consumer's thread; the sensors are thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from strom.common.structs import TopicPartition
from strom.consumer.internals.subscription_state import SubscriptionState
from strom.metrics import Avg, Max, Meter, MetricName, Metrics, Min, SampledStats, Sensor

__all__ = ["FetchMetricsManager", "FetchResponseMetricAggregator", "GROUP"]

GROUP = "consumer-fetch-manager-metrics"


class FetchResponseMetricAggregator:
    """Kafka's ``FetchMetricsAggregator``: the records of one fetch response, counted as each of its partitions is
    consumed (drained, or found unusable); once the last one is, records-per-request-avg gets the response's total.
    Consumer thread only (a partition told twice counts once)."""

    __slots__ = ("_sensor", "_unrecorded", "_records")

    def __init__(self, manager: FetchMetricsManager, partitions: set[TopicPartition]) -> None:
        self._sensor = manager.records_per_request
        self._unrecorded = partitions
        self._records = 0

    def record(self, tp: TopicPartition, records: int) -> None:
        unrecorded = self._unrecorded
        if tp in unrecorded:
            unrecorded.discard(tp)
            self._records += records
            if not unrecorded:
                self._sensor.record(self._records)


class FetchMetricsManager:
    """The Fetcher's sensors (see the module docstring). Thread-safe."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = m = metrics
        name = m.metric_name
        self.fetch_latency = s = m.sensor("fetch-latency")
        s.add(None, SampledStats({
            "avg": name("fetch-latency-avg", GROUP, "The average time taken for a fetch request."),
            "max": name("fetch-latency-max", GROUP, "The max time taken for any fetch request."),
            "count-rate": name("fetch-rate", GROUP, "The number of fetch requests per second."),
            "count": name("fetch-total", GROUP, "The total number of fetch requests.")}))
        self.bytes_fetched = s = m.sensor("bytes-fetched")
        self._add_bytes_stats(s, None)
        self.records_fetched = s = m.sensor("records-fetched")
        self._add_records_stats(s, None)
        self.records_lag = s = m.sensor("records-lag")
        s.add(name("records-lag-max", GROUP, "The maximum lag in terms of number of records for any partition in "
                                             "this window"), Max())
        self.records_lead = s = m.sensor("records-lead")
        s.add(name("records-lead-min", GROUP, "The minimum lead in terms of number of records for any partition "
                                              "in this window"), Min())
        self.records_per_request = s = m.sensor("records-per-request")
        s.add(name("records-per-request-avg", GROUP, "The average number of records in each request"), Avg())
        self.throttle_time = s = m.sensor("fetch-throttle-time")
        s.add(name("fetch-throttle-time-avg", GROUP, "The average throttle time in ms"), Avg())
        s.add(name("fetch-throttle-time-max", GROUP, "The maximum throttle time in ms"), Max())
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[Sensor, Sensor]] = {}
        self._partitions: dict[TopicPartition, tuple[Sensor, Sensor]] = {}
        self._assignment_token: object = None
        self._assigned: set[TopicPartition] = set()

    def _add_bytes_stats(self, s: Sensor, topic: str | None) -> None:
        name = self.metrics.metric_name
        tags = {"topic": topic} if topic is not None else None
        what = f" for topic {topic}" if topic is not None else ""
        s.add(name("fetch-size-avg", GROUP, f"The average number of bytes fetched per request{what}", tags), Avg())
        s.add(name("fetch-size-max", GROUP, f"The maximum number of bytes fetched per request{what}", tags), Max())
        s.add(None, Meter(name("bytes-consumed-rate", GROUP, f"The average number of bytes consumed per second{what}",
                               tags),
                          name("bytes-consumed-total", GROUP, f"The total number of bytes consumed{what}", tags)))

    def _add_records_stats(self, s: Sensor, topic: str | None) -> None:
        name = self.metrics.metric_name
        tags = {"topic": topic} if topic is not None else None
        what = f" for topic {topic}" if topic is not None else ""
        s.add(None, Meter(name("records-consumed-rate", GROUP,
                               f"The average number of records consumed per second{what}", tags),
                          name("records-consumed-total", GROUP, f"The total number of records consumed{what}",
                               tags)))

    def _topic(self, topic: str) -> tuple[Sensor, Sensor]:
        sensors = self._topics.get(topic)
        if sensors is None:
            with self._lock:
                sensors = self._topics.get(topic)
                if sensors is None:
                    m = self.metrics
                    # no parent: the client-level fetch-size is per request, recorded once per response
                    b = m.sensor(f"topic.{topic}.bytes-fetched")
                    self._add_bytes_stats(b, topic)
                    r = m.sensor(f"topic.{topic}.records-fetched", None, self.records_fetched)
                    self._add_records_stats(r, topic)
                    sensors = self._topics[topic] = (b, r)
        return sensors

    def _partition(self, tp: TopicPartition) -> tuple[Sensor, Sensor]:
        sensors = self._partitions.get(tp)
        if sensors is None:
            m = self.metrics
            name = m.metric_name
            tags = {"topic": tp.topic, "partition": str(tp.partition)}
            # one SampledStats per sensor: Kafka's Value + Max/Min + Avg, one window update per record
            lag = m.sensor(f"{tp}.records-lag", None, self.records_lag)
            lag.add(None, SampledStats({
                "value": name("records-lag", GROUP, "The latest lag of the partition", tags),
                "max": name("records-lag-max", GROUP, "The max lag of the partition", tags),
                "avg": name("records-lag-avg", GROUP, "The average lag of the partition", tags)}))
            lead = m.sensor(f"{tp}.records-lead", None, self.records_lead)
            lead.add(None, SampledStats({
                "value": name("records-lead", GROUP, "The latest lead of the partition", tags),
                "min": name("records-lead-min", GROUP, "The min lead of the partition", tags),
                "avg": name("records-lead-avg", GROUP, "The average lead of the partition", tags)}))
            sensors = self._partitions[tp] = (lag, lead)
        return sensors

    # ------------------------------------------------------------------------------------ recording

    def record_fetch_response(self, latency_ms: float, bytes_by_topic: dict[str, int], throttle_time_ms: int,
                              now_ms: int) -> None:
        """One FetchRequest answered: its latency, its record bytes (per topic; the request's total feeds
        fetch-size) and the broker's throttle time."""
        self.fetch_latency.record(latency_ms, now_ms)
        self.throttle_time.record(throttle_time_ms, now_ms)
        total = 0
        for topic, size in bytes_by_topic.items():
            self._topic(topic)[0].record(size, now_ms)
            total += size
        self.bytes_fetched.record(total, now_ms)

    def record_records_fetched(self, topic: str, count: int, now_ms: int) -> None:
        self._topic(topic)[1].record(count, now_ms)

    def record_partition_fetch(self, tp: TopicPartition, count: int, lag: int | None, lead: int | None,
                               now_ms: int) -> None:
        """The application was handed ``count`` records of ``tp``; its lag and lead at the new position."""
        if count:
            self._topic(tp.topic)[1].record(count, now_ms)
        if lag is not None or lead is not None:
            sensors = self._partitions.get(tp) or self._partition(tp)
            if lag is not None:
                sensors[0].record(lag, now_ms)
            if lead is not None:
                sensors[1].record(lead, now_ms)

    def record_partition_lag(self, tp: TopicPartition, lag: int, now_ms: int) -> None:
        self._partition(tp)[0].record(lag, now_ms)

    def record_partition_lead(self, tp: TopicPartition, lead: int, now_ms: int) -> None:
        self._partition(tp)[1].record(lead, now_ms)

    def maybe_update_assignment(self, subscriptions: SubscriptionState,
                                read_replica: Callable[[TopicPartition], int]) -> None:
        """Kafka's ``maybeUpdateAssignment``, when the assignment changed: the per-partition sensors and the
        preferred-read-replica gauges of partitions no longer assigned go, newly assigned partitions get their
        gauge (``read_replica(tp)``: the node it is read from, -1 for the leader). Consumer thread only."""
        token = subscriptions.assignment_token()
        if token is self._assignment_token:
            return
        self._assignment_token = token
        assigned = subscriptions.assigned_partitions()
        m = self.metrics
        partitions = self._partitions
        for tp in self._assigned - assigned:
            m.remove_metric(self._read_replica_name(tp))
        for tp in [tp for tp in partitions if tp not in assigned]:
            del partitions[tp]
            m.remove_sensor(f"{tp}.records-lag")
            m.remove_sensor(f"{tp}.records-lead")
        for tp in assigned - self._assigned:
            m.add_metric_if_absent(self._read_replica_name(tp), lambda _c, _now, tp=tp: float(read_replica(tp)))
        self._assigned = assigned

    def _read_replica_name(self, tp: TopicPartition) -> MetricName:
        return self.metrics.metric_name("preferred-read-replica", GROUP, "The current read replica for the "
                                        "partition, or -1 if reading from leader",
                                        {"topic": tp.topic, "partition": str(tp.partition)})
