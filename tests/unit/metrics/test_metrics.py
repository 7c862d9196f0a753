"""strom.metrics: Kafka's stats over sample windows with exact values under MockTime, sensors with parents,
recording levels, the registry and metric.reporters."""

from __future__ import annotations

import math
import threading

import pytest

from strom.config.config_def import ConfigError
from strom.metrics import (
    Avg,
    CumulativeCount,
    CumulativeSum,
    Gauge,
    Max,
    Meter,
    MetricConfig,
    MetricName,
    Metrics,
    Min,
    Percentile,
    Percentiles,
    Rate,
    RecordingLevel,
    Value,
    WindowedCount,
    load_reporters,
    metric_values,
)
from strom.testing.mock_time import MockTime

pytestmark = pytest.mark.unit


def registry(samples: int = 2, window_ms: int = 1000, level: str = "INFO", **tags: str) -> tuple[Metrics, MockTime]:
    time = MockTime(start_ms=1_000_000)
    return Metrics(MetricConfig(samples, window_ms, recording_level=level, tags=tags), time=time), time


def value(metrics: Metrics, name: str, group: str = "g", **tags: str) -> float:
    return metrics.metric(metrics.metric_name(name, group, tags=tags)).metric_value()  # type: ignore[union-attr]


def test_metric_name_equality_ignores_description_and_tag_order() -> None:
    a = MetricName("n", "g", "one", {"a": "1", "b": "2"})
    b = MetricName("n", "g", "two", {"b": "2", "a": "1"})
    assert a == b and hash(a) == hash(b)
    assert a != MetricName("n", "g", "", {"a": "1"})
    assert a != MetricName("n", "h", "", {"a": "1", "b": "2"})
    with pytest.raises(ValueError, match="metric name"):
        MetricName("", "g")


def test_global_tags_are_added_to_every_name() -> None:
    metrics, _ = registry(**{"client-id": "c1"})
    name = metrics.metric_name("x", "g", tags={"topic": "t"})
    assert name.tags == {"client-id": "c1", "topic": "t"}


def test_rate_counts_at_least_samples_minus_one_full_windows() -> None:
    metrics, time = registry(samples=2, window_ms=1000)
    s = metrics.sensor("s")
    s.add(metrics.metric_name("r", "g"), Rate())
    s.record(10)
    # a young rate is divided by one full window (samples - 1), not by ~0 ms
    assert value(metrics, "r") == pytest.approx(10.0)
    time.sleep(500)
    s.record(10)
    time.sleep(1000)
    # both values in the first window; 1,500 ms covered
    assert value(metrics, "r") == pytest.approx(20 / 1.5)
    s.record(30)  # second window starts at +1500
    time.sleep(200)
    assert value(metrics, "r") == pytest.approx(50 / 1.7)
    time.sleep(2000)  # both windows older than samples * window: purged
    assert value(metrics, "r") == 0.0


def test_windowed_count_rate_counts_occurrences() -> None:
    metrics, time = registry(samples=3, window_ms=1000)
    s = metrics.sensor("s")
    s.add(metrics.metric_name("count-rate", "g"), Rate(WindowedCount()))
    for _ in range(6):
        s.record(1000)
    time.sleep(2000)  # 2 full windows = samples - 1
    assert value(metrics, "count-rate") == pytest.approx(6 / 2.0)
    time.sleep(1000)  # every window older than samples * window: purged
    assert value(metrics, "count-rate") == 0.0


def test_avg_max_min_are_windowed_and_nan_when_empty() -> None:
    metrics, time = registry(samples=2, window_ms=1000)
    s = metrics.sensor("lat")
    s.add(metrics.metric_name("avg", "g"), Avg())
    s.add(metrics.metric_name("max", "g"), Max())
    s.add(metrics.metric_name("min", "g"), Min())
    assert math.isnan(value(metrics, "avg")) and math.isnan(value(metrics, "max")) and math.isnan(value(metrics, "min"))
    for v in (4, 8, 12):
        s.record(v)
    assert (value(metrics, "avg"), value(metrics, "max"), value(metrics, "min")) == (8.0, 12.0, 4.0)
    time.sleep(1000)
    s.record(-2)  # second window
    assert (value(metrics, "avg"), value(metrics, "max"), value(metrics, "min")) == (5.5, 12.0, -2.0)
    time.sleep(1000)
    s.record(100)  # third window reuses the first slot: 4, 8, 12 are gone
    assert (value(metrics, "avg"), value(metrics, "max"), value(metrics, "min")) == (49.0, 100.0, -2.0)


def test_event_window_closes_a_sample_early() -> None:
    time = MockTime()
    metrics = Metrics(MetricConfig(samples=2, time_window_ms=60_000, event_window=2), time=time)
    s = metrics.sensor("s")
    s.add(metrics.metric_name("avg", "g"), Avg())
    for v in (1, 1, 10, 10, 100):  # windows: [1,1] [10,10] then [100] replaces [1,1]
        s.record(v)
    assert value(metrics, "avg") == pytest.approx(120 / 3)


def test_cumulative_stats_never_forget() -> None:
    metrics, time = registry()
    s = metrics.sensor("s")
    s.add(metrics.metric_name("sum", "g"), CumulativeSum())
    s.add(metrics.metric_name("count", "g"), CumulativeCount())
    s.add(metrics.metric_name("last", "g"), Value())
    for v in (5, 7):
        s.record(v)
    time.sleep(1_000_000)
    assert (value(metrics, "sum"), value(metrics, "count"), value(metrics, "last")) == (12.0, 2.0, 7.0)


def test_meter_gives_a_rate_and_a_total() -> None:
    metrics, time = registry(samples=2, window_ms=1000)
    s = metrics.sensor("bytes")
    s.add(None, Meter(metrics.metric_name("byte-rate", "g"), metrics.metric_name("byte-total", "g")))
    s.add(None, Meter(metrics.metric_name("record-rate", "g"), metrics.metric_name("record-total", "g"),
                      WindowedCount()))
    s.record(100)
    s.record(300)
    time.sleep(1000)
    assert value(metrics, "byte-total") == 400.0 and value(metrics, "record-total") == 2.0
    assert value(metrics, "byte-rate") == pytest.approx(400.0) and value(metrics, "record-rate") == pytest.approx(2.0)


def test_percentiles_from_hdr_histograms_over_live_windows() -> None:
    metrics, time = registry(samples=2, window_ms=1000)
    s = metrics.sensor("latency")
    s.add(None, Percentiles([Percentile(metrics.metric_name("p50", "g"), 50),
                             Percentile(metrics.metric_name("p99", "g"), 99)], highest=100_000))
    assert math.isnan(value(metrics, "p50"))
    for v in range(1, 101):
        s.record(v)
    assert value(metrics, "p50") == 50.0 and value(metrics, "p99") == 99.0
    time.sleep(1000)
    for _ in range(100):
        s.record(1_000_000)  # above the trackable range: clamped, still in the tail
    # 200 values: the median is the 100th (100), the tail is the clamped outliers
    assert value(metrics, "p50") == 100.0 and value(metrics, "p99") == pytest.approx(100_000, rel=0.01)
    time.sleep(1000)
    assert value(metrics, "p50") == pytest.approx(100_000, rel=0.01)  # the first window expired
    time.sleep(1000)
    assert math.isnan(value(metrics, "p50"))


def test_sensor_records_into_its_parents() -> None:
    metrics, _ = registry()
    total = metrics.sensor("records")
    total.add(metrics.metric_name("record-send-total", "g"), CumulativeSum())
    per_topic = metrics.sensor("topic.t.records", None, total)
    per_topic.add(metrics.metric_name("record-send-total", "g", tags={"topic": "t"}), CumulativeSum())
    per_topic.record(3)
    total.record(2)
    assert value(metrics, "record-send-total") == 5.0
    assert value(metrics, "record-send-total", topic="t") == 3.0
    assert metric_values(metrics.metrics(), "g", topic="t") == {"record-send-total": 3.0}


def test_recording_level_filters_sensors() -> None:
    metrics, _ = registry(level="INFO")
    debug = metrics.sensor("d", recording_level=RecordingLevel.DEBUG)
    debug.add(metrics.metric_name("d-total", "g"), CumulativeSum())
    debug.record(5)
    assert value(metrics, "d-total") == 0.0 and not debug.should_record()
    metrics2, _ = registry(level="DEBUG")
    debug2 = metrics2.sensor("d", recording_level=RecordingLevel.DEBUG)
    debug2.add(metrics2.metric_name("d-total", "g"), CumulativeSum())
    debug2.record(5)
    assert value(metrics2, "d-total") == 5.0
    with pytest.raises(ValueError, match="metrics.recording.level"):
        MetricConfig(recording_level="LOUD")


def test_duplicate_names_are_rejected_and_gauges_read_live() -> None:
    metrics, _ = registry()
    name = metrics.metric_name("x", "g")
    metrics.sensor("a").add(name, CumulativeSum())
    with pytest.raises(ValueError, match="already exists"):
        metrics.sensor("b").add(name, CumulativeSum())
    assert metrics.sensor("a").add(name, CumulativeSum()) is False  # same sensor: ignored, as Kafka does
    state = {"v": 1}
    metrics.add_metric(metrics.metric_name("live", "g"), Gauge(lambda: state["v"]))
    state["v"] = 42
    assert value(metrics, "live") == 42
    metrics.add_metric(metrics.metric_name("m", "g"), lambda config, now: config.samples * 10.0)
    assert value(metrics, "m") == 20.0
    assert value(metrics, "count", "kafka-metrics-count") == len(metrics.metrics())


class RecordingReporter:
    instances: list[RecordingReporter] = []

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.configs: dict[str, object] = {}
        RecordingReporter.instances.append(self)

    def configure(self, configs: dict[str, object]) -> None:
        self.configs = configs

    def init(self, metrics: list) -> None:  # type: ignore[type-arg]
        self.events += [("init", m.metric_name().name) for m in metrics]

    def metric_change(self, metric) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("change", metric.metric_name().name))

    def metric_removal(self, metric) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("removal", metric.metric_name().name))

    def close(self) -> None:
        self.events.append(("close", ""))


def test_reporters_are_loaded_by_class_name_and_told_every_change() -> None:
    reporters = load_reporters(f"{__name__}.RecordingReporter", {"client.id": "c"})
    reporter = reporters[0]
    assert isinstance(reporter, RecordingReporter) and reporter.configs == {"client.id": "c"}
    time = MockTime()
    metrics = Metrics(MetricConfig(), reporters, time)
    parent = metrics.sensor("parent")
    parent.add(metrics.metric_name("p", "g"), CumulativeSum())
    child = metrics.sensor("child", None, parent)
    child.add(metrics.metric_name("c", "g"), CumulativeSum())
    metrics.remove_sensor("parent")  # removes the child first, as Kafka does
    assert metrics.get_sensor("child") is None and metrics.metric(metrics.metric_name("p", "g")) is None
    metrics.close()
    metrics.close()
    assert reporter.events == [("init", "count"), ("change", "p"), ("change", "c"), ("removal", "c"),
                               ("removal", "p"), ("close", "")]


def test_bad_reporter_names_fail_with_the_key_named() -> None:
    with pytest.raises(ConfigError, match="metric.reporters"):
        load_reporters("no.such.Reporter", {})
    with pytest.raises(TypeError, match="MetricsReporter"):
        load_reporters([dict], {})


def test_concurrent_records_are_all_counted() -> None:
    metrics, _ = registry()
    parent = metrics.sensor("all")
    parent.add(metrics.metric_name("all-total", "g"), CumulativeCount())
    sensors = []
    for i in range(4):
        s = metrics.sensor(f"t{i}", None, parent)
        s.add(None, Meter(metrics.metric_name("rate", "g", tags={"t": str(i)}),
                          metrics.metric_name("total", "g", tags={"t": str(i)}), WindowedCount()))
        sensors.append(s)
    start = threading.Barrier(8)

    def work(s) -> None:  # type: ignore[no-untyped-def]
        start.wait()
        for _ in range(5000):
            s.record(1)
            metrics.metrics()

    threads = [threading.Thread(target=work, args=(sensors[i % 4],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert value(metrics, "all-total") == 40_000.0
    assert [value(metrics, "total", t=str(i)) for i in range(4)] == [10_000.0] * 4


def test_sampled_stats_equal_the_separate_stats() -> None:
    """SampledStats keeps one ring for several stats: every kind must read as Kafka's separate stat would."""
    import random

    from strom.metrics import SampledStats

    rng = random.Random(7)
    metrics, time = registry(samples=3, window_ms=1000)
    kinds = {"avg": Avg(), "max": Max(), "min": Min(), "rate": Rate(), "count-rate": Rate(WindowedCount()),
             "total": CumulativeSum(), "count": CumulativeCount(), "value": Value()}
    separate = metrics.sensor("separate")
    for kind, stat in kinds.items():
        separate.add(metrics.metric_name(kind, "separate"), stat)
    separate.add(metrics.metric_name("ratio", "separate"), Rate(unit_ms=1 / 1_000_000))
    fused = metrics.sensor("fused")
    fused.add(None, SampledStats({kind: metrics.metric_name(kind, "fused") for kind in [*kinds, "ratio"]}))
    for i in range(300):
        time.sleep(rng.choice([0, 0, 10, 250, 900, 2500]))
        if i == 0 or rng.random() < 0.8:
            v = rng.uniform(-50, 5000)
            separate.record(v)
            fused.record(v)
        for kind in [*kinds, "ratio"]:
            a, b = value(metrics, kind, "separate"), value(metrics, kind, "fused")
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b), (kind, a, b)
    with pytest.raises(ValueError, match="unknown stat kinds"):
        SampledStats({"p99": metrics.metric_name("x", "g")})
