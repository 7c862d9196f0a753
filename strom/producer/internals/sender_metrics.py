"""The producer's metrics: Kafka's ``SenderMetricsRegistry`` / ``Sender.SenderMetrics`` and the producer-level
sensors of ``KafkaProducer`` and ``BufferPool``.

Group ``producer-metrics`` (tag ``client-id``): batch-size-avg/max (bytes of a built batch),
record-size-avg/max (the largest record of each batch sent, as Kafka's Sender records it), compression-rate-avg, record-queue-time-avg/max, request-latency-avg/max, produce-throttle-time-avg/max,
record-send-rate/total and records-per-request-avg (counted when a request is sent, as Kafka does: a retried
record counts again), record-retry-rate/total, record-error-rate/total, batch-split-rate/total,
requests-in-flight, metadata-age, flush-time-ns-total, metadata-wait-time-ns-total, txn-init-time-ns-total,
txn-begin-time-ns-total, txn-send-offsets-time-ns-total, txn-commit-time-ns-total, txn-abort-time-ns-total (Kafka's
``KafkaProducerMetrics``: the time of each call that returned), bufferpool-wait-ratio,
bufferpool-wait-time-ns-total, buffer-exhausted-rate/total (sends that failed waiting for buffer memory),
buffer-total-bytes, buffer-available-bytes, waiting-threads.
Group ``producer-topic-metrics`` (tags ``client-id``, ``topic``): record-send-rate/total, byte-rate/total,
compression-rate, record-retry-rate/total, record-error-rate/total — registered when a topic is first sent to.

Sensors are recorded once per batch or request, never per record, so the cost does not grow with records.

Threading: the Sender records on the I/O thread; ``KafkaProducer.send`` records errors and metadata waits on
caller threads; reads come from any thread. The sensors are thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.metrics import Avg, CumulativeSum, Max, Meter, MetricName, Metrics, Rate, Sensor, WindowedCount

__all__ = ["SenderMetrics", "ProducerMetrics", "GROUP", "TOPIC_GROUP"]

GROUP = "producer-metrics"
TOPIC_GROUP = "producer-topic-metrics"


def _meter(metrics: Metrics, sensor: Sensor, base: str, group: str, what: str, count: bool = False,
           tags: dict[str, str] | None = None) -> None:
    name = metrics.metric_name
    sensor.add(None, Meter(name(f"{base}-rate", group, f"The average per-second number of {what}", tags),
                           name(f"{base}-total", group, f"The total number of {what}", tags),
                           WindowedCount() if count else None))


def _avg_max(metrics: Metrics, sensor: Sensor, base: str, group: str, what: str) -> None:
    sensor.add(metrics.metric_name(f"{base}-avg", group, f"The average {what}"), Avg())
    sensor.add(metrics.metric_name(f"{base}-max", group, f"The maximum {what}"), Max())


class _TopicSensors:
    __slots__ = ("records", "bytes", "compression", "retries", "errors")

    def __init__(self, metrics: Metrics, topic: str) -> None:
        tags = {"topic": topic}
        base = f"topic.{topic}"
        self.records = metrics.sensor(f"{base}.records-per-batch")
        _meter(metrics, self.records, "record-send", TOPIC_GROUP, "records sent for a topic", tags=tags)
        self.bytes = metrics.sensor(f"{base}.bytes")
        _meter(metrics, self.bytes, "byte", TOPIC_GROUP, "bytes sent for a topic", tags=tags)
        self.compression = metrics.sensor(f"{base}.compression-rate")
        self.compression.add(metrics.metric_name("compression-rate", TOPIC_GROUP,
                                                 "The average compression rate of record batches for a topic", tags),
                             Avg())
        self.retries = metrics.sensor(f"{base}.record-retries")
        _meter(metrics, self.retries, "record-retry", TOPIC_GROUP, "retried record sends for a topic", tags=tags)
        self.errors = metrics.sensor(f"{base}.record-errors")
        _meter(metrics, self.errors, "record-error", TOPIC_GROUP, "record sends that resulted in errors for a topic",
               tags=tags)


class SenderMetrics:
    """Kafka's ``Sender.SenderMetrics``: the Sender's sensors and its per-topic sensors."""

    def __init__(self, metrics: Metrics, in_flight: Callable[[], int], metadata_age_ms: Callable[[], float]) -> None:
        self.metrics = metrics
        m = metrics
        self.batch_size = m.sensor("batch-size")
        _avg_max(m, self.batch_size, "batch-size", GROUP, "number of bytes sent per partition per-request")
        self.max_record_size = m.sensor("record-size")
        self.max_record_size.add(m.metric_name("record-size-avg", GROUP, "The average record size"), Avg())
        self.max_record_size.add(m.metric_name("record-size-max", GROUP, "The maximum record size"), Max())
        self.compression_rate = m.sensor("compression-rate")
        self.compression_rate.add(m.metric_name("compression-rate-avg", GROUP,
                                                "The average compression rate of record batches"), Avg())
        self.queue_time = m.sensor("queue-time")
        _avg_max(m, self.queue_time, "record-queue-time", GROUP, "time in ms record batches spent in the send buffer")
        self.request_time = m.sensor("request-time")
        _avg_max(m, self.request_time, "request-latency", GROUP, "request latency in ms")
        self.throttle_time = m.sensor("produce-throttle-time")
        _avg_max(m, self.throttle_time, "produce-throttle-time", GROUP, "time in ms a request was throttled by a broker")
        self.records_per_request = m.sensor("records-per-request")
        _meter(m, self.records_per_request, "record-send", GROUP, "records sent")
        self.records_per_request.add(m.metric_name("records-per-request-avg", GROUP,
                                                   "The average number of records per request."), Avg())
        self.retries = m.sensor("record-retries")
        _meter(m, self.retries, "record-retry", GROUP, "retried record sends")
        self.errors = m.sensor("errors")
        _meter(m, self.errors, "record-error", GROUP, "record sends that resulted in errors")
        self.batch_split = m.sensor("batch-split")
        _meter(m, self.batch_split, "batch-split", GROUP, "batch splits", count=True)
        m.add_metric(m.metric_name("requests-in-flight", GROUP, "The current number of in-flight requests awaiting "
                                   "a response."), lambda _c, _n: float(in_flight()))
        m.add_metric(m.metric_name("metadata-age", GROUP, "The age in seconds of the current producer metadata "
                                   "being used."), lambda _c, now: metadata_age_ms() / 1000.0)
        self._topics: dict[str, _TopicSensors] = {}

    def topic(self, topic: str) -> _TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = self._topics[topic] = _TopicSensors(self.metrics, topic)
        return sensors

    def record_batch_sent(self, topic: str, record_count: int, size: int, queue_time_ms: int,
                          compression_ratio: float | None, now: int, max_record_size: int = 0) -> None:
        """Kafka's ``updateProduceRequestMetrics`` for one batch of a request."""
        t = self.topic(topic)
        t.records.record(record_count, now)
        t.bytes.record(size, now)
        self.batch_size.record(size, now)
        self.max_record_size.record(max_record_size, now)
        self.queue_time.record(queue_time_ms, now)
        if compression_ratio is not None:
            t.compression.record(compression_ratio, now)
            self.compression_rate.record(compression_ratio, now)

    def record_retries(self, topic: str, count: int, now: int) -> None:
        self.retries.record(count, now)
        self.topic(topic).retries.record(count, now)

    def record_errors(self, topic: str, count: int, now: int | None = None) -> None:
        self.errors.record(count, now)
        self.topic(topic).errors.record(count, now)


class ProducerMetrics:
    """The producer-level sensors of ``KafkaProducer`` and its ``BufferPool`` (``bufferpool-wait-time`` goes
    through :meth:`record`, the pool's metrics-sink interface)."""

    def __init__(self, metrics: Metrics, buffer_pool_values: Callable[[], dict[str, Any]]) -> None:
        m = metrics
        self.metrics = metrics
        self.flush_time = m.sensor("flush-time")
        self.flush_time.add(m.metric_name("flush-time-ns-total", GROUP, "Total time producer has spent in flush in "
                                          "nanoseconds."), CumulativeSum())
        self.metadata_wait = m.sensor("metadata-wait-time")
        self.metadata_wait.add(m.metric_name("metadata-wait-time-ns-total", GROUP, "Total time producer has spent "
                                             "waiting on topic metadata in nanoseconds."), CumulativeSum())
        self.txn_init, self.txn_begin, self.txn_send_offsets, self.txn_commit, self.txn_abort = (
            self._total_time(key, call) for key, call in (
                ("txn-init", "initTransactions"), ("txn-begin", "beginTransaction"),
                ("txn-send-offsets", "sendOffsetsToTransaction"), ("txn-commit", "commitTransaction"),
                ("txn-abort", "abortTransaction")))
        self.buffer_exhausted = m.sensor("buffer-exhausted-records")
        _meter(m, self.buffer_exhausted, "buffer-exhausted", GROUP, "record sends that are dropped due to buffer "
                                                                     "exhaustion")
        self.buffer_pool_wait = m.sensor("bufferpool-wait-time")
        self.buffer_pool_wait.add(m.metric_name("bufferpool-wait-ratio", GROUP, "The fraction of time an appender "
                                                "waits for space allocation."), Rate(unit_ms=1 / 1_000_000))
        self.buffer_pool_wait.add(m.metric_name("bufferpool-wait-time-ns-total", GROUP, "The total time in "
                                                "nanoseconds an appender waits for space allocation."),
                                  CumulativeSum())
        for key, description in (("buffer-total-bytes", "The maximum amount of buffer memory the client can use"),
                                 ("buffer-available-bytes", "The total amount of buffer memory that is not being "
                                                            "used"),
                                 ("waiting-threads", "The number of user threads blocked waiting for buffer memory "
                                                     "to enqueue their records")):
            m.add_metric(m.metric_name(key, GROUP, description),
                         lambda _c, _n, k=key: float(buffer_pool_values()[k]))

    def _total_time(self, key: str, call: str) -> Sensor:
        sensor = self.metrics.sensor(f"{key}-time")
        sensor.add(self.metrics.metric_name(f"{key}-time-ns-total", GROUP, f"Total time producer has spent in {call} "
                                            "in nanoseconds."), CumulativeSum())
        return sensor

    def record(self, group: str, name: str, value: float) -> None:
        """The ``BufferPool`` metrics sink: wait time in ns, or one send that ran out of buffer memory."""
        if name == "buffer-exhausted-records":
            self.buffer_exhausted.record(value)
        else:
            self.buffer_pool_wait.record(value)


def producer_metric_name(metrics: Metrics, name: str, topic: str | None = None) -> MetricName:
    """The name of ``name`` in ``producer-metrics`` (or ``producer-topic-metrics`` for ``topic``)."""
    if topic is None:
        return metrics.metric_name(name, GROUP)
    return metrics.metric_name(name, TOPIC_GROUP, tags={"topic": topic})
