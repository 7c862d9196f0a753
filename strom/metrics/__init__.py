"""Kafka's metrics model shared by the clients and the broker: names, sensors, stats, reporters.

``Metrics`` (registry) → ``Sensor`` (records values, feeds parents) → stats (``Rate``, ``Avg``, ``Max``, ``Min``,
``CumulativeSum``, ``CumulativeCount``, ``WindowedCount``, ``Meter``, ``Percentiles``) → ``KafkaMetric`` objects
named by ``MetricName(name, group, description, tags)``. Prometheus exposition lives in
:mod:`strom.metrics.prometheus` (imported on demand: it needs ``prometheus_client``).
"""

from strom.metrics.metric_name import MetricConfig, MetricName, RecordingLevel
from strom.metrics.metrics import Gauge, KafkaMetric, Measurable, Metrics, Sensor, metric_values
from strom.metrics.percentiles import Percentile, Percentiles
from strom.metrics.reporter import MetricsReporter, load_reporters
from strom.metrics.stats import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Max,
    Meter,
    Min,
    Rate,
    SampledStats,
    TokenBucket,
    Total,
    Value,
    WindowedCount,
    WindowedSum,
)

__all__ = [
    "MetricConfig", "MetricName", "RecordingLevel", "Gauge", "KafkaMetric", "Measurable", "Metrics", "Sensor",
    "metric_values", "Percentile", "Percentiles", "MetricsReporter", "load_reporters", "Avg", "CumulativeCount",
    "CumulativeSum", "Max", "Meter", "Min", "Rate", "SampledStats", "TokenBucket", "Total", "Value", "WindowedCount", "WindowedSum",
]
