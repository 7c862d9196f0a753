"""Large requests' frame buffers are reused by the broker (``FrameBufferPool``) without a request ever seeing
another's bytes: produce requests of a few hundred kilobytes, pipelined so that several are queued on the
connection at once, over plaintext and TLS (where every frame spans many TLS records), land in the log byte for
byte as sent, and the listener's pool handed the same buffers out again.

The broker runs in-process on a thread (the standard asyncio loop and uvloop); the client is a raw socket."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import FrameBufferPool
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.server.broker import BrokerServer
from strom.testing.certs import Pki
from tests.integration.test_fetch_zero_copy import _Client, _LoopThread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REQUESTS = 24


class _CountingPool(FrameBufferPool):
    """A pool that counts the large frames it serves and those served from a buffer it already held."""

    def __init__(self) -> None:
        super().__init__()
        self.served = 0
        self.reused = 0

    def allocate(self, size: int) -> bytearray | memoryview:
        held = {id(b) for b in self._buffers}  # (ids of live objects: unique)
        buf = super().allocate(size)
        if size >= self.min_size:
            self.served += 1
            self.reused += id(buf.obj if isinstance(buf, memoryview) else buf) in held
        return buf


def _batch(i: int) -> bytes:
    builder = MemoryRecordsBuilder()
    for j in range(3):
        builder.append(1_700_000_000_000 + j, b"k%d-%d" % (i, j), os.urandom(100_000 + 7_919 * (i % 5)))
    return bytes(builder.build())


def _produce(records: bytes) -> ProduceRequest:
    return ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name="frames", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_pipelined_large_produces_reuse_frame_buffers_and_keep_their_bytes(
        loop_broker: tuple[BrokerServer, _LoopThread], pki: Pki, listener: str) -> None:
    b, _ = loop_broker
    server = next(s for s in b.socket_servers if s.listener.name == listener)
    pool = server.frame_pool = _CountingPool()  # (the connection below takes the listener's pool when accepted)
    c = _Client(int(server.bound_port or 0), tls_ca=pki.ca if listener == "SSL" else None)
    try:
        c.send(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
            CreateTopicsRequest.CreatableTopic(name="frames", num_partitions=1, replication_factor=1)]))
        assert c.receive().topics[0].error_code == 0
        sent = [_batch(i) for i in range(REQUESTS)]
        for start in range(0, REQUESTS, 6):  # six requests in flight at a time: frames queue on the connection
            for records in sent[start:start + 6]:
                c.send(ApiKey.PRODUCE, 9, _produce(records))
            for _ in range(6):
                part = c.receive().responses[0].partition_responses[0]
                assert part.error_code == 0
    finally:
        c.close()
    log = b.replica_manager.get_log(TopicPartition("frames", 0))
    assert log is not None
    stored = b"".join(Path(s.log.path).read_bytes() for s in log.segments)
    pos = 0
    for i, records in enumerate(sent):
        size = 12 + struct.unpack_from(">i", stored, pos + 8)[0]
        assert size == len(records)
        # the broker sets the base offset and the partition leader epoch; every byte from the magic on is the client's
        assert struct.unpack_from(">q", stored, pos)[0] == 3 * i
        assert stored[pos + 16:pos + size] == records[16:], f"batch {i} differs from what was sent"
        pos += size
    assert pos == len(stored)
    assert pool.served >= REQUESTS
    assert pool.reused >= REQUESTS // 2, f"{pool.reused} of {pool.served} frames in a buffer used before"
