"""A scripted Selector for deterministic NetworkClient tests (Kafka's ``MockSelector``): connections complete
on the next poll (or fail), sends complete on the next poll, responses are queued by the test."""

from __future__ import annotations

from typing import Any

from strom.network.kafka_channel import ChannelState
from strom.network.network_receive import NetworkSend
from strom.protocol.headers import decode_request_header, encode_response_header, response_header_version
from strom.protocol.messages import REQUESTS


class FakeReceive:
    def __init__(self, source: Any, payload: bytes) -> None:
        self.source = source
        self._payload = payload

    def payload(self) -> memoryview:
        return memoryview(self._payload)

    def size(self) -> int:
        return len(self._payload) + 4

    def release(self) -> None:
        pass


class SentRequest:
    """A request the client handed to the selector, decoded."""

    def __init__(self, send: NetworkSend) -> None:
        self.send = send
        self.destination = send.destination
        payload = b"".join(bytes(b) for b in send._buffers)[4:]
        self.header, offset = decode_request_header(payload)
        self.body = REQUESTS[self.header.api_key].decode(payload[offset:], self.header.api_version)
        self.answered = False


class MockSelector:
    def __init__(self, time: Any) -> None:
        self.time = time
        self.ready: set[Any] = set()
        self.requests: list[SentRequest] = []
        self._pending_sends: list[NetworkSend] = []
        self._pending_connects: list[Any] = []
        self._fail_connects: set[Any] = set()
        self._pending_receives: list[FakeReceive] = []
        self._pending_disconnects: dict[Any, ChannelState] = {}
        self.completed_sends: list[NetworkSend] = []
        self.completed_receives: list[FakeReceive] = []
        self.connected: list[Any] = []
        self.disconnected: dict[Any, ChannelState] = {}
        self.authentication_errors: dict[Any, BaseException] = {}
        self.poll_timeouts: list[int] = []
        self.wakeups = 0
        self.closed_connections: list[Any] = []
        self.closed = False
        self.connect_error: OSError | None = None
        self.hold_sends = False  # True: sends stay incomplete (being written) until released
        self.hold_connects = False  # True: connections stay in progress

    # ---- Selector API
    def connect(self, id: Any, address: Any, send_buffer: int = -1, receive_buffer: int = -1,
                family: int = 0, host: str | None = None) -> None:
        if self.connect_error is not None:
            raise self.connect_error
        if id in self._fail_connects:
            self._pending_disconnects[id] = ChannelState.NOT_CONNECTED
        else:
            self._pending_connects.append(id)

    def send(self, send: NetworkSend) -> None:
        self.requests.append(SentRequest(send))
        self._pending_sends.append(send)

    def poll(self, timeout_ms: int) -> None:
        self.poll_timeouts.append(timeout_ms)
        self.completed_sends = []
        self.connected = []
        self.disconnected = dict(self._pending_disconnects)
        self._pending_disconnects = {}
        if not self.hold_sends:
            for send in self._pending_sends:
                while not send.completed():
                    send.write_to(_Sink())
                self.completed_sends.append(send)
            self._pending_sends = []
        if not self.hold_connects:
            for id in self._pending_connects:
                self.ready.add(id)
                self.connected.append(id)
            self._pending_connects = []
        self.completed_receives = self._pending_receives
        self._pending_receives = []
        for id in self.disconnected:
            self.ready.discard(id)

    def is_channel_ready(self, id: Any) -> bool:
        return id in self.ready

    def expired_sessions(self) -> list[Any]:
        return []

    def close_connection(self, id: Any) -> None:
        self.ready.discard(id)
        if id in self._pending_connects:
            self._pending_connects.remove(id)
        self.closed_connections.append(id)

    def channels(self) -> list[Any]:
        return list(self.ready)

    def wakeup(self) -> None:
        self.wakeups += 1

    def close(self) -> None:
        self.closed = True

    # ---- scripting
    def fail_connect(self, id: Any) -> None:
        self._fail_connects.add(id)

    def server_disconnect(self, id: Any) -> None:
        self._pending_disconnects[id] = ChannelState.CLOSED_BY_PEER

    def unanswered(self, destination: Any = None, api_key: int | None = None) -> list[SentRequest]:
        return [r for r in self.requests if not r.answered and (destination is None or r.destination == destination)
                and (api_key is None or r.header.api_key == api_key)]

    def respond(self, request: SentRequest, body: Any = None, *, version: int | None = None,
                correlation_id: int | None = None, raw_body: bytes | None = None) -> None:
        """Queue the response to ``request`` for the next poll."""
        request.answered = True
        header = request.header
        out = bytearray()
        encode_response_header(out, header.correlation_id if correlation_id is None else correlation_id,
                               response_header_version(header.api_key, header.api_version))
        if raw_body is not None:
            out += raw_body
        else:
            body.encode_into(out, header.api_version if version is None else version)
        self._pending_receives.append(FakeReceive(request.destination, bytes(out)))


class _Sink:
    def write(self, buffers: list[memoryview]) -> int:
        return sum(len(b) for b in buffers)
