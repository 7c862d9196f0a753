"""Driver-side logic: which partitions a query reads, where each read starts and ends, micro-batch planning.

Talks to the cluster only through :class:`OffsetSource` (implemented with strom's consumer in
:mod:`strom.spark.kafka_io`; a fake in the unit tests). :class:`StreamPlanner` is the state machine behind the
streaming reader: ``initial_offsets`` for a new query, ``latest_offsets(start, limit)`` for each trigger (rate
limit, ``minOffsetsPerTrigger`` / ``maxTriggerDelay``, ``Trigger.AvailableNow``), ``plan(start, end)`` for the
ranges of a batch. It holds no offsets of its own that matter for correctness: Spark's checkpoint holds them,
so a restarted query plans exactly the ranges it planned before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol, TypeVar

from strom.common.error_codes import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from strom.common.structs import TopicPartition
from strom.security.sasl import AuthenticationError
from strom.spark.offsets import EARLIEST, LATEST, PartitionOffsets
from strom.spark.options import OffsetSpec, OptionError, SourceOptions
from strom.spark.planning import (
    DataLossReporter,
    OffsetRange,
    plan_ranges,
    rate_limit,
    split_ranges,
    total_lag,
)

__all__ = ["OffsetSource", "Limit", "current_partitions", "resolve_offsets", "plan_batch", "StreamPlanner"]

log = logging.getLogger(__name__)
T = TypeVar("T")

Limit = tuple[str, int]
"""A read limit: ``("all", 0)``, ``("max", n)`` or ``("min", n)``."""
ALL: Limit = ("all", 0)


class OffsetSource(Protocol):
    """What the driver needs from the cluster."""

    def list_topics(self) -> dict[str, list[int]]:
        """Every (non-internal) topic and its partition numbers."""
        ...

    def partitions_for(self, topics: Collection[str]) -> dict[str, list[int]]:
        """Partition numbers of the given topics; topics that do not exist are left out."""
        ...

    def earliest(self, tps: Collection[TopicPartition]) -> PartitionOffsets: ...

    def latest(self, tps: Collection[TopicPartition]) -> PartitionOffsets: ...

    def offsets_for_times(self, query: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]: ...

    def close(self) -> None: ...


def current_partitions(opts: SourceOptions, source: OffsetSource) -> set[TopicPartition]:
    """The partitions the query reads now (new partitions of subscribed topics included)."""
    if opts.strategy == "assign":
        return set(opts.assign)
    topics = source.partitions_for(opts.topics) if opts.strategy == "subscribe" else {
        t: ps for t, ps in source.list_topics().items() if opts.matches(t)}
    return {TopicPartition(t, p) for t, ps in topics.items() for p in ps}


def _check_all_given(given: Collection[TopicPartition], tps: Collection[TopicPartition], what: str) -> None:
    if set(given) != set(tps):
        raise OptionError(f"If {what} contains specific offsets, you must specify all TopicPartitions.\n"
                          "Use -1 for latest, -2 for earliest.\n"
                          f"Specified: {sorted(map(str, given))} Assigned: {sorted(map(str, tps))}")


def resolve_offsets(spec: OffsetSpec, tps: Collection[TopicPartition], source: OffsetSource,
                    starting: bool) -> PartitionOffsets:
    """Concrete offsets for every partition in ``tps`` (Spark's ``fetchSpecificOffsets`` and friends)."""
    if not tps:
        return {}
    if spec.kind == "earliest":
        return source.earliest(tps)
    if spec.kind == "latest":
        return source.latest(tps)
    what = "startingOffsets" if starting else "endingOffsets"
    if spec.kind == "offsets":
        _check_all_given(spec.offsets, tps, what)
        need_earliest = [tp for tp, o in spec.offsets.items() if o == EARLIEST]
        need_latest = [tp for tp, o in spec.offsets.items() if o == LATEST]
        resolved = dict(spec.offsets)
        resolved.update(source.earliest(need_earliest) if need_earliest else {})
        resolved.update(source.latest(need_latest) if need_latest else {})
        return resolved
    if spec.kind == "timestamps":
        _check_all_given(spec.offsets, tps, what + "ByTimestamp")
        query = dict(spec.offsets)
    else:
        assert spec.timestamp is not None
        query = {tp: spec.timestamp for tp in tps}
    found = source.offsets_for_times(query)
    missing = [tp for tp in query if found.get(tp) is None]
    if missing and starting and not spec.latest_if_no_match:
        tp = missing[0]
        raise OptionError(f"No offset matched from request of topic-partition {tp} and timestamp {query[tp]}. "
                          "Set 'startingOffsetsByTimestampStrategy' to 'latest' to start such partitions at the "
                          "latest offset instead.")
    latest = source.latest(missing) if missing else {}
    return {tp: latest[tp] if found.get(tp) is None else int(found[tp] or 0) for tp in query}


# Retrying these cannot help: a wrong option, a refused login, a principal the ACLs do not allow.
_NOT_RETRIED = (OptionError, AuthenticationError, TopicAuthorizationFailedError, GroupAuthorizationFailedError,
                ClusterAuthorizationFailedError)


def _retrying(opts: SourceOptions, fn: Callable[[], T]) -> T:
    """Driver offset look-ups retried ``fetchOffset.numRetries`` times (``fetchOffset.retryIntervalMs`` apart)."""
    attempt = 0
    while True:
        try:
            return fn()
        except _NOT_RETRIED:
            raise
        except Exception as e:  # noqa: BLE001 - any transient client error
            attempt += 1
            if attempt > opts.fetch_offset_num_retries:
                raise
            log.warning("offset look-up failed (attempt %d): %s; retrying", attempt, e)
            time.sleep(opts.fetch_offset_retry_interval_ms / 1000)


def plan_batch(opts: SourceOptions, source: OffsetSource) -> list[OffsetRange]:
    """The ranges of a batch query (``startingOffsets`` .. ``endingOffsets``)."""
    tps = _retrying(opts, lambda: current_partitions(opts, source))
    start = _retrying(opts, lambda: resolve_offsets(opts.starting, tps, source, starting=True))
    end = _retrying(opts, lambda: resolve_offsets(opts.ending, tps, source, starting=False))
    ranges = []
    for tp in sorted(tps):
        if start[tp] > end[tp]:
            raise OptionError(f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for topic "
                              f"{tp.topic} partition {tp.partition}. You either provided an invalid fromOffset, "
                              "or the Kafka topic has been damaged")
        ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
    return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)


class StreamPlanner:
    """The streaming reader's driver-side state machine (Spark's ``KafkaMicroBatchStream``)."""

    def __init__(self, opts: SourceOptions, source: OffsetSource,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self.source = source
        self.clock = clock
        self.report = DataLossReporter(opts.fail_on_data_loss)
        self._available_now_end: PartitionOffsets | None = None
        self._last_trigger: float | None = None
        self.last_latest: PartitionOffsets = {}

    def default_limit(self) -> Limit:
        if self.opts.max_offsets_per_trigger is not None:
            return ("max", self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ("min", self.opts.min_offsets_per_trigger)
        return ALL

    def _latest_now(self) -> PartitionOffsets:
        tps = _retrying(self.opts, lambda: current_partitions(self.opts, self.source))
        return _retrying(self.opts, lambda: self.source.latest(tps)) if tps else {}

    def initial_offsets(self) -> PartitionOffsets:
        """Where a new query starts (``startingOffsets`` / timestamps over the partitions that exist now)."""
        tps = _retrying(self.opts, lambda: current_partitions(self.opts, self.source))
        return _retrying(self.opts, lambda: resolve_offsets(self.opts.starting, tps, self.source, starting=True))

    def prepare_available_now(self) -> None:
        """``Trigger.AvailableNow``: fix the target now; later data (and later partitions) is not read."""
        self._available_now_end = self._latest_now()

    def latest_offsets(self, start: Mapping[TopicPartition, int], limit: Limit) -> PartitionOffsets:
        """The end of the next batch, or ``start`` itself when there is nothing (or not enough) to read."""
        latest = dict(self._available_now_end) if self._available_now_end is not None else self._latest_now()
        self.last_latest = latest
        kind, n = limit
        if kind != "all" and self.opts.min_offsets_per_trigger is not None and self._available_now_end is None:
            now = self.clock()
            if self._last_trigger is None:
                self._last_trigger = now
            waited_ms = (now - self._last_trigger) * 1000
            if (total_lag(start, latest) < self.opts.min_offsets_per_trigger
                    and waited_ms < self.opts.max_trigger_delay_ms):
                return dict(start)
        if kind == "max":
            end = rate_limit(n, start, latest)
        elif kind == "min" and self.opts.max_offsets_per_trigger is not None:
            end = rate_limit(self.opts.max_offsets_per_trigger, start, latest)
        else:
            end = latest
        if end != dict(start):
            self._last_trigger = self.clock()
        return end

    def plan(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
        ranges = plan_ranges(start, end, self.report)
        return split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
