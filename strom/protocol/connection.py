"""Sans-I/O Kafka connection: size-prefixed framing, correlation ids and the in-flight FIFO.

Wire layout: every request and response is ``INT32 size`` followed by ``size`` bytes (header + body).

Kafka counterparts: ``NetworkReceive`` (framing, ``InvalidReceiveException`` for bad sizes),
``InFlightRequests`` / ``NetworkClient.correlate`` (client role), the request channel of ``SocketServer``
(server role). No sockets, threads or clocks: feed received bytes in, write the returned bytes out.
Not thread-safe: one connection belongs to one I/O thread (or one asyncio task).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, NamedTuple

from strom.common.errors import ProtocolError
from strom.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    response_header_version,
)
from strom.protocol.messages import RESPONSES

__all__ = ["FrameDecoder", "KafkaConnection", "InFlightRequest", "DEFAULT_MAX_FRAME_SIZE"]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # socket.request.max.bytes default
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_API_VERSIONS = 18
_UNSUPPORTED_VERSION = 35


class FrameDecoder:
    """Splits a byte stream into frames (Kafka's ``NetworkReceive``).

    ``feed`` returns complete frame payloads (size prefix stripped). When ``data`` is an immutable
    ``bytes`` object, frames lying wholly inside it are zero-copy ``memoryview`` slices of it; otherwise each
    frame is copied once. Partial frames are buffered; a frame arriving in many chunks is appended to one
    growing buffer (amortised linear, never re-copied per chunk).
    """

    __slots__ = ("max_frame_size", "_buf")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    def _check(self, size: int) -> None:
        if size < 0:
            raise ProtocolError(f"invalid frame size {size} (negative)")
        if size > self.max_frame_size:
            raise ProtocolError(f"frame size {size} exceeds the maximum of {self.max_frame_size}")

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames: list[memoryview] = []
        if not self._buf:
            zero_copy = isinstance(data, bytes)
            mv = memoryview(data)
            if mv.format != "B" or mv.ndim != 1:
                mv = mv.cast("B")
            n = len(mv)
            pos = 0
            while n - pos >= 4:
                size = _I32.unpack_from(mv, pos)[0]
                self._check(size)
                end = pos + 4 + size
                if end > n:
                    break
                frames.append(mv[pos + 4:end] if zero_copy else memoryview(bytes(mv[pos + 4:end])))
                pos = end
            if pos < n:
                self._buf += mv[pos:]
            return frames
        buf = self._buf
        buf += data
        n = len(buf)
        pos = 0
        view = memoryview(buf)  # slicing a view copies once (bytes(view[a:b])), not twice
        try:
            while n - pos >= 4:
                size = _I32.unpack_from(buf, pos)[0]
                self._check(size)
                end = pos + 4 + size
                if end > n:
                    break
                frames.append(memoryview(bytes(view[pos + 4:end])))
                pos = end
        finally:
            view.release()
        if pos:
            del buf[:pos]
        return frames


class InFlightRequest(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int


class KafkaConnection:
    """Framing + correlation for one connection, in the ``"client"`` or ``"server"`` role.

    Client: ``send_request`` returns ``(correlation_id, bytes_to_write)``; ``receive_bytes`` returns
    ``[(correlation_id, api_key, api_version, response_obj), ...]`` in request order. A response whose
    correlation id is not the oldest in-flight one raises ``ProtocolError`` (the connection must be closed).

    Server: ``receive_bytes`` returns ``[(RequestHeader, body_memoryview), ...]``; ``encode_response``
    frames a response with the right response-header version. Unknown api keys still give a header.
    """

    def __init__(self, role: str = "client", *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 client_id: str | None = None) -> None:
        if role not in ("client", "server"):
            raise ValueError(f"role must be 'client' or 'server', not {role!r}")
        self.role = role
        self.client_id = client_id
        self._frames = FrameDecoder(max_frame_size)
        self._in_flight: deque[InFlightRequest] = deque()
        self._next_correlation_id = 0

    # ------------------------------------------------------------------------------ shared

    def receive_bytes(self, data: bytes | bytearray | memoryview) -> list[Any]:
        frames = self._frames.feed(data)
        if not frames:
            return []
        if self.role == "server":
            out: list[Any] = []
            for frame in frames:
                header, offset = decode_request_header(frame)
                out.append((header, frame[offset:]))
            return out
        return [self._complete(frame) for frame in frames]

    # ------------------------------------------------------------------------------ client

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def in_flight(self) -> list[InFlightRequest]:
        return list(self._in_flight)

    def next_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = 0 if cid >= 0x7FFFFFFF else cid + 1
        return cid

    def send_request(self, api_key: int, version: int, body: Any, client_id: str | None = None,
                     expect_response: bool = True) -> tuple[int, bytes]:
        """Frames a request (``body`` is a message object or pre-encoded body bytes).

        ``expect_response=False`` (Produce with acks=0) leaves it out of the in-flight FIFO.
        """
        if self.role != "client":
            raise ProtocolError("send_request on a server-role connection")
        cid = self.next_correlation_id()
        header = RequestHeader(int(api_key), version, cid, self.client_id if client_id is None else client_id)
        out = bytearray(b"\x00\x00\x00\x00")
        encode_request_header(out, header)
        if isinstance(body, bytes | bytearray | memoryview):
            out += body
        elif body is not None:
            body.encode_into(out, version)
        _I32.pack_into(out, 0, len(out) - 4)
        if expect_response:
            self._in_flight.append(InFlightRequest(cid, int(api_key), version))
        return cid, bytes(out)

    def _complete(self, frame: memoryview) -> tuple[int, int, int, Any]:
        if len(frame) < 4:
            raise ProtocolError(f"response frame too short: {len(frame)} bytes")
        cid = _I32.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise ProtocolError(f"received a response (correlation id {cid}) with no request in flight")
        req = self._in_flight[0]
        if cid != req.correlation_id:
            raise ProtocolError(
                f"correlation id mismatch: expected {req.correlation_id} (api key {req.api_key}), got {cid}")
        self._in_flight.popleft()
        _, offset = decode_response_header(frame, req.api_key, req.api_version)
        cls = RESPONSES.get(req.api_key)
        if cls is None:
            return cid, req.api_key, req.api_version, frame[offset:]
        body = frame[offset:]
        version = req.api_version
        if req.api_key == _API_VERSIONS and version > 0:
            # A broker that does not support our ApiVersions version answers with a v0 body carrying
            # UNSUPPORTED_VERSION (KIP-511); Kafka's client falls back to parsing v0 the same way.
            if len(body) >= 2 and _I16.unpack_from(body, 0)[0] == _UNSUPPORTED_VERSION:
                version = 0
            else:
                try:
                    return cid, req.api_key, version, cls.decode(body, version)
                except ProtocolError:
                    version = 0
        return cid, req.api_key, version, cls.decode(body, version)

    # ------------------------------------------------------------------------------ server

    def encode_response(self, header: RequestHeader, response: Any, version: int | None = None) -> bytes:
        """Frames ``response`` (object or pre-encoded body) for ``header``'s request.

        ``version`` overrides the body version (ApiVersions answers an unsupported version with v0);
        the response header version always follows the request's api key and version.
        """
        body_version = header.api_version if version is None else version
        out = bytearray(b"\x00\x00\x00\x00")
        encode_response_header(out, header.correlation_id,
                               response_header_version(header.api_key, header.api_version))
        if isinstance(response, bytes | bytearray | memoryview):
            out += response
        elif response is not None:
            response.encode_into(out, body_version)
        _I32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
