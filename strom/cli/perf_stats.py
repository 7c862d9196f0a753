"""Measurement for the perf tools: latency statistics, throughput throttling, a terminal progress bar.

Kafka counterparts: ``ProducerPerformance.Stats`` (windowed report lines every 5 s and the final summary with
50th/95th/99th/99.9th latency percentiles over at most 500,000 sampled latencies — every
``num_records / min(num_records, 500000)``-th record), ``ProducerPerformance.percentiles`` (sort, take
``latencies[int(p * n)]``) and ``ThroughputThrottler`` (sleep so the average rate stays at the target).

The line formats are Kafka's, byte for byte::

    50000 records sent, 9998.0 records/sec (0.95 MB/sec), 1.3 ms avg latency, 38.0 ms max latency.
    100000 records sent, 9999.100081 records/sec (0.95 MB/sec), 1.21 ms avg latency, 38.00 ms max latency,
        1 ms 50th, 2 ms 95th, 4 ms 99th, 21 ms 99.9th.        (one line)

Thread-safety: :class:`Stats` is thread-safe (producer callbacks run on the I/O thread);
:class:`ThroughputThrottler` and :class:`ProgressBar` belong to the sending thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

__all__ = ["Stats", "percentiles", "ThroughputThrottler", "ProgressBar", "MAX_SAMPLES", "snapshot_metrics",
           "print_metrics"]

MAX_SAMPLES = 500_000
MB = 1024.0 * 1024.0


def percentiles(latencies: Sequence[int], ps: Sequence[float]) -> list[int]:
    """Kafka's ``percentiles``: the value at index ``int(p * n)`` of the sorted samples (0 when there are none)."""
    ordered = sorted(latencies)
    n = len(ordered)
    return [ordered[min(int(p * n), n - 1)] if n else 0 for p in ps]


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Stats:
    """Kafka's ``ProducerPerformance.Stats``."""

    def __init__(self, num_records: int, reporting_interval_ms: int = 5000, out: TextIO | None = None,
                 clock: Callable[[], int] = _now_ms) -> None:
        self._clock = clock
        self.start = clock()
        self.window_start = self.start
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_SAMPLES)))
        self.latencies: list[int] = []
        self.reporting_interval = reporting_interval_ms
        self.out = out if out is not None else sys.stdout
        self.iteration = 0
        self.count = self.bytes = self.total_latency = 0
        self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total_latency = 0
        self.window_max_latency = 0
        self._lock = threading.Lock()
        self.before_print: Callable[[], None] | None = None  # e.g. clear the progress bar

    def next_completion(self, start_ms: int, bytes_: int) -> Callable[[object, BaseException | None], None]:
        """A producer callback that records the latency of the send started at ``start_ms``."""
        with self._lock:
            iteration = self.iteration
            self.iteration += 1

        def done(_metadata: object, exception: BaseException | None) -> None:
            if exception is None:
                self.record(iteration, int(self._clock() - start_ms), bytes_, self._clock())

        return done

    def record(self, iteration: int, latency: int, bytes_: int, now: int) -> None:
        with self._lock:
            self.count += 1
            self.bytes += bytes_
            self.total_latency += latency
            self.max_latency = max(self.max_latency, latency)
            self.window_count += 1
            self.window_bytes += bytes_
            self.window_total_latency += latency
            self.window_max_latency = max(self.window_max_latency, latency)
            if iteration % self.sampling == 0 and len(self.latencies) < MAX_SAMPLES:
                self.latencies.append(latency)
            if now - self.window_start >= self.reporting_interval:
                self._print_window(now)
                self._new_window(now)

    def _emit(self, line: str) -> None:
        if self.before_print is not None:
            self.before_print()
        self.out.write(line + "\n")
        self.out.flush()

    def window_line(self, now: int) -> str:
        elapsed = max(1, now - self.window_start)
        recs_per_sec = 1000.0 * self.window_count / elapsed
        mb_per_sec = 1000.0 * self.window_bytes / elapsed / MB
        avg = self.window_total_latency / self.window_count if self.window_count else 0.0
        return (f"{self.window_count} records sent, {recs_per_sec:.1f} records/sec ({mb_per_sec:.2f} MB/sec), "
                f"{avg:.1f} ms avg latency, {float(self.window_max_latency):.1f} ms max latency.")

    def _print_window(self, now: int) -> None:
        self._emit(self.window_line(now))

    def _new_window(self, now: int) -> None:
        self.window_start = now
        self.window_count = self.window_bytes = self.window_total_latency = 0
        self.window_max_latency = 0

    def total_line(self, now: int | None = None) -> str:
        with self._lock:
            elapsed = max(1, (self._clock() if now is None else now) - self.start)
            recs_per_sec = 1000.0 * self.count / elapsed
            mb_per_sec = 1000.0 * self.bytes / elapsed / MB
            avg = self.total_latency / self.count if self.count else 0.0
            p50, p95, p99, p999 = percentiles(self.latencies, (0.5, 0.95, 0.99, 0.999))
            return (f"{self.count} records sent, {recs_per_sec:f} records/sec ({mb_per_sec:.2f} MB/sec), "
                    f"{avg:.2f} ms avg latency, {float(self.max_latency):.2f} ms max latency, {p50} ms 50th, "
                    f"{p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")

    def print_total(self) -> None:
        self._emit(self.total_line())


class ThroughputThrottler:
    """Kafka's ``ThroughputThrottler``: ``should_throttle(sent, now)`` when the average rate is above target;
    ``throttle()`` sleeps off the accumulated deficit (at least 2 ms at a time). A negative target never
    throttles."""

    MIN_SLEEP_NS = 2_000_000

    def __init__(self, target_throughput: float, start_ms: int,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target = target_throughput
        self.start_ms = start_ms
        self.sleep_time_ns = int(1_000_000_000 / target_throughput) if target_throughput > 0 else 0
        self.sleep_deficit_ns = 0
        self._sleep = sleep
        self._wakeup = threading.Event()

    def should_throttle(self, amount_so_far: int, send_start_ms: int) -> bool:
        if self.target < 0:
            return False
        elapsed_s = (send_start_ms - self.start_ms) / 1000.0
        return elapsed_s > 0 and amount_so_far / elapsed_s > self.target

    def throttle(self) -> None:
        if self.target == 0:
            self._wakeup.wait()  # a target of 0 sends nothing more until wakeup()
            return
        self.sleep_deficit_ns += self.sleep_time_ns
        if self.sleep_deficit_ns >= self.MIN_SLEEP_NS:
            start = time.monotonic_ns()
            self._sleep(self.sleep_deficit_ns / 1e9)
            self.sleep_deficit_ns = max(0, self.sleep_deficit_ns - (time.monotonic_ns() - start))

    def wakeup(self) -> None:
        self._wakeup.set()


class ProgressBar:
    """A one-line live progress bar on a terminal (``stream`` must be a TTY; otherwise it draws nothing)."""

    WIDTH = 30

    def __init__(self, total: int, unit: str = "records", stream: TextIO | None = None,
                 min_interval_s: float = 0.2) -> None:
        self.total = max(1, total)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval_s = min_interval_s
        self.start = time.monotonic()
        self._last = 0.0
        self._drawn = False
        self._lock = threading.Lock()

    def render(self, done: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        fraction = min(1.0, done / self.total)
        filled = int(self.WIDTH * fraction)
        rate = done / max(1e-9, now - self.start)
        return (f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction * 100:5.1f}% "
                f"{done}/{self.total} {self.unit} {rate:,.0f} {self.unit}/sec")

    def update(self, done: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last < self.min_interval_s:
                return
            self._last = now
            self.stream.write("\r" + self.render(done, now) + "\x1b[K")
            self.stream.flush()
            self._drawn = True

    def clear(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._drawn = False


def snapshot_metrics(metrics: Mapping[Any, Any]) -> dict[str, Any]:
    """``{"group:name:{tags}": value}`` of a client's ``metrics()``, read now (Kafka's ``ToolsUtils`` key)."""
    out: dict[str, Any] = {}
    for name, metric in metrics.items():
        tags = ", ".join(f"{k}={v}" for k, v in name.tags.items())
        try:
            out[f"{name.group}:{name.name}:{{{tags}}}"] = metric.metric_value()
        except Exception as e:  # noqa: BLE001 - a failing gauge prints as its error
            out[f"{name.group}:{name.name}:{{{tags}}}"] = f"error: {e}"
    return out


def print_metrics(values: Mapping[str, Any], out: TextIO | None = None) -> None:
    """Kafka's ``ToolsUtils.printMetrics``: a sorted name/value table, floats with 3 decimals."""
    if not values:
        return
    out = out or sys.stdout
    width = max(len("Metric Name"), *(len(k) for k in values))
    print(f"\n{'Metric Name':<{width}} : Value", file=out)
    for key in sorted(values):
        value = values[key]
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}} : {text}", file=out)
