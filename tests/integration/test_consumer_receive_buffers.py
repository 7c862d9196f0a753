"""The consumer receives fetch responses into buffers it hands out again once nothing refers to them
(``transport.ReusingMemoryPool``). Whatever a caller keeps from earlier polls — records (``poll``), tables
(``poll_arrow``), or both mixed — keeps its bytes while later responses arrive, and the buffers are reused."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer
from strom.protocol.connection import FrameBufferPool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

N = 6000
SIZE = 1000


def _value(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest() * (SIZE // 32) + b"%08d" % i


@pytest.fixture(scope="module")
def topic(broker) -> str:  # type: ignore[no-untyped-def]
    p = KafkaProducer({"bootstrap.servers": broker.bootstrap, "key.serializer": "bytes",
                       "value.serializer": "bytes", "linger.ms": "50", "batch.size": "200000"})
    for i in range(N):
        p.send("buffers", _value(i), key=b"k%d" % i, partition=0, headers=[("i", b"%d" % i)])
    p.flush()
    p.close()
    return "buffers"


def _consumer(broker) -> KafkaConsumer:  # type: ignore[no-untyped-def]
    c = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "key.deserializer": "bytes",
                       "value.deserializer": "bytes", "max.partition.fetch.bytes": "300000",
                       "fetch.max.bytes": "300000", "max.poll.records": "700"})
    c.assign([TopicPartition("buffers", 0)])
    c.seek_to_beginning()
    return c


def _pool(c: KafkaConsumer):  # type: ignore[no-untyped-def]
    return c._client.client.selector._memory_pool._frames  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["records", "tables", "mixed"])
def test_what_earlier_polls_returned_keeps_its_bytes(broker, topic: str, mode: str,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    allocations: list[str] = []
    allocate = FrameBufferPool.allocate

    def counting(self: FrameBufferPool, size: int):  # type: ignore[no-untyped-def]
        buf = allocate(self, size)
        if size >= self.min_size:
            allocations.append("reused" if isinstance(buf, memoryview) else "new")
        return buf

    monkeypatch.setattr(FrameBufferPool, "allocate", counting)
    c = _consumer(broker)
    kept: list[object] = []
    seen = 0
    polls = 0
    try:
        while seen < N and polls < 500:
            polls += 1
            if mode == "records" or (mode == "mixed" and polls % 2):
                records = list(c.poll(2000))
                kept.extend(records)
                seen += len(records)
            else:
                table = c.poll_arrow(2000)
                kept.append(table)
                seen += table.num_rows
    finally:
        c.close()
    assert seen == N
    values: list[bytes] = []
    headers: list[bytes] = []
    for item in kept:
        if isinstance(item, pa.Table):
            values.extend(item.column("value").to_pylist())
            headers.extend(h[0]["value"] for h in item.column("headers").to_pylist())
        else:
            values.append(item.value)  # type: ignore[attr-defined]
            headers.append(item.headers[0][1])  # type: ignore[attr-defined]
    assert values == [_value(i) for i in range(N)]
    assert headers == [b"%d" % i for i in range(N)]
    # ~6 MB in responses of at most 300 KB: most landed in a buffer that had held an earlier response.
    assert allocations.count("reused") > len(allocations) // 2, allocations


def test_a_view_still_alive_makes_the_pool_allocate_another(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    c = _consumer(broker)
    pool = _pool(c)
    try:
        buffers = [pool.allocate(200_000) for _ in range(2)]
        views = [memoryview(b) for b in buffers]  # a caller keeping slices of both
        del buffers
        third = pool.allocate(200_000)
        assert not isinstance(third, memoryview)  # a new buffer, not one a view still shows
        del views
        again = pool.allocate(200_000)
        assert isinstance(again, memoryview) and again.obj is not third  # an idle buffer now
    finally:
        c.close()
