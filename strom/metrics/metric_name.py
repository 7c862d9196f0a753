"""Metric identity and configuration: Kafka's ``MetricName``, ``MetricConfig`` and ``Sensor.RecordingLevel``.

Kafka counterparts: ``org.apache.kafka.common.MetricName`` (a name, a group, a description and ordered tags;
equality ignores the description), ``org.apache.kafka.common.metrics.MetricConfig`` (sample count and window,
event window, recording level, global tags) and ``Sensor.RecordingLevel`` (INFO < DEBUG < TRACE).

Thread-safety: immutable values; ``MetricConfig`` is not changed after construction by the clients.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["MetricName", "MetricConfig", "RecordingLevel"]


class MetricName:
    """Kafka's ``MetricName``: ``name`` within ``group`` with ``tags``; hashable, equal on (name, group, tags)."""

    __slots__ = ("name", "group", "description", "_tags", "_hash")

    def __init__(self, name: str, group: str, description: str = "", tags: Mapping[str, str] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric name must be a non-empty string, not {name!r}")
        if not isinstance(group, str) or not group:
            raise ValueError(f"metric group must be a non-empty string, not {group!r}")
        self.name = name
        self.group = group
        self.description = description
        items = tuple((str(k), str(v)) for k, v in (tags or {}).items())
        self._tags = items
        self._hash = hash((name, group, frozenset(items)))

    @property
    def tags(self) -> dict[str, str]:
        """The tags in the order they were given (a copy)."""
        return dict(self._tags)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetricName):
            return NotImplemented
        return (self.name == other.name and self.group == other.group
                and (self._tags == other._tags or dict(self._tags) == dict(other._tags)))

    def __repr__(self) -> str:
        return (f"MetricName(name={self.name!r}, group={self.group!r}, description={self.description!r}, "
                f"tags={dict(self._tags)!r})")


class RecordingLevel(enum.IntEnum):
    """Kafka's ``Sensor.RecordingLevel``: a sensor records when the configured level includes its own."""

    INFO = 0
    DEBUG = 1
    TRACE = 2

    @classmethod
    def for_name(cls, name: str) -> RecordingLevel:
        try:
            return cls[name.upper()]
        except (KeyError, AttributeError):
            raise ValueError(f"Invalid value {name!r} for metrics.recording.level: expected one of INFO, DEBUG, "
                             f"TRACE") from None

    def should_record(self, config_level: RecordingLevel) -> bool:
        """Whether a sensor at this level records when ``metrics.recording.level`` is ``config_level``."""
        return self <= config_level


class MetricConfig:
    """Kafka's ``MetricConfig``: ``samples`` windows of ``time_window_ms`` each (a window also closes after
    ``event_window`` events), the recording level and tags added to every metric name of a registry."""

    __slots__ = ("samples", "time_window_ms", "event_window", "recording_level", "tags", "quota")

    def __init__(self, samples: int = 2, time_window_ms: int = 30_000, event_window: int = 2**63 - 1,
                 recording_level: RecordingLevel | str = RecordingLevel.INFO,
                 tags: Mapping[str, str] | None = None, quota: Any = None) -> None:
        if samples < 1:
            raise ValueError(f"metrics.num.samples must be at least 1, not {samples}")
        if time_window_ms < 0:
            raise ValueError(f"metrics.sample.window.ms must be at least 0, not {time_window_ms}")
        self.samples = int(samples)
        self.time_window_ms = int(time_window_ms)
        self.event_window = int(event_window)
        self.recording_level = (RecordingLevel.for_name(recording_level) if isinstance(recording_level, str)
                                else RecordingLevel(recording_level))
        self.tags = dict(tags or {})
        self.quota = quota

    @classmethod
    def from_client_config(cls, values: Mapping[str, Any], tags: Mapping[str, str] | None = None) -> MetricConfig:
        """The config a client builds from ``metrics.num.samples``, ``metrics.sample.window.ms`` and
        ``metrics.recording.level``."""
        return cls(samples=values.get("metrics.num.samples", 2),
                   time_window_ms=values.get("metrics.sample.window.ms", 30_000),
                   recording_level=values.get("metrics.recording.level", "INFO"), tags=tags)

    def __repr__(self) -> str:
        return (f"MetricConfig(samples={self.samples}, time_window_ms={self.time_window_ms}, "
                f"recording_level={self.recording_level.name}, tags={self.tags})")
