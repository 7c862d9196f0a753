"""ProducerPerformance statistics: Kafka's percentile rule, window and summary lines, the throttler."""

from __future__ import annotations

import io
import re

import pytest

from strom.cli.perf_stats import ProgressBar, Stats, ThroughputThrottler, percentiles

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

SUMMARY = re.compile(r"^(\d+) records sent, (\d+\.\d{6}) records/sec \((\d+\.\d\d) MB/sec\), (\d+\.\d\d) ms avg latency, "
                     r"(\d+\.\d\d) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")


def test_percentiles_take_index_p_times_n() -> None:
    data = list(range(1000, 0, -1))  # 1..1000 unsorted
    assert percentiles(data, (0.5, 0.95, 0.99, 0.999)) == [501, 951, 991, 1000]
    assert percentiles([7], (0.5, 0.999)) == [7, 7]
    assert percentiles([], (0.5,)) == [0]


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_window_and_total_lines() -> None:
    clock, out = Clock(), io.StringIO()
    stats = Stats(10, reporting_interval_ms=5000, out=out, clock=clock)
    for i in range(10):
        clock.now = i * 1000
        stats.record(i, latency=i + 1, bytes_=1024 * 1024, now=clock.now)
    # one window report after 5 s
    window = out.getvalue().splitlines()
    assert window == ["6 records sent, 1.2 records/sec (1.20 MB/sec), 3.5 ms avg latency, 6.0 ms max latency."]
    clock.now = 10_000
    line = stats.total_line()
    m = SUMMARY.match(line)
    assert m is not None, line
    assert m.group(1) == "10" and m.group(2) == "1.000000" and m.group(3) == "1.00"
    assert m.group(4) == "5.50" and m.group(5) == "10.00"
    assert [int(m.group(i)) for i in range(6, 10)] == [6, 10, 10, 10]


def test_sampling_keeps_at_most_500000_latencies() -> None:
    stats = Stats(1_500_000, out=io.StringIO(), clock=Clock())
    assert stats.sampling == 3
    for i in range(30):
        stats.record(i, 1, 1, 0)
    assert len(stats.latencies) == 10


def test_throttler_keeps_the_average_rate() -> None:
    slept: list[float] = []
    t = ThroughputThrottler(100, start_ms=0, sleep=slept.append)
    assert not t.should_throttle(10, 0)          # no time elapsed yet
    assert t.should_throttle(50, 100)            # 500/s > 100/s
    assert not t.should_throttle(5, 100)         # 50/s
    t.throttle()
    assert slept and abs(slept[0] - 0.01) < 1e-9  # 1/100 s per record
    assert not ThroughputThrottler(-1, 0).should_throttle(10**9, 1)


def test_progress_bar_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    bar = ProgressBar(100, stream=quiet)
    bar.update(50, force=True)
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = ProgressBar(100, stream=tty)
    bar.update(50, force=True)
    assert "50/100 records" in tty.getvalue() and " 50.0%" in tty.getvalue()
    bar.clear()
    assert tty.getvalue().endswith("\r\x1b[K")
