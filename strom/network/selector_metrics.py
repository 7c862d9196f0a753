"""The network metrics of a client: Kafka's ``Selector.SelectorMetrics`` plus per-node request latency.

Group ``<prefix>-metrics`` (``producer``, ``consumer``, ``admin-client``), tagged with the registry's tags
(``client-id``): connection-creation-rate/total, connection-close-rate/total, connection-count,
outgoing-byte-rate/total, request-rate/total, request-size-avg/max, incoming-byte-rate/total,
response-rate/total, select-rate/total, network-io-rate/total, io-wait-time-ns-avg/total, io-wait-ratio,
io-time-ns-avg/total, io-ratio. Group ``<prefix>-node-metrics``, tagged ``node-id=node-<id>`` (bootstrap
connections have negative ids, ``node--1``, as in Kafka): outgoing-byte-rate/total, request-rate/total,
request-size-avg/max, incoming-byte-rate/total, response-rate/total, request-latency-avg/max. Per-node
sensors are the parents' children, so one ``record`` per completed send or receive feeds both levels.

Kafka records per-node request latency only in the producer's Sender; here the ``NetworkClient`` records it for
every client (the documented ``*-node-metrics`` list it for producer and consumer alike).

Threading: recorded on the I/O thread; read from any thread (the sensors are thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.metrics import Meter, Metrics, SampledStats, Sensor, WindowedCount, WindowedSum

__all__ = ["SelectorMetrics"]

_NS_PER_MS = 1_000_000


class SelectorMetrics:
    """Sensors of one client's network layer. Record from the I/O thread only."""

    def __init__(self, metrics: Metrics, metric_grp_prefix: str, connection_count: Callable[[], int]) -> None:
        self.metrics = metrics
        self.group = group = f"{metric_grp_prefix}-metrics"
        self.node_group = f"{metric_grp_prefix}-node-metrics"
        self._prefix = metric_grp_prefix
        name = metrics.metric_name

        def meter(sensor: Sensor, base: str, what: str, count: bool = False, grp: str = group,
                  tags: dict[str, str] | None = None) -> None:
            sensor.add(None, Meter(name(f"{base}-rate", grp, f"The number of {what} per second", tags),
                                   name(f"{base}-total", grp, f"The total number of {what}", tags),
                                   WindowedCount() if count else WindowedSum()))

        self._meter = meter
        self.connection_closed = s = metrics.sensor(f"{metric_grp_prefix}.connections-closed")
        meter(s, "connection-close", "connections closed", count=True)
        self.connection_created = s = metrics.sensor(f"{metric_grp_prefix}.connections-created")
        meter(s, "connection-creation", "new connections established", count=True)
        self.bytes_sent = s = metrics.sensor(f"{metric_grp_prefix}.bytes-sent")
        self._add_send_stats(s, group, None)
        self.bytes_received = s = metrics.sensor(f"{metric_grp_prefix}.bytes-received")
        self._add_receive_stats(s, group, None)
        # Recorded on every poll: one SampledStats each (Kafka's Meter + Avg + CumulativeSum + Rate(ns)).
        self.select_time = s = metrics.sensor(f"{metric_grp_prefix}.select-time")
        s.add(None, SampledStats({
            "count-rate": name("select-rate", group, "The number of times the I/O layer checked for new I/O to "
                                                     "perform per second"),
            "count": name("select-total", group, "The total number of times the I/O layer checked for new I/O"),
            "avg": name("io-wait-time-ns-avg", group, "The average length of time the I/O thread spent waiting for "
                                                      "a socket ready for reads or writes in nanoseconds."),
            "total": name("io-wait-time-ns-total", group, "The total time the I/O thread spent waiting"),
            "ratio": name("io-wait-ratio", group, "The fraction of time the I/O thread spent waiting")}))
        self.io_time = s = metrics.sensor(f"{metric_grp_prefix}.io-time")
        s.add(None, SampledStats({
            "avg": name("io-time-ns-avg", group, "The average length of time for I/O per select call in "
                                                 "nanoseconds."),
            "total": name("io-time-ns-total", group, "The total time the I/O thread spent doing I/O"),
            "ratio": name("io-ratio", group, "The fraction of time the I/O thread spent doing I/O")}))
        # network-io counts sends and receives together (Kafka: a sensor fed by both).
        self.network_io = s = metrics.sensor(f"{metric_grp_prefix}.network-io")
        meter(s, "network-io", "network operations (reads or writes) on all connections", count=True)
        metrics.add_metric(name("connection-count", group, "The current number of active connections."),
                           lambda _config, _now: float(connection_count()))
        self._nodes: dict[Any, tuple[Sensor, Sensor, Sensor]] = {}

    def _add_send_stats(self, s: Sensor, group: str, tags: dict[str, str] | None) -> None:
        name = self.metrics.metric_name
        s.add(None, SampledStats({
            "rate": name("outgoing-byte-rate", group, "The number of outgoing bytes sent per second", tags),
            "total": name("outgoing-byte-total", group, "The total number of outgoing bytes sent", tags),
            "count-rate": name("request-rate", group, "The number of requests sent per second", tags),
            "count": name("request-total", group, "The total number of requests sent", tags),
            "avg": name("request-size-avg", group, "The average size of requests sent.", tags),
            "max": name("request-size-max", group, "The maximum size of any request sent.", tags)}))

    def _add_receive_stats(self, s: Sensor, group: str, tags: dict[str, str] | None) -> None:
        self._meter(s, "incoming-byte", "bytes read off all sockets", grp=group, tags=tags)
        self._meter(s, "response", "responses received", count=True, grp=group, tags=tags)

    def _node(self, node_id: Any) -> tuple[Sensor, Sensor, Sensor]:
        sensors = self._nodes.get(node_id)
        if sensors is None:
            metrics = self.metrics
            base = f"{self._prefix}.node-{node_id}"
            tags = {"node-id": f"node-{node_id}"}
            existing = metrics.get_sensor(f"{base}.bytes-sent")
            sent = metrics.sensor(f"{base}.bytes-sent", None, self.bytes_sent)
            received = metrics.sensor(f"{base}.bytes-received", None, self.bytes_received)
            latency = metrics.sensor(f"{base}.latency")
            if existing is None:
                self._add_send_stats(sent, self.node_group, tags)
                self._add_receive_stats(received, self.node_group, tags)
                name = metrics.metric_name
                latency.add(None, SampledStats({
                    "avg": name("request-latency-avg", self.node_group, "The average request latency in ms", tags),
                    "max": name("request-latency-max", self.node_group, "The maximum request latency in ms",
                                tags)}))
            sensors = self._nodes[node_id] = (sent, received, latency)
        return sensors

    # ------------------------------------------------------------------------------------ recording

    def record_connection_created(self, now_ms: int) -> None:
        self.connection_created.record(1, now_ms)

    def record_connection_closed(self, now_ms: int) -> None:
        self.connection_closed.record(1, now_ms)

    def record_completed_send(self, node_id: Any, size: int, now_ms: int) -> None:
        self._node(node_id)[0].record(size, now_ms)
        self.network_io.record(1, now_ms)

    def record_completed_receive(self, node_id: Any, size: int, now_ms: int) -> None:
        self._node(node_id)[1].record(size, now_ms)
        self.network_io.record(1, now_ms)

    def record_select(self, io_wait_ns: int, io_time_ns: int, now_ms: int) -> None:
        self.select_time.record(io_wait_ns, now_ms)
        self.io_time.record(io_time_ns, now_ms)

    def record_latency(self, node_id: Any, latency_ms: float, now_ms: int) -> None:
        self._node(node_id)[2].record(latency_ms, now_ms)
