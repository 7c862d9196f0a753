"""The JSON formats of Spark's Kafka connector: ``assign``, per-partition offsets and timestamps.

Shapes (exactly Spark's, so option values and checkpointed offsets read the same):

- ``assign``: ``{"topicA":[0,1],"topicB":[2,4]}``
- offsets (``startingOffsets``, ``endingOffsets`` and the streaming offsets kept in the checkpoint):
  ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}`` where -2 means earliest and -1 latest;
- timestamps (``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``): ``{"topicA":{"0":1700000000000}}``.

Offsets written by this module are canonical: topics sorted by name, partitions by number. Spark decides
"no new data" by comparing offset JSON strings, so the same offsets must always serialise the same way.
Pure code: no pyspark, no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from strom.common.structs import TopicPartition

__all__ = [
    "LATEST", "EARLIEST", "PartitionOffsets", "parse_assign", "parse_partition_offsets",
    "parse_partition_timestamps", "offsets_to_dict", "offsets_from_dict", "offsets_to_json",
]

LATEST = -1
EARLIEST = -2

PartitionOffsets = dict[TopicPartition, int]

_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = ('{"topicA": {"0": 123456789, "1": 123456789}, '
                       '"topicB": {"0": 123456789, "1": 123456789}}')


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_assign(text: str) -> list[TopicPartition]:
    """``{"topicA":[0,1]}`` -> topic-partitions, in the order given."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        out: list[TopicPartition] = []
        for topic, parts in data.items():
            if not isinstance(parts, list) or not all(_is_int(p) for p in parts):
                raise ValueError
            out.extend(TopicPartition(topic, p) for p in parts)
        return out
    except ValueError:
        raise ValueError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {text}") from None


def _parse_nested(text: str, example: str) -> PartitionOffsets:
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        out: PartitionOffsets = {}
        for topic, parts in data.items():
            if not isinstance(parts, dict):
                raise ValueError
            for p, off in parts.items():
                if not _is_int(off):
                    raise ValueError
                out[TopicPartition(topic, int(p))] = off
        return out
    except ValueError:
        raise ValueError(f"Expected e.g. {example}, got {text}") from None


def parse_partition_offsets(text: str) -> PartitionOffsets:
    """``{"t":{"0":23,"1":-1}}`` -> {TopicPartition: offset} (-2 earliest, -1 latest)."""
    return _parse_nested(text, _OFFSETS_EXAMPLE)


def parse_partition_timestamps(text: str) -> PartitionOffsets:
    """``{"t":{"0":1700000000000}}`` -> {TopicPartition: timestamp ms}."""
    return _parse_nested(text, _TIMESTAMPS_EXAMPLE)


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Canonical JSON-able form: topics sorted, partitions sorted numerically."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_dict(data: Mapping[str, Mapping[str, int]] | None) -> PartitionOffsets:
    """The inverse of :func:`offsets_to_dict` (what Spark hands back from the checkpoint)."""
    out: PartitionOffsets = {}
    for topic, parts in (data or {}).items():
        for p, off in parts.items():
            out[TopicPartition(topic, int(p))] = int(off)
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))
