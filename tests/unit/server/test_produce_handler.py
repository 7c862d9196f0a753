"""The Produce handler's choice between serving, refusing and auto-creating, with its collaborators stubbed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.messages import ProduceRequest
from strom.record import MemoryRecordsBuilder
from strom.server.apis.produce import handle
from strom.server.replica_manager import AppendResult

pytestmark = pytest.mark.unit


class _ReplicaManager:
    def __init__(self, hosted: set[TopicPartition]) -> None:
        self.hosted = hosted
        self.appended: list[TopicPartition] = []

    def get_partition(self, tp: TopicPartition) -> Any:
        return object() if tp in self.hosted else None

    async def append_records(self, entries: dict[TopicPartition, Any], acks: int, timeout_ms: int,
                             on_parked: Any = None, transactional_id: str | None = None,
                             ) -> dict[TopicPartition, AppendResult]:
        self.appended += list(entries)
        info = SimpleNamespace(first_offset=0, log_append_time=-1, log_start_offset=0)
        return {tp: AppendResult(ErrorCode.NONE, info) for tp in entries}  # type: ignore[arg-type]


class _Admin:
    def __init__(self) -> None:
        self.created: list[str] = []

    async def auto_create_topic(self, name: str) -> Any:
        self.created.append(name)
        return SimpleNamespace(num_partitions=1)


def _request(topic: str) -> ProduceRequest:
    b = MemoryRecordsBuilder()
    b.append(1_700_000_000_000, None, b"v")
    return ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b.build())])])


def _produce(topic: str, rm: _ReplicaManager, admin: _Admin) -> Any:
    ctx = SimpleNamespace(api_version=9, connection=SimpleNamespace(parked=lambda: None))
    metadata = SimpleNamespace(topic=lambda name: None)  # the UpdateMetadata naming the topic has not come yet
    return asyncio.run(handle(ctx, _request(topic), metadata=metadata, replica_manager=rm, admin=admin,  # type: ignore[arg-type]
                              authorizer=None, quotas=None))


def test_a_hosted_partition_is_served_before_the_metadata_cache_knows_its_topic() -> None:
    """A leader told by LeaderAndIsr to lead ``t-0`` appends to it although its metadata cache has no ``t`` yet,
    and does not try to auto-create ``t`` (which would wait on the controller: a produce then hung for as long as
    the controller was away)."""
    rm, admin = _ReplicaManager({TopicPartition("t", 0)}), _Admin()
    response = _produce("t", rm, admin)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert rm.appended == [TopicPartition("t", 0)] and admin.created == []


def test_an_unknown_topic_is_auto_created() -> None:
    rm, admin = _ReplicaManager(set()), _Admin()
    _produce("new-topic", rm, admin)
    assert admin.created == ["new-topic"]
