"""ListOffsets on a partition whose leader has just been elected (KIP-207): a client is not given the new
leader's high watermark while it lags behind the offsets the leader already has."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.messages.list_offsets import ListOffsetsRequest
from strom.record import MemoryRecordsBuilder
from strom.server.apis.list_offsets import EARLIEST, LATEST, handle
from strom.server.partition import LeaderAndIsr, Partition
from strom.storage.log import Log
from strom.storage.log_config import LogConfig

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000


class _ReplicaManager:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def leader_partition(self, tp: TopicPartition) -> Partition:
        assert tp == TP
        return self.partition


@pytest.fixture
def partition(tmp_path: Path) -> Any:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    b = MemoryRecordsBuilder()
    for i in range(10):
        b.append(T0 + i, None, b"v%d" % i)
    log.append_as_leader(b.build(), leader_epoch=0)
    p = Partition(TP, log, local_broker_id=1)
    yield p
    log.close()


def _list(p: Partition, timestamp: int, version: int = 8, replica_id: int = -1) -> Any:
    request = ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])])
    ctx = SimpleNamespace(api_version=version)
    response = asyncio.run(handle(ctx, request, replica_manager=_ReplicaManager(p), authorizer=None))  # type: ignore[arg-type]
    return response.topics[0].partitions[0]


def test_a_new_leader_with_a_lagging_high_watermark_answers_offset_not_available(partition: Partition) -> None:
    # broker 1 leads with broker 2 in the ISR: the HW stays where it was (0) until broker 2 fetches at this epoch
    partition.make_leader(LeaderAndIsr(1, 5, [1, 2], 0, [1, 2]), now_ms=0)
    assert partition.high_watermark == 0 and partition.leader_epoch_start_offset == 10
    assert _list(partition, LATEST).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert _list(partition, LATEST, version=4).error_code == ErrorCode.LEADER_NOT_AVAILABLE  # (before v5)
    assert _list(partition, T0 + 3).error_code == ErrorCode.OFFSET_NOT_AVAILABLE  # past the HW: not known yet
    earliest = _list(partition, EARLIEST)
    assert (earliest.error_code, earliest.offset) == (ErrorCode.NONE, 0)
    follower = _list(partition, LATEST, replica_id=2)  # a replica (not a client) gets the HW as it is
    assert (follower.error_code, follower.offset) == (ErrorCode.NONE, 0)


def test_once_the_high_watermark_reaches_the_epoch_start_the_latest_offset_is_given(partition: Partition) -> None:
    partition.make_leader(LeaderAndIsr(1, 5, [1], 0, [1, 2]), now_ms=0)  # alone in the ISR: HW = LEO at once
    latest = _list(partition, LATEST)
    assert (latest.error_code, latest.offset) == (ErrorCode.NONE, 10)
    found = _list(partition, T0 + 3)
    assert (found.error_code, found.offset, found.timestamp) == (ErrorCode.NONE, 3, T0 + 3)
