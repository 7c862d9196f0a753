"""The metrics registry: Kafka's ``Metrics``, ``Sensor`` and ``KafkaMetric``.

Kafka counterpart: ``org.apache.kafka.common.metrics`` (3.x). A :class:`Metrics` registry holds named
:class:`Sensor` objects and :class:`KafkaMetric` objects keyed by :class:`MetricName`. A sensor records values
into its stats (each stat is one or more metrics) and then into its parents, so a per-topic sensor can feed the
client-wide one. A metric's value is computed when read (``metric_value()``), at the registry's clock, so an
idle rate decays as Kafka's does. Registry changes are told to every ``metric.reporters`` plug-in.

Time is injected (:class:`strom.common.time.Time`): tests step a ``MockTime`` and read exact values.

Thread-safety: thread-safe as Kafka's. A sensor's ``record`` and its metrics' reads hold the sensor's lock
(one lock per sensor, so the Sender thread and caller threads contend only on the same sensor); the registry's
maps are guarded by the registry's lock. Reporters are called outside that lock. Lock order: registry, then
sensor — ``record`` never takes the registry lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strom.common.time import SYSTEM_TIME, Time
from strom.metrics.metric_name import MetricConfig, MetricName, RecordingLevel
from strom.metrics.reporter import MetricsReporter

__all__ = ["KafkaMetric", "Sensor", "Metrics", "Measurable", "Gauge", "metric_values"]

log = logging.getLogger(__name__)


class Measurable:
    """A numeric value read from a config and a time (Kafka's ``Measurable``); wraps a ``(config, now_ms)``
    callable."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[MetricConfig, int], float]) -> None:
        self._fn = fn

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._fn(config, now_ms)


class Gauge:
    """A value of any type read when asked (Kafka's ``Gauge``); wraps a no-argument callable."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    def value(self, config: MetricConfig, now_ms: int) -> Any:
        return self._fn()


class KafkaMetric:
    """Kafka's ``KafkaMetric``: a name, the measurable or gauge behind it and the lock that guards it."""

    __slots__ = ("_name", "_provider", "_lock", "config", "_time", "_is_measurable")

    def __init__(self, lock: Any, name: MetricName, provider: Any, config: MetricConfig, time: Time) -> None:
        if not (callable(getattr(provider, "measure", None)) or callable(getattr(provider, "value", None))):
            raise TypeError(f"metric {name.name!r} needs a measurable or a gauge, not {type(provider).__name__}")
        self._lock = lock
        self._name = name
        self._provider = provider
        self._is_measurable = callable(getattr(provider, "measure", None))
        self.config = config
        self._time = time

    def metric_name(self) -> MetricName:
        return self._name

    def metric_value(self) -> Any:
        """The current value: a measurable at the registry's clock, or the gauge's value."""
        now = self._time.milliseconds()
        with self._lock:
            if self._is_measurable:
                return self._provider.measure(self.config, now)
            return self._provider.value(self.config, now)

    def measurable(self) -> Any:
        if not self._is_measurable:
            raise TypeError(f"Not a measurable: {self._name.name}")
        return self._provider

    def is_measurable(self) -> bool:
        return self._is_measurable

    def __repr__(self) -> str:
        return f"KafkaMetric({self._name!r})"


class Sensor:
    """Kafka's ``Sensor``: records values into its stats, then into its parents. Thread-safe."""

    __slots__ = ("_registry", "name", "_parents", "_stats", "_metrics", "config", "_time", "recording_level",
                 "_lock", "_should_record", "_stat_records")

    def __init__(self, registry: Metrics, name: str, parents: Iterable[Sensor], config: MetricConfig, time: Time,
                 recording_level: RecordingLevel) -> None:
        self._registry = registry
        self.name = name
        self._parents = tuple(parents)
        self._stats: list[Any] = []
        self._stat_records: tuple[Callable[[MetricConfig, float, int], None], ...] = ()
        self._metrics: dict[MetricName, KafkaMetric] = {}
        self.config = config
        self._time = time
        self.recording_level = recording_level
        self._lock = threading.RLock()
        self._should_record = recording_level.should_record(registry.config.recording_level)
        for parent in self._parents:
            if parent is self:
                raise ValueError(f"Sensor {name} cannot be its own parent")

    def should_record(self) -> bool:
        """Whether ``metrics.recording.level`` includes this sensor's level (a DEBUG sensor records nothing at
        INFO, so the hot path pays only this test)."""
        return self._should_record

    def record(self, value: float = 1.0, time_ms: int | None = None, check_quotas: bool = False) -> None:
        """Record ``value`` at ``time_ms`` (the registry's clock when ``None``) into every stat and parent.

        With ``check_quotas`` a metric whose config has a quota is measured after recording and
        :class:`~strom.metrics.quota.QuotaViolationError` raised when it is out of bounds (Kafka's
        ``record(value, timeMs, checkQuotas)``); the value stays recorded."""
        if not self._should_record:
            return
        if time_ms is None:
            time_ms = self._time.milliseconds()
        config = self.config
        with self._lock:
            for record in self._stat_records:
                record(config, value, time_ms)
            if check_quotas:
                self.check_quotas(time_ms)
        if self._parents:
            for parent in self._parents:
                parent.record(value, time_ms, check_quotas)

    def check_quotas(self, time_ms: int | None = None) -> None:
        """Raise :class:`~strom.metrics.quota.QuotaViolationError` if a metric with a quota is out of bounds now
        (Kafka's ``checkQuotas``). A :class:`~strom.metrics.stats.TokenBucket` is out of bounds when it holds
        fewer than zero tokens (its quota's bound is the refill rate, not a limit on the value)."""
        from strom.metrics.stats import TokenBucket

        if time_ms is None:
            time_ms = self._time.milliseconds()
        for metric in self._metrics.values():
            quota = metric.config.quota
            if quota is not None and metric.is_measurable():
                measurable = metric.measurable()
                value = measurable.measure(metric.config, time_ms)
                if value < 0 if isinstance(measurable, TokenBucket) else not quota.acceptable(value):
                    from strom.metrics.quota import QuotaViolationError

                    raise QuotaViolationError(metric, value, quota.bound)

    def parents(self) -> tuple[Sensor, ...]:
        return self._parents

    def add(self, name: MetricName | None, stat: Any, config: MetricConfig | None = None) -> bool:
        """Add ``stat``: a measurable stat reported as ``name``, or a compound stat (``name`` ``None``; a
        :class:`~strom.metrics.stats.Meter` or :class:`~strom.metrics.percentiles.Percentiles`) reported under
        its own names. Returns False when the sensor already has a metric of that name (the stat is not added
        twice, as in Kafka)."""
        named = [(n.name, n.stat) for n in stat.stats()] if name is None else [(name, stat)]
        with self._lock:
            if any(n in self._metrics for n, _ in named):
                return False
            metric_config = config or self.config
            new_metrics = [KafkaMetric(self._lock, n, s, metric_config, self._time) for n, s in named]
            self._registry._register_metrics(new_metrics)  # raises if another sensor owns the name
            for m in new_metrics:
                self._metrics[m.metric_name()] = m
            self._stats.append(stat)
            record = stat.record
            if config is not None and len(new_metrics) == 1:
                # Kafka's StatAndConfig: the stat records with its metric's config (its windows, its quota), read
                # at each record since a quota update replaces it, not with the sensor's
                metric = new_metrics[0]

                def record(_sensor_config: MetricConfig, value: float, time_ms: int, _stat: Any = stat,
                           _metric: KafkaMetric = metric) -> None:
                    _stat.record(_metric.config, value, time_ms)
            self._stat_records = (*self._stat_records, record)
        return True

    def has_metric(self, name: MetricName) -> bool:
        return name in self._metrics

    def metrics(self) -> list[KafkaMetric]:
        with self._lock:
            return list(self._metrics.values())

    def __repr__(self) -> str:
        return f"Sensor({self.name!r})"


class Metrics:
    """Kafka's ``Metrics`` registry. Thread-safe. ``close()`` closes the reporters."""

    def __init__(self, config: MetricConfig | None = None, reporters: Iterable[MetricsReporter] = (),
                 time: Time = SYSTEM_TIME) -> None:
        self.config = config or MetricConfig()
        self.time = time
        self.jmx_prefix = "kafka"  # the JMX domain a client or the broker reports under (kafka.producer, ...)
        self._lock = threading.RLock()
        self._metrics: dict[MetricName, KafkaMetric] = {}
        self._sensors: dict[str, Sensor] = {}
        self._children: dict[str, list[Sensor]] = {}
        self._reporters: list[MetricsReporter] = []
        self._closed = False
        self.add_metric(self.metric_name("count", "kafka-metrics-count", "total number of registered metrics"),
                        Measurable(lambda _c, _n: float(len(self._metrics))))
        for reporter in reporters:
            self.add_reporter(reporter)

    # ---------------------------------------------------------------------------------------- names

    def metric_name(self, name: str, group: str, description: str = "",
                    tags: Mapping[str, str] | None = None) -> MetricName:
        """A name in ``group`` whose tags are the registry's global tags (e.g. ``client-id``) plus ``tags``."""
        combined = dict(self.config.tags)
        if tags:
            combined.update(tags)
        return MetricName(name, group, description, combined)

    # -------------------------------------------------------------------------------------- sensors

    def sensor(self, name: str, config: MetricConfig | None = None, *parents: Sensor,
               recording_level: RecordingLevel = RecordingLevel.INFO) -> Sensor:
        """The sensor called ``name``, created (with ``parents``) if missing."""
        with self._lock:
            sensor = self._sensors.get(name)
            if sensor is None:
                sensor = Sensor(self, name, parents, config or self.config, self.time, recording_level)
                self._sensors[name] = sensor
                for parent in parents:
                    self._children.setdefault(parent.name, []).append(sensor)
            return sensor

    def get_sensor(self, name: str) -> Sensor | None:
        with self._lock:
            return self._sensors.get(name)

    def remove_sensor(self, name: str) -> None:
        """Remove sensor ``name``, its metrics and (first) the sensors it is a parent of."""
        removed: list[KafkaMetric] = []
        with self._lock:
            self._remove_sensor_locked(name, removed)
        for metric in removed:
            self._notify("metric_removal", metric)

    def _remove_sensor_locked(self, name: str, removed: list[KafkaMetric]) -> None:
        sensor = self._sensors.pop(name, None)
        if sensor is None:
            return
        for child in self._children.pop(name, []):
            self._remove_sensor_locked(child.name, removed)
        for metric in sensor.metrics():
            if self._metrics.get(metric.metric_name()) is metric:
                del self._metrics[metric.metric_name()]
                removed.append(metric)
        for parent in sensor.parents():
            siblings = self._children.get(parent.name)
            if siblings and sensor in siblings:
                siblings.remove(sensor)

    # -------------------------------------------------------------------------------------- metrics

    def add_metric(self, name: MetricName, provider: Any, config: MetricConfig | None = None) -> KafkaMetric:
        """Add a metric outside any sensor: a measurable, a gauge, or a ``(config, now_ms)`` callable. Raises
        ``ValueError`` when the name is taken."""
        if not (hasattr(provider, "measure") or hasattr(provider, "value")) and callable(provider):
            provider = Measurable(provider)
        metric = KafkaMetric(threading.Lock(), name, provider, config or self.config, self.time)
        self._register_metrics([metric])
        return metric

    def add_metric_if_absent(self, name: MetricName, provider: Any, config: MetricConfig | None = None
                             ) -> KafkaMetric:
        with self._lock:
            existing = self._metrics.get(name)
            if existing is not None:
                return existing
            return self.add_metric(name, provider, config)

    def remove_metric(self, name: MetricName) -> KafkaMetric | None:
        with self._lock:
            metric = self._metrics.pop(name, None)
        if metric is not None:
            self._notify("metric_removal", metric)
        return metric

    def _register_metrics(self, metrics: list[KafkaMetric]) -> None:
        with self._lock:
            for m in metrics:
                if m.metric_name() in self._metrics:
                    raise ValueError(f"A metric named '{m.metric_name()!r}' already exists, can't register "
                                     f"another one.")
            for m in metrics:
                self._metrics[m.metric_name()] = m
        for m in metrics:
            self._notify("metric_change", m)

    def metrics(self) -> dict[MetricName, KafkaMetric]:
        """A snapshot of every metric by name (Kafka's ``metrics()``)."""
        with self._lock:
            return dict(self._metrics)

    def metric(self, name: MetricName) -> KafkaMetric | None:
        with self._lock:
            return self._metrics.get(name)

    # ------------------------------------------------------------------------------------ reporters

    def add_reporter(self, reporter: MetricsReporter) -> None:
        with self._lock:
            self._reporters.append(reporter)
            current = list(self._metrics.values())
        reporter.init(current)

    def remove_reporter(self, reporter: MetricsReporter) -> None:
        with self._lock:
            if reporter not in self._reporters:
                return
            self._reporters.remove(reporter)
        reporter.close()

    def reporters(self) -> list[MetricsReporter]:
        with self._lock:
            return list(self._reporters)

    def _notify(self, method: str, metric: KafkaMetric) -> None:
        for reporter in self.reporters():
            try:
                getattr(reporter, method)(metric)
            except Exception:  # a broken reporter must not break the client that records
                log.error("Error when %s called for metric %s", method, metric.metric_name(), exc_info=True)

    def close(self) -> None:
        """Close every reporter (once)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reporters, self._reporters = self._reporters, []
        for reporter in reporters:
            try:
                reporter.close()
            except Exception:
                log.error("Error when closing %s", type(reporter).__name__, exc_info=True)


def metric_values(metrics: Mapping[MetricName, KafkaMetric], group: str | None = None,
                  **tags: str) -> dict[str, Any]:
    """``{name: value}`` of the metrics in ``group`` (any group when ``None``) whose tags include ``tags``
    (keyword underscores stand for dashes: ``client_id="p"``). Convenience for tests, tools and the console."""
    want = {k.replace("_", "-"): v for k, v in tags.items()}
    out: dict[str, Any] = {}
    for name, metric in metrics.items():
        if group is not None and name.group != group:
            continue
        if want:
            have = name.tags
            if any(have.get(k) != v for k, v in want.items()):
                continue
        out[name.name] = metric.metric_value()
    return out
