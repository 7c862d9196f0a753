"""Measurable statistics: Kafka's ``org.apache.kafka.common.metrics.stats``.

Sampled stats (:class:`Avg`, :class:`Max`, :class:`Min`, :class:`WindowedSum`, :class:`WindowedCount`) keep up
to ``samples`` windows of ``time_window_ms``: a record goes into the current window, a new window starts when
the current one is older than ``time_window_ms`` (or holds ``event_window`` events), and windows older than
``samples * time_window_ms`` are reset before a measurement. :class:`Rate` divides a sampled stat by the time
covered, as Kafka's ``Rate.windowSize`` does: at least ``samples - 1`` full windows, so a rate does not spike
when a registry is young. Cumulative stats (:class:`CumulativeSum`, :class:`CumulativeCount`, :class:`Value`)
never forget. Compound stats (:class:`Meter`, :class:`Percentiles`) give several metrics from one stat.

Thread-safety: not thread-safe; a :class:`~strom.metrics.metrics.Sensor` serialises ``record`` and
``measure`` under its lock.
"""

from __future__ import annotations

import math
from typing import Protocol

from strom.metrics.metric_name import MetricConfig, MetricName

__all__ = [
    "MeasurableStat", "CompoundStat", "NamedMeasurable", "Sample", "SampledStat", "Avg", "Max", "Min",
    "WindowedSum", "WindowedCount", "Rate", "CumulativeSum", "CumulativeCount", "Total", "Value", "Meter",
    "SampledStats", "TokenBucket",
]


class MeasurableStat(Protocol):
    """A stat that records values and measures one number (Kafka's ``MeasurableStat``)."""

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None: ...

    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class NamedMeasurable:
    """One metric of a compound stat: its name and the measurable behind it."""

    __slots__ = ("name", "stat")

    def __init__(self, name: MetricName, stat: object) -> None:
        self.name = name
        self.stat = stat


class CompoundStat(Protocol):
    """A stat that yields several metrics (Kafka's ``CompoundStat``: ``Meter``, ``Percentiles``)."""

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None: ...

    def stats(self) -> list[NamedMeasurable]: ...


class Sample:
    """One window of a sampled stat (Kafka's ``SampledStat.Sample``)."""

    __slots__ = ("initial_value", "event_count", "last_window_ms", "value")

    def __init__(self, initial_value: float, now_ms: int) -> None:
        self.initial_value = initial_value
        self.event_count = 0
        self.last_window_ms = now_ms
        self.value = initial_value

    def reset(self, now_ms: int) -> None:
        self.event_count = 0
        self.last_window_ms = now_ms
        self.value = self.initial_value

    def is_complete(self, time_ms: int, config: MetricConfig) -> bool:
        return time_ms - self.last_window_ms >= config.time_window_ms or self.event_count >= config.event_window


class SampledStat:
    """Kafka's ``SampledStat``: a ring of ``config.samples`` windows; subclasses define ``update`` and
    ``combine``."""

    __slots__ = ("_initial_value", "_samples", "_current")

    def __init__(self, initial_value: float) -> None:
        self._initial_value = initial_value
        self._samples: list[Sample] = []
        self._current = 0

    def new_sample(self, time_ms: int) -> Sample:
        return Sample(self._initial_value, time_ms)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.update(self._sample_for(config, time_ms), config, value, time_ms)

    def _sample_for(self, config: MetricConfig, time_ms: int) -> Sample:
        """The window ``time_ms`` falls in (a new one when the current is complete), its event counted.
        Subclasses on hot paths call this and update the sample inline."""
        samples = self._samples
        if samples:
            sample = samples[self._current]
            if time_ms - sample.last_window_ms >= config.time_window_ms or sample.event_count >= config.event_window:
                sample = self._advance(config, time_ms)
        else:
            sample = self.new_sample(time_ms)
            samples.append(sample)
        sample.event_count += 1
        return sample

    def _advance(self, config: MetricConfig, time_ms: int) -> Sample:
        self._current = (self._current + 1) % config.samples
        if self._current >= len(self._samples):
            sample = self.new_sample(time_ms)
            self._samples.append(sample)
        else:
            sample = self._samples[self._current]
            sample.reset(time_ms)
        return sample

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge_obsolete_samples(config, now_ms)
        return self.combine(self._samples, config, now_ms)

    def purge_obsolete_samples(self, config: MetricConfig, now_ms: int) -> None:
        """Reset windows that ended more than ``samples * time_window_ms`` ago."""
        expire_age = config.samples * config.time_window_ms
        for sample in self._samples:
            if now_ms - sample.last_window_ms >= expire_age:
                sample.reset(now_ms)

    def oldest(self, now_ms: int) -> Sample:
        if not self._samples:
            self._samples.append(self.new_sample(now_ms))
        return min(self._samples, key=lambda s: s.last_window_ms)

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        raise NotImplementedError

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError


class WindowedSum(SampledStat):
    """The sum of the values recorded in the live windows (Kafka's ``WindowedSum``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self._sample_for(config, time_ms).value += value

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        sample.value += value

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        return float(sum(s.value for s in samples))


class WindowedCount(WindowedSum):
    """The number of values recorded in the live windows (Kafka's ``WindowedCount``)."""

    __slots__ = ()

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self._sample_for(config, time_ms).value += 1

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        sample.value += 1


class Avg(SampledStat):
    """The mean of the values in the live windows; NaN when there are none (Kafka's ``Avg``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0.0)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self._sample_for(config, time_ms).value += value

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        sample.value += value

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        total = 0.0
        count = 0
        for s in samples:
            total += s.value
            count += s.event_count
        return total / count if count else math.nan


class Max(SampledStat):
    """The largest value in the live windows; NaN when there are none (Kafka's ``Max``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(-math.inf)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        sample = self._sample_for(config, time_ms)
        if value > sample.value:
            sample.value = value

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        if value > sample.value:
            sample.value = value

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        live = [s.value for s in samples if s.event_count]
        return max(live) if live else math.nan


class Min(SampledStat):
    """The smallest value in the live windows; NaN when there are none (Kafka's ``Min``)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(math.inf)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        sample = self._sample_for(config, time_ms)
        if value < sample.value:
            sample.value = value

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        if value < sample.value:
            sample.value = value

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        live = [s.value for s in samples if s.event_count]
        return min(live) if live else math.nan


class Rate:
    """A sampled stat per second (Kafka's ``Rate``; ``WindowedSum`` by default, ``WindowedCount`` for an
    occurrence rate)."""

    __slots__ = ("stat", "_unit_ms")

    def __init__(self, stat: SampledStat | None = None, unit_ms: int = 1000) -> None:
        self.stat = stat if stat is not None else WindowedSum()
        self._unit_ms = unit_ms

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.stat.record(config, value, time_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        value = self.stat.measure(config, now_ms)
        return value * self._unit_ms / self.window_size(config, now_ms)

    def window_size(self, config: MetricConfig, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: the time the live windows cover, counting at least ``samples - 1`` full
        windows (so a young rate is not over-estimated), and at least 1 ms."""
        stat = self.stat
        stat.purge_obsolete_samples(config, now_ms)
        total_elapsed_ms = now_ms - stat.oldest(now_ms).last_window_ms
        window = config.time_window_ms
        num_full_windows = total_elapsed_ms // window if window else 0
        min_full_windows = config.samples - 1
        if num_full_windows < min_full_windows:
            total_elapsed_ms += (min_full_windows - num_full_windows) * window
        return max(total_elapsed_ms, 1)


class TokenBucket:
    """Kafka's ``TokenBucket`` (KIP-599): a bucket of ``quota * samples * window`` tokens refilled at ``quota`` per
    second; recording takes tokens (the level may go below zero: a burst is let through, later ones wait), and
    measuring answers the tokens left. Without a quota in the config it records nothing and measures "unlimited"."""

    __slots__ = ("tokens", "last_update_ms", "_unit_ms")

    def __init__(self, unit_ms: int = 1000) -> None:
        self.tokens = 0.0
        self.last_update_ms = 0
        self._unit_ms = unit_ms

    def _burst(self, config: MetricConfig) -> float:
        assert config.quota is not None
        return config.samples * config.time_window_ms / self._unit_ms * config.quota.bound

    def _refill(self, config: MetricConfig, now_ms: int) -> None:
        assert config.quota is not None
        gained = config.quota.bound * (now_ms - self.last_update_ms) / self._unit_ms
        self.tokens = min(self._burst(config), self.tokens + gained)
        self.last_update_ms = now_ms

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        if config.quota is None:
            return
        self._refill(config, time_ms)
        self.tokens = min(self._burst(config), self.tokens - value)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        if config.quota is None:
            return float(2**63 - 1)
        self._refill(config, now_ms)
        return self.tokens


class CumulativeSum:
    """The sum of every value ever recorded (Kafka's ``CumulativeSum``, formerly ``Total``)."""

    __slots__ = ("total",)

    def __init__(self, value: float = 0.0) -> None:
        self.total = value

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.total


Total = CumulativeSum


class CumulativeCount(CumulativeSum):
    """The number of values ever recorded (Kafka's ``CumulativeCount``)."""

    __slots__ = ()

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.total += 1


class Value:
    """The last value recorded (Kafka's ``Value``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.value = value

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self.value


class Meter:
    """Kafka's ``Meter``: a rate and a cumulative total recorded together (``<x>-rate`` + ``<x>-total``).

    With the default :class:`WindowedSum` the total sums the values; with :class:`WindowedCount` both count
    occurrences (Kafka pairs ``WindowedCount`` with ``CumulativeCount``).
    """

    __slots__ = ("rate_name", "total_name", "rate", "total", "_counts")

    def __init__(self, rate_name: MetricName, total_name: MetricName, rate_stat: SampledStat | None = None) -> None:
        rate_stat = rate_stat if rate_stat is not None else WindowedSum()
        self.rate_name = rate_name
        self.total_name = total_name
        self.rate = Rate(rate_stat)
        self._counts = isinstance(rate_stat, WindowedCount)
        self.total: CumulativeSum = CumulativeCount() if self._counts else CumulativeSum()

    def stats(self) -> list[NamedMeasurable]:
        return [NamedMeasurable(self.total_name, self.total), NamedMeasurable(self.rate_name, self.rate)]

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        self.rate.stat.record(config, value, time_ms)
        # Kafka's Meter records the total with the same value: for WindowedCount it is a count.
        self.total.total += 1 if self._counts else value


class _StatsSample(Sample):
    __slots__ = ("max", "min")

    def __init__(self, now_ms: int) -> None:
        super().__init__(0.0, now_ms)
        self.max = -math.inf
        self.min = math.inf

    def reset(self, now_ms: int) -> None:
        super().reset(now_ms)
        self.max = -math.inf
        self.min = math.inf


class _Derived:
    __slots__ = ("_owner", "_kind")

    def __init__(self, owner: SampledStats, kind: str) -> None:
        self._owner = owner
        self._kind = kind

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return self._owner.measure_kind(self._kind, config, now_ms)


class SampledStats(SampledStat):
    """Several of Kafka's stats of one sensor kept in one ring of windows (a compound stat).

    ``names`` maps a kind to the metric reporting it: ``avg`` (:class:`Avg`), ``max`` (:class:`Max`), ``min``
    (:class:`Min`), ``rate`` (:class:`Rate` of the values per second), ``count-rate`` (:class:`Rate` of
    :class:`WindowedCount`), ``ratio`` (a rate of nanoseconds per nanosecond, Kafka's
    ``Rate(TimeUnit.NANOSECONDS)``), ``total`` (:class:`CumulativeSum`), ``count`` (:class:`CumulativeCount`),
    ``value`` (:class:`Value`). The values equal those of the separate stats read at the same instants — Kafka
    records every stat of a sensor at the same instants, so their windows coincide — but a record updates one
    window instead of one per stat, which matters on the consumer's per-poll path.
    """

    __slots__ = ("_names", "_rate", "total", "count", "last")

    KINDS = ("avg", "max", "min", "rate", "count-rate", "ratio", "total", "count", "value")

    def __init__(self, names: dict[str, MetricName]) -> None:
        unknown = set(names) - set(self.KINDS)
        if unknown:
            raise ValueError(f"unknown stat kinds {sorted(unknown)}: expected some of {self.KINDS}")
        super().__init__(0.0)
        self._names = dict(names)
        self._rate = Rate(self)
        self.total = 0.0
        self.count = 0
        self.last = 0.0

    def stats(self) -> list[NamedMeasurable]:
        return [NamedMeasurable(name, _Derived(self, kind)) for kind, name in self._names.items()]

    def new_sample(self, time_ms: int) -> Sample:
        return _StatsSample(time_ms)

    def record(self, config: MetricConfig, value: float, time_ms: int) -> None:
        sample = self._sample_for(config, time_ms)
        sample.value += value
        if value > sample.max:  # type: ignore[attr-defined]
            sample.max = value  # type: ignore[attr-defined]
        if value < sample.min:  # type: ignore[attr-defined]
            sample.min = value  # type: ignore[attr-defined]
        self.total += value
        self.count += 1
        self.last = value

    def update(self, sample: Sample, config: MetricConfig, value: float, time_ms: int) -> None:
        raise NotImplementedError("SampledStats records through record()")

    def oldest(self, now_ms: int) -> Sample:
        # Reading must not open a window (Kafka's Rate does when nothing was recorded yet, which would shift the
        # windows that the other kinds share).
        if not self._samples:
            return Sample(0.0, now_ms)
        return min(self._samples, key=lambda s: s.last_window_ms)

    def combine(self, samples: list[Sample], config: MetricConfig, now_ms: int) -> float:
        return float(sum(s.value for s in samples))

    def measure_kind(self, kind: str, config: MetricConfig, now_ms: int) -> float:
        if kind == "total":
            return self.total
        if kind == "count":
            return float(self.count)
        if kind == "value":
            return self.last
        if kind in ("rate", "ratio"):
            rate = self._rate.measure(config, now_ms)  # purges, then sum / window
            return rate / 1_000_000_000 if kind == "ratio" else rate
        self.purge_obsolete_samples(config, now_ms)
        samples = self._samples
        if kind == "count-rate":
            count = sum(s.event_count for s in samples)
            return count * 1000.0 / self._rate.window_size(config, now_ms)
        live = [s for s in samples if s.event_count]
        if not live:
            return math.nan
        if kind == "avg":
            return sum(s.value for s in live) / sum(s.event_count for s in live)
        if kind == "max":
            return max(s.max for s in live)  # type: ignore[attr-defined]
        return min(s.min for s in live)  # type: ignore[attr-defined]
