"""The metrics registry of a client, built from its config as Kafka's clients build theirs.

``metrics.num.samples``, ``metrics.sample.window.ms`` and ``metrics.recording.level`` make the
:class:`MetricConfig`; every metric name carries ``client-id``; ``metric.reporters`` are loaded by class name
and configured with the client's configs; ``app-info`` (version, commit-id, start-time-ms) is registered as
Kafka's ``AppInfoParser`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom.common.time import Time
from strom.metrics.metric_name import MetricConfig
from strom.metrics.metrics import Gauge, Metrics
from strom.metrics.reporter import load_reporters

__all__ = ["new_client_metrics"]


def new_client_metrics(values: Mapping[str, Any], client_id: str, time: Time, jmx_prefix: str) -> Metrics:
    """A registry for a client whose parsed configs are ``values``. ``jmx_prefix`` (``producer``,
    ``consumer``, ``admin.client``) is kept as :attr:`Metrics.jmx_prefix` for exposition."""
    from strom import __version__

    config = MetricConfig.from_client_config(values, {"client-id": client_id})
    reporters = load_reporters(values.get("metric.reporters"), values)
    metrics = Metrics(config, reporters, time)
    metrics.jmx_prefix = f"kafka.{jmx_prefix}"
    start_ms = time.milliseconds()
    for name, description, value in (("version", "Metric indicating version", __version__),
                                      ("commit-id", "Metric indicating commit-id", "unknown"),
                                      ("start-time-ms", "Metric indicating start-time-ms", start_ms)):
        metrics.add_metric(metrics.metric_name(name, "app-info", description), Gauge(lambda v=value: v))
    return metrics
