"""Shared by the transaction API handlers: the coordinator lookup and the partition checks of a request.

Not an API module itself (no ``@api``); each transaction API has its own handler module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition

if TYPE_CHECKING:
    from strom.server.metadata_cache import MetadataCache

__all__ = ["split_known_partitions"]


def split_known_partitions(metadata: MetadataCache, topics: dict[str, list[int]],
                           ) -> tuple[set[TopicPartition], dict[TopicPartition, int]]:
    """(partitions that exist, error per partition that does not: UNKNOWN_TOPIC_OR_PARTITION)."""
    known: set[TopicPartition] = set()
    errors: dict[TopicPartition, int] = {}
    for name, parts in topics.items():
        info = metadata.topic(name)
        for p in parts:
            tp = TopicPartition(name, p)
            if info is None or not 0 <= p < info.num_partitions:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.add(tp)
    return known, errors
