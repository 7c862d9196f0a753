"""Client quotas: byte rates for Produce and Fetch, request-time percentage and controller mutations per
(user, client-id).

Kafka counterparts: ``ClientQuotaManager`` (KIP-13, KIP-55), ``ClientRequestQuotaManager`` (KIP-124),
``QuotaUtils.throttleTime`` and the throttling of KIP-219. One :class:`ClientQuotaManager` per quota type keeps a
sensor per quota id in a strom :class:`~strom.metrics.Metrics` registry: a :class:`~strom.metrics.Rate` over
``quota.window.num`` windows of ``quota.window.size.seconds``, its ``MetricConfig`` carrying the quota bound.
Recording with ``check_quotas`` raises when the rate is over the bound; the throttle time is then Kafka's
``(rate - bound) / bound * windowSize`` — the delay that brings the measured rate back to the bound.

Which quota applies to a connection's (user, client-id) is Kafka's precedence, per quota key::

    /config/users/<user>/clients/<client-id>     /config/users/<default>/clients/<client-id>
    /config/users/<user>/clients/<default>       /config/users/<default>/clients/<default>
    /config/users/<user>                         /config/users/<default>
    /config/clients/<client-id>                  /config/clients/<default>

(in that order: the left column first, top to bottom, then the right one, then clients). The level that matched
decides which connections share a sensor: a ``users/<user>`` quota is shared by all of the user's client ids, a
``clients/<default>`` quota is per client id — Kafka's ``quotaMetricTags``.

Controller mutations (KIP-599, ``controller_mutation_rate``): partitions created (CreateTopics,
CreatePartitions) or deleted (DeleteTopics) per second, measured by a token bucket holding
``quota * quota.window.num * quota.window.size.seconds`` partitions. With the newer versions of those APIs
(CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) the quota is strict: once the bucket is empty a topic is
refused with THROTTLING_QUOTA_EXCEEDED and the throttle time (the one operation that empties it goes through);
older versions cannot carry that error, so their mutations are made and only throttled afterwards.

Connection creation rate (KIP-612, ``connection_creation_rate``): an IP entity's only key (its own address,
else the default IP); :meth:`ClientQuotaManagers.connection_rate` answers it and the socket servers'
``ConnectionQuotas`` measure and enforce it at accept time.

Throttling (KIP-219): the handler answers at once with ``throttle_time_ms`` and the socket server stops reading
from that connection for that long after sending the response (``ConnectionContext.throttle_ms``). Inter-broker
requests, follower fetches, ApiVersions and the SASL APIs are exempt, as in Kafka.

Event loop only (quota updates from ZooKeeper notifications are handed to the loop by the store).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time as _time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ThrottlingQuotaExceededError
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import Avg, MetricConfig, Metrics, Rate, Sensor, TokenBucket
from strom.metrics.quota import Quota, QuotaViolationError
from strom.protocol.api_keys import ApiKey

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

__all__ = [
    "DEFAULT", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE", "REQUEST_PERCENTAGE", "CONTROLLER_MUTATION_RATE",
    "QUOTA_KEYS", "QuotaEntity", "QuotaValidationError", "ClientQuotaManager", "ClientQuotaManagers",
    "ControllerMutationQuota", "validate_quota_value", "entity_from_wire",
]

log = logging.getLogger("strom.server")

DEFAULT = "<default>"  # the default entity of a type (a null entity name on the wire)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"  # IP entities only (KIP-612)
# key -> integral (Kafka's LONG / INT) or not (DOUBLE)
QUOTA_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
                               CONTROLLER_MUTATION_RATE: False, CONNECTION_CREATION_RATE: True}
USER, CLIENT_ID, IP = "user", "client-id", "ip"  # ClientQuotaEntity.USER / CLIENT_ID / IP

_INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
_NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9
# Requests Kafka never throttles: version negotiation, authentication, and the brokers' own traffic.
_EXEMPT_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                          ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                          ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION, ApiKey.WRITE_TXN_MARKERS})


class QuotaValidationError(ValueError):
    """An AlterClientQuotas entry Kafka refuses with INVALID_REQUEST; the message is what the client sees."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity (Kafka's ``ClientQuotaEntity``): ``user`` and ``client_id`` are each ``None`` (not part of
    the entity), :data:`DEFAULT` (the type's default) or a name; an ``ip`` entity (an address or :data:`DEFAULT`)
    stands alone and carries only ``connection_creation_rate``."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None

    def to_wire(self) -> list[tuple[str, str | None]]:
        """``[(entity type, name or None for the default)]`` as DescribeClientQuotas / AlterClientQuotas carry it."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        if self.ip is not None:
            out.append((IP, None if self.ip == DEFAULT else self.ip))
        return out

    def __str__(self) -> str:
        if self.ip is not None:
            return "default ip" if self.ip == DEFAULT else f"ip {self.ip}"
        parts = []
        if self.user is not None:
            parts.append("default user" if self.user == DEFAULT else f"user {self.user}")
        if self.client_id is not None:
            parts.append("default client-id" if self.client_id == DEFAULT else f"client-id {self.client_id}")
        return " ".join(parts)


def entity_from_wire(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """A :class:`QuotaEntity` from wire components, refusing what Kafka refuses (INVALID_REQUEST)."""
    seen: dict[str, str] = {}
    for entity_type, name in components:
        if entity_type in seen:
            raise QuotaValidationError(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaValidationError(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise QuotaValidationError(f"Empty {entity_type} not supported")
        if name == DEFAULT:
            raise QuotaValidationError(f"{DEFAULT} is reserved for the default {entity_type}; send a null name")
        if entity_type == IP and name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise QuotaValidationError(f"{name} is not a valid IP") from None
        seen[entity_type] = DEFAULT if name is None else name
    if not seen:
        raise QuotaValidationError("Invalid empty client quota entity")
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        raise QuotaValidationError("Invalid quota entity combination, IP entity should not be used with "
                                   "user/client ID entity.")
    return QuotaEntity(seen.get(USER), seen.get(CLIENT_ID), seen.get(IP))


def validate_quota_value(key: str, value: float, ip_entity: bool = False) -> str:
    """The value as stored (``"1024"`` for the integral byte rates, ``"12.5"`` for percentages); Kafka's checks.
    An IP entity takes ``connection_creation_rate`` only, and only an IP entity takes it."""
    integral = QUOTA_KEYS.get(key)
    if integral is None or (key == CONNECTION_CREATION_RATE) != ip_entity:
        raise QuotaValidationError(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0.0:
        raise QuotaValidationError(f"Quota {key} must be greater than 0")
    if integral:
        if value > 2**63 - 1:
            raise QuotaValidationError(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaValidationError(f"{key} cannot be a fractional value.")
        return str(int(value + 1e-6))
    return repr(float(value))


def precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """The entities whose quota may apply to (user, client_id), first match wins, each with the quota id (metric
    tags user, client-id) that connections matched at that level share (Kafka's ``DefaultQuotaCallback``)."""
    both, user_only, client_only = (user, client_id), (user, ""), ("", client_id)
    return [
        (QuotaEntity(user, client_id), both),
        (QuotaEntity(user, DEFAULT), both),
        (QuotaEntity(user, None), user_only),
        (QuotaEntity(DEFAULT, client_id), both),
        (QuotaEntity(DEFAULT, DEFAULT), both),
        (QuotaEntity(DEFAULT, None), user_only),
        (QuotaEntity(None, client_id), client_only),
        (QuotaEntity(None, DEFAULT), client_only),
    ]


class _Sensors:
    __slots__ = ("quota_sensor", "throttle_sensor", "metric", "last_record_ms")

    def __init__(self, quota_sensor: Sensor, throttle_sensor: Sensor, metric: Any, now_ms: int) -> None:
        self.quota_sensor = quota_sensor
        self.throttle_sensor = throttle_sensor
        self.metric = metric
        self.last_record_ms = now_ms


class ClientQuotaManager:
    """The quotas of one type (Kafka's ``ClientQuotaManager``): ``Produce`` / ``Fetch`` byte rates or ``Request``
    time. ``record_and_get_throttle_time_ms`` records and answers how long to throttle (0 within quota)."""

    def __init__(self, quota_type: str, key: str, metrics: Metrics, time: Time, num_samples: int,
                 window_seconds: int, *, metric_name: str = "byte-rate", max_throttle_ms: int | None = None,
                 stat: Callable[[], Any] = Rate) -> None:
        self.quota_type = quota_type
        self.key = key
        self.metrics = metrics
        self.time = time
        self.num_samples = num_samples
        self.window_seconds = window_seconds
        self.metric_name = metric_name
        self.max_throttle_ms = max_throttle_ms
        self._stat = stat
        self._quotas: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], _Sensors] = {}
        self._last_sweep_ms = time.milliseconds()

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def update_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        """Set (or remove, ``None``) the quota of ``entity``; live sensors get their new bound at once."""
        if bound is None:
            if self._quotas.pop(entity, None) is None:
                return
        else:
            self._quotas[entity] = bound
        log.info("%s quota for %s is now %s", self.quota_type, entity, "removed" if bound is None else bound)
        for quota_id, sensors in self._sensors.items():
            sensors.metric.config = self._metric_config(self.quota_limit(quota_id))

    def quota_id_and_limit(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """The quota id (user, client-id tags) whose sensor (user, client_id) records into, and its bound."""
        for entity, quota_id in precedence(user, client_id):
            if entity in self._quotas:
                return quota_id, self.quota_limit(quota_id)
        return ("", client_id), None

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound that applies to (user, client_id), None when none does."""
        return self.quota_id_and_limit(user, client_id)[1]

    def quota_limit(self, quota_id: tuple[str, str]) -> float | None:
        """Kafka's ``quotaLimit(metricTags)``: the bound of a quota id, from the levels that can produce it."""
        user, client_id = quota_id
        if user and client_id:
            candidates = [QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT), QuotaEntity(DEFAULT, client_id),
                          QuotaEntity(DEFAULT, DEFAULT)]
        elif user:
            candidates = [QuotaEntity(user, None), QuotaEntity(DEFAULT, None)]
        else:
            candidates = [QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT)]
        for entity in candidates:
            bound = self._quotas.get(entity)
            if bound is not None:
                return bound
        return None

    def _metric_config(self, bound: float | None) -> MetricConfig:
        return MetricConfig(samples=self.num_samples, time_window_ms=self.window_seconds * 1000,
                            quota=Quota.upper_bound(bound) if bound is not None else None)

    def _sensors_for(self, user: str, client_id: str, now_ms: int) -> tuple[_Sensors, float | None]:
        quota_id, bound = self.quota_id_and_limit(user, client_id)
        sensors = self._sensors.get(quota_id)
        if sensors is None:
            tags = {"user": quota_id[0], "client-id": quota_id[1]}
            suffix = f"{quota_id[0]}:{quota_id[1]}"
            quota_sensor = self.metrics.sensor(f"{self.quota_type}-{suffix}")
            name = self.metrics.metric_name(self.metric_name, self.quota_type,
                                             f"Tracking {self.metric_name} per user/client-id", tags)
            quota_sensor.add(name, self._stat(), self._metric_config(bound))
            throttle_sensor = self.metrics.sensor(f"{self.quota_type}ThrottleTime-{suffix}")
            throttle_sensor.add(self.metrics.metric_name("throttle-time", self.quota_type,
                                                         "Tracking average throttle-time per user/client-id", tags),
                                Avg())
            metric = self.metrics.metric(name)
            sensors = _Sensors(quota_sensor, throttle_sensor, metric, now_ms)
            self._sensors[quota_id] = sensors
        return sensors, bound

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for (user, client_id); the throttle time when that takes the rate over its quota."""
        if not self._quotas:
            return 0
        self._maybe_expire(now_ms)
        sensors, bound = self._sensors_for(user, client_id, now_ms)
        sensors.last_record_ms = now_ms
        try:
            sensors.quota_sensor.record(value, now_ms, check_quotas=True)
        except QuotaViolationError as e:
            throttle = self.throttle_time(e, now_ms)
            sensors.throttle_sensor.record(throttle, now_ms)
            log.debug("%s quota violated by user %r client-id %r: %.1f > %.1f, throttled %d ms", self.quota_type,
                      user, client_id, e.value, e.bound, throttle)
            return throttle
        return 0

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a Fetch answered empty because it was throttled)."""
        if self._quotas:
            self._sensors_for(user, client_id, now_ms)[0].quota_sensor.record(-value, now_ms)

    def throttle_time(self, e: QuotaViolationError, now_ms: int) -> int:
        """Kafka's ``QuotaUtils.throttleTime``: O * W / (W + X) = T gives X = (O - T) / T * W, with W the window
        the rate was measured over (bounded to one window for request quotas). For a token bucket: the time to
        refill the missing tokens (ControllerMutationQuotaManager's ``throttleTimeMs``)."""
        if isinstance(e.metric.measurable(), TokenBucket):
            return int(round(-e.value / e.bound * 1000))
        window_ms = e.metric.measurable().window_size(e.metric.config, now_ms)
        throttle = int(round((e.value - e.bound) / e.bound * window_ms))
        return min(throttle, self.max_throttle_ms) if self.max_throttle_ms is not None else throttle

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """Kafka's ``getMaxValueInQuotaWindow``: the most a fetch may return without being throttled forever."""
        bound = self.quota(user, client_id) if self._quotas else None
        if bound is None:
            return math.inf
        return bound * (self.num_samples - 1) * self.window_seconds

    def _maybe_expire(self, now_ms: int) -> None:
        """Drop sensors idle for an hour (Kafka's ``InactiveSensorExpirationTimeSeconds``); swept once a minute."""
        if now_ms - self._last_sweep_ms < 60_000:
            return
        self._last_sweep_ms = now_ms
        for quota_id, sensors in list(self._sensors.items()):
            if now_ms - sensors.last_record_ms > _INACTIVE_SENSOR_EXPIRATION_MS:
                del self._sensors[quota_id]
                self.metrics.remove_sensor(sensors.quota_sensor.name)
                self.metrics.remove_sensor(sensors.throttle_sensor.name)


class _StepTimer:
    """Awaits a handler coroutine and adds up the time its steps ran on the event loop — the broker's
    counterpart of Kafka's request handler thread time (waiting in a purgatory does not count)."""

    __slots__ = ("_coro", "nanos")

    def __init__(self, coro: Awaitable[Any]) -> None:
        self._coro = coro
        self.nanos = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self._coro.__await__()
        send: Any = None
        throw: BaseException | None = None
        clock = _time.perf_counter_ns
        while True:
            start = clock()
            try:
                yielded = it.throw(throw) if throw is not None else it.send(send)
            except StopIteration as stop:
                self.nanos += clock() - start
                return stop.value
            except BaseException:
                self.nanos += clock() - start
                raise
            self.nanos += clock() - start
            try:
                send, throw = (yield yielded), None
            except BaseException as e:  # cancellation and the like go to the handler
                send, throw = None, e


def _principal_name(ctx: RequestContext) -> str:
    return ctx.connection.principal.name


class ClientQuotaManagers:
    """The broker's three client quota managers and what the handlers call (Kafka's ``QuotaManagers``)."""

    def __init__(self, config: Mapping[str, Any] | Any = None, time: Time = SYSTEM_TIME,
                 metrics: Metrics | None = None) -> None:
        num = int(config["quota.window.num"]) if config is not None else 11
        size = int(config["quota.window.size.seconds"]) if config is not None else 1
        self.time = time
        self.metrics = metrics if metrics is not None else Metrics(time=time)
        self.produce = ClientQuotaManager("Produce", PRODUCER_BYTE_RATE, self.metrics, time, num, size)
        self.fetch = ClientQuotaManager("Fetch", CONSUMER_BYTE_RATE, self.metrics, time, num, size)
        self.request = ClientQuotaManager("Request", REQUEST_PERCENTAGE, self.metrics, time, num, size,
                                          metric_name="request-time", max_throttle_ms=size * 1000)
        self.controller_mutation = ClientQuotaManager("ControllerMutation", CONTROLLER_MUTATION_RATE, self.metrics,
                                                      time, num, size, metric_name="tokens", stat=TokenBucket)
        self._by_key = {m.key: m for m in (self.produce, self.fetch, self.request, self.controller_mutation)}
        self.connection_rates: dict[str, float] = {}  # ip (or DEFAULT) -> connection_creation_rate
        self.entities: dict[QuotaEntity, dict[str, float]] = {}
        self.store: Any = None  # the QuotaStore (file or ZooKeeper) AlterClientQuotas writes to

    # -- quota values ------------------------------------------------------------------------------------------
    def set_entity(self, entity: QuotaEntity, quotas: Mapping[str, float]) -> None:
        """Make ``quotas`` the whole set of quota values of ``entity`` (an empty mapping removes them all)."""
        if entity.ip is not None:
            quotas = {k: float(v) for k, v in quotas.items() if k == CONNECTION_CREATION_RATE}
            if quotas:
                self.connection_rates[entity.ip] = quotas[CONNECTION_CREATION_RATE]
            else:
                self.connection_rates.pop(entity.ip, None)
        else:
            quotas = {k: float(v) for k, v in quotas.items() if k in self._by_key}
            for key, manager in self._by_key.items():
                manager.update_quota(entity, quotas.get(key))
        if quotas:
            self.entities[entity] = quotas
        else:
            self.entities.pop(entity, None)

    def load(self, entities: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        for entity in list(self.entities):
            if entity not in entities:
                self.set_entity(entity, {})
        for entity, quotas in entities.items():
            self.set_entity(entity, quotas)

    def connection_rate(self, ip: str) -> float | None:
        """The ``connection_creation_rate`` that applies to connections from ``ip``: its own, else the default
        IP's (Kafka's ``ConnectionQuotas.connectionRateForIp``); None when neither is set."""
        rates = self.connection_rates
        return rates.get(ip, rates.get(DEFAULT)) if rates else None

    # -- what the handlers call --------------------------------------------------------------------------------
    def record_produce(self, ctx: RequestContext, request: Any) -> int:
        """Record a Produce request's record bytes (appended or not, as Kafka counts the request size); the
        throttle time (also set to mute the connection after the response)."""
        if not self.produce.enabled:
            return 0
        size = sum(len(pd.records or b"") for td in request.topic_data for pd in td.partition_data)
        throttle = self.produce.record_and_get_throttle_time_ms(_principal_name(ctx), ctx.client_id or "", size,
                                                                self.time.milliseconds())
        _mute(ctx, throttle)
        return throttle

    def fetch_max_bytes(self, ctx: RequestContext, max_bytes: int) -> int:
        """A consumer's fetch may carry at most one quota window's bytes (else it would never fit the quota)."""
        if not self.fetch.enabled:
            return max_bytes
        cap = self.fetch.max_value_in_quota_window(_principal_name(ctx), ctx.client_id or "")
        return max_bytes if cap >= max_bytes else max(1, int(cap))

    def record_fetch(self, ctx: RequestContext, size: int) -> int:
        """Record a consumer Fetch response's bytes. When it is over quota the throttle time is returned, the bytes
        are taken back and the caller answers with no data (Kafka's ``getThrottledResponse``)."""
        if not self.fetch.enabled:
            return 0
        user, client_id, now = _principal_name(ctx), ctx.client_id or "", self.time.milliseconds()
        throttle = self.fetch.record_and_get_throttle_time_ms(user, client_id, size, now)
        if throttle > 0:
            self.fetch.unrecord(user, client_id, size, now)
            _mute(ctx, throttle)
        return throttle

    def controller_mutation_quota(self, ctx: RequestContext, strict: bool) -> ControllerMutationQuota:
        """The mutation quota of one CreateTopics / CreatePartitions / DeleteTopics request (``strict`` for the
        versions that can carry THROTTLING_QUOTA_EXCEEDED)."""
        return ControllerMutationQuota(self.controller_mutation, ctx, strict, self.time)

    def wrap_handler(self, api_key: int, handler: Callable[[Any, Any], Awaitable[Any]],
                     ) -> Callable[[Any, Any], Awaitable[Any]]:
        """The handler with request-time quotas (KIP-124) around it; exempt APIs are returned unchanged."""
        if api_key in _EXEMPT_APIS:
            return handler
        request_quota = self.request

        async def timed(ctx: RequestContext, request: Any) -> Any:
            if not request_quota.enabled or (api_key == ApiKey.FETCH and _from_follower(ctx, request)):
                return await handler(ctx, request)
            timer = _StepTimer(handler(ctx, request))
            response = await timer
            throttle = request_quota.record_and_get_throttle_time_ms(
                _principal_name(ctx), ctx.client_id or "", timer.nanos * _NANOS_TO_PERCENTAGE_PER_SECOND,
                self.time.milliseconds())
            if throttle > 0:
                _mute(ctx, throttle)
                if response is not None and hasattr(response, "throttle_time_ms"):
                    response.throttle_time_ms = max(int(response.throttle_time_ms or 0), throttle)
            return response

        return timed


class ControllerMutationQuota:
    """One request's view of its principal's controller mutation quota (Kafka's ``StrictControllerMutationQuota``
    / ``PermissiveControllerMutationQuota``). ``record(partitions)`` before each mutation: a strict quota raises
    :class:`~strom.common.error_codes.ThrottlingQuotaExceededError` when the bucket is already empty, a
    permissive one only remembers the throttle. ``throttle_time_ms`` goes into the response (and mutes the
    connection for that long after it, as every quota)."""

    def __init__(self, manager: ClientQuotaManager, ctx: RequestContext, strict: bool, time: Time) -> None:
        self._manager = manager
        self._ctx = ctx
        self.strict = strict
        self._time = time
        self.throttle_time_ms = 0

    def record(self, partitions: int) -> None:
        manager = self._manager
        if not manager.enabled:
            return
        now = self._time.milliseconds()
        user, client_id = _principal_name(self._ctx), self._ctx.client_id or ""
        sensors, _bound = manager._sensors_for(user, client_id, now)
        sensors.last_record_ms = now
        try:
            if self.strict:
                sensors.quota_sensor.check_quotas(now)
                sensors.quota_sensor.record(partitions, now)
            else:
                sensors.quota_sensor.record(partitions, now, check_quotas=True)
        except QuotaViolationError as e:
            self.throttle_time_ms = max(self.throttle_time_ms, manager.throttle_time(e, now))
            sensors.throttle_sensor.record(self.throttle_time_ms, now)
            _mute(self._ctx, self.throttle_time_ms)
            if self.strict:
                raise ThrottlingQuotaExceededError("The throttling quota has been exceeded.") from None


def _from_follower(ctx: RequestContext, request: Any) -> bool:
    replica_id = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
    return bool(replica_id >= 0)


def _mute(ctx: RequestContext, throttle_ms: int) -> None:
    if throttle_ms > 0:
        conn = ctx.connection
        conn.throttle_ms = max(conn.throttle_ms, throttle_ms)
