"""Where clients' pushed metrics go (KIP-714's ``ClientTelemetryReceiver``).

:class:`ClientTelemetryStore` is the broker's own receiver, on when ``metrics.prometheus.listener`` is set: it reads
each push (OTLP, :mod:`strom.metrics.otlp`) and keeps the latest value of every series of every client instance,
served on the broker's ``/metrics`` endpoint. A series is named as Prometheus names an OTLP metric (``.`` and ``-``
become ``_``: ``org.apache.kafka.producer.record.queue.time.avg`` →
``org_apache_kafka_producer_record_queue_time_avg``) and labelled with the client's ``client_instance_id``,
``client_id``, ``client_software_name`` and ``client_software_version`` and the data point's own attributes.
Gauges and cumulative sums are served as pushed; delta sums (what the broker asks for, as Kafka's) are added up
into a running total. A client instance's series go when the broker forgets the instance (its terminating push,
or no request for ``max(60 s, 3 × push interval)``). A client instance keeps at most 10,000 series; data points of
further series are dropped (counted in ``dropped``).

A ``metric.reporters`` plug-in receives pushes too when it has ``client_receiver()`` (Kafka's ``ClientTelemetry``):
the object it returns gets ``export_metrics(metadata, payload)`` with the client's
:class:`~strom.server.client_metrics_manager.ClientInstanceMetadata` and the decompressed OTLP bytes.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from strom.metrics.otlp import DELTA, SUM, parse_metrics_data
from strom.server.client_metrics_manager import ClientInstanceMetadata

__all__ = ["ClientTelemetryStore", "prometheus_metric_name", "reporter_receivers"]

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")
MAX_SERIES_PER_CLIENT = 10_000
_CLIENT_LABELS = ("client_instance_id", "client_id", "client_software_name", "client_software_version")


def prometheus_metric_name(name: str) -> str:
    out = _NOT_NAME.sub("_", name)
    return "_" + out if out[:1].isdigit() else out


def _label(name: str) -> str:
    out = _NOT_LABEL.sub("_", name)
    return "_" + out if not out or out[:1].isdigit() else out


class ClientTelemetryStore:
    """The latest pushed value of each client series. ``receive`` runs on the event loop, ``collect`` on the
    metrics endpoint's thread: a lock keeps them apart."""

    def __init__(self, max_series_per_client: int = MAX_SERIES_PER_CLIENT) -> None:
        self._lock = threading.Lock()
        self.max_series_per_client = max_series_per_client
        self.dropped = 0  # data points of series over the cap, not kept
        # client instance id -> (metric name, label names, label values) -> value
        self._series: dict[uuid.UUID, dict[tuple[str, tuple[str, ...], tuple[str, ...]], float]] = {}
        self.pushes = 0

    def receive(self, md: ClientInstanceMetadata, payload: bytes, push_interval_ms: int) -> None:
        """One push's payload; raises :class:`~strom.metrics.otlp.OtlpError` when it is not OTLP metrics."""
        metrics = parse_metrics_data(payload)
        client = md.attributes()
        base = tuple((k, client[k]) for k in _CLIENT_LABELS)
        with self._lock:
            series = self._series.setdefault(md.client_instance_id, {})
            for m in metrics:
                name = prometheus_metric_name(m.name)
                accumulate = m.kind == SUM and m.temporality == DELTA
                for p in m.points:
                    labels = dict(base)
                    for k, v in p.attributes:
                        labels.setdefault(_label(k), v)
                    key = (name, tuple(labels), tuple(labels.values()))
                    if key not in series and len(series) >= self.max_series_per_client:
                        self.dropped += 1  # (a client cannot grow the broker's memory without bound)
                        continue
                    series[key] = series.get(key, 0.0) + p.value if accumulate else p.value
            self.pushes += 1

    def forget(self, client_instance_id: uuid.UUID) -> None:
        with self._lock:
            self._series.pop(client_instance_id, None)

    def values(self, client_instance_id: uuid.UUID | None = None) -> dict[str, float]:
        """``name{label="value",...}`` -> value (every client's, or one's): what ``/metrics`` shows."""
        with self._lock:
            items = [(k, v) for iid, s in self._series.items() if client_instance_id in (None, iid)
                     for k, v in s.items()]
        return {f"{n}{{{','.join(f'{k}={v!r}' for k, v in zip(ks, vs, strict=True))}}}": value
                for (n, ks, vs), value in items}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self._lock:
            items = [(k, v) for s in self._series.values() for k, v in s.items()]
        by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
        for (name, keys, values), value in items:
            by_name.setdefault(name, []).append((dict(zip(keys, values, strict=True)), value))
        for name, points in sorted(by_name.items()):
            # one family per name: a metric whose data points carry different attributes has their union ("" where
            # a point has none)
            keys = list(_CLIENT_LABELS) + sorted({k for labels, _v in points for k in labels} - set(_CLIENT_LABELS))
            family = GaugeMetricFamily(name, f"client metric {name} (KIP-714)", labels=keys)
            for labels, value in points:
                family.add_metric([labels.get(k, "") for k in keys], value)
            yield family


def reporter_receivers(reporters: list[Any]) -> list[Any]:
    """The receivers of ``metric.reporters`` plug-ins that take client telemetry (``client_receiver()``), as
    callables of (metadata, payload, push interval)."""
    out = []
    for r in reporters:
        make = getattr(r, "client_receiver", None)
        if make is None:
            continue
        receiver = make()

        def export(md: ClientInstanceMetadata, payload: bytes, _interval: int, receiver: Any = receiver) -> None:
            receiver.export_metrics(md, payload)
        out.append(export)
    return out
