"""Zero-copy Fetch: on a plaintext listener the records of a Fetch response leave the broker by ``sendfile`` from
the segment files, byte for byte what the files hold, in order with the other responses of the connection, also
when the client reads slowly; over TLS the regions are read as the response is written, and it is identical. A
region whose file was cut between the read and the send closes the connection instead of sending a frame whose
length lies.

The broker runs in-process on a thread (the standard asyncio loop and uvloop, which has no ``loop.sendfile``), so
``os.sendfile`` can be watched; clients are raw sockets on loopback.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import KafkaConnection
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.protocol.send import MultiSend
from strom.record.builder import MemoryRecordsBuilder
from strom.server.broker import BrokerServer
from strom.server.broker_config import BrokerConfig, Listener
from strom.server.security.ssl_factory import server_ssl_context
from strom.server.socket_server import ConnectionContext, SocketServer
from strom.storage.file_records import FileRecords, FileRegion
from strom.testing.certs import Pki

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class _LoopThread:
    """An event loop running in a thread; ``run(coro)`` executes a coroutine there and returns its result."""

    def __init__(self, kind: str) -> None:
        self.loop = _new_loop(kind)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def sendfile_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes each ``os.sendfile`` call sent (the broker thread calls it through the ``os`` module)."""
    sent: list[int] = []
    real = os.sendfile

    def spy(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        n = real(out_fd, in_fd, offset, count)
        sent.append(n)
        return n

    monkeypatch.setattr(os, "sendfile", spy)
    return sent


@pytest.fixture(params=["asyncio", "uvloop"])
def broker(request: pytest.FixtureRequest, tmp_path: Path, pki: Pki) -> Iterator[tuple[BrokerServer, dict[str, int]]]:
    runner = _LoopThread(request.param)
    b = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://localhost:0",
                                   "ssl.keystore.location": str(pki.broker_keystore),
                                   "log.dirs": str(tmp_path / "data"), "num.partitions": "2",
                                   "socket.request.max.bytes": str(200 << 20)}))
    runner.run(b.start())
    ports = {s.listener.name: int(s.bound_port or 0) for s in b.socket_servers}
    try:
        yield b, ports
    finally:
        runner.run(b.stop())
        runner.close()


class _Client:
    """A blocking Kafka connection (plaintext or TLS) that can pipeline requests and read slowly."""

    def __init__(self, port: int, tls_ca: Path | None = None, rcvbuf: int | None = None) -> None:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", port))
        if tls_ca is not None:
            ctx = ssl.create_default_context(cafile=str(tls_ca))
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.conn = KafkaConnection("client", client_id="zc")
        self._pending: list[Any] = []

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.sock.sendall(self.conn.send_request(api_key, version, body)[1])

    def receive(self, chunk: int = 1 << 20) -> Any:
        while not self._pending:
            data = self.sock.recv(chunk)
            if not data:
                raise ConnectionError("closed")
            self._pending.extend(self.conn.receive_bytes(data))
        return self._pending.pop(0)[3]

    def close(self) -> None:
        self.sock.close()


def _produce(port: int, topic: str, partition: int, batches: int, value_size: int) -> None:
    c = _Client(port)
    try:
        for i in range(batches):
            builder = MemoryRecordsBuilder()
            for j in range(4):
                builder.append(1_700_000_000_000 + j, b"k%d" % j, bytes([65 + (i + j) % 26]) * value_size)
            req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition,
                                                                                records=builder.build())])])
            c.send(ApiKey.PRODUCE, 9, req)
            resp = c.receive()
            assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        c.close()


def _fetch(partitions: list[int], max_bytes: int = 64 << 20) -> FetchRequest:
    return FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic="zc", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=32 << 20)
            for p in partitions])])


def _segment_bytes(b: BrokerServer, partition: int) -> bytes:
    lg = b.replica_manager.get_log(__import__("strom.common.structs", fromlist=["TopicPartition"])
                                   .TopicPartition("zc", partition))
    assert lg is not None and lg.num_segments == 1
    return Path(lg.active_segment.log.path).read_bytes()


def _create_topic(port: int) -> None:
    from strom.protocol.messages.create_topics import CreateTopicsRequest

    c = _Client(port)
    try:
        c.send(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
            CreateTopicsRequest.CreatableTopic(name="zc", num_partitions=2, replication_factor=1)]))
        assert c.receive().topics[0].error_code == 0
    finally:
        c.close()


def test_plaintext_fetch_sends_the_segment_bytes_with_sendfile(broker: tuple[BrokerServer, dict[str, int]],
                                                              sendfile_spy: list[int]) -> None:
    b, ports = broker
    _create_topic(ports["PLAINTEXT"])
    _produce(ports["PLAINTEXT"], "zc", 0, 24, 60_000)  # ~5.8 MB in 240 KB batches
    _produce(ports["PLAINTEXT"], "zc", 1, 3, 100)
    expected = {p: _segment_bytes(b, p) for p in (0, 1)}
    # A small receive buffer and a client that reads in small pieces: the broker's socket fills up and the
    # writer must wait for writability in the middle of a region.
    c = _Client(ports["PLAINTEXT"], rcvbuf=32 << 10)
    try:
        # Pipelined: a Metadata before and after each Fetch; responses must come back in order and whole.
        from strom.protocol.messages.metadata import MetadataRequest

        for version in (4, 11, 12, 16):
            c.send(ApiKey.METADATA, 1, MetadataRequest(topics=None))
            fetch = _fetch([0, 1])
            if version >= 13:
                fetch.topics[0].topic_id = b.metadata.topic("zc").topic_id
            c.send(ApiKey.FETCH, version, fetch)
            c.send(ApiKey.METADATA, 1, MetadataRequest(topics=None))
            assert c.receive(4096).brokers  # Metadata
            resp = c.receive(4096)
            got = {p.partition_index: bytes(p.records) for p in resp.responses[0].partitions}
            assert got == expected, f"Fetch v{version} records differ from the segment files"
            assert c.receive(4096).brokers
    finally:
        c.close()
    # Every record byte of the four responses left through sendfile, nothing else did.
    assert sum(sendfile_spy) == 4 * sum(len(v) for v in expected.values())


def test_tls_fetch_reads_each_region_when_writing_and_matches(broker: tuple[BrokerServer, dict[str, int]],
                                                              pki: Pki, sendfile_spy: list[int],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Over TLS the records are file regions too, read when the response is written and handed to the TLS
    transport as parts of a list (not copied into the frame first)."""
    b, ports = broker
    _create_topic(ports["PLAINTEXT"])
    _produce(ports["PLAINTEXT"], "zc", 0, 5, 50_000)
    expected = _segment_bytes(b, 0)
    read: list[int] = []
    real = FileRegion.read_bytes

    def spy(self: FileRegion) -> bytes:
        data = real(self)
        read.append(len(data))
        return data

    monkeypatch.setattr(FileRegion, "read_bytes", spy)
    sendfile_spy.clear()
    c = _Client(ports["SSL"], tls_ca=pki.ca)
    try:
        c.send(ApiKey.FETCH, 12, _fetch([0]))
        assert bytes(c.receive().responses[0].partitions[0].records) == expected
    finally:
        c.close()
    assert sendfile_spy == []
    assert read == [len(expected)]  # one region, read whole at write time


# -- a region cut under the response -------------------------------------------------------------------------


def _serve_one_region(kind: str, tmp_path: Path, listener: Listener, ssl_context: ssl.SSLContext | None,
                      client: Callable[[int], bytes]) -> tuple[bytes, int, Any]:
    """A socket server whose dispatcher answers any frame with [8 header bytes, a 1 MB file region] after
    cutting the region's file to half: returns what the client received, the frame size promised, the region."""
    path = tmp_path / "00000000000000000000.log"
    records = FileRecords(str(path))
    records.append(b"R" * (1 << 20))
    made: list[Any] = []

    async def dispatch(ctx: ConnectionContext, frame: memoryview) -> MultiSend:
        region = records.slice(0, 1 << 20)
        made.append(region)
        os.truncate(path, 1 << 19)  # a follower truncation between the read and the send
        head = struct.pack(">ii", 4 + region.size, 1)
        return MultiSend([head, region], len(head) + region.size)

    runner = _LoopThread(kind)
    server = SocketServer(listener, dispatch, ssl_context=ssl_context)
    try:
        runner.run(server.start())
        got = client(int(server.bound_port or 0))
        runner.run(server.stop())
    finally:
        runner.close()
        records.close()
    return got, 8 + (1 << 20), made[0]


def _read_until_closed(sock: socket.socket) -> bytes:
    sock.sendall(struct.pack(">i", 8) + b"\0" * 8)
    out = bytearray()
    while True:
        try:
            data = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not data:
            break
        out += data
    return bytes(out)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_truncated_region_closes_the_connection_plaintext(kind: str, tmp_path: Path) -> None:
    def client(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            return _read_until_closed(s)

    got, frame_size, region = _serve_one_region(kind, tmp_path, Listener("PLAINTEXT", "127.0.0.1", 0), None,
                                                client)
    assert len(got) < frame_size  # never a whole frame with made-up bytes
    assert got[8:] == b"R" * (len(got) - 8)  # what did go out is the file's real content
    assert region.closed  # its descriptor was given back


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_truncated_region_closes_the_connection_tls(kind: str, tmp_path: Path, pki: Pki) -> None:
    config = BrokerConfig({"listeners": "SSL://localhost:0", "ssl.keystore.location": str(pki.broker_keystore),
                           "security.inter.broker.protocol": "SSL"})

    def client(port: int) -> bytes:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                             server_hostname="localhost") as s:
            try:
                return _read_until_closed(s)
            except ssl.SSLError:
                return b""

    got, _frame_size, region = _serve_one_region(kind, tmp_path, Listener("SSL", "localhost", 0, "SSL"),
                                                 server_ssl_context(config, "SSL"), client)
    assert got == b""  # the frame could not be assembled: nothing of it was sent
    assert region.closed
