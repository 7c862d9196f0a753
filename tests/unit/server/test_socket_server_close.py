"""Who closed a connection decides what happens to the requests it already received (``KafkaServerProtocol``
driven on a real event loop through a stand-in transport): after a close by the client they are all handled, in
order, their responses dropped (Kafka's broker reads a closed socket to its end); after a close by the broker
(idle expiry, shutdown, a bad frame) the worker stops at once."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from strom.server.socket_server import ConnectionContext, KafkaServerProtocol


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False
        self.protocol: KafkaServerProtocol | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def write(self, data: Any) -> None:
        assert not self.closing, "a response written to a closed connection"
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:  # as asyncio does: connection_lost on a later turn of the loop
        if not self.closing:
            self.closing = True
            assert self.protocol is not None
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _frame(api_key: int, tag: bytes) -> bytes:
    payload = struct.pack(">hh", api_key, 0) + tag
    return struct.pack(">i", len(payload)) + payload


class _Dispatcher:
    """Answers each request with its tag; the request tagged ``hold`` waits until :attr:`release` is set."""

    def __init__(self) -> None:
        self.handled: list[bytes] = []
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def __call__(self, ctx: ConnectionContext, frame: memoryview) -> bytes:
        tag = bytes(frame[4:])
        if tag == b"hold":
            self.holding.set()
            await self.release.wait()
        self.handled.append(tag)
        return b"answer:" + tag


def _connect(dispatch: _Dispatcher, closed: list[KafkaServerProtocol]) -> tuple[KafkaServerProtocol, _Transport]:
    proto = KafkaServerProtocol(dispatch, 1 << 20, closed.append)
    transport = _Transport()
    transport.protocol = proto
    proto.connection_made(transport)
    return proto, transport


def _client_closes(proto: KafkaServerProtocol, transport: _Transport, exc: Exception | None = None) -> None:
    transport.closing = True
    proto.connection_lost(exc)


async def _settle(proto: KafkaServerProtocol) -> None:
    worker = proto.worker
    assert worker is not None
    await asyncio.wait_for(worker, 5)


def test_client_close_handles_every_received_request_in_order() -> None:
    async def run() -> None:
        dispatch, closed = _Dispatcher(), []
        proto, transport = _connect(dispatch, closed)
        tags = [b"r%d" % i for i in range(40)]  # more than a connection queues before it stops reading
        proto.data_received(b"".join(_frame(0 if i % 2 else 3, t) for i, t in enumerate(tags)))
        _client_closes(proto, transport)  # right after writing: nothing was handled yet
        assert closed == [proto]  # its quota slot is given back at once
        await _settle(proto)
        assert dispatch.handled == tags
        assert transport.written == []  # nobody to answer

    asyncio.run(run())


def test_client_close_while_a_request_is_in_progress() -> None:
    async def run() -> None:
        dispatch, closed = _Dispatcher(), []
        proto, transport = _connect(dispatch, closed)
        proto.data_received(_frame(3, b"first") + _frame(3, b"hold") + _frame(0, b"after"))
        await asyncio.wait_for(dispatch.holding.wait(), 5)
        assert transport.written == [b"answer:first"] and dispatch.handled == [b"first"]
        _client_closes(proto, transport, ConnectionResetError())
        dispatch.release.set()
        await _settle(proto)
        assert dispatch.handled == [b"first", b"hold", b"after"]
        assert len(transport.written) == 1 and closed == [proto]

    asyncio.run(run())


def test_broker_close_stops_at_once() -> None:
    async def run() -> None:
        dispatch, closed = _Dispatcher(), []
        proto, transport = _connect(dispatch, closed)
        proto.data_received(_frame(3, b"hold") + _frame(0, b"dropped") + _frame(3, b"dropped too"))
        await asyncio.wait_for(dispatch.holding.wait(), 5)
        proto.close()  # idle expiry or shutdown
        await asyncio.sleep(0)
        dispatch.release.set()
        await _settle(proto)
        assert dispatch.handled == [b"hold"]
        assert transport.written == [] and closed == [proto]

    asyncio.run(run())


def test_shutdown_discards_what_a_closed_connection_has_not_started() -> None:
    """A broker shutting down does not wait for a connection the client closed: the request in progress
    finishes, the queued ones are dropped."""

    async def run() -> None:
        dispatch, closed = _Dispatcher(), []
        proto, transport = _connect(dispatch, closed)
        proto.data_received(_frame(3, b"hold") + _frame(3, b"queued"))
        await asyncio.wait_for(dispatch.holding.wait(), 5)
        _client_closes(proto, transport)
        proto.discard_queued()
        dispatch.release.set()
        await _settle(proto)
        assert dispatch.handled == [b"hold"] and closed == [proto]

    asyncio.run(run())
