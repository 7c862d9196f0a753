"""ZkMetadataCache before and after the controller's first UpdateMetadata: what a Metadata request waits for."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from strom.protocol.messages.update_metadata import UpdateMetadataRequest
from strom.server.metadata_cache import BrokerInfo
from strom.server.zk_metadata_cache import ZkMetadataCache

R = UpdateMetadataRequest


def _update(controller_epoch: int = 1) -> UpdateMetadataRequest:
    return R(controller_id=2, controller_epoch=controller_epoch, live_brokers=[
        R.UpdateMetadataBroker(id=n, endpoints=[R.UpdateMetadataEndpoint(port=9090 + n, host="h", listener="PLAINTEXT")])
        for n in (1, 2)], topic_states=[R.UpdateMetadataTopicState(
            topic_name="t", topic_id=uuid.uuid4(), partition_states=[R.UpdateMetadataPartitionState(
                topic_name="t", partition_index=0, controller_epoch=controller_epoch, leader=2, leader_epoch=0,
                isr=[1, 2], replicas=[1, 2])])])


def _cache() -> ZkMetadataCache:
    return ZkMetadataCache(1, "cluster", local=BrokerInfo(1, {"PLAINTEXT": ("h", 9091)}))


def test_a_waiting_request_is_released_by_the_first_update_metadata() -> None:
    async def run() -> tuple[bool, bool, list[str]]:
        cache = _cache()
        waiting = asyncio.ensure_future(cache.wait_until_initialized(30))
        await asyncio.sleep(0)
        parked = not waiting.done()
        assert cache.apply_update_metadata(_update())[0]
        initialized = await asyncio.wait_for(waiting, 5)
        return parked, initialized, [t.name for t in cache.topics()]

    assert asyncio.run(run()) == (True, True, ["t"])


def test_without_update_metadata_the_wait_ends_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> list[bool]:
        cache = _cache()
        return [await cache.wait_until_initialized(0.05), await cache.wait_until_initialized(0.05)]

    with caplog.at_level(logging.WARNING, logger="strom.server"):
        assert asyncio.run(run()) == [False, False]
    assert [r.getMessage() for r in caplog.records] == [
        "broker 1 has had no UpdateMetadata from the controller yet: Metadata is answered with what this broker "
        "knows (itself, no topic)"]


def test_once_initialized_nothing_waits() -> None:
    async def run() -> bool:
        cache = _cache()
        cache.apply_update_metadata(_update())
        return await asyncio.wait_for(cache.wait_until_initialized(30), 1)

    assert asyncio.run(run()) is True
