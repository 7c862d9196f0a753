"""The client side of KIP-714: a client pushes its own metrics to the cluster (``enable.metrics.push``, default
true as in Kafka 3.7+).

Kafka counterpart: ``ClientTelemetryReporter.DefaultClientTelemetrySender``, driven by the ``NetworkClient`` as its
metadata updater is. States: a GetTelemetrySubscriptions to the least loaded broker (which gives the client its
instance id the first time) → wait a staggered first interval (0.5-1.5 × the push interval, so restarted clients do
not push together) → PushTelemetry of the subscribed metrics every push interval → on close, one last push with
``terminating`` set. A broker without the telemetry APIs, or one that answers UNSUPPORTED_VERSION, INVALID_REQUEST or
INVALID_RECORD, turns pushing off for this client; UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE asks for
the subscription again at once; throttling and other errors wait a push interval.

What is pushed: every metric of the client's registry whose OTLP name starts with a requested prefix (``""`` is
all). A metric ``name`` of group ``<g>-metrics`` is named ``org.apache.kafka.<g>.<name>`` with ``-`` as ``.``
(``producer-metrics`` ``record-queue-time-avg`` → ``org.apache.kafka.producer.record.queue.time.avg``, as Java's
clients name them); its tags become attributes (``node-id`` → ``node_id``; ``client-id`` is left out, the broker
knows it). ``…-total`` metrics are monotonic sums, pushed as deltas since the last push when the broker asks for
delta temporality (Kafka's brokers do), everything else a gauge. The payload is compressed with the first codec of
the broker's list.

I/O thread only, except :meth:`initiate_close` and :meth:`client_instance_id` (thread-safe).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import uuid
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import IllegalStateError, KafkaError, for_code
from strom.metrics.otlp import CUMULATIVE, DELTA, GAUGE, SUM, DataPoint, MetricPoints, encode_metrics_data
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from strom.protocol.messages.push_telemetry import PushTelemetryRequest
from strom.record.compression import CompressionType, compress

if TYPE_CHECKING:
    from strom.network.network_client import NetworkClient

__all__ = ["ClientTelemetrySender", "telemetry_metric_name"]

log = logging.getLogger(__name__)

DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000
_DISABLING_ERRORS = (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_RECORD)
_RESUBSCRIBE_ERRORS = (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
_CODECS = {int(c) for c in (CompressionType.ZSTD, CompressionType.LZ4, CompressionType.GZIP, CompressionType.SNAPPY)}

SUBSCRIPTION_NEEDED = "SUBSCRIPTION_NEEDED"
SUBSCRIPTION_IN_PROGRESS = "SUBSCRIPTION_IN_PROGRESS"
PUSH_NEEDED = "PUSH_NEEDED"
PUSH_IN_PROGRESS = "PUSH_IN_PROGRESS"
TERMINATING_PUSH_NEEDED = "TERMINATING_PUSH_NEEDED"
TERMINATING_PUSH_IN_PROGRESS = "TERMINATING_PUSH_IN_PROGRESS"
TERMINATED = "TERMINATED"


def telemetry_metric_name(group: str, name: str) -> str:
    """The OTLP name of metric ``name`` of ``group`` (Java's client telemetry naming)."""
    prefix = group[:-len("-metrics")] if group.endswith("-metrics") else group
    return f"org.apache.kafka.{prefix}.{name}".replace("-", ".")


class ClientTelemetrySender:
    """Kafka's ``ClientTelemetrySender``; ``metrics`` is the client's registry (anything with ``metrics()``)."""

    def __init__(self, metrics: Any, time: Any, rng: random.Random | None = None) -> None:
        self.metrics = metrics
        self.time = time
        self.rng = rng or random.Random()
        self.client: NetworkClient | None = None
        self.state = SUBSCRIPTION_NEEDED
        self.instance_id: uuid.UUID | None = None
        self.subscription_id = 0
        self.requested: tuple[str, ...] = ()
        self.push_interval_ms = DEFAULT_PUSH_INTERVAL_MS
        self.compression = int(CompressionType.NONE)
        self.delta = True
        self.max_bytes = 1 << 20
        self.pushes = 0
        self._next_ms = 0  # when the next request is due
        self._last_sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._start_ns: int = time.milliseconds() * 1_000_000
        self._lock = threading.Lock()
        self._close_requested = False
        self._instance_known = threading.Event()
        self._terminated = threading.Event()

    def bind(self, client: NetworkClient) -> None:
        self.client = client

    # -- thread-safe ----------------------------------------------------------------------------------------------
    def initiate_close(self) -> None:
        """The client closes: a last push with ``terminating`` set if it is subscribed to metrics."""
        with self._lock:
            self._close_requested = True
        if self.client is not None:
            self.client.wakeup()

    def client_instance_id(self, timeout_ms: int) -> uuid.UUID:
        """The id the cluster gave this client (Java's ``clientInstanceId``): waits for the first subscription."""
        known = self._instance_known.wait(max(0, timeout_ms) / 1000)
        if self.instance_id is not None:
            return self.instance_id
        if known:  # (set without an id: telemetry ended first)
            raise IllegalStateError("Client telemetry is off: the cluster does not offer it")
        raise KafkaError(f"Timeout of {timeout_ms} ms expired before the client instance id was known")

    def instance_known(self) -> bool:
        return self._instance_known.is_set()

    def wait_terminated(self, timeout_s: float) -> bool:
        """After :meth:`initiate_close`: wait (up to ``timeout_s``) for the terminating push to be answered (or
        found needless); whether it was."""
        return self._terminated.wait(max(0.0, timeout_s))

    # -- I/O thread -----------------------------------------------------------------------------------------------
    def due(self, now: int) -> bool:
        """Whether a request is due now (cheap: the client's poll asks after its I/O, when a busy connection's
        last send has just been written, so a busy producer cannot keep the push out)."""
        return now >= self._next_ms and self.state in (SUBSCRIPTION_NEEDED, PUSH_NEEDED, TERMINATING_PUSH_NEEDED)

    def maybe_update(self, now: int) -> int:
        """Send what is due; how long until this needs another look."""
        client = self.client
        if client is None or self.state == TERMINATED:
            return 1 << 30
        if self._close_requested and self.state in (SUBSCRIPTION_NEEDED, PUSH_NEEDED):
            if self.instance_id is None or not self.requested:
                self._set(TERMINATED)
                return 1 << 30
            self._set(TERMINATING_PUSH_NEEDED)
            self._next_ms = now
        if self.state in (SUBSCRIPTION_IN_PROGRESS, PUSH_IN_PROGRESS, TERMINATING_PUSH_IN_PROGRESS):
            return client.default_request_timeout_ms
        if now < self._next_ms:
            return self._next_ms - now
        node = client.least_loaded_node(now)
        # (not counted against max.in.flight.requests.per.connection: a busy producer keeps every slot full)
        if node is None or not client.can_send_beyond_in_flight_limit(node.node_id, now):
            if self.state == TERMINATING_PUSH_NEEDED:  # a close does not wait for a connection
                self._set(TERMINATED)
                return 1 << 30
            if node is not None:
                client.ready(node, now)
            return client.reconnect_backoff_ms
        versions = client.api_versions.get(node.node_id)
        key = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS if self.state == SUBSCRIPTION_NEEDED else ApiKey.PUSH_TELEMETRY
        if versions is not None and versions.api_version(key) is None:
            log.debug("%sbroker %s does not offer client telemetry: not pushing metrics", client.log_context, node)
            self._set(TERMINATED)
            return 1 << 30
        if self.state == SUBSCRIPTION_NEEDED:
            request: Any = GetTelemetrySubscriptionsRequest(client_instance_id=self.instance_id or uuid.UUID(int=0))
            self._set(SUBSCRIPTION_IN_PROGRESS)
        else:
            terminating = self.state == TERMINATING_PUSH_NEEDED
            request = self._push_request(now, terminating)
            self._set(TERMINATING_PUSH_IN_PROGRESS if terminating else PUSH_IN_PROGRESS)
        client.send_internal(client.new_client_request(node.node_id, request, now, True), now)
        return client.default_request_timeout_ms

    def _set(self, state: str) -> None:
        self.state = state
        if state == TERMINATED:
            self._instance_known.set()  # (client_instance_id() stops waiting)
            self._terminated.set()

    def _push_request(self, now: int, terminating: bool) -> PushTelemetryRequest:
        payload = encode_metrics_data(self._collect(now))
        codec = self.compression
        data = compress(codec, payload) if codec else payload
        if len(data) > self.max_bytes:
            log.debug("telemetry payload of %d bytes over the broker's %d: pushing none", len(data), self.max_bytes)
            data = b""
        assert self.instance_id is not None
        return PushTelemetryRequest(client_instance_id=self.instance_id, subscription_id=self.subscription_id,
                                    terminating=terminating, compression_type=codec, metrics=data)

    def _collect(self, now: int) -> list[MetricPoints]:
        now_ns = now * 1_000_000
        out = []
        prefixes = self.requested
        for mname, metric in self.metrics.metrics().items():
            name = telemetry_metric_name(mname.group, mname.name)
            if not any(name.startswith(p) for p in prefixes):
                continue
            try:
                value = metric.metric_value()
            except Exception:  # noqa: BLE001 - a gauge whose source went away
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            attrs = tuple(sorted((k.replace("-", "_"), str(v)) for k, v in mname.tags.items() if k != "client-id"))
            if mname.name.endswith("-total"):
                key = (name, attrs)
                point = float(value) - self._last_sums.get(key, 0.0) if self.delta else float(value)
                self._last_sums[key] = float(value)
                out.append(MetricPoints(name, SUM, DELTA if self.delta else CUMULATIVE, True,
                                        (DataPoint(attrs, now_ns, point),), ()))
            else:
                out.append(MetricPoints(name, GAUGE, 0, False, (DataPoint(attrs, now_ns, float(value)),), ()))
        return out

    def handle_response(self, api_key: int, body: Any, now: int) -> None:
        if api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
            self._handle_subscription(body, now)
        else:
            self._handle_push(body, now)

    def _handle_subscription(self, r: Any, now: int) -> None:
        err = r.error_code
        if err in _DISABLING_ERRORS:
            log.debug("GetTelemetrySubscriptions answered %s: not pushing metrics", for_code(err).name)
            self._set(TERMINATED)
            return
        if err:
            self._set(SUBSCRIPTION_NEEDED)
            self._next_ms = now + self.push_interval_ms
            return
        if r.client_instance_id.int != 0:
            self.instance_id = r.client_instance_id
            self._instance_known.set()
        self.subscription_id = r.subscription_id
        self.requested = tuple(r.requested_metrics)
        self.push_interval_ms = r.push_interval_ms if r.push_interval_ms > 0 else DEFAULT_PUSH_INTERVAL_MS
        self.compression = next((c for c in r.accepted_compression_types if c in _CODECS), int(CompressionType.NONE))
        self.delta = r.delta_temporality
        self.max_bytes = r.telemetry_max_bytes
        self._last_sums.clear()
        if self.requested:
            self._set(PUSH_NEEDED)
            self._next_ms = now + int(self.push_interval_ms * self.rng.uniform(0.5, 1.5))
        else:  # subscribed to nothing: ask again a push interval later
            self._set(SUBSCRIPTION_NEEDED)
            self._next_ms = now + self.push_interval_ms

    def _handle_push(self, r: Any, now: int) -> None:
        err = r.error_code
        if self.state == TERMINATING_PUSH_IN_PROGRESS or err in _DISABLING_ERRORS:
            if err:
                log.debug("PushTelemetry answered %s", for_code(err).name)
            self._set(TERMINATED)
            return
        if err == ErrorCode.NONE:
            self.pushes += 1
            self._set(PUSH_NEEDED)
            self._next_ms = now + self.push_interval_ms
        elif err in _RESUBSCRIBE_ERRORS:
            self._set(SUBSCRIPTION_NEEDED)
            self._next_ms = now
        elif err in (ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.TELEMETRY_TOO_LARGE):
            self._set(PUSH_NEEDED)
            self._next_ms = now + self.push_interval_ms
        else:
            self._set(SUBSCRIPTION_NEEDED)
            self._next_ms = now + self.push_interval_ms

    def handle_failed_request(self, api_key: int, now: int) -> None:
        """The request was lost (disconnect, timeout): try again after a push interval (at once when closing)."""
        if self.state in (TERMINATING_PUSH_IN_PROGRESS,):
            self._set(TERMINATED)
            return
        self._set(SUBSCRIPTION_NEEDED if api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS else PUSH_NEEDED)
        self._next_ms = now + (0 if self._close_requested else min(self.push_interval_ms, 30_000))
