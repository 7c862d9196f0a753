"""Many concurrent connections against one broker: every acknowledged batch lands exactly once, offsets stay dense
per partition, each connection's batches keep their order, and long-polling fetchers see everything."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from strom.broker_process import BrokerProcess
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.records import MemoryRecords
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.stress, pytest.mark.timeout(180)]

PRODUCERS = 16
PARTITIONS = 4
BATCHES = 60
PER_BATCH = 10


def _produce(bootstrap: str, pid: int, acked: dict[int, list[tuple[int, int]]], errors: list[str]) -> None:
    try:
        with RawClient(bootstrap, client_id=f"p{pid}") as c:
            for n in range(BATCHES):
                part = (pid + n) % PARTITIONS
                b = MemoryRecordsBuilder()
                for i in range(PER_BATCH):
                    b.append(int(time.time() * 1000), None, b"%d:%d:%d" % (pid, n, i))
                req = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[ProduceRequest.TopicProduceData(
                    name="many", partition_data=[ProduceRequest.PartitionProduceData(index=part, records=b.build())])])
                r = c.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
                if r.error_code:
                    errors.append(f"producer {pid} batch {n}: error {r.error_code}")
                    return
                acked[pid].append((part, r.base_offset))
    except Exception as e:  # surfaced by the assertion below
        errors.append(f"producer {pid}: {e!r}")


def _fetch_all(bootstrap: str, total: int, out: list[bytes], errors: list[str]) -> None:
    try:
        offsets = [0] * PARTITIONS
        deadline = time.monotonic() + 120
        with RawClient(bootstrap) as c:
            while len(out) < total and time.monotonic() < deadline:
                req = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                    topic="many", partitions=[FetchRequest.FetchPartition(partition=p, fetch_offset=offsets[p],
                                                                          partition_max_bytes=1 << 18)
                                              for p in range(PARTITIONS)])])
                for part in c.request(ApiKey.FETCH, 11, req).responses[0].partitions:
                    for rec in MemoryRecords(part.records).records():
                        if rec.offset >= offsets[part.partition_index]:
                            out.append(rec.value)
                            offsets[part.partition_index] = rec.offset + 1
    except Exception as e:
        errors.append(f"fetcher: {e!r}")


def test_many_concurrent_producers_and_fetchers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BrokerProcess(data_dir=tmp_path / "d", overrides={"num.partitions": str(PARTITIONS)}) as b:
        total = PRODUCERS * BATCHES * PER_BATCH
        acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        errors: list[str] = []
        fetched: list[list[bytes]] = [[], []]
        threads = [threading.Thread(target=_fetch_all, args=(b.bootstrap, total, fetched[i], errors))
                   for i in range(2)]
        threads += [threading.Thread(target=_produce, args=(b.bootstrap, pid, acked, errors))
                    for pid in range(PRODUCERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert not errors, errors[:5]
        # Offsets: every batch got its own dense range; each producer's batches on a partition are in order.
        per_partition: dict[int, list[int]] = defaultdict(list)
        for batches in acked.values():
            assert len(batches) == BATCHES
            for part in range(PARTITIONS):
                mine = [off for (p, off) in batches if p == part]
                assert mine == sorted(mine)
                per_partition[part] += mine
        for bases in per_partition.values():
            assert sorted(bases) == list(range(0, len(bases) * PER_BATCH, PER_BATCH))
        expected = sorted(b"%d:%d:%d" % (p, n, i) for p in range(PRODUCERS) for n in range(BATCHES)
                          for i in range(PER_BATCH))
        for got in fetched:
            assert sorted(got) == expected  # every record exactly once, for both long-polling fetchers
