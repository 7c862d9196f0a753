"""Sans-I/O Kafka connection: size-prefixed framing, correlation ids and the in-flight FIFO.

Wire layout: every request and response is ``INT32 size`` followed by ``size`` bytes (header + body).

Kafka counterparts: ``NetworkReceive`` (framing, ``InvalidReceiveException`` for bad sizes),
``InFlightRequests`` / ``NetworkClient.correlate`` (client role), the request channel of ``SocketServer``
(server role). No sockets, threads or clocks: feed received bytes in, write the returned bytes out.
Not thread-safe: one connection belongs to one I/O thread (or one asyncio task).
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from strom.common.error_codes import ErrorCode
from strom.common.errors import ProtocolError
from strom.protocol.api_keys import ApiKey
from strom.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    response_header_version,
)
from strom.protocol.messages import RESPONSES, ApiVersionsResponse

__all__ = [
    "FrameDecoder",
    "FrameBufferPool",
    "KafkaConnection",
    "InFlightRequest",
    "InvalidFrameError",
    "CorrelationIdMismatchError",
    "DEFAULT_MAX_FRAME_SIZE",
    "check_frame_size",
    "encode_request_frame",
    "decode_response_frame",
    "encode_response_frame",
    "decode_api_versions_response",
]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # socket.request.max.bytes default
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_HHH = struct.Struct(">hhh")
_API_VERSIONS = int(ApiKey.API_VERSIONS)


class InvalidFrameError(ProtocolError):
    """A size prefix that is negative or above the maximum frame size (Kafka's ``InvalidReceiveException``):
    the connection must be closed."""


class CorrelationIdMismatchError(ProtocolError):
    """A response's correlation id is not the one of the oldest in-flight request on that connection."""


def check_frame_size(size: int, max_frame_size: int) -> None:
    # Kafka's InvalidReceiveException messages, word for word.
    if size < 0:
        raise InvalidFrameError(f"Invalid receive (size = {size})")
    if 0 <= max_frame_size < size:
        raise InvalidFrameError(f"Invalid receive (size = {size} larger than {max_frame_size})")


def _bytearray(size: int) -> bytearray | None:
    return bytearray(size)


class FrameBufferPool:
    """Buffers for frames that span several reads (a :class:`FrameDecoder`'s ``allocate``), handed out again once
    nothing refers to them.

    A frame larger than one read is copied into a buffer of its own; a new ``bytearray`` per frame is memory the
    allocator zero-fills (and often faults in) only to be overwritten: a tenth of a broker's busy time when
    producers send megabyte requests. A buffer goes back into use only when this pool holds the last reference to
    it (CPython's reference count): no frame, slice or decoded request still views it, so a request kept for
    later (a parked produce, a queued frame) makes the pool hand out another buffer instead. Frames below
    ``min_size`` get a fresh ``bytearray``; at most ``max_buffers`` buffers and ``max_bytes`` bytes are kept, and
    a frame the pool cannot serve gets a fresh ``bytearray`` too. Not thread-safe: one event loop or I/O thread.
    """

    __slots__ = ("min_size", "max_buffers", "max_bytes", "_buffers", "_bytes")

    def __init__(self, min_size: int = 64 * 1024, max_buffers: int = 8, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.min_size = min_size
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._buffers: list[bytearray] = []
        self._bytes = 0

    @property
    def pooled_bytes(self) -> int:
        """Bytes of the buffers the pool keeps (in use or not)."""
        return self._bytes

    def allocate(self, size: int) -> bytearray | memoryview:
        """A writable buffer of exactly ``size`` bytes (contents undefined)."""
        if size < self.min_size:
            return bytearray(size)
        buffers = self._buffers
        best = -1
        for i in range(len(buffers)):
            buf = buffers[i]
            # References: the list, ``buf`` and getrefcount's argument; any more is a view still alive.
            if sys.getrefcount(buf) == 3 and (best < 0 or len(buf) < len(buffers[best])) and len(buf) >= size:
                best = i
        if best >= 0:
            return memoryview(buffers[best])[:size]
        buf = bytearray(size)
        if len(buffers) >= self.max_buffers or self._bytes + size > self.max_bytes:
            self._drop_idle(size)
            buffers = self._buffers
        if len(buffers) < self.max_buffers and self._bytes + size <= self.max_bytes:
            buffers.append(buf)
            self._bytes += size
        return buf

    def _drop_idle(self, room: int) -> None:
        """Drop idle buffers (smallest first, too small for this frame anyway) until ``room`` more bytes and one
        more buffer fit, or none is idle."""
        buffers = self._buffers
        idle = sorted((i for i in range(len(buffers)) if sys.getrefcount(buffers[i]) == 2),
                      key=lambda i: len(buffers[i]))
        dropped = set()
        for i in idle:
            if len(buffers) - len(dropped) < self.max_buffers and self._bytes + room <= self.max_bytes:
                break
            dropped.add(i)
            self._bytes -= len(buffers[i])
        if dropped:
            self._buffers = [b for i, b in enumerate(buffers) if i not in dropped]


class FrameDecoder:
    """Splits a byte stream into frames (Kafka's ``NetworkReceive``): the one framing core of client, broker and
    test tools. Two ways in, one state machine:

    * ``feed(data)`` — for callers handed bytes (asyncio protocols, TLS records, tests). Returns the complete
      frame payloads (size prefix stripped). Frames lying wholly inside an immutable ``bytes`` chunk are
      zero-copy ``memoryview`` slices of it; a frame spanning chunks is copied once into a buffer of its size.
    * ``buffer()`` / ``advance(n)`` — for callers that read straight into memory (``recv_into``): ``buffer()``
      is where the next bytes go (never past the current frame), ``advance(n)`` says ``n`` bytes landed there
      and returns the payload when the frame is complete. The payload buffer comes from ``allocate`` (a memory
      pool); ``buffer()`` returns ``None`` while the pool has no memory for it.

    ``max_frame_size < 0`` means unlimited. Not thread-safe: one decoder per connection.
    """

    __slots__ = ("max_frame_size", "_allocate", "_head", "_head_view", "_head_n", "_size", "_payload", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 allocate: Callable[[int], bytearray | memoryview | None] = _bytearray) -> None:
        self.max_frame_size = max_frame_size
        self._allocate = allocate
        self._head = bytearray(4)
        self._head_view = memoryview(self._head)
        self._head_n = 0
        self._size = -1  # payload size of the frame in progress, -1 while its size prefix is incomplete
        self._payload: bytearray | memoryview | None = None
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (size prefix included)."""
        return self._head_n + self._pos

    @property
    def frame_size(self) -> int:
        """Payload size of the frame in progress, ``-1`` while its size prefix is incomplete."""
        return self._size

    @property
    def payload_allocated(self) -> bool:
        return self._payload is not None

    # -- recv_into style ------------------------------------------------------------------------------------
    # (the hot path of every client receive: no helper calls, no slicing when a read starts at offset 0)
    def buffer(self) -> memoryview | None:
        if self._size < 0:
            n = self._head_n
            return self._head_view[n:] if n else self._head_view
        payload = self._payload
        if payload is None:
            payload = self._payload = self._allocate(self._size)
            if payload is None:
                return None
        pos = self._pos
        return memoryview(payload)[pos:] if pos else memoryview(payload)

    def advance(self, n: int) -> memoryview | None:
        if self._size < 0:
            n += self._head_n
            if n < 4:
                self._head_n = n
                return None
            self._head_n = 0
            size = _I32.unpack(self._head)[0]
            if size < 0 or 0 <= self.max_frame_size < size:
                check_frame_size(size, self.max_frame_size)
            if size == 0:
                return memoryview(b"")
            self._size = size
            return None
        pos = self._pos + n
        if pos < self._size:
            self._pos = pos
            return None
        payload = self._payload
        assert payload is not None
        self._size, self._payload, self._pos = -1, None, 0
        return memoryview(payload)

    # -- bytes style ----------------------------------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames: list[memoryview] = []
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        pos = self._fill(mv, 0, n, frames) if (self._head_n or self._size >= 0) else 0
        zero_copy = isinstance(data, bytes)
        max_size = self.max_frame_size
        while n - pos >= 4:
            size = _I32.unpack_from(mv, pos)[0]
            if size < 0 or 0 <= max_size < size:
                check_frame_size(size, max_size)
            end = pos + 4 + size
            if end > n:
                break
            frames.append(mv[pos + 4:end] if zero_copy else memoryview(bytes(mv[pos + 4:end])))
            pos = end
        if pos < n:
            self._fill(mv, pos, n, frames)
        return frames

    def _fill(self, mv: memoryview, pos: int, n: int, frames: list[memoryview]) -> int:
        """Copy ``mv[pos:n]`` into the frame in progress until it is complete or the data ends."""
        while pos < n:
            buf = self.buffer()
            if buf is None:
                raise InvalidFrameError(f"no memory for a frame of {self._size} bytes")
            k = min(len(buf), n - pos)
            buf[:k] = mv[pos:pos + k]
            pos += k
            frame = self.advance(k)
            if frame is not None:
                frames.append(frame)
                break
        return pos


def encode_request_frame(header: RequestHeader, body: Any) -> bytearray:
    """Size prefix + request header + body (a message object, pre-encoded bytes or ``None``), in one buffer."""
    out = bytearray(b"\x00\x00\x00\x00")
    encode_request_header(out, header)
    if isinstance(body, bytes | bytearray | memoryview):
        out += body
    elif body is not None:
        body.encode_into(out, header.api_version)
    _I32.pack_into(out, 0, len(out) - 4)
    return out


def encode_response_frame(correlation_id: int, header_version: int, response: Any, version: int) -> bytearray:
    """Size prefix + response header + body, in one buffer (Fetch bodies carry megabytes: copied once)."""
    out = bytearray(b"\x00\x00\x00\x00")
    encode_response_header(out, correlation_id, header_version)
    if isinstance(response, bytes | bytearray | memoryview):
        out += response
    elif response is not None:
        response.encode_into(out, version)
    _I32.pack_into(out, 0, len(out) - 4)
    return out


def decode_response_frame(payload: memoryview, api_key: int, api_version: int,
                          correlation_id: int | None = None) -> tuple[int, Any]:
    """Decode a response frame's payload for the request ``(api_key, api_version)``: returns
    ``(correlation_id, body)``. ``ProtocolError`` when the correlation id is not ``correlation_id`` (if given)
    or the body does not decode. ApiVersions is read leniently (:func:`decode_api_versions_response`); an api key
    without a generated codec gives the raw body."""
    cid, offset = decode_response_header(payload, api_key, api_version)
    if correlation_id is not None and cid != correlation_id:
        raise CorrelationIdMismatchError(
            f"Correlation id for response ({cid}) does not match request ({correlation_id})")
    body = payload[offset:]
    if api_key == _API_VERSIONS:
        return cid, decode_api_versions_response(body, api_version)
    cls = RESPONSES.get(api_key)
    return cid, (body if cls is None else cls.decode(body, api_version))


def decode_api_versions_response(body: bytes | bytearray | memoryview, version: int) -> Any:
    """Decode an ApiVersionsResponse body sent in answer to a v``version`` request, leniently (KIP-511).

    An ``UNSUPPORTED_VERSION`` answer is read as v0 (what Kafka brokers send), else scanned for the
    ApiVersions entry (librdkafka's mock uses a nonstandard layout); any other body that does not decode at
    ``version`` is retried as v0. The result's ``api_keys`` may then hold only the ApiVersions entry.
    """
    buf = body if isinstance(body, memoryview) else memoryview(body)
    if len(buf) < 2:
        raise ProtocolError(f"ApiVersionsResponse too short: {len(buf)} bytes")
    error_code = _I16.unpack_from(buf, 0)[0]
    if error_code != ErrorCode.UNSUPPORTED_VERSION:
        try:
            return ApiVersionsResponse.decode(buf, version)
        except ProtocolError:
            if version == 0:
                raise
    try:
        return ApiVersionsResponse.decode(buf, 0)
    except ProtocolError:
        if error_code != ErrorCode.UNSUPPORTED_VERSION:
            raise
    response = ApiVersionsResponse(error_code=error_code)
    for pos in range(2, len(buf) - 5):  # find an (ApiKey=18, MinVersion, MaxVersion) triple
        key, lo, hi = _HHH.unpack_from(buf, pos)
        if key == _API_VERSIONS and 0 <= lo <= hi < 100:
            response.api_keys = [ApiVersionsResponse.ApiVersion(api_key=_API_VERSIONS, min_version=0,
                                                                max_version=hi)]
            break
    return response


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
        out = encode_request_frame(header, body)
        if expect_response:
            self._in_flight.append(InFlightRequest(cid, int(api_key), version))
        return cid, bytes(out)

    def receive_frame(self, frame: memoryview) -> tuple[int, int, int, Any]:
        """One response frame's payload (size prefix stripped) → ``(correlation_id, api_key, version, body)``."""
        return self._complete(frame)

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
        _, body = decode_response_frame(frame, req.api_key, req.api_version)
        version = req.api_version
        if req.api_key == _API_VERSIONS and isinstance(body, ApiVersionsResponse) and body.error_code:
            version = 0  # the broker answered in v0 (KIP-511)
        return cid, req.api_key, version, body

    # ------------------------------------------------------------------------------ server

    def encode_response(self, header: RequestHeader, response: Any, version: int | None = None) -> bytes:
        """Frames ``response`` (object or pre-encoded body) for ``header``'s request.

        ``version`` overrides the body version (ApiVersions answers an unsupported version with v0);
        the response header version always follows the request's api key and version.
        """
        body_version = header.api_version if version is None else version
        return bytes(encode_response_frame(header.correlation_id,
                                           response_header_version(header.api_key, header.api_version),
                                           response, body_version))
