"""The event loop never waits for the disk on the produce path: with ``flush.messages=1`` (an fsync per append)
and small segments (rolls, producer snapshots, leader-epoch checkpoints), every ``fsync`` runs on a thread other
than the broker's event loop, and still each acknowledged record is durable before its ack (the recovery point
has passed it when the response arrives), as Kafka's ``flush.messages`` promises.

A loop-lag probe (a callback scheduled every 2 ms on the broker's loop, lateness recorded) runs meanwhile; its
figures are printed for information only: timings are judged in bench/broker_loop_lag.py, never here.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.server.broker import BrokerServer
from strom.server.broker_config import BrokerConfig
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class _Broker:
    """An in-process broker on its own loop thread, with a loop-lag probe."""

    def __init__(self, kind: str, data: Path, props: dict[str, str]) -> None:
        if kind == "uvloop":
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        else:
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data),
                                                 **props}))
        self.run(self.server.start())
        self.bootstrap = f"127.0.0.1:{self.server.socket_servers[0].bound_port}"
        self.lags_ms: list[float] = []
        self._probing = False

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start_probe(self, every_s: float = 0.002) -> None:
        self._probing = True

        def tick(expected: float) -> None:
            now = time.perf_counter()
            self.lags_ms.append((now - expected) * 1000)
            if self._probing:
                self.loop.call_later(every_s, tick, now + every_s)

        self.loop.call_soon_threadsafe(tick, time.perf_counter())

    def stop_probe(self) -> None:
        self._probing = False

    def close(self) -> None:
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(params=["asyncio", "uvloop"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Broker]:
    b = _Broker(request.param, tmp_path / "data", {"log.flush.interval.messages": "1", "log.segment.bytes": "30000",
                                                   "num.partitions": "2"})
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def fsync_threads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """(thread id, what) of every fsync of the process, recorded as it happens."""
    calls: list[tuple[int, str]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        try:
            what = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            what = "?"
        calls.append((threading.get_ident(), what))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def _batch(i: int) -> bytes:
    b = MemoryRecordsBuilder()
    b.append(1_700_000_000_000 + i, b"k%d" % i, b"v" * 1000)
    return b.build()


def test_fsyncs_of_the_produce_path_run_off_the_loop_and_precede_the_ack(broker: _Broker,
                                                                         fsync_threads: list[tuple[int, str]]) -> None:
    with RawClient(broker.bootstrap) as c:
        created = c.request(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
            CreateTopicsRequest.CreatableTopic(name="lag", num_partitions=2, replication_factor=1)]))
        assert created.topics[0].error_code == 0
        loop_thread = broker.thread.ident
        fsync_threads.clear()
        broker.start_probe()
        acked = 0
        for i in range(120):
            partition = i % 2
            acks = (1, -1)[i % 2]
            resp = c.request(ApiKey.PRODUCE, 9, ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[
                ProduceRequest.TopicProduceData(name="lag", partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=_batch(i))])]))
            pr = resp.responses[0].partition_responses[0]
            assert pr.error_code == 0
            lg = broker.server.replica_manager.get_log(TopicPartition("lag", partition))
            # flush.messages=1: the record was fsynced before the ack left the broker.
            assert lg.recovery_point >= pr.base_offset + 1, (i, lg.recovery_point, pr.base_offset)
            acked += 1
        broker.stop_probe()
    logs = [broker.server.replica_manager.get_log(TopicPartition("lag", p)) for p in (0, 1)]
    assert all(lg.num_segments > 1 for lg in logs)  # rolls happened (snapshots written) during the run
    on_loop = [what for tid, what in fsync_threads if tid == loop_thread]
    assert len(fsync_threads) >= acked  # at least one fsync per acknowledged append
    assert on_loop == [], f"fsync on the event loop: {on_loop[:5]}"
    assert any(what.endswith(".snapshot") for _tid, what in fsync_threads)  # roll snapshots synced, off the loop
    lags = sorted(broker.lags_ms)
    print(f"loop lag over {len(lags)} probes: p50 {lags[len(lags) // 2]:.2f} ms, "
          f"p99 {lags[int(len(lags) * 0.99)]:.2f} ms, max {lags[-1]:.2f} ms")
