"""Windowed latency percentiles backed by HdrHistogram (the ``hdrhistogram`` package).

Kafka counterpart: ``org.apache.kafka.common.metrics.stats.Percentiles`` (a compound stat giving one metric per
``Percentile``, over the same sample windows as the other sampled stats). Kafka buckets values itself
(``BucketSizing.CONSTANT`` / ``LINEAR``); here each window holds an HDR histogram with ``significant_figures``
decimal digits of precision from ``lowest`` to ``highest``, and a measurement adds the live windows' histograms.
Values are recorded as integers (use a unit that makes them so: ms, µs); values outside the trackable range
are clamped to it rather than dropped, so a wild outlier still counts in the tail.

Thread-safety: not thread-safe; the owning sensor serialises it.
"""

from __future__ import annotations

import math

from hdrh.histogram import HdrHistogram

from strom.metrics.metric_name import MetricConfig, MetricName
from strom.metrics.stats import NamedMeasurable, Sample, SampledStat

__all__ = ["Percentile", "Percentiles"]


class Percentile:
    """One requested percentile (0–100) and the metric name that reports it (Kafka's ``Percentile``)."""

    __slots__ = ("name", "percentile")

    def __init__(self, name: MetricName, percentile: float) -> None:
        if not 0.0 <= percentile <= 100.0:
            raise ValueError(f"percentile must be within [0, 100], not {percentile}")
        self.name = name
        self.percentile = percentile


class _HistogramSample(Sample):
    __slots__ = ("histogram",)

    def __init__(self, now_ms: int, lowest: int, highest: int, significant_figures: int) -> None:
        super().__init__(0.0, now_ms)
        self.histogram = HdrHistogram(lowest, highest, significant_figures)

    def reset(self, now_ms: int) -> None:
        super().reset(now_ms)
        self.histogram.reset()


class _PercentileValue:
    __slots__ = ("_owner", "_percentile")

    def __init__(self, owner: Percentiles, percentile: float) -> None:
        self._owner = owner
        self._percentile = percentile

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._owner.value(config, now_ms, self._percentile)


class Percentiles(SampledStat):
    """A compound stat: ``percentiles`` of the values recorded in the live windows; NaN when empty."""

    __slots__ = ("_percentiles", "_lowest", "_highest", "_significant_figures")

    def __init__(self, percentiles: list[Percentile], lowest: int = 1, highest: int = 3_600_000,
                 significant_figures: int = 2) -> None:
        if lowest < 1 or highest <= lowest:
            raise ValueError(f"Percentiles needs 1 <= lowest < highest, not lowest={lowest}, highest={highest}")
        super().__init__(0.0)
        self._percentiles = list(percentiles)
        self._lowest = lowest
        self._highest = highest
        self._significant_figures = significant_figures

    def stats(self) -> list[NamedMeasurable]:
        return [NamedMeasurable(p.name, _PercentileValue(self, p.percentile)) for p in self._percentiles]

    def new_sample(self, time_ms: int) -> Sample:
        return _HistogramSample(time_ms, self._lowest, self._highest, self._significant_figures)

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        v = int(value)
        if v < self._lowest:
            v = self._lowest
        elif v > self._highest:
            v = self._highest
        sample.histogram.record_value(v)  # type: ignore[attr-defined]

    def value(self, config: MetricConfig, now_ms: int, percentile: float) -> float:
        self.purge_obsolete_samples(config, now_ms)
        live = [s for s in self._samples if s.event_count]
        if not live:
            return math.nan
        if len(live) == 1:
            merged = live[0].histogram  # type: ignore[attr-defined]
        else:
            merged = HdrHistogram(self._lowest, self._highest, self._significant_figures)
            for s in live:
                merged.add(s.histogram)  # type: ignore[attr-defined]
        return float(merged.get_value_at_percentile(percentile))

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        return self.value(config, now_ms, 50.0)
