"""Encoded sizes of v2 records and batches, and header encoding (used by ``MemoryRecordsBuilder``).

Kafka counterpart: ``DefaultRecord.sizeInBytes``/``recordSizeUpperBound``,
``AbstractRecords.estimateSizeInBytesUpperBound``. Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strom.record.batch import Header
from strom.record.compression import CompressionType
from strom.record.header import HEADER_SIZE
from strom.record.varint import size_of_varint, varint_bytes

__all__ = [
    "EncodedHeaders",
    "encode_headers",
    "encode_plain_headers",
    "record_size",
    "record_size_upper_bound",
    "upper_bound_size",
    "RECORD_BATCH_OVERHEAD",
    "MAX_RECORD_OVERHEAD",
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
]

RECORD_BATCH_OVERHEAD = HEADER_SIZE
#: length varint (5) + attributes (1) + timestampDelta varlong (10) + offsetDelta varint (5)
MAX_RECORD_OVERHEAD = 21
#: Kafka's pessimism when estimating how full a compressed batch is.
COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05

_NULL = b"\x01"  # varint -1


class EncodedHeaders(bytes):
    """Headers in their wire form (the count, then each key and value): the producer encodes a record's headers
    once, for its size check and for the batch; the record builder and the size functions take them as they are."""

    __slots__ = ()


try:  # the optional C encoder of plain (str, bytes | None) pairs (strom/record/_fastencode.c)
    from strom.record import _fastencode

    _fastencode.set_encoded_headers_type(EncodedHeaders)
    #: ``encode_plain_headers(headers)``: the wire form of a list or tuple of (str, bytes | None) pairs, ``None``
    #: for any other shape (then :func:`encode_headers` converts or raises); ``None`` itself when not built.
    encode_plain_headers: Callable[[Any], EncodedHeaders | None] | None = _fastencode.encode_headers
except (ImportError, AttributeError):  # (an install without a C compiler, or a build older than this file)
    encode_plain_headers = None

_SHORT = [bytes([n << 1]) for n in range(64)]  # the varints of 0..63: one byte each
_KEY_FIELDS: dict[str, bytes] = {}  # header key -> its length varint and UTF-8 bytes (keys repeat record to record)
_MAX_KEY_FIELDS = 1024


def _key_field(hkey: str | bytes) -> bytes:
    kb = hkey.encode("utf-8") if isinstance(hkey, str) else bytes(hkey)
    n = len(kb)
    field = (_SHORT[n] if n < 64 else varint_bytes(n)) + kb
    if type(hkey) is str:
        if len(_KEY_FIELDS) >= _MAX_KEY_FIELDS:
            _KEY_FIELDS.clear()
        _KEY_FIELDS[hkey] = field
    return field


def encode_headers(headers: Sequence[Any],
                   check: Callable[[Any, Any], tuple[str, bytes | None]] | None = None) -> EncodedHeaders:
    """Headers in their wire form. ``check(key, value)`` (the producer's) is called for a pair that is not
    ``(str, bytes | None)``, to convert it or raise. (Per record on the producer's send path: a list or tuple
    of plain pairs goes to the C encoder where it was built, ~0.05 µs for one header; else one header, as a
    tracing library sets, takes one join, ~0.3 µs; encoded keys are cached.)"""
    if encode_plain_headers is not None:
        encoded = encode_plain_headers(headers)
        if encoded is not None:
            return encoded
    n = len(headers)
    if n == 1:
        hkey, hval = headers[0]
        if type(hkey) is str and type(hval) is bytes:
            m = len(hval)
            return EncodedHeaders(b"".join((b"\x02", _KEY_FIELDS.get(hkey) or _key_field(hkey),
                                            _SHORT[m] if m < 64 else varint_bytes(m), hval)))
    parts = [_SHORT[n] if n < 64 else varint_bytes(n)]
    append = parts.append
    for pair in headers:
        hkey, hval = pair
        if check is not None and (type(hkey) is not str or not (type(hval) is bytes or hval is None)):
            hkey, hval = check(hkey, hval)
        append(_KEY_FIELDS.get(hkey) or _key_field(hkey) if type(hkey) is str else _key_field(hkey))
        if hval is None:
            append(_NULL)
        else:
            n = len(hval)
            append(_SHORT[n] if n < 64 else varint_bytes(n))
            append(hval)
    return EncodedHeaders(b"".join(parts))


def _bytes_field_size(data: bytes | None) -> int:
    if data is None:
        return 1
    n = len(data)
    return size_of_varint(n) + n


def _headers_size(headers: Sequence[Header]) -> int:
    if type(headers) is EncodedHeaders:
        return len(headers)
    size = size_of_varint(len(headers))
    for hkey, hval in headers:
        klen = len(hkey.encode("utf-8")) if isinstance(hkey, str) else len(hkey)
        size += size_of_varint(klen) + klen + _bytes_field_size(hval)
    return size


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> int:
    """Exact encoded size of one record, length varint included (``DefaultRecord.sizeInBytes``)."""
    body = (
        1
        + size_of_varint(timestamp_delta)
        + size_of_varint(offset_delta)
        + _bytes_field_size(key)
        + _bytes_field_size(value)
        + _headers_size(headers)
    )
    return size_of_varint(body) + body


def record_size_upper_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Largest size one record can take whatever its deltas (``DefaultRecord.recordSizeUpperBound``)."""
    return MAX_RECORD_OVERHEAD + _bytes_field_size(key) + _bytes_field_size(value) + _headers_size(headers)


def upper_bound_size(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
    compression_type: CompressionType | int = CompressionType.NONE,
) -> int:
    """Upper bound of a batch holding just this record (``AbstractRecords.estimateSizeInBytesUpperBound``).

    As in Kafka, ``compression_type`` does not change the bound for magic v2.
    """
    return RECORD_BATCH_OVERHEAD + record_size_upper_bound(key, value, headers)
