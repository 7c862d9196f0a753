"""A client that closes its connection right after writing requests: the broker handles every request it
received whole before the close, as Kafka's broker does (it reads a closed socket to its end). An acks=0
producer's ``flush()`` + ``close()`` relies on it: its last batches count as sent once written to the socket."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import KafkaConnection
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.list_offsets import ListOffsetsRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.server.broker import BrokerServer
from strom.server.socket_server import MAX_QUEUED_PER_CONNECTION
from strom.testing.certs import Pki
from strom.testing.raw_client import RawClient
from tests.integration.in_process_broker import in_process_broker
from tests.integration.test_fetch_zero_copy import _Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "closing-client"
REQUESTS = 300
RECORDS_PER_REQUEST = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Two connections per IP: the reader below and one producer connection, so a producer connection whose close
    # is never accounted for would keep the next one out.
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("close") / "data",
                      overrides={"max.connections.per.ip": "2"}).start()
    with RawClient(b.bootstrap) as c:
        resp = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(timeout_ms=10000, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)]))
        assert resp.topics[0].error_code == 0
    yield b
    assert b.stop() == 0
    b.cleanup()


def _end_offset(c: RawClient) -> int:
    req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    return int(c.request(ApiKey.LIST_OFFSETS, 5, req).topics[0].partitions[0].offset)


def _produce_frames(acks: int, requests: int = REQUESTS) -> bytes:
    conn = KafkaConnection("client", client_id="closing")
    frames = bytearray()
    for i in range(requests):
        builder = MemoryRecordsBuilder()
        for j in range(RECORDS_PER_REQUEST):
            builder.append(1_700_000_000_000 + j, None, b"%d-%d" % (i, j))
        req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=builder.build())])])
        frames += conn.send_request(ApiKey.PRODUCE, 9, req, expect_response=acks != 0)[1]
    return bytes(frames)


def _connect(bootstrap: str, deadline: float) -> RawClient:
    """A connection the broker accepted (it closes one over max.connections.per.ip at once)."""
    while True:
        client = RawClient(bootstrap, timeout=10)
        try:
            client.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                      client_software_version="1"))
            return client
        except OSError:
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("acks", [0, 1])
def test_requests_written_before_close_are_appended(broker: BrokerProcess, acks: int) -> None:
    with RawClient(broker.bootstrap) as reader:
        for _ in range(3):
            start = _end_offset(reader)
            producer = _connect(broker.bootstrap, time.monotonic() + 10)
            producer.send_raw(_produce_frames(acks))  # every request at once, then close without reading
            producer.close()
            expected = start + REQUESTS * RECORDS_PER_REQUEST
            deadline = time.monotonic() + 10
            while (end := _end_offset(reader)) < expected and time.monotonic() < deadline:
                time.sleep(0.02)
            assert end == expected, f"{expected - end} of {REQUESTS * RECORDS_PER_REQUEST} records lost"


@pytest.fixture(params=["asyncio", "uvloop"])
def broker_in_process(request: pytest.FixtureRequest, tmp_path: Path, pki: Pki) -> Iterator[tuple[BrokerServer, str]]:
    with in_process_broker(request.param, tmp_path / "data", pki) as (b, _runner):
        yield b, request.param


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_every_listener_and_loop(broker_in_process: tuple[BrokerServer, str], pki: Pki, listener: str) -> None:
    """The same over TLS (the client drops the socket without a close_notify) and on uvloop as well. Far more
    requests than a connection queues before it pauses reading: uvloop's own TLS transport (0.23) would not
    deliver what it decrypted after the peer's close while reading was paused (the socket server runs TLS
    through asyncio's SSLProtocol on every loop for that reason)."""
    b, _loop_kind = broker_in_process
    server = next(s for s in b.socket_servers if s.listener.name == listener)
    port = int(server.bound_port or 0)
    setup = _Client(port, tls_ca=pki.ca if listener == "SSL" else None)
    setup.send(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)]))
    assert setup.receive().topics[0].error_code == 0
    setup.close()
    producer = _Client(port, tls_ca=pki.ca if listener == "SSL" else None)
    # A request answered first, as a client's ApiVersions: over TLS 1.3 it also reads the session tickets the
    # broker sends after the handshake. (Closing a socket with bytes left unread makes the kernel reset the
    # connection and discard what it has not sent yet: that loss would be the client's, not the broker's.)
    producer.send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert producer.receive().error_code == 0
    requests = REQUESTS
    assert requests > 4 * MAX_QUEUED_PER_CONNECTION  # the connection pauses reading, then the client closes
    producer.sock.sendall(_produce_frames(0, requests))
    producer.close()
    log = b.replica_manager.get_log(TopicPartition(TOPIC, 0))
    assert log is not None
    deadline = time.monotonic() + 10
    while log.log_end_offset < requests * RECORDS_PER_REQUEST and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.log_end_offset == requests * RECORDS_PER_REQUEST
