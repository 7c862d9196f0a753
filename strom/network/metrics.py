"""A minimal metrics registry: sensors with windowed rates, averages, maxima and totals, plus gauges.

Kafka counterpart: ``org.apache.kafka.common.metrics`` (``Metrics``, ``Sensor``, ``Rate``, ``Avg``, ``Max``,
``CumulativeSum``) reduced to what the clients report. Windowed stats keep ``metrics.num.samples`` samples of
``metrics.sample.window.ms`` each (Kafka's defaults: 2 × 30 s); a rate is the windowed sum per second.
Metric names follow Kafka's (``record-send-rate``, ``request-latency-avg``, ...).

Thread-safety: thread-safe (one small lock per sensor); recording is O(1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from strom.common.time import SYSTEM_TIME, Time

__all__ = ["Metrics", "Sensor"]


class Sensor:
    """Records values; exposes any of: ``<name>-rate``, ``-total``, ``-avg``, ``-max`` (windowed avg/max)."""

    __slots__ = ("name", "_window_ms", "_num_samples", "_time", "_lock", "_samples", "total", "count",
                 "_created_ms", "stats")

    def __init__(self, name: str, window_ms: int, num_samples: int, time: Time, stats: dict[str, str]) -> None:
        self.name = name
        self._window_ms = window_ms
        self._num_samples = num_samples
        self._time = time
        self._lock = threading.Lock()
        self._samples: list[list[float]] = []  # [start_ms, sum, count, max]
        self.total = 0.0
        self.count = 0
        self._created_ms = time.milliseconds()
        self.stats = stats  # metric name -> "rate" | "total" | "avg" | "max" | "count-rate"

    def record(self, value: float = 1.0, now_ms: int | None = None) -> None:
        now = self._time.milliseconds() if now_ms is None else now_ms
        with self._lock:
            self.total += value
            self.count += 1
            samples = self._samples
            if not samples or now - samples[-1][0] >= self._window_ms:
                samples.append([now, value, 1, value])
                if len(samples) > self._num_samples:
                    del samples[0]
            else:
                s = samples[-1]
                s[1] += value
                s[2] += 1
                if value > s[3]:
                    s[3] = value

    def _live(self, now: int) -> list[list[float]]:
        horizon = now - self._window_ms * self._num_samples
        return [s for s in self._samples if s[0] > horizon]

    def measure(self, kind: str, now: int) -> float:
        with self._lock:
            if kind == "total":
                return self.total
            if kind == "count":
                return float(self.count)
            live = self._live(now)
            if kind == "avg":
                n = sum(s[2] for s in live)
                return sum(s[1] for s in live) / n if n else float("nan")
            if kind == "max":
                return max((s[3] for s in live), default=float("nan"))
            if kind in ("rate", "count-rate"):
                if not live:
                    return 0.0
                elapsed = max(now - live[0][0], self._window_ms * (len(live) - 1), 1)
                elapsed = min(elapsed, max(now - self._created_ms, 1)) if now > self._created_ms else elapsed
                amount = sum(s[2] for s in live) if kind == "count-rate" else sum(s[1] for s in live)
                return amount * 1000.0 / max(elapsed, 1)
            raise ValueError(kind)


class Metrics:
    """Sensors and gauges by name; :meth:`values` gives ``{metric name: float}``. Thread-safe."""

    def __init__(self, time: Time = SYSTEM_TIME, window_ms: int = 30_000, num_samples: int = 2) -> None:
        self.time = time
        self.window_ms = window_ms
        self.num_samples = num_samples
        self._sensors: dict[str, Sensor] = {}
        self._gauges: dict[str, Callable[[], Any]] = {}
        self._lock = threading.Lock()

    def sensor(self, name: str, **stats: str) -> Sensor:
        """Get or create sensor ``name``; ``stats`` maps metric names (``record_send_rate="rate"``, dashes
        or underscores) to a stat kind."""
        with self._lock:
            sensor = self._sensors.get(name)
            if sensor is None:
                sensor = self._sensors[name] = Sensor(name, self.window_ms, self.num_samples, self.time, {})
            for metric, kind in stats.items():
                sensor.stats[metric.replace("_", "-")] = kind
            return sensor

    def add_gauge(self, name: str, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._gauges[name] = fn

    def values(self) -> dict[str, Any]:
        now = self.time.milliseconds()
        out: dict[str, Any] = {}
        with self._lock:
            sensors = list(self._sensors.values())
            gauges = list(self._gauges.items())
        for sensor in sensors:
            for metric, kind in sensor.stats.items():
                out[metric] = sensor.measure(kind, now)
        for name, fn in gauges:
            try:
                out[name] = fn()
            except Exception:  # a gauge must never break metrics()
                out[name] = float("nan")
        return dict(sorted(out.items()))
