"""Client metrics subscriptions and telemetry pushes (KIP-714): Kafka's ``ClientMetricsManager``.

An operator subscribes clients to metrics with ``client-metrics`` config resources (``strom configs --entity-type
client-metrics``, ``IncrementalAlterConfigs`` of resource type CLIENT_METRICS): ``metrics`` (name prefixes, ``*`` for
all), ``interval.ms`` (how often to push) and ``match`` (``key=regex`` selectors over the client's
``client_instance_id``, ``client_id``, ``client_software_name``, ``client_software_version``,
``client_source_address`` and ``client_source_port``; every selector must match the whole value). A client asks
for its subscription with GetTelemetrySubscriptions (the broker gives it a client instance id the first time) and
pushes its metrics with PushTelemetry, every push interval, compressed and OTLP-encoded; the payload goes to the
broker's telemetry receivers (:mod:`strom.server.client_telemetry`).

As Kafka's: the subscriptions a client matches are evaluated when its instance is made and again after any
subscription changed; a GetTelemetrySubscriptions or PushTelemetry before the push interval has passed is answered
THROTTLING_QUOTA_EXCEEDED (a push right after a GetTelemetrySubscriptions is accepted: clients add jitter); a push
with a stale subscription id UNKNOWN_SUBSCRIPTION_ID (the client then asks again); an unknown compression type
UNSUPPORTED_COMPRESSION_TYPE; a payload over ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE; anything after a push
with ``terminating`` set INVALID_REQUEST. A client instance is forgotten ``max(60 s, 3 × push interval)`` after its
last request (checked lazily; Kafka also drops it when its connection closes).

Sans I/O, event loop only; ``Time`` is injected.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.time import SYSTEM_TIME, Time
from strom.record.compression import CompressionType, DecompressedTooLarge
from strom.record.crc import crc32c

__all__ = ["ClientMetricsConfigError", "ClientMetricsManager", "ClientMetricsInstance", "ClientInstanceMetadata",
           "SubscriptionInfo", "validate_client_metrics_configs", "METRICS_CONFIG", "INTERVAL_MS_CONFIG",
           "MATCH_CONFIG", "INTERVAL_MS_DEFAULT", "MATCH_KEYS"]

log = logging.getLogger("strom.server")

METRICS_CONFIG = "metrics"
INTERVAL_MS_CONFIG = "interval.ms"
MATCH_CONFIG = "match"
INTERVAL_MS_DEFAULT = 5 * 60 * 1000
INTERVAL_MS_MIN, INTERVAL_MS_MAX = 100, 60 * 60 * 1000
ALL_METRICS = "*"
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
              "client_source_address", "client_source_port")
CONFIG_NAMES = (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG)
# What the broker accepts for PushTelemetry, most preferred first (a client takes the first it has): Kafka's order.
ACCEPTED_COMPRESSION_TYPES = (CompressionType.ZSTD, CompressionType.LZ4, CompressionType.GZIP, CompressionType.SNAPPY)
CACHE_EXPIRY_MS = 60 * 1000
MAX_INSTANCES = 16384  # client instances kept at most (Kafka's cache size)


class ClientMetricsConfigError(ValueError):
    """A client-metrics resource's configs are not valid; ``error_code`` is what the wire answers."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def validate_client_metrics_configs(name: str, configs: Mapping[str, str]) -> SubscriptionInfo:
    """Kafka's ``ClientMetricsConfigs.validate``: the subscription ``configs`` of resource ``name`` describe, or
    :class:`ClientMetricsConfigError` (INVALID_REQUEST for an unknown key or a bad interval, INVALID_CONFIG for a bad
    ``match``)."""
    if not name:
        raise ClientMetricsConfigError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    unknown = sorted(set(configs) - set(CONFIG_NAMES))
    if unknown:
        raise ClientMetricsConfigError(ErrorCode.INVALID_REQUEST,
                                       f"Unknown client metrics configuration: {', '.join(unknown)}")
    interval = INTERVAL_MS_DEFAULT
    if INTERVAL_MS_CONFIG in configs:
        try:
            interval = int(configs[INTERVAL_MS_CONFIG])
        except ValueError:
            raise ClientMetricsConfigError(
                ErrorCode.INVALID_REQUEST, f"Invalid value {configs[INTERVAL_MS_CONFIG]} for {INTERVAL_MS_CONFIG}: "
                "it must be an integer") from None
        if not INTERVAL_MS_MIN <= interval <= INTERVAL_MS_MAX:
            raise ClientMetricsConfigError(
                ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for {INTERVAL_MS_CONFIG}, interval must be "
                f"between {INTERVAL_MS_MIN} and {INTERVAL_MS_MAX}")
    patterns: dict[str, re.Pattern[str]] = {}
    for selector in _list(configs.get(MATCH_CONFIG, "")):
        key, sep, regex = selector.partition("=")
        key = key.strip()
        if not sep or not regex:
            raise ClientMetricsConfigError(ErrorCode.INVALID_CONFIG,
                                           f"Illegal client matching pattern: {selector} (expected key=regex)")
        if key not in MATCH_KEYS:
            raise ClientMetricsConfigError(
                ErrorCode.INVALID_CONFIG, f"Invalid client matching key {key}: it must be one of "
                f"{', '.join(MATCH_KEYS)}")
        try:
            patterns[key] = re.compile(regex.strip())
        except re.error as e:
            raise ClientMetricsConfigError(ErrorCode.INVALID_CONFIG,
                                           f"Illegal regular expression in client matching pattern {selector}: {e}"
                                           ) from None
    return SubscriptionInfo(name, frozenset(_list(configs.get(METRICS_CONFIG, ""))), interval, patterns)


@dataclass(frozen=True)
class SubscriptionInfo:
    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]]


@dataclass(frozen=True)
class ClientInstanceMetadata:
    """What selectors match against (Kafka's ``ClientMetricsInstanceMetadata``)."""

    client_instance_id: uuid.UUID
    client_id: str
    client_software_name: str
    client_software_version: str
    client_source_address: str
    client_source_port: str

    def attributes(self) -> dict[str, str]:
        return {"client_instance_id": str(self.client_instance_id), "client_id": self.client_id,
                "client_software_name": self.client_software_name,
                "client_software_version": self.client_software_version,
                "client_source_address": self.client_source_address, "client_source_port": self.client_source_port}

    def is_match(self, patterns: Mapping[str, re.Pattern[str]]) -> bool:
        attrs = self.attributes()
        return all(attrs.get(k) is not None and p.fullmatch(attrs[k]) is not None for k, p in patterns.items())


@dataclass
class ClientMetricsInstance:
    """One client instance's subscription and request times (Kafka's ``ClientMetricsInstance``)."""

    metadata: ClientInstanceMetadata
    subscription_id: int
    subscription_version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int = -1
    last_push_ms: int = -1
    last_error: int = ErrorCode.NONE
    terminating: bool = False
    last_seen_ms: int = 0
    pushes: int = field(default=0)

    def maybe_update_get(self, now: int) -> bool:
        last = max(self.last_get_ms, self.last_push_ms)
        if last < 0 or now - last >= self.push_interval_ms:
            self.last_get_ms = now
            return True
        return False

    def maybe_update_push(self, now: int) -> bool:
        # A push right after a GetTelemetrySubscriptions is accepted whenever it comes (clients add jitter).
        ok = self.last_get_ms > self.last_push_ms or self.last_push_ms < 0 or \
            now - self.last_push_ms >= self.push_interval_ms
        if ok:
            self.last_push_ms = now
        return ok


@dataclass(frozen=True)
class GetSubscriptionsResult:
    error_code: int
    client_instance_id: uuid.UUID
    subscription_id: int = 0
    accepted_compression_types: tuple[int, ...] = ()
    push_interval_ms: int = 0
    telemetry_max_bytes: int = 0
    delta_temporality: bool = True
    requested_metrics: tuple[str, ...] = ()
    error_message: str | None = None


# (client instance metadata, payload after decompression, push interval ms) -> None; raises to refuse the payload.
TelemetryReceiver = Callable[[ClientInstanceMetadata, bytes, int], None]


class ClientMetricsManager:
    """Subscriptions by name and the client instances that asked for theirs. ``receivers`` get every accepted
    push's payload; ``decompress(codec, data, max_size)`` undoes the push's compression."""

    def __init__(self, receivers: list[TelemetryReceiver], telemetry_max_bytes: int, time: Time = SYSTEM_TIME,
                 decompress: Callable[[int, bytes, int], bytes] | None = None,
                 cache_expiry_ms: int = CACHE_EXPIRY_MS, max_instances: int = MAX_INSTANCES) -> None:
        from strom.record.compression import decompress as _decompress

        self.receivers = receivers
        self.telemetry_max_bytes = telemetry_max_bytes
        self.time = time
        self.decompress = decompress or _decompress
        self.cache_expiry_ms = cache_expiry_ms
        self.subscriptions: dict[str, SubscriptionInfo] = {}
        self._configs: dict[str, dict[str, str]] = {}  # each subscription's configs as given
        self.store: Any = None  # the ClientMetricsStore subscriptions are written to (strom.server.client_metrics_store)
        # in order of their last request, least recent first
        self.instances: OrderedDict[uuid.UUID, ClientMetricsInstance] = OrderedDict()
        self.max_instances = max_instances
        self._evicting = False
        self._version = 0
        self.unknown_subscription_requests = 0
        self.throttled = 0
        self.on_instance_removed: list[Callable[[uuid.UUID], None]] = []

    @property
    def enabled(self) -> bool:
        """Whether anything receives pushed metrics (Kafka advertises the telemetry APIs only then)."""
        return bool(self.receivers)

    # -- subscriptions --------------------------------------------------------------------------------------------
    def update_subscription(self, name: str, configs: Mapping[str, str]) -> None:
        """Set (or, with no configs, remove) subscription ``name``; raises :class:`ClientMetricsConfigError`."""
        if not configs:
            self._configs.pop(name, None)
            if self.subscriptions.pop(name, None) is not None:
                log.info("client metrics subscription %s removed", name)
                self._version += 1
            return
        self.subscriptions[name] = validate_client_metrics_configs(name, configs)
        self._configs[name] = dict(configs)
        self._version += 1
        log.info("client metrics subscription %s: %s", name, dict(configs))

    def subscription_configs(self, name: str) -> dict[str, str]:
        """Subscription ``name``'s configs as set (``{}``: no such subscription)."""
        return dict(self._configs.get(name, {}))

    def load_subscriptions(self, subscriptions: Mapping[str, Mapping[str, str]]) -> None:
        """Replace every subscription (start-up); one that no longer validates is skipped with a warning."""
        for name in list(self._configs):
            if name not in subscriptions:
                self.update_subscription(name, {})
        for name, configs in subscriptions.items():
            try:
                self.update_subscription(name, configs)
            except ClientMetricsConfigError as e:
                log.warning("skipping client metrics subscription %s: %s", name, e)

    # -- instances ------------------------------------------------------------------------------------------------
    def _expire(self, now: int) -> None:
        """Forget instances idle past their time, oldest first (``instances`` is in order of last request: the scan
        stops at the first one still wanted, so a request costs what it expires)."""
        while self.instances:
            iid, inst = next(iter(self.instances.items()))
            if now - inst.last_seen_ms <= max(self.cache_expiry_ms, 3 * inst.push_interval_ms):
                return
            self._remove(iid)

    def _remove(self, iid: uuid.UUID) -> None:
        if self.instances.pop(iid, None) is not None:
            for fn in self.on_instance_removed:
                fn(iid)

    def _make_instance(self, md: ClientInstanceMetadata) -> ClientMetricsInstance:
        interval = INTERVAL_MS_DEFAULT
        metrics: set[str] = set()
        for sub in self.subscriptions.values():
            if md.is_match(sub.match):
                metrics |= sub.metrics
                interval = min(interval, sub.interval_ms)
        if ALL_METRICS in metrics:
            metrics = {ALL_METRICS}
        ordered = tuple(sorted(metrics))
        crc = crc32c(("[" + ", ".join(ordered) + "]" + str(interval)).encode())
        folded = md.client_instance_id.int
        folded = (folded ^ (folded >> 64)) & 0xFFFFFFFFFFFFFFFF
        folded = (folded ^ (folded >> 32)) & 0xFFFFFFFF
        sid = crc ^ folded
        sid = sid - (1 << 32) if sid >= 1 << 31 else sid
        # A client is told "" for all metrics (KIP-714's wire form of "*").
        requested = ("",) if ordered == (ALL_METRICS,) else ordered
        return ClientMetricsInstance(md, sid, self._version, requested, interval)

    def _instance(self, md: ClientInstanceMetadata, now: int) -> ClientMetricsInstance:
        inst = self.instances.get(md.client_instance_id)
        if inst is None:
            inst = self.instances[md.client_instance_id] = self._make_instance(md)
        elif inst.subscription_version < self._version:
            # Subscriptions changed: evaluate them again; the client may ask at once.
            fresh = self._make_instance(inst.metadata)
            fresh.terminating = inst.terminating
            inst = self.instances[md.client_instance_id] = fresh
        inst.last_seen_ms = now
        self.instances.move_to_end(md.client_instance_id)
        while len(self.instances) > self.max_instances:  # (Kafka's LRU cache of 16,384 instances)
            oldest = next(iter(self.instances))
            if not self._evicting:
                log.warning("more than %d client metrics instances: forgetting the least recently seen",
                            self.max_instances)
                self._evicting = True
            self._remove(oldest)
        return inst

    def get_subscriptions(self, client_instance_id: uuid.UUID, client_id: str, software_name: str,
                          software_version: str, source_address: str, source_port: str) -> GetSubscriptionsResult:
        """GetTelemetrySubscriptions: a zero ``client_instance_id`` is given a new one."""
        now = self.time.milliseconds()
        self._expire(now)
        iid = client_instance_id
        if iid.int == 0:
            iid = uuid.uuid4()
            while iid in self.instances:
                iid = uuid.uuid4()
        inst = self._instance(ClientInstanceMetadata(iid, client_id or "", software_name or "", software_version or "",
                                                     source_address, source_port), now)
        if not inst.maybe_update_get(now) and inst.last_error not in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                                                                      ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            self.throttled += 1
            return GetSubscriptionsResult(ErrorCode.THROTTLING_QUOTA_EXCEEDED, iid, error_message=(
                f"Request from the client [{iid}] arrived before the next push interval time"))
        inst.last_error = ErrorCode.NONE
        return GetSubscriptionsResult(ErrorCode.NONE, iid, inst.subscription_id,
                                      tuple(int(c) for c in ACCEPTED_COMPRESSION_TYPES), inst.push_interval_ms,
                                      self.telemetry_max_bytes, True, inst.metrics)

    def push(self, client_instance_id: uuid.UUID, subscription_id: int, terminating: bool, compression_type: int,
             metrics: bytes, client_id: str, software_name: str, software_version: str, source_address: str,
             source_port: str) -> tuple[int, str | None]:
        """PushTelemetry: (error code, message)."""
        if client_instance_id.int == 0:
            return ErrorCode.INVALID_REQUEST, f"Invalid request from the client [{client_instance_id}], invalid " \
                "client instance id"
        now = self.time.milliseconds()
        self._expire(now)
        inst = self._instance(ClientInstanceMetadata(client_instance_id, client_id or "", software_name or "",
                                                     software_version or "", source_address, source_port), now)
        try:
            err = self._validate_push(inst, subscription_id, terminating, compression_type, metrics, now)
        finally:
            inst.terminating = inst.terminating or terminating
        if err is not None:
            inst.last_error = err[0]
            return err
        if metrics:
            payload: bytes | None = None
            try:
                payload = self.decompress(compression_type, metrics, self.telemetry_max_bytes) \
                    if compression_type else bytes(metrics)
            except DecompressedTooLarge:
                pass
            except Exception as e:  # noqa: BLE001 - an undecodable payload: the client stops pushing
                inst.last_error = ErrorCode.INVALID_RECORD
                return ErrorCode.INVALID_RECORD, f"Cannot decompress the telemetry of [{client_instance_id}]: {e}"
            if payload is None or len(payload) > self.telemetry_max_bytes:
                inst.last_error = ErrorCode.TELEMETRY_TOO_LARGE
                return ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry of [{client_instance_id}] is larger than " \
                    f"{self.telemetry_max_bytes} bytes decompressed"
            for receive in self.receivers:
                try:
                    receive(inst.metadata, payload, inst.push_interval_ms)
                except Exception as e:  # noqa: BLE001 - a payload a receiver cannot read
                    log.warning("cannot export the telemetry of client instance %s: %s", client_instance_id, e)
                    inst.last_error = ErrorCode.INVALID_RECORD
                    return ErrorCode.INVALID_RECORD, f"Cannot read the telemetry of [{client_instance_id}]: {e}"
            inst.pushes += 1
        inst.last_error = ErrorCode.NONE
        if terminating:
            self._remove(client_instance_id)
        return ErrorCode.NONE, None

    def _validate_push(self, inst: ClientMetricsInstance, subscription_id: int, terminating: bool,
                       compression_type: int, metrics: bytes, now: int) -> tuple[int, str] | None:
        iid = inst.metadata.client_instance_id
        if inst.terminating:
            return ErrorCode.INVALID_REQUEST, f"Client [{iid}] sent a request with terminating set: no request " \
                "is accepted after that"
        if not inst.maybe_update_push(now) and not terminating:
            self.throttled += 1
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"Request from the client [{iid}] arrived before the next " \
                "push interval time"
        if subscription_id != inst.subscription_id:
            self.unknown_subscription_requests += 1
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID, f"Unknown client subscription id for the client [{iid}]"
        if compression_type not in (int(CompressionType.NONE), *(int(c) for c in ACCEPTED_COMPRESSION_TYPES)):
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type [{compression_type}] in the " \
                f"telemetry request of [{iid}]"
        if len(metrics) > self.telemetry_max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE, f"Telemetry request from [{iid}] is larger than the maximum " \
                f"allowed size [{self.telemetry_max_bytes}]"
        return None
