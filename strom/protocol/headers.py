"""Request and response headers, and which header version goes with which (api key, api version).

Wire layout (``kafka-protocol/messages/RequestHeader.json``, ``ResponseHeader.json``)::

    request header v0   RequestApiKey INT16, RequestApiVersion INT16, CorrelationId INT32
    request header v1   v0 + ClientId NULLABLE_STRING (INT16 length, even in v2)
    request header v2   v1 + TAGGED_FIELDS
    response header v0  CorrelationId INT32
    response header v1  v0 + TAGGED_FIELDS

A request uses header v2 when its api version is flexible, else v1. A response uses header v1 when its api
version is flexible, else v0 -- except ApiVersionsResponse, which always uses v0 (KIP-511).

Kafka counterpart: ``RequestHeader``, ``ResponseHeader``, ``ApiKeys.requestHeaderVersion``.
Pure functions and plain values; thread-safe.
"""

from __future__ import annotations

import struct
from typing import Any

from strom.common.errors import ProtocolError
from strom.protocol.messages import REQUESTS, RESPONSES
from strom.protocol.primitives import (
    read_nullable_string,
    read_tagged_fields,
    write_nullable_string,
    write_tagged_fields,
)

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "request_header_version",
    "response_header_version",
    "encode_request_header",
    "encode_request",
    "decode_request_header",
    "encode_response_header",
    "encode_response",
    "decode_response_header",
]

API_VERSIONS_KEY = 18

_HDR = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


class RequestHeader:
    """A decoded or to-be-encoded request header. ``tagged`` holds raw tagged fields (header v2)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "tagged")

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None = None,
        tagged: dict[int, bytes] | None = None,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.tagged = {} if tagged is None else tagged

    @property
    def header_version(self) -> int:
        return request_header_version(self.api_key, self.api_version)

    @property
    def api_key_known(self) -> bool:
        return self.api_key in REQUESTS

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestHeader):
            return NotImplemented
        return (self.api_key, self.api_version, self.correlation_id, self.client_id, self.tagged) == (
            other.api_key, other.api_version, other.correlation_id, other.client_id, other.tagged)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}"
                + (f", tagged={self.tagged!r})" if self.tagged else ")"))


class ResponseHeader:
    __slots__ = ("correlation_id", "tagged")

    def __init__(self, correlation_id: int, tagged: dict[int, bytes] | None = None) -> None:
        self.correlation_id = correlation_id
        self.tagged = {} if tagged is None else tagged

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResponseHeader):
            return NotImplemented
        return (self.correlation_id, self.tagged) == (other.correlation_id, other.tagged)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ResponseHeader(correlation_id={self.correlation_id})"


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, else 1 (1 for unknown api keys)."""
    cls = REQUESTS.get(api_key)
    if cls is None:
        return 1
    fmin = cls.FLEXIBLE_VERSIONS_MIN
    return 2 if fmin is not None and api_version >= fmin else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible response versions, else 0; ApiVersions responses always use 0."""
    if api_key == API_VERSIONS_KEY:
        return 0
    cls = RESPONSES.get(api_key)
    if cls is None:
        return 0
    fmin = cls.FLEXIBLE_VERSIONS_MIN
    return 1 if fmin is not None and api_version >= fmin else 0


# ----------------------------------------------------------------------------------------------- requests


def encode_request_header(out: bytearray, header: RequestHeader, header_version: int | None = None) -> None:
    hv = request_header_version(header.api_key, header.api_version) if header_version is None else header_version
    out += _HDR.pack(header.api_key, header.api_version, header.correlation_id)
    if hv >= 1:
        write_nullable_string(out, header.client_id)
    if hv >= 2:
        write_tagged_fields(out, header.tagged)


def _append_body(out: bytearray, body: Any, version: int) -> None:
    if body is None:
        return
    if isinstance(body, bytes | bytearray | memoryview):
        out += body
    else:
        body.encode_into(out, version)


def encode_request(header: RequestHeader, body: Any, *, size_prefix: bool = True) -> bytes:
    """Header + body (a message object, encoded at ``header.api_version``, or pre-encoded bytes),
    preceded by the INT32 frame size unless ``size_prefix`` is false."""
    out = bytearray(b"\x00\x00\x00\x00") if size_prefix else bytearray()
    encode_request_header(out, header)
    _append_body(out, body, header.api_version)
    if size_prefix:
        _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_request_header(data: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parses the header of one request frame (without the size prefix) -> ``(header, body_offset)``.

    An unknown api key still yields api key, version and correlation id (the client id is read leniently
    and no tagged section is assumed), so the broker can answer or close the connection.
    """
    buf = data if isinstance(data, memoryview) else memoryview(data)
    if len(buf) < 8:
        raise ProtocolError(f"request header truncated: {len(buf)} bytes")
    api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    known = api_key in REQUESTS
    try:
        client_id, pos = read_nullable_string(buf, 8)
    except ProtocolError:
        if known:
            raise
        return RequestHeader(api_key, api_version, correlation_id, None), 8
    tagged: dict[int, bytes] = {}
    if known and request_header_version(api_key, api_version) >= 2:
        tagged, pos = read_tagged_fields(buf, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, tagged), pos


# ----------------------------------------------------------------------------------------------- responses


def encode_response_header(out: bytearray, correlation_id: int, header_version: int,
                           tagged: dict[int, bytes] | None = None) -> None:
    out += _I32.pack(correlation_id)
    if header_version >= 1:
        write_tagged_fields(out, tagged)


def encode_response(correlation_id: int, api_key: int, api_version: int, body: Any, *,
                    size_prefix: bool = True) -> bytes:
    """Response header (version chosen from api key/version) + body, with the INT32 frame size."""
    out = bytearray(b"\x00\x00\x00\x00") if size_prefix else bytearray()
    encode_response_header(out, correlation_id, response_header_version(api_key, api_version))
    _append_body(out, body, api_version)
    if size_prefix:
        _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response_header(data: bytes | bytearray | memoryview, api_key: int,
                           api_version: int) -> tuple[int, int]:
    """Parses the header of one response frame (without size prefix) -> ``(correlation_id, body_offset)``."""
    buf = data if isinstance(data, memoryview) else memoryview(data)
    if len(buf) < 4:
        raise ProtocolError(f"response header truncated: {len(buf)} bytes")
    correlation_id = _I32.unpack_from(buf, 0)[0]
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        _, pos = read_tagged_fields(buf, pos)
    return correlation_id, pos
