"""Offset-range planning: resolving start/end offsets, rate limiting, splitting into Spark partitions.

Mirrors the behaviour of Spark's Kafka source:

- :func:`rate_limit` — ``maxOffsetsPerTrigger`` is shared among partitions in proportion to their lag
  (a partition with any lag gets at least one record, so small partitions are not starved);
- :func:`split_ranges` — with ``minPartitions`` larger than the number of non-empty ranges, large ranges are
  cut into pieces in proportion to their size; ``maxRecordsPerPartition`` caps each piece;
- :func:`plan_ranges` — the ranges of one micro-batch between two offset maps, reporting data loss (partitions
  gone, offsets moved backwards). A partition that appears in ``end`` but not in ``start`` is new and is read
  from offset 0, so re-planning a batch after a restart gives the same ranges; if its log no longer starts at
  0 the executor reports the loss (Spark reports "Added partition ... starts from X instead of 0").

Pure code: no pyspark, no network.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from strom.common.structs import TopicPartition
from strom.spark.offsets import PartitionOffsets
from strom.spark.options import FAIL_ON_DATA_LOSS_FALSE_HINT, FAIL_ON_DATA_LOSS_TRUE_HINT

__all__ = ["OffsetRange", "DataLossError", "DataLossReporter", "rate_limit", "split_ranges", "plan_ranges",
           "total_lag"]

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Records a query should have read are gone (``failOnDataLoss=true``)."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


class DataLossReporter:
    """Raises :class:`DataLossError` or logs a warning, per ``failOnDataLoss``."""

    def __init__(self, fail_on_data_loss: bool) -> None:
        self.fail = fail_on_data_loss

    def __call__(self, message: str) -> None:
        if self.fail:
            raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_TRUE_HINT}")
        log.warning("%s. %s", message, FAIL_ON_DATA_LOSS_FALSE_HINT)


def total_lag(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Records available between ``start`` (new partitions from 0) and ``latest``."""
    return sum(max(0, end - start.get(tp, 0)) for tp, end in latest.items())


def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               new_partition_start: Callable[[TopicPartition], int] = lambda _tp: 0) -> PartitionOffsets:
    """End offsets that admit at most about ``limit`` records, shared in proportion to each partition's lag.

    A partition with lag gets ``floor(limit * lag / total)`` records, or 1 when that share is below one record
    (so the total can exceed ``limit`` by at most the number of partitions, as in Spark).
    """
    begins = {tp: start[tp] if tp in start else new_partition_start(tp) for tp in latest}
    lags = {tp: end - begins[tp] for tp, end in latest.items() if end - begins[tp] > 0}
    total = sum(lags.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        lag = lags.get(tp)
        if lag is None:
            out[tp] = end
            continue
        share = limit * (lag / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = end if take > lag else begins[tp] + take
    return out


def _pieces(size: int, parts: int) -> list[int]:
    """``size`` cut into ``parts`` near-equal pieces (the last one takes the rounding)."""
    out, remaining = [], size
    for i in range(parts):
        piece = remaining // (parts - i)
        out.append(piece)
        remaining -= piece
    return out


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges; then split for ``minPartitions`` and ``maxRecordsPerPartition``.

    Ranges whose proportional share of ``minPartitions`` rounds to one piece stay whole, and the pieces they
    would have used go to the larger ranges — the result has roughly ``minPartitions`` ranges.
    """
    nonempty = [r for r in ranges if r.size > 0]
    out = nonempty
    if min_partitions is not None and len(nonempty) < min_partitions:
        total = sum(r.size for r in nonempty)

        def share(size: int, of_total: int, parts: int) -> int:
            return max(round(size / of_total * parts), 1) if of_total else 1

        whole = [r for r in nonempty if share(r.size, total, min_partitions) == 1]
        whole_ids = {id(r) for r in whole}
        split_total = total - sum(r.size for r in whole)
        split_parts = max(min_partitions - len(whole), 1)
        out = []
        for r in nonempty:
            parts = 1 if id(r) in whole_ids else share(r.size, split_total, split_parts)
            out.extend(_cut(r, _pieces(r.size, parts)))
    if max_records_per_partition is not None:
        capped: list[OffsetRange] = []
        for r in out:
            parts = max(1, math.ceil(r.size / max_records_per_partition))
            capped.extend(_cut(r, _pieces(r.size, parts)))
        out = capped
    return [r for r in out if r.size > 0]


def _cut(r: OffsetRange, sizes: list[int]) -> list[OffsetRange]:
    out, pos = [], r.start
    for s in sizes:
        out.append(OffsetRange(r.topic, r.partition, pos, min(pos + s, r.end)))
        pos += s
    return out


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                report_data_loss: Callable[[str], None]) -> list[OffsetRange]:
    """The (possibly empty) ranges of one micro-batch, in topic-partition order. Reports data loss for
    partitions that disappeared and partitions whose end is before their start."""
    gone = sorted(tp for tp in start if tp not in end)
    if gone:
        report_data_loss(f"{', '.join(map(str, gone))} are gone. Some data may have been missed")
    ranges = []
    for tp in sorted(end):
        begin, until = start.get(tp, 0), end[tp]
        if until < begin:
            report_data_loss(f"Partition {tp}'s offset was changed from {begin} to {until}, some data may have "
                             "been missed")
            continue
        ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
    return ranges
