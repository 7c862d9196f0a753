"""Prometheus exposition of a :class:`~strom.metrics.metrics.Metrics` registry, with JMX-exporter names.

Naming rule (the one Prometheus' JMX exporter produces for Kafka's client and broker MBeans with the usual
``kafka.(.+)<type=(.+), ...><>(.+)`` rules and ``lowercaseOutputName``): a metric ``name`` in ``group`` of a
registry whose JMX domain is ``domain`` becomes

    ``<domain>_<group>_<name>``  lowercased, every character outside ``[a-z0-9_]`` replaced by ``_``

and each tag becomes a label of the same sanitised name (a group written ``domain:group`` carries its own
domain, so one registry can hold ``kafka.server:...``, ``kafka.network:...`` and ``kafka.log:...`` metrics): ``record-send-rate`` in ``producer-metrics`` of a
producer (domain ``kafka.producer``) tagged ``client-id=p1`` is
``kafka_producer_producer_metrics_record_send_rate{client_id="p1"}``. Every series is a gauge (the JMX exporter
exports MBean attributes untyped or as gauges; Kafka's ``-total`` metrics are cumulative, so ``rate()`` works on
them). Values that are not numbers (string gauges such as ``app-info`` ``version``) are skipped.

:class:`MetricsHttpServer` serves ``/metrics`` from ``prometheus_client``'s threaded WSGI server, one
:class:`KafkaMetricsCollector` per registry; each scrape reads the metrics' current values.

Thread-safety: the collector reads metrics through their locks; the server handles scrapes on its own threads.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector, CollectorRegistry

from strom.metrics.metric_name import MetricName
from strom.metrics.metrics import KafkaMetric

__all__ = ["KafkaMetricsCollector", "MetricsHttpServer", "MetricsSource", "prometheus_name", "parse_listener"]


class MetricsSource(Protocol):
    """Anything with Kafka's ``metrics()``: a :class:`~strom.metrics.metrics.Metrics` registry, or a producer,
    consumer or admin client."""

    def metrics(self) -> Mapping[MetricName, KafkaMetric]: ...

_INVALID = re.compile(r"[^a-z0-9_]")


def _sanitize(s: str) -> str:
    return _INVALID.sub("_", s.lower())


def prometheus_name(domain: str, group: str, name: str) -> str:
    """The series name the JMX exporter gives metric ``name`` of ``group`` in JMX ``domain``.

    A broker meter ``<X>PerSec`` (a Yammer meter whose ``Count`` the broker registry holds) follows the JMX
    exporter's ``(.+)PerSec\\w*><>Count`` rule: ``<domain>_<group>_<x>_total``."""
    if name.endswith("PerSec"):
        return f"{_sanitize(domain)}_{_sanitize(group)}_{_sanitize(name[:-6])}_total"
    return f"{_sanitize(domain)}_{_sanitize(group)}_{_sanitize(name)}"


def _label(tag: str) -> str:
    label = _INVALID.sub("_", tag.lower()) or "_"
    return "_" + label if label[0].isdigit() else label


class KafkaMetricsCollector(Collector):
    """A prometheus-client collector for one metrics registry (or client) under JMX ``domain``
    (``kafka.producer``, ``kafka.consumer``, ``kafka.admin.client``, ``kafka.server``, ...)."""

    def __init__(self, metrics: MetricsSource, domain: str, group_domains: Mapping[str, str] | None = None) -> None:
        if not domain:
            raise ValueError("a JMX domain such as 'kafka.server' is required")
        self.metrics = metrics
        self.domain = domain
        # The broker's MBeans live in several domains (kafka.network:type=RequestMetrics, kafka.log:type=Log):
        # the domain of a group when it is not ``domain``.
        self.group_domains = dict(group_domains or {})
        # series name and labels per metric name: sanitising is done once, not per scrape
        self._names: dict[MetricName, tuple[str, dict[str, str], str]] = {}

    def _series(self, metric_name: MetricName) -> tuple[str, dict[str, str], str]:
        known = self._names.get(metric_name)
        if known is None:
            if len(self._names) > 100_000:  # metrics come and go (partitions): do not grow forever
                self._names.clear()
            domain, _, group = metric_name.group.rpartition(":")
            series = prometheus_name(domain or self.group_domains.get(group, self.domain), group, metric_name.name)
            labels = {_label(k): v for k, v in metric_name.tags.items()}
            doc = metric_name.description or f"{metric_name.group} {metric_name.name}"
            known = self._names[metric_name] = (series, labels, doc)
        return known

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        for metric_name, metric in self.metrics.metrics().items():
            try:
                value: Any = metric.metric_value()
            except Exception:  # one failing gauge must not fail the scrape
                continue
            if type(value) is not float:
                if not isinstance(value, (int, float)):  # bool is an int: exported as 0 / 1
                    continue
                value = float(value)
            series, labels, doc = self._series(metric_name)
            family = families.get(series)
            if family is None:
                family = families[series] = GaugeMetricFamily(series, doc)
            # Labels per sample: metrics of one family may carry different tag sets.
            family.add_sample(series, labels, value)
        yield from families.values()


def parse_listener(listener: str) -> tuple[str, int] | None:
    """``metrics.prometheus.listener`` (``http://HOST:PORT``; empty = off) as ``(host, port)``; raises
    ``ValueError`` with the reason for anything else."""
    if not listener:
        return None
    parts = urlsplit(listener)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"metrics.prometheus.listener must look like http://HOST:PORT, not {listener!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"metrics.prometheus.listener {listener!r}: {e}") from None
    if port is None:
        raise ValueError(f"metrics.prometheus.listener {listener!r} has no port")
    return parts.hostname, port


class MetricsHttpServer:
    """Serves ``/metrics`` for one or more registries on ``host:port`` (port 0 picks a free one; see
    :attr:`port`). ``close()`` stops it. Thread-safe."""

    def __init__(self, metrics: MetricsSource | None, host: str = "127.0.0.1", port: int = 0,
                 domain: str = "kafka.server") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if metrics is not None:
            self.add(metrics, domain)
        self._lock = threading.Lock()
        self._httpd, self._thread = start_http_server(port, host, self.registry)
        self.host = host
        self.port: int = self._httpd.server_port

    def add(self, metrics: MetricsSource, domain: str,
            group_domains: Mapping[str, str] | None = None) -> KafkaMetricsCollector:
        """Expose another registry or client under ``domain`` (``kafka.consumer`` for a consumer, ...);
        ``group_domains`` puts some groups in another domain."""
        collector = KafkaMetricsCollector(metrics, domain, group_domains)
        self.registry.register(collector)
        return collector

    def register(self, collector: Collector) -> None:
        """Expose any prometheus-client collector (e.g. consumer-group lag series) on the same endpoint."""
        self.registry.register(collector)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        with self._lock:
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            self._thread.join(5)

    def __enter__(self) -> MetricsHttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
