"""Fuzz the broker's request path in-process: whatever bytes arrive, dispatch answers or closes the connection.

Every frame must end in one of: encoded response bytes, ``None`` (acks=0), or ``ConnectionClosed``. Any other
exception is a bug that would drop a client's connection with a traceback (or worse, stall it).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.api_keys import ApiKey
from strom.protocol.headers import RequestHeader, encode_request
from strom.protocol.messages import REQUESTS
from strom.record.builder import MemoryRecordsBuilder
from strom.server.broker import BrokerServer
from strom.server.broker_config import BrokerConfig
from strom.server.socket_server import ConnectionClosed, ConnectionContext

pytestmark = [pytest.mark.unit, pytest.mark.timeout(300)]


class _Harness:
    def __init__(self, tmp: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": tmp,
                                                 "num.partitions": "2"}))
        self.loop.run_until_complete(self.broker.start())
        self.conn = ConnectionContext("fuzz:1", 1)

    def dispatch(self, frame: bytes) -> bytes | None:
        async def go() -> bytes | None:
            return await asyncio.wait_for(self.broker.apis.handle(self.conn, memoryview(frame)), 10)

        try:
            return self.loop.run_until_complete(go())
        except ConnectionClosed:
            return None

    def close(self) -> None:
        self.loop.run_until_complete(self.broker.stop())
        self.loop.close()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Harness]:
    h = _Harness(str(tmp_path_factory.mktemp("fuzz")))
    yield h
    h.close()


def _valid_frame(api_key: int, version: int, body: bytes) -> bytes:
    return encode_request(RequestHeader(api_key, version, 7, "fuzz"), body, size_prefix=False)


def _batch() -> bytes:
    b = MemoryRecordsBuilder()
    b.append(1_700_000_000_000, b"k", b"v")
    return b.build()


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
API_KEYS = sorted(REQUESTS)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes(harness: _Harness, data: bytes) -> None:
    harness.dispatch(data)


@SETTINGS
@given(st.sampled_from(API_KEYS), st.integers(-2, 20), st.binary(max_size=300))
def test_valid_header_random_body(harness: _Harness, api_key: int, version: int, body: bytes) -> None:
    harness.dispatch(_valid_frame(api_key, version, body))


@st.composite
def _mutated_request(draw: st.DrawFn) -> bytes:
    """A well-formed request of a handled API with some bytes flipped, cut or inserted."""
    from strom.protocol.messages.metadata import MetadataRequest
    from strom.protocol.messages.produce import ProduceRequest

    key = draw(st.sampled_from([ApiKey.PRODUCE, ApiKey.METADATA]))
    if key == ApiKey.PRODUCE:
        version = draw(st.integers(3, 11))
        body = ProduceRequest(acks=draw(st.sampled_from([-1, 0, 1, 2])), timeout_ms=100, topic_data=[
            ProduceRequest.TopicProduceData(name=draw(st.sampled_from(["fz", "fz2", "", "a/b"])), partition_data=[
                ProduceRequest.PartitionProduceData(index=draw(st.integers(-1, 3)), records=_batch())])])
    else:
        version = draw(st.integers(0, 12))
        body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=draw(st.sampled_from(["fz", "x" * 300])))])
    data = bytearray(body.encode(version))
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[pos:]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    return _valid_frame(key, version, bytes(data))


@SETTINGS
@given(_mutated_request())
def test_mutated_requests(harness: _Harness, frame: bytes) -> None:
    harness.dispatch(frame)


def test_broker_still_serves_after_fuzzing(harness: _Harness) -> None:
    from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse

    out = harness.dispatch(_valid_frame(ApiKey.METADATA, 9, MetadataRequest(topics=None).encode(9)))
    assert out is not None
    size, cid = struct.unpack_from(">ii", out)
    assert size == len(out) - 4 and cid == 7
    resp = MetadataResponse.decode(memoryview(out)[9:], 9)
    assert resp.brokers[0].node_id == 1
