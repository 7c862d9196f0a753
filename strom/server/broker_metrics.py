"""The broker's metrics: Kafka's broker MBeans in one :class:`~strom.metrics.Metrics` registry, and ``/metrics``.

Kafka counterparts: ``BrokerTopicStats`` (``kafka.server:type=BrokerTopicMetrics``), ``RequestChannel.Metrics``
(``kafka.network:type=RequestMetrics``), the ``ReplicaManager``, ``KafkaController``, ``GroupMetadataManager`` and
``Log`` gauges, ``SocketServer``'s ``socket-server-metrics`` and ``KafkaRequestHandlerPool``'s idle percent. Kafka
keeps most of these in Yammer metrics; here they share the registry the clients use, named so that
:mod:`strom.metrics.prometheus` gives the series Prometheus' JMX exporter gives Kafka's MBeans (a meter
``<X>PerSec`` holds the MBean's ``Count``: ``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``; a
latency histogram holds one metric per quantile: ``kafka_network_requestmetrics_totaltimems{request="Produce",
quantile="0.99"}``). Per-partition series (Log size and offsets, consumer lag as kafka_exporter names it) come and
go with partitions and groups, so they are computed per scrape by :class:`PartitionSeriesCollector`.

Recording is per request and per partition of a request, never per record. The collaborators that record
(``ReplicaManager``, ``KafkaApis``, the fetch handler, ``Partition`` via ``ReplicaManager``) get this object
passed in; nothing here reaches into the broker except the gauges, which read the collaborators handed to
``add_*``.

Thread-safety: recording happens on the event loop; sensors are thread-safe, and the gauges read by the
``/metrics`` thread copy the collections they walk (the GIL keeps each copy consistent) and tolerate a
partition vanishing mid-scrape.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import random
import threading
import time as _time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import (
    Avg,
    CumulativeCount,
    Max,
    Measurable,
    Meter,
    MetricConfig,
    Metrics,
    Value,
    load_reporters,
)
from strom.metrics.prometheus import MetricsHttpServer, parse_listener, prometheus_name
from strom.protocol.messages import REQUESTS
from strom.server.client_telemetry import ClientTelemetryStore, reporter_receivers
from strom.server.socket_server import ConnectionClosed
from strom.storage.log_validator import VALIDATION_METERS

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

    from strom.server.replica_manager import AppendResult, ReplicaManager

__all__ = ["BrokerMetrics", "BrokerTopicStats", "RequestMetrics", "PartitionSeriesCollector", "add_remote_time",
           "GROUP_DOMAINS"]

log = logging.getLogger("strom.server")

# JMX domain of each group (the MBean's ``kafka.<x>:type=<group>``); groups not listed are in kafka.server.
GROUP_DOMAINS = {
    "RequestMetrics": "kafka.network",
    "SocketServer": "kafka.network",
    "KafkaController": "kafka.controller",
    "GroupMetadataManager": "kafka.coordinator.group",
    "Log": "kafka.log",
    "LogManager": "kafka.log",
}

# Kafka's histogram percentiles, with the ``quantile`` label the JMX exporter's ``(\d+)thPercentile`` rule gives.
_QUANTILES = ((50.0, "0.50"), (75.0, "0.75"), (95.0, "0.95"), (98.0, "0.98"), (99.0, "0.99"), (99.9, "0.999"))

# Errors that only say "ask another broker": not a failed produce/fetch in Kafka's BrokerTopicStats.
_ROUTING_ERRORS = frozenset((ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH,
                             ErrorCode.UNKNOWN_LEADER_EPOCH))
_REJECTED_ERRORS = frozenset((ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                              ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD))


# -- remote time ------------------------------------------------------------------------------------------------
# Time a request spends parked (acks=all waiting for the ISR, a long-poll fetch waiting for data) is Kafka's
# RemoteTimeMs. The purgatory that parks it (ReplicaManager) does not know the request, so the dispatcher puts
# a per-request accumulator in a context variable: each connection runs its requests one at a time in its own
# task, so the variable is the current request's.
class _RequestTimes:
    __slots__ = ("remote_ns",)

    def __init__(self) -> None:
        self.remote_ns = 0


_CURRENT: contextvars.ContextVar[_RequestTimes | None] = contextvars.ContextVar("strom_request_times", default=None)


def add_remote_time(ns: int) -> None:
    """Count ``ns`` of parked time against the request being handled (no-op outside a timed request)."""
    times = _CURRENT.get()
    if times is not None:
        times.remote_ns += ns


def _request_name(api_key: int) -> str:
    cls = REQUESTS.get(api_key)
    name = cls.__name__ if cls is not None else f"ApiKey{api_key}"
    return name[:-7] if name.endswith("Request") else name


_ERROR_NAMES: dict[int, str] = {v: k for k, v in vars(ErrorCode).items() if k.isupper() and isinstance(v, int)}


def _error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"UNKNOWN_ERROR_{code}")


# -- error counts ------------------------------------------------------------------------------------------------
# Kafka's AbstractResponse.errorCounts(): every ErrorCode of a response. Each response class gets a plan once:
# its ErrorCode fields and the struct fields whose subtree holds one.
_Plan = tuple[tuple[str, ...], tuple[tuple[str, bool, Any], ...]]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        fields = getattr(cls, "FIELDS", ())
        errors = tuple(f.name for f in fields if f.json_name == "ErrorCode")
        subs = []
        for f in fields:
            if f.struct is not None:
                sub = _plan(f.struct)
                if sub[0] or sub[1]:
                    subs.append((f.name, f.type.startswith("[]"), sub))
        plan = _PLANS[cls] = (errors, tuple(subs))
    return plan


def _count_errors(obj: Any, plan: _Plan, out: dict[int, int]) -> None:
    errors, subs = plan
    for name in errors:
        code = getattr(obj, name, 0)
        if type(code) is int:
            out[code] = out.get(code, 0) + 1
    for name, is_array, sub in subs:
        value = getattr(obj, name, None)
        if value is None or not (sub[0] or sub[1]):
            continue
        if is_array:
            if isinstance(value, list):
                for item in value:
                    _count_errors(item, sub, out)
        else:
            _count_errors(value, sub, out)


def error_counts(response: Any) -> dict[int, int]:
    """``{error code: occurrences}`` over every ErrorCode field of ``response`` (Kafka's ``errorCounts``)."""
    out: dict[int, int] = {}
    _count_errors(response, _plan(type(response)), out)
    return out


# -- BrokerTopicMetrics -----------------------------------------------------------------------------------------
_TOPIC_METERS = ("MessagesInPerSec", "BytesInPerSec", "BytesOutPerSec", "BytesRejectedPerSec",
                 "FailedProduceRequestsPerSec", "FailedFetchRequestsPerSec", "TotalProduceRequestsPerSec",
                 "TotalFetchRequestsPerSec", "ReplicationBytesOutPerSec")


class _TopicCounters:
    """The ``Count`` of each BrokerTopicMetrics meter of one topic (or of all topics): plain integers bumped on
    the event loop and read by the registry's metrics; a counter costs an addition, not a sensor record. The
    validation meters are in the all-topics set only (Kafka's validator marks only those)."""

    __slots__ = (*_TOPIC_METERS, *VALIDATION_METERS, "names")

    def __init__(self, metrics: Metrics, topic: str | None) -> None:
        tags = {"topic": topic} if topic is not None else {}
        self.names = []
        for name in _TOPIC_METERS if topic is not None else (*_TOPIC_METERS, *VALIDATION_METERS):
            setattr(self, name, 0)
            metric_name = metrics.metric_name(name, "BrokerTopicMetrics", f"{name} Count", tags)
            metrics.add_metric(metric_name, Measurable(lambda _c, _n, a=name: float(getattr(self, a))))
            self.names.append(metric_name)


class BrokerTopicStats:
    """Kafka's ``BrokerTopicStats``: per-topic meters and the all-topics ones (the series without a topic
    label). Event loop only for recording."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.all_topics = _TopicCounters(metrics, None)
        self._topics: dict[str, _TopicCounters] = {}

    def topic(self, topic: str) -> _TopicCounters:
        s = self._topics.get(topic)
        if s is None:
            s = self._topics[topic] = _TopicCounters(self._metrics, topic)
        return s

    def record_append(self, topic: str, result: AppendResult, size: int) -> None:
        """One partition of a produce (or coordinator) append, after the local append (Kafka's
        ``appendToLocalLog``): its outcome, its bytes, its record count."""
        code = result.error_code
        a = self.all_topics
        a.TotalProduceRequestsPerSec += 1
        if code in _ROUTING_ERRORS:
            # An unknown topic gets no per-topic meters: a client must not grow the registry with made-up names.
            return
        s = self.topic(topic)
        s.TotalProduceRequestsPerSec += 1
        if code:
            a.FailedProduceRequestsPerSec += 1
            s.FailedProduceRequestsPerSec += 1
            if result.validation_meter is not None:
                setattr(a, result.validation_meter, getattr(a, result.validation_meter) + 1)
            if code in _REJECTED_ERRORS:
                a.BytesRejectedPerSec += size
                s.BytesRejectedPerSec += size
        elif result.info is not None:
            n = result.info.num_records
            a.BytesInPerSec += size
            s.BytesInPerSec += size
            a.MessagesInPerSec += n
            s.MessagesInPerSec += n

    def record_fetch(self, responses: Iterable[Any], from_follower: bool) -> None:
        """A Fetch response as sent: per partition a fetch request, a failure, bytes out (consumers) or
        replication bytes out (followers)."""
        a = self.all_topics
        for t in responses:
            s: _TopicCounters | None = None
            for p in t.partitions:
                a.TotalFetchRequestsPerSec += 1
                code = p.error_code
                if code in _ROUTING_ERRORS or not t.topic:
                    continue
                if s is None:
                    s = self.topic(t.topic)
                s.TotalFetchRequestsPerSec += 1
                if code:
                    a.FailedFetchRequestsPerSec += 1
                    s.FailedFetchRequestsPerSec += 1
                elif p.records:
                    n = len(p.records)
                    if from_follower:
                        a.ReplicationBytesOutPerSec += n
                        s.ReplicationBytesOutPerSec += n
                    else:
                        a.BytesOutPerSec += n
                        s.BytesOutPerSec += n

    def remove_topic(self, topic: str) -> None:
        """Drop a deleted topic's meters (Kafka's ``removeMetrics``)."""
        s = self._topics.pop(topic, None)
        if s is not None:
            for name in s.names:
                self._metrics.remove_metric(name)


# -- RequestMetrics ---------------------------------------------------------------------------------------------
_TIMES = ("TotalTimeMs", "RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs")
_RESERVOIR = 1028  # Yammer's default reservoir size, which Kafka's request histograms use


class _RequestTimeWindows:
    """The four request-time histograms of one API, as Kafka's Yammer histograms keep them: a uniform reservoir
    of up to 1,028 requests (each sample holds all four times, in µs), here per window of
    ``metrics.sample.window.ms``, ``metrics.num.samples`` windows live. Recording is an append or a random
    replacement, not a histogram update per time: it runs once per request on the event loop. A quantile
    sorts the live samples. Thread-safe."""

    def __init__(self, config: MetricConfig) -> None:
        self._samples = config.samples
        self._window_ms = max(1, config.time_window_ms)
        self._lock = threading.Lock()
        # per window: [start ms, requests seen, samples]
        self._windows: list[list[Any]] = []
        self._current: list[Any] | None = None
        self._random = random.Random()

    def record(self, now_ms: int, times: tuple[int, int, int, int]) -> None:
        with self._lock:
            w = self._current
            if w is None or now_ms - w[0] >= self._window_ms:
                if len(self._windows) < self._samples:
                    w = [now_ms, 0, []]
                    self._windows.append(w)
                else:  # reuse the oldest window
                    w = min(self._windows, key=lambda x: x[0])
                    w[0], w[1], w[2] = now_ms, 0, []
                self._current = w
            w[1] += 1
            reservoir = w[2]
            if len(reservoir) < _RESERVOIR:
                reservoir.append(times)
            else:
                j = self._random.randrange(w[1])
                if j < _RESERVOIR:
                    reservoir[j] = times

    def quantile_ms(self, which: int, percentile: float, now_ms: int) -> float:
        with self._lock:
            oldest = now_ms - self._samples * self._window_ms
            values = sorted(t[which] for w in self._windows if w[0] > oldest for t in w[2])
        if not values:
            return math.nan
        # Yammer's Snapshot.getValue: linear interpolation at quantile * (n + 1)
        pos = percentile / 100.0 * (len(values) + 1)
        if pos < 1:
            return values[0] / 1000.0
        if pos >= len(values):
            return values[-1] / 1000.0
        lower = values[int(pos) - 1]
        upper = values[int(pos)]
        return (lower + (pos - math.floor(pos)) * (upper - lower)) / 1000.0


class _ApiSensors:
    __slots__ = ("metrics", "name", "requests", "errors", "times")

    def __init__(self, metrics: Metrics, api_key: int) -> None:
        self.metrics = metrics
        self.name = _request_name(api_key)
        self.requests: dict[int, int] = {}  # Count per version
        self.errors: dict[int, int] = {}  # Count per error code
        self.times = _RequestTimeWindows(metrics.config)
        for which, name in enumerate(_TIMES):
            for pct, label in _QUANTILES:
                metrics.add_metric(
                    metrics.metric_name(name, "RequestMetrics", f"{name} {label} quantile",
                                        {"request": self.name, "quantile": label}),
                    Measurable(lambda _c, now, w=which, p=pct: self.times.quantile_ms(w, p, now)))

    def count_request(self, version: int) -> None:
        n = self.requests.get(version)
        if n is None:
            n = self.requests[version] = 0
            self.metrics.add_metric(
                self.metrics.metric_name("RequestsPerSec", "RequestMetrics", "requests handled (Count)",
                                         {"request": self.name, "version": str(version)}),
                Measurable(lambda _c, _n: float(self.requests[version])))
        self.requests[version] = n + 1

    def count_error(self, code: int, times: int) -> None:
        n = self.errors.get(code)
        if n is None:
            n = self.errors[code] = 0
            self.metrics.add_metric(
                self.metrics.metric_name("ErrorsPerSec", "RequestMetrics", "error codes in responses (Count)",
                                         {"request": self.name, "error": _error_name(code)}),
                Measurable(lambda _c, _n: float(self.errors[code])))
        self.errors[code] = n + times


class RequestMetrics:
    """Kafka's ``RequestChannel.Metrics`` per API: RequestsPerSec by version, ErrorsPerSec by error, and
    TotalTimeMs / RequestQueueTimeMs / LocalTimeMs / RemoteTimeMs percentiles. Event loop only."""

    def __init__(self, metrics: Metrics, time: Time) -> None:
        self._metrics = metrics
        self._time = time
        self._apis: dict[int, _ApiSensors] = {}

    async def timed(self, handler: Any, ctx: Any, request: Any, received_ns: int) -> Any:
        """Run ``handler(ctx, request)`` and record its request metrics; ``received_ns`` is when the frame
        arrived (the queue time runs from there to now)."""
        now_ns = self._time.nanoseconds
        start = now_ns()
        times = _RequestTimes()
        token = _CURRENT.set(times)
        try:
            response = await handler(ctx, request)
        except ConnectionClosed as e:  # (counted with the errors of the response it did not send, then closed)
            self._record(ctx, start, now_ns(), received_ns, times, e.response)
            raise
        finally:
            _CURRENT.reset(token)
        self._record(ctx, start, now_ns(), received_ns, times, response)
        return response

    def _record(self, ctx: Any, start: int, end: int, received_ns: int, times: _RequestTimes,
                response: Any) -> None:
        api = self._apis.get(ctx.api_key)
        if api is None:
            api = self._apis[ctx.api_key] = _ApiSensors(self._metrics, ctx.api_key)
        queue_us = max(0, start - received_ns) // 1000 if received_ns else 0
        handler_us = (end - start) // 1000
        remote_us = min(times.remote_ns // 1000, handler_us)
        api.count_request(ctx.api_version)
        api.times.record(self._time.milliseconds(), (queue_us + handler_us, queue_us, handler_us - remote_us,
                                                     remote_us))
        if response is not None:
            for code, n in error_counts(response).items():
                api.count_error(code, n)


# -- per-partition series -------------------------------------------------------------------------------------
class PartitionSeriesCollector:
    """A prometheus-client collector for series that come and go with partitions and groups, computed per
    scrape: ``kafka_log_log_{size,numlogsegments,logstartoffset,logendoffset}{topic,partition}`` over the live
    logs, and kafka_exporter's ``kafka_consumergroup_current_offset`` / ``kafka_consumergroup_lag``
    ``{consumergroup,topic,partition}`` for the groups this broker coordinates, whose partitions it hosts (lag =
    high watermark - committed offset)."""

    def __init__(self) -> None:
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: Any = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        rm = self.replica_manager
        if rm is None:
            return
        logs = [(n, GaugeMetricFamily(prometheus_name("kafka.log", "Log", n), f"Log {n}",
                                      labels=["topic", "partition"]))
                for n in ("Size", "NumLogSegments", "LogStartOffset", "LogEndOffset")]
        hws: dict[Any, int] = {}
        for tp, p in _copy_items(rm.partitions):
            try:
                lg = p.log
                labels = [tp.topic, str(tp.partition)]
                values = (lg.size_in_bytes, lg.num_segments, lg.log_start_offset, lg.log_end_offset)
                hws[tp] = lg.high_watermark
            except Exception:  # deleted or closed while we looked: skip it this scrape
                continue
            for (_n, family), v in zip(logs, values, strict=True):
                family.add_metric(labels, float(v))
        yield from (f for _n, f in logs)
        gc = self.group_coordinator
        if gc is None:
            return
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Current offset of a consumer group",
                                    labels=["consumergroup", "topic", "partition"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Current approximate lag of a consumer group",
                                labels=["consumergroup", "topic", "partition"])
        for group_id, group in _copy_items(gc.manager.groups):
            for tp, committed in _copy_items(group.offsets):
                labels = [group_id, tp.topic, str(tp.partition)]
                current.add_metric(labels, float(committed.offset))
                hw = hws.get(tp)
                if hw is not None:
                    lag.add_metric(labels, float(max(0, hw - committed.offset)))
        yield current
        yield lag


def _copy_items(d: dict[Any, Any]) -> list[tuple[Any, Any]]:
    for _ in range(10):
        try:
            return list(d.items())
        except RuntimeError:  # resized by the event loop while copying
            continue
    return []


def _copy_values(d: dict[Any, Any]) -> list[Any]:
    return [v for _k, v in _copy_items(d)]


# -- the broker's registry ----------------------------------------------------------------------------------------
class BrokerMetrics:
    """The broker's registry (``metrics.num.samples``, ``metrics.sample.window.ms``, ``metrics.recording.level``,
    ``metric.reporters``), its recorders and gauges, and the ``metrics.prometheus.listener`` endpoint."""

    def __init__(self, config: MetricConfig | None = None, reporters: Iterable[Any] = (),
                 time: Time = SYSTEM_TIME, prometheus_listener: str = "") -> None:
        self.time = time
        self.metrics = Metrics(config or MetricConfig(), list(reporters), time)
        self.metrics.jmx_prefix = "kafka.server"
        self.topic_stats = BrokerTopicStats(self.metrics)
        self.requests = RequestMetrics(self.metrics, time)
        self.partition_series = PartitionSeriesCollector()
        self.prometheus_listener = parse_listener(prometheus_listener)  # ValueError for a bad value
        # Clients' pushed metrics (KIP-714), served with the broker's own when the endpoint is on.
        self.client_telemetry = ClientTelemetryStore() if self.prometheus_listener is not None else None
        self.http: MetricsHttpServer | None = None
        self._probe: asyncio.Task[None] | None = None
        m = self.metrics
        self._isr_shrinks = m.sensor("ReplicaManager:IsrShrinksPerSec")
        self._isr_shrinks.add(m.metric_name("IsrShrinksPerSec", "ReplicaManager", "ISR shrinks (Count)"),
                              CumulativeCount())
        self._isr_expands = m.sensor("ReplicaManager:IsrExpandsPerSec")
        self._isr_expands.add(m.metric_name("IsrExpandsPerSec", "ReplicaManager", "ISR expansions (Count)"),
                              CumulativeCount())
        self.offset_commits = m.sensor("group-coordinator-metrics:offset-commit")
        self.offset_commits.add(None, Meter(
            m.metric_name("offset-commit-rate", "group-coordinator-metrics", "committed offsets per second"),
            m.metric_name("offset-commit-count", "group-coordinator-metrics", "committed offsets")))

    @classmethod
    def from_config(cls, config: Any, time: Time = SYSTEM_TIME) -> BrokerMetrics:
        """From a :class:`~strom.server.broker_config.BrokerConfig`; raises ``ValueError`` / ``TypeError`` /
        ``ImportError`` naming the bad key."""
        mc = MetricConfig(samples=int(config["metrics.num.samples"]),
                          time_window_ms=int(config["metrics.sample.window.ms"]),
                          recording_level=config["metrics.recording.level"])
        reporters = load_reporters(config["metric.reporters"], dict(config.originals))
        return cls(mc, reporters, time, config["metrics.prometheus.listener"] or "")

    # -- recorders handed to collaborators ------------------------------------------------------------------------
    def isr_changed(self, old: set[int], new: set[int]) -> None:
        """A committed ISR change of a partition this broker leads (Kafka marks shrink / expand)."""
        if old - new:
            self._isr_shrinks.record()
        if new - old:
            self._isr_expands.record()

    # -- gauges over collaborators --------------------------------------------------------------------------------
    def _gauge(self, name: str, group: str, description: str, fn: Any, tags: dict[str, str] | None = None) -> None:
        self.metrics.add_metric_if_absent(self.metrics.metric_name(name, group, description, tags),
                                          lambda _config, _now: float(fn()))

    def add_replica_manager(self, rm: ReplicaManager) -> None:
        """ReplicaManager gauges (Kafka's ``kafka.server:type=ReplicaManager``) and the per-partition series."""
        def leaders() -> list[Any]:
            return [p for p in _copy_values(rm.partitions) if p.is_leader]

        def min_isr(p: Any) -> int:
            return rm.log_config(p.tp.topic).min_insync_replicas

        g = "ReplicaManager"
        self._gauge("PartitionCount", g, "partitions on this broker", lambda: len(rm.partitions))
        self._gauge("LeaderCount", g, "partitions this broker leads", lambda: len(leaders()))
        self._gauge("UnderReplicatedPartitions", g, "led partitions whose ISR is smaller than their replicas",
                    lambda: sum(1 for p in leaders() if len(p.isr) < len(p.replicas)))
        self._gauge("UnderMinIsrPartitionCount", g, "led partitions whose ISR is below min.insync.replicas",
                    lambda: sum(1 for p in leaders() if len(p.isr) < min_isr(p)))
        self._gauge("AtMinIsrPartitionCount", g, "led partitions whose ISR is exactly min.insync.replicas",
                    lambda: sum(1 for p in leaders() if len(p.isr) == min_isr(p)))
        self._gauge("OfflineReplicaCount", g, "replicas in a failed log dir (KIP-112)",
                    lambda: len(rm.offline_partitions))
        self.partition_series.replica_manager = rm

    def add_log_manager(self, lm: Any) -> None:
        """``kafka.log:type=LogManager``: ``OfflineLogDirectoryCount`` and, per log dir, ``LogDirectoryOffline``
        (1 once the dir failed)."""
        self._gauge("OfflineLogDirectoryCount", "LogManager", "log dirs that failed",
                    lambda: len(lm.offline_log_dirs))
        for d in lm.log_dirs:
            self._gauge("LogDirectoryOffline", "LogManager", "1 when this log dir failed",
                        lambda d=d: int(lm.failure_channel.has_offline_log_dir(d)), {"logDirectory": d})

    def telemetry_receivers(self) -> list[Any]:
        """Who takes clients' pushed metrics (KIP-714): the Prometheus endpoint's store, and ``metric.reporters``
        plug-ins with ``client_receiver()``. None of them: the broker does not offer the telemetry APIs."""
        out: list[Any] = reporter_receivers(list(self.metrics._reporters))
        if self.client_telemetry is not None:
            out.insert(0, self.client_telemetry.receive)
        return out

    def add_client_metrics(self, manager: Any) -> None:
        """Kafka's ``client-metrics`` group: client instances known, pushes refused for a stale subscription id
        and requests throttled (early); a forgotten instance's pushed series go with it."""
        g = "client-metrics"
        self._gauge("instance-count", g, "client metrics instances the broker knows", lambda: len(manager.instances))
        self._gauge("unknown-subscription-request-count", g, "pushes with an unknown subscription id",
                    lambda: manager.unknown_subscription_requests)
        self._gauge("throttle-count", g, "telemetry requests before their push interval", lambda: manager.throttled)
        if self.client_telemetry is not None:
            manager.on_instance_removed.append(self.client_telemetry.forget)

    def add_fetch_session_cache(self, cache: Any) -> None:
        """``kafka.server:type=FetchSessionCache``: sessions and partitions cached, evictions (a meter's Count)."""
        g = "FetchSessionCache"
        self._gauge("NumIncrementalFetchSessions", g, "incremental fetch sessions cached", lambda: cache.size)
        self._gauge("NumIncrementalFetchPartitionsCached", g, "partitions of the cached fetch sessions",
                    lambda: cache.total_partitions)
        self._gauge("IncrementalFetchSessionEvictionsPerSec", g, "fetch sessions evicted (Count)",
                    lambda: cache.evictions)

    def add_controller(self, controller: Any) -> None:
        """``kafka.controller:type=KafkaController`` gauges. ``None`` (a standalone broker, which is its own
        controller and leads every partition): 1 active controller, no offline partitions."""
        g = "KafkaController"

        def active() -> int:
            return 1 if controller is None or controller.active else 0

        def offline() -> int:
            if controller is None or not controller.active:
                return 0
            ctx = controller.ctx
            deleting = ctx.topics_being_deleted
            return sum(1 for tp, st in _copy_items(ctx.states)
                       if tp.topic not in deleting and (st.leader < 0 or not ctx.replica_online(st.leader, tp)))

        self._gauge("ActiveControllerCount", g, "1 on the active controller", active)
        self._gauge("OfflinePartitionsCount", g, "partitions without a live leader (active controller only)",
                    offline)

    def add_group_coordinator(self, gc: Any) -> None:
        """``kafka.coordinator.group:type=GroupMetadataManager`` NumGroups and NumGroups<State>, and consumer lag."""
        from strom.server.coordinator.group_metadata import GroupState

        g = "GroupMetadataManager"
        self._gauge("NumGroups", g, "groups this coordinator holds", lambda: len(gc.manager.groups))
        self._gauge("NumOffsets", g, "committed offsets this coordinator holds",
                    lambda: sum(len(grp.offsets) for grp in _copy_values(gc.manager.groups)))
        for state in GroupState:
            self._gauge(f"NumGroups{state.value}", g, f"groups in state {state.value}",
                        lambda s=state: sum(1 for grp in _copy_values(gc.manager.groups) if grp.state is s))
        self.partition_series.group_coordinator = gc

    def add_socket_servers(self, servers: Iterable[Any]) -> None:
        """``socket-server-metrics`` per listener: connection-count, connection-creation-rate/total."""
        g = "socket-server-metrics"
        m = self.metrics
        for server in servers:
            tags = {"listener": server.listener.name}
            self._gauge("connection-count", g, "open connections", lambda s=server: len(s.connections), tags)
            sensor = m.sensor(f"socket-server-metrics:connections-created:{server.listener.name}")
            sensor.add(None, Meter(m.metric_name("connection-creation-rate", g, "new connections per second", tags),
                                   m.metric_name("connection-creation-total", g, "new connections", tags)))
            server.on_connection_created = sensor.record

    # -- event loop probe ---------------------------------------------------------------------------------------
    def start_event_loop_probe(self, interval_s: float = 0.5) -> None:
        """Measure the event loop every ``interval_s``: its busy ratio (CPU time of the loop's thread over wall
        time: a loop waiting for I/O uses none) and its lag (how late a timer fires). RequestHandlerAvgIdlePercent
        (Kafka: the idle fraction of the request handler threads) is ``1 - busy``."""
        m = self.metrics
        g = "event-loop-metrics"
        busy = m.sensor("event-loop:busy")
        busy.add(m.metric_name("busy-ratio-avg", g, "fraction of time the event loop thread was on CPU"), Avg())
        last_busy = Value()
        busy.add(m.metric_name("busy-ratio", g, "busy ratio over the last probe interval"), last_busy)
        lag = m.sensor("event-loop:lag")
        lag.add(m.metric_name("lag-avg-ms", g, "how late the probe timer fired (ms)"), Avg())
        lag.add(m.metric_name("lag-max-ms", g, "how late the probe timer fired, worst (ms)"), Max())
        m.add_metric_if_absent(
            m.metric_name("RequestHandlerAvgIdlePercent", "KafkaRequestHandlerPool",
                          "idle fraction of the event loop (1 - busy ratio), Kafka's handler idle stand-in"),
            lambda _config, _now: 1.0 - last_busy.value)

        async def probe() -> None:
            wall, cpu = _time.monotonic(), _time.thread_time()
            while True:
                await asyncio.sleep(interval_s)
                w, c = _time.monotonic(), _time.thread_time()
                elapsed = w - wall
                if elapsed > 0:
                    busy.record(min(1.0, max(0.0, (c - cpu) / elapsed)))
                    lag.record(max(0.0, (elapsed - interval_s) * 1000.0))
                wall, cpu = w, c

        self._probe = asyncio.get_running_loop().create_task(probe())

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start_http(self) -> None:
        """Serve ``/metrics`` when ``metrics.prometheus.listener`` is set; raises ``OSError`` when the address
        cannot be bound."""
        if self.prometheus_listener is None or self.http is not None:
            return
        host, port = self.prometheus_listener
        server = MetricsHttpServer(None, host, port)
        server.add(self.metrics, "kafka.server", GROUP_DOMAINS)
        server.register(self.partition_series)  # type: ignore[arg-type]
        if self.client_telemetry is not None:
            server.register(self.client_telemetry)  # type: ignore[arg-type]
        self.http = server
        log.info("serving Prometheus metrics on %s", server.url)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        if self.http is not None:
            self.http.close()
            self.http = None
        self.metrics.close()
