"""Offset-range planning and the streaming reader's state machine, with a fake cluster."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from strom.common.error_codes import TopicAuthorizationFailedError
from strom.common.errors import KafkaTimeoutError
from strom.common.structs import TopicPartition as TP
from strom.security.sasl import SaslAuthenticationError
from strom.spark.options import OptionError, parse_source_options
from strom.spark.planning import DataLossError, OffsetRange, plan_ranges, rate_limit, split_ranges
from strom.spark.resolver import StreamPlanner, plan_batch

pytestmark = pytest.mark.unit


class FakeSource:
    """Partitions with [earliest, latest) logs; record i of every partition has timestamp 1000 + i."""

    def __init__(self, logs: dict[TP, tuple[int, int]]) -> None:
        self.logs = dict(logs)

    def list_topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for tp in sorted(self.logs):
            out.setdefault(tp.topic, []).append(tp.partition)
        return out

    def partitions_for(self, topics: Collection[str]) -> dict[str, list[int]]:
        return {t: ps for t, ps in self.list_topics().items() if t in topics}

    def earliest(self, tps: Collection[TP]) -> dict[TP, int]:
        return {tp: self.logs[tp][0] for tp in tps}

    def latest(self, tps: Collection[TP]) -> dict[TP, int]:
        return {tp: self.logs[tp][1] for tp in tps}

    def offsets_for_times(self, query: Mapping[TP, int]) -> dict[TP, int | None]:
        out: dict[TP, int | None] = {}
        for tp, ts in query.items():
            lo, hi = self.logs[tp]
            off = max(lo, ts - 1000)
            out[tp] = off if off < hi else None
        return out

    def close(self) -> None:
        pass


def opts(streaming: bool = True, **o: str) -> object:
    return parse_source_options({"kafka.bootstrap.servers": "h:1", **o}, streaming=streaming)


def test_rate_limit_is_proportional_to_lag_and_never_starves() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 0, TP("t", 2): 0}
    assert rate_limit(9, start, {TP("t", 0): 10, TP("t", 1): 10, TP("t", 2): 10}) == {
        TP("t", 0): 3, TP("t", 1): 3, TP("t", 2): 3}
    # 1000 vs 1 record of lag: the small partition still gets its record (ceil below one)
    end = rate_limit(100, {TP("t", 0): 0, TP("t", 1): 5}, {TP("t", 0): 1000, TP("t", 1): 6})
    assert end == {TP("t", 0): 99, TP("t", 1): 6}
    # a new partition (not in start) starts at 0; partitions without lag keep their latest
    assert rate_limit(4, {TP("t", 0): 7}, {TP("t", 0): 7, TP("t", 1): 8}) == {TP("t", 0): 7, TP("t", 1): 4}
    assert rate_limit(100, start, {TP("t", 0): 10, TP("t", 1): 0, TP("t", 2): 0})[TP("t", 0)] == 10


def test_split_ranges_for_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges) == ranges[:2]
    split = split_ranges(ranges, min_partitions=5)
    assert [r for r in split if r.partition == 1] == [ranges[1]]  # small ranges stay whole
    big = [r for r in split if r.partition == 0]
    assert len(big) == 4 and big[0].start == 0 and big[-1].end == 100
    assert all(a.end == b.start for a, b in zip(big, big[1:], strict=False))
    capped = split_ranges(ranges, max_records_per_partition=30)
    assert [(r.start, r.end) for r in capped if r.partition == 0] == [(0, 25), (25, 50), (50, 75), (75, 100)]


def test_plan_ranges_reports_data_loss() -> None:
    lost: list[str] = []
    ranges = plan_ranges({TP("t", 0): 5, TP("t", 1): 9, TP("u", 0): 1},
                         {TP("t", 0): 8, TP("t", 1): 4, TP("t", 2): 3}, lost.append)
    assert ranges == [OffsetRange("t", 0, 5, 8), OffsetRange("t", 2, 0, 3)]
    assert lost == ["u-0 are gone. Some data may have been missed",
                    "Partition t-1's offset was changed from 9 to 4, some data may have been missed"]


def test_batch_plan_resolves_specific_earliest_latest_and_timestamps() -> None:
    src = FakeSource({TP("t", 0): (2, 10), TP("t", 1): (0, 4)})
    o = opts(False, subscribe="t", startingOffsets='{"t":{"0":-2,"1":1}}', endingOffsets='{"t":{"0":7,"1":-1}}')
    assert plan_batch(o, src) == [OffsetRange("t", 0, 2, 7), OffsetRange("t", 1, 1, 4)]
    o = opts(False, subscribe="t", startingTimestamp="1003", endingOffsetsByTimestamp='{"t":{"0":1005,"1":9999}}')
    assert plan_batch(o, src) == [OffsetRange("t", 0, 3, 5), OffsetRange("t", 1, 3, 4)]
    with pytest.raises(OptionError, match="you must specify all TopicPartitions"):
        plan_batch(opts(False, subscribe="t", startingOffsets='{"t":{"0":1}}'), src)
    with pytest.raises(OptionError, match="Beginning offset 9 is after the ending offset 4 for topic t partition 1"):
        plan_batch(opts(False, subscribe="t", startingOffsets='{"t":{"0":1,"1":9}}'), src)
    with pytest.raises(OptionError, match="No offset matched from request of topic-partition t-1 and timestamp"):
        plan_batch(opts(False, subscribe="t", startingTimestamp="1005"), src)
    o = opts(False, subscribe="t", startingTimestamp="1005", startingOffsetsByTimestampStrategy="latest")
    assert plan_batch(o, src) == [OffsetRange("t", 0, 5, 10)]  # t-1 starts at its latest offset: empty


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stream_planner_rate_limits_then_picks_up_new_partitions() -> None:
    src = FakeSource({TP("t", 0): (0, 12), TP("t", 1): (0, 6)})
    p = StreamPlanner(opts(subscribePattern="t", startingOffsets="earliest", maxOffsetsPerTrigger="6"), src)
    assert p.default_limit() == ("max", 6)
    start = p.initial_offsets()
    assert start == {TP("t", 0): 0, TP("t", 1): 0}
    end = p.latest_offsets(start, p.default_limit())
    assert end == {TP("t", 0): 4, TP("t", 1): 2}
    assert p.plan(start, end) == [OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 2)]
    src.logs[TP("t", 2)] = (0, 3)  # a partition is added
    end2 = p.latest_offsets(end, ("all", 0))
    assert end2 == {TP("t", 0): 12, TP("t", 1): 6, TP("t", 2): 3}
    assert p.plan(end, end2)[-1] == OffsetRange("t", 2, 0, 3)
    assert p.latest_offsets(end2, p.default_limit()) == end2  # nothing new: the same offsets


def test_stream_planner_available_now_fixes_the_target() -> None:
    src = FakeSource({TP("t", 0): (0, 10)})
    p = StreamPlanner(opts(subscribe="t", startingOffsets="earliest", maxOffsetsPerTrigger="4"), src)
    start = p.initial_offsets()
    p.prepare_available_now()
    src.logs[TP("t", 0)] = (0, 50)
    src.logs[TP("t", 1)] = (0, 5)
    ends = []
    while (end := p.latest_offsets(start, p.default_limit())) != start:
        ends.append(end[TP("t", 0)])
        start = end
    assert ends == [4, 8, 10] and TP("t", 1) not in start


def test_stream_planner_min_offsets_per_trigger_waits_up_to_max_trigger_delay() -> None:
    src = FakeSource({TP("t", 0): (0, 3)})
    clock = Clock()
    p = StreamPlanner(opts(subscribe="t", startingOffsets="earliest", minOffsetsPerTrigger="5",
                           maxTriggerDelay="10s"), src, clock=clock)
    start = p.initial_offsets()
    assert p.default_limit() == ("min", 5)
    assert p.latest_offsets(start, p.default_limit()) == start  # 3 < 5: wait
    clock.now = 11.0
    assert p.latest_offsets(start, p.default_limit()) == {TP("t", 0): 3}  # waited long enough
    src.logs[TP("t", 0)] = (0, 9)
    assert p.latest_offsets({TP("t", 0): 3}, p.default_limit()) == {TP("t", 0): 9}  # 6 >= 5


def test_stream_planner_data_loss_per_fail_on_data_loss() -> None:
    src = FakeSource({TP("t", 0): (0, 5)})
    strict = StreamPlanner(opts(subscribe="t"), src)
    with pytest.raises(DataLossError, match="t-1 are gone.*set the source option \"failOnDataLoss\" to \"false\""):
        strict.plan({TP("t", 0): 0, TP("t", 1): 4}, {TP("t", 0): 5})
    lenient = StreamPlanner(opts(subscribe="t", failOnDataLoss="false"), src)
    assert lenient.plan({TP("t", 0): 0, TP("t", 1): 4}, {TP("t", 0): 5}) == [OffsetRange("t", 0, 0, 5)]


class FlakySource(FakeSource):
    """Fails its first ``failures`` partition look-ups with ``error``."""

    def __init__(self, logs: dict[TP, tuple[int, int]], error: Exception, failures: int) -> None:
        super().__init__(logs)
        self.error, self.failures, self.calls = error, failures, 0

    def partitions_for(self, topics: Collection[str]) -> dict[str, list[int]]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return super().partitions_for(topics)


def test_batch_plan_retries_transient_errors_but_not_a_refused_login() -> None:
    logs = {TP("t", 0): (0, 3)}
    o = opts(False, subscribe="t", **{"fetchOffset.retryIntervalMs": "1"})
    transient = FlakySource(logs, KafkaTimeoutError("Failed to send request after 30000 ms."), failures=2)
    assert plan_batch(o, transient) == [OffsetRange("t", 0, 0, 3)]
    assert transient.calls == 3
    refused = FlakySource(logs, SaslAuthenticationError("Invalid username or password"), failures=1)
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        plan_batch(o, refused)
    assert refused.calls == 1  # asking again cannot help; the broker's reason reaches the query at once
    denied = FlakySource(logs, TopicAuthorizationFailedError("Not authorized to access topics: [t]"), failures=1)
    with pytest.raises(TopicAuthorizationFailedError):
        plan_batch(o, denied)
    assert denied.calls == 1
