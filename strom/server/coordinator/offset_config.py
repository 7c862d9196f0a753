"""Settings of the group coordinator and of the ``__consumer_offsets`` topic.

Kafka counterparts: ``OffsetConfig`` (offsets topic and retention) and ``GroupConfig`` (session timeout bounds,
initial rebalance delay, maximum group size), both read from the broker's ``server.properties`` keys.
Immutable values; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["OffsetConfig", "GroupConfig", "GROUP_METADATA_TOPIC_NAME", "NEW_MEMBER_JOIN_TIMEOUT_MS"]

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
# A new member waiting in JoinGroup is dropped after this long (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs):
# its socket is busy with the JoinGroup, so a client that went away would otherwise stay in the rebalance forever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class _Config(Protocol):
    def __getitem__(self, key: str) -> Any: ...


def _get(config: _Config | None, key: str, default: int) -> int:
    if config is None:
        return default
    try:
        value = config[key]
    except KeyError:
        return default
    return default if value is None else int(value)


@dataclass(frozen=True, slots=True)
class OffsetConfig:
    """``offsets.*`` settings (Kafka's ``OffsetConfig``)."""

    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_topic_replication_factor: int = 3
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    max_metadata_size: int = 4096  # offset.metadata.max.bytes

    @classmethod
    def from_broker_config(cls, config: _Config | None) -> OffsetConfig:
        d = cls()
        return cls(
            offsets_topic_num_partitions=_get(config, "offsets.topic.num.partitions", d.offsets_topic_num_partitions),
            offsets_topic_segment_bytes=_get(config, "offsets.topic.segment.bytes", d.offsets_topic_segment_bytes),
            offsets_topic_replication_factor=_get(config, "offsets.topic.replication.factor",
                                                  d.offsets_topic_replication_factor),
            offsets_retention_ms=_get(config, "offsets.retention.minutes", d.offsets_retention_ms // 60_000) * 60_000,
            offsets_retention_check_interval_ms=_get(config, "offsets.retention.check.interval.ms",
                                                     d.offsets_retention_check_interval_ms),
            max_metadata_size=_get(config, "offset.metadata.max.bytes", d.max_metadata_size),
        )


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """``group.*`` settings (Kafka's ``GroupConfig``)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1

    @classmethod
    def from_broker_config(cls, config: _Config | None) -> GroupConfig:
        d = cls()
        return cls(
            group_min_session_timeout_ms=_get(config, "group.min.session.timeout.ms", d.group_min_session_timeout_ms),
            group_max_session_timeout_ms=_get(config, "group.max.session.timeout.ms", d.group_max_session_timeout_ms),
            group_initial_rebalance_delay_ms=_get(config, "group.initial.rebalance.delay.ms",
                                                  d.group_initial_rebalance_delay_ms),
            group_max_size=_get(config, "group.max.size", d.group_max_size),
        )
