"""Connection counts and creation rates shared by a broker's listeners (Kafka's ``ConnectionQuotas``):
``max.connections``, ``max.connections.per.ip`` and its overrides, ``max.connection.creation.rate`` per listener
and broker-wide, the connection creation rate per IP. Bookkeeping only: the socket servers ask it at accept time
and tell it when a connection closes. Event loop only."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from strom.common.errors import ConfigError
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import MetricConfig, Metrics, Rate, Sensor
from strom.metrics.quota import Quota, QuotaViolationError

__all__ = ["ConnectionQuotas", "parse_max_connections_per_ip_overrides"]

def parse_max_connections_per_ip_overrides(value: str) -> dict[str, int]:
    """``host:count,...`` (Kafka's ``max.connections.per.ip.overrides``); host names are resolved to addresses."""
    result: dict[str, int] = {}
    for item in (v.strip() for v in (value or "").split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ConfigError(f"Invalid value {item} for configuration max.connections.per.ip.overrides: "
                              "expected host:count")
        try:
            n = int(count)
        except ValueError:
            raise ConfigError(f"Invalid value {item} for configuration max.connections.per.ip.overrides: "
                              f"{count!r} is not a number") from None
        if n < 0:
            raise ConfigError(f"Invalid value {item} for configuration max.connections.per.ip.overrides: "
                              "count must be at least 0")
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
        except OSError as e:
            raise ConfigError(f"Invalid value {item} for configuration max.connections.per.ip.overrides: "
                              f"cannot resolve {host} ({e})") from None
        for address in addresses | {host}:
            result[address] = n
    return result


_INT_MAX = 2**31 - 1


class ConnectionQuotas:
    """Connection counts shared by every listener of a broker (Kafka's ``ConnectionQuotas``). Event loop only.

    Over ``max.connections.per.ip`` (or the address's override) a new connection is closed at once; at
    ``max.connections`` the listeners stop accepting until a connection closes (new clients wait in the
    listen backlog), as Kafka's acceptor blocks. Over its ``connection_creation_rate`` quota (KIP-612: the IP's
    own, else the default IP's, measured over ``quota.window.num`` windows of ``quota.window.size.seconds``) a
    new connection is held unanswered for the throttle time, then closed (:meth:`record_ip_connection`). Over
    ``max.connection.creation.rate`` (the whole broker; the inter-broker listener is exempt) or a listener's
    ``listener.name.<l>.max.connection.creation.rate``, the listener stops accepting for the throttle time and
    the connection just accepted waits that long (:meth:`record_listener_connection`), as Kafka's acceptor blocks.
    """

    def __init__(self, max_connections: int = 2**31 - 1, max_connections_per_ip: int = 2**31 - 1,
                 overrides: Mapping[str, int] | None = None, *,
                 connection_rate: Callable[[str], float | None] | None = None, quota_window_num: int = 11,
                 quota_window_size_seconds: int = 1, time: Time = SYSTEM_TIME) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.overrides = dict(overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._waiters: list[Callable[[], None]] = []
        self.connection_rate = connection_rate  # ip -> its connection_creation_rate quota, None: no quota
        self._rate_samples, self._rate_window_s = quota_window_num, quota_window_size_seconds
        self._rate_metrics: Metrics | None = None
        self._rate_sensors: dict[str, Sensor] = {}
        self._time = time
        self.broker_connection_rate: float | None = None  # max.connection.creation.rate
        self.listener_connection_rates: dict[str, float] = {}  # listener name -> its own rate

    def reconfigure(self, config: Any) -> None:
        """New ``max.connections``, ``max.connections.per.ip(.overrides)`` and ``max.connection.creation.rate``
        (dynamic broker configs); connections over a lowered limit stay open, as in Kafka. Event loop only."""
        fresh = ConnectionQuotas.from_config(config, self.connection_rate, self._time)
        self.max_connections = fresh.max_connections
        self.max_connections_per_ip = fresh.max_connections_per_ip
        self.overrides = fresh.overrides
        self.broker_connection_rate = fresh.broker_connection_rate
        if not self.at_broker_limit():  # a raised limit: listeners waiting for a free slot go on accepting
            waiters, self._waiters = self._waiters, []
            for resume in waiters:
                resume()

    @classmethod
    def from_config(cls, config: Any, connection_rate: Callable[[str], float | None] | None = None,
                    time: Time = SYSTEM_TIME) -> ConnectionQuotas:
        q = cls(int(config["max.connections"]), int(config["max.connections.per.ip"]),
                parse_max_connections_per_ip_overrides(str(config["max.connections.per.ip.overrides"] or "")),
                connection_rate=connection_rate, quota_window_num=int(config["quota.window.num"]),
                quota_window_size_seconds=int(config["quota.window.size.seconds"]), time=time)
        broker_rate = int(config["max.connection.creation.rate"])
        q.broker_connection_rate = float(broker_rate) if broker_rate < _INT_MAX else None
        for listener in getattr(config, "listeners", []):
            prefixed = f"listener.name.{listener.name.lower()}.max.connection.creation.rate"
            value = getattr(config, "originals", {}).get(prefixed)
            if value is not None:
                try:
                    rate = int(value)
                except (TypeError, ValueError):
                    raise ConfigError(f"Invalid value {value} for configuration {prefixed}: Not a number of type "
                                      "INT") from None
                if rate < 0:
                    raise ConfigError(f"Invalid value {value} for configuration {prefixed}: Value must be at "
                                      "least 0")
                if rate < _INT_MAX:
                    q.listener_connection_rates[listener.name] = float(rate)
        return q

    def _rate_sensor(self, key: str, rate: float, name: str, tags: dict[str, str]) -> Sensor:
        """The connection-rate sensor of ``key`` with ``rate`` as its quota (updated when the quota changed)."""
        config = MetricConfig(samples=self._rate_samples, time_window_ms=self._rate_window_s * 1000,
                              quota=Quota.upper_bound(rate))
        sensor = self._rate_sensors.get(key)
        if sensor is None:
            if self._rate_metrics is None:
                self._rate_metrics = Metrics(time=self._time)
            sensor = self._rate_sensors[key] = self._rate_metrics.sensor(key)
            sensor.add(self._rate_metrics.metric_name(name, "connection-quota", "Connections created per second",
                                                      tags), Rate(), config)
        for metric in sensor.metrics():
            if metric.config.quota != config.quota:
                metric.config = config  # the quota changed since the sensor was made
        return sensor

    def _throttle_ms(self, e: QuotaViolationError, now: int) -> int:
        """Kafka's ``QuotaUtils.boundedThrottleTime``: the time that brings the rate back to the quota, at most one
        quota window (and at least 1 ms)."""
        window_ms = e.metric.measurable().window_size(e.metric.config, now)
        return max(1, min(int(round((e.value - e.bound) / e.bound * window_ms)), self._rate_window_s * 1000))

    def record_listener_connection(self, listener: str, inter_broker: bool = False) -> int:
        """Count a connection accepted on ``listener`` against the broker's and the listener's connection
        creation rates; how long the listener must wait before going on (0 within both). Counted either way, as
        in Kafka: the connection is served, later."""
        now = self._time.milliseconds()
        throttle = 0
        limits = [] if inter_broker or self.broker_connection_rate is None else \
            [("connection-rate:broker", self.broker_connection_rate, {})]
        listener_rate = self.listener_connection_rates.get(listener)
        if listener_rate is not None:
            limits.append((f"connection-rate:listener:{listener}", listener_rate, {"listener": listener}))
        for key, rate, tags in limits:
            sensor = self._rate_sensor(key, rate, "connection-creation-rate", tags)
            try:
                sensor.record(1.0, now, check_quotas=True)
            except QuotaViolationError as e:
                throttle = max(throttle, self._throttle_ms(e, now))
        return throttle

    def record_ip_connection(self, ip: str) -> int:
        """Count a connection attempt from ``ip`` against its connection-rate quota; the throttle time (ms) when
        it is over the quota (the attempt is then not counted: the connection is refused), else 0 (Kafka's
        ``recordIpConnectionMaybeThrottle``; the throttle is at most one quota window)."""
        rate = self.connection_rate(ip) if self.connection_rate is not None else None
        if rate is None:
            return 0
        now = self._time.milliseconds()
        sensor = self._rate_sensor(f"connection-rate:ip:{ip}", rate, "connection-creation-rate", {"ip": ip})
        try:
            sensor.record(1.0, now, check_quotas=True)
        except QuotaViolationError as e:
            sensor.record(-1.0, now)
            return self._throttle_ms(e, now)
        return 0

    def count(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)

    def at_broker_limit(self) -> bool:
        return self.total >= self.max_connections

    def try_acquire(self, ip: str) -> bool:
        """Count a new connection from ``ip``; ``False`` (nothing counted) when ``ip`` is at its limit."""
        limit = self.overrides.get(ip, self.max_connections_per_ip)
        n = self._per_ip.get(ip, 0)
        if n >= limit:
            return False
        self._per_ip[ip] = n + 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        n = self._per_ip.get(ip, 0) - 1
        if n > 0:
            self._per_ip[ip] = n
        else:
            self._per_ip.pop(ip, None)
        self.total = max(0, self.total - 1)
        if self._waiters and not self.at_broker_limit():
            waiters, self._waiters = self._waiters, []
            for resume in waiters:
                resume()

    def wait_for_slot(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once a connection has closed and a slot is free."""
        self._waiters.append(resume)
