"""Variable-length integers: unsigned varint, zig-zag varint (int32) and varlong (int64).

Wire layout (protobuf base-128): 7 payload bits per byte, least significant group first, the high bit
(0x80) set on every byte except the last. Zig-zag maps signed to unsigned so that small magnitudes stay
short: ``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...`` i.e. ``(v << 1) ^ (v >> 63)``. A varint takes at most
5 bytes, a varlong at most 10.

Kafka counterpart: ``org.apache.kafka.common.utils.ByteUtils`` (``writeVarint``, ``readVarlong``,
``sizeOfVarint`` ...). Pure functions, no I/O, thread-safe.

Encoders append to a ``bytearray``; ``*_bytes`` helpers return the encoding (served from a
precomputed table for zig-zag values below ``CACHE_SIZE``, which covers offset deltas, small lengths
and small timestamp deltas, the common cases on the record hot path). Decoders take any buffer whose
indexing yields ints (``bytes``, ``bytearray``, ``memoryview`` of format ``B``) and return
``(value, new_pos)``; a single-byte value is decoded without a loop.
"""

from __future__ import annotations

__all__ = [
    "CACHE_SIZE",
    "UVARINT_TABLE",
    "zigzag",
    "unzigzag",
    "encode_unsigned_varint",
    "encode_varint",
    "encode_varlong",
    "unsigned_varint_bytes",
    "uvarint64_bytes",
    "varint_bytes",
    "varlong_bytes",
    "decode_unsigned_varint",
    "decode_uvarint64",
    "decode_varint",
    "decode_varlong",
    "size_of_unsigned_varint",
    "size_of_varint",
    "size_of_varlong",
]

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _encode_uvarint_slow(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


CACHE_SIZE = 1 << 14
#: ``UVARINT_TABLE[u]`` is the unsigned-varint encoding of ``u`` for ``0 <= u < CACHE_SIZE``.
UVARINT_TABLE: tuple[bytes, ...] = tuple(_encode_uvarint_slow(u) for u in range(CACHE_SIZE))


def zigzag(value: int) -> int:
    """Zig-zag map a signed 64-bit value to an unsigned one."""
    return (value << 1) ^ (value >> 63)


def unzigzag(u: int) -> int:
    """Inverse of :func:`zigzag`."""
    return (u >> 1) ^ -(u & 1)


# -- encoding ---------------------------------------------------------------------------------------


def uvarint64_bytes(value: int) -> bytes:
    """The 64-bit unsigned base-128 varint of ``0 <= value < 2**64`` (protobuf's)."""
    if 0 <= value < CACHE_SIZE:
        return UVARINT_TABLE[value]
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"unsigned 64-bit varint out of range: {value}")
    return _encode_uvarint_slow(value)


def unsigned_varint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of ``0 <= value < 2**32``."""
    if 0 <= value < CACHE_SIZE:
        return UVARINT_TABLE[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_uvarint_slow(value)


def varint_bytes(value: int) -> bytes:
    """The zig-zag varint encoding of a signed 32-bit ``value``."""
    z = (value << 1) ^ (value >> 63)
    if z < CACHE_SIZE:
        return UVARINT_TABLE[z]
    if value < _INT32_MIN or value > _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_uvarint_slow(z)


def varlong_bytes(value: int) -> bytes:
    """The zig-zag varlong encoding of a signed 64-bit ``value``."""
    z = (value << 1) ^ (value >> 63)
    if z < CACHE_SIZE:
        return UVARINT_TABLE[z]
    if value < _INT64_MIN or value > _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_uvarint_slow(z)


def encode_unsigned_varint(value: int, out: bytearray) -> None:
    """Append the unsigned varint encoding of ``value`` to ``out``."""
    out += unsigned_varint_bytes(value)


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag varint (int32) encoding of ``value`` to ``out``."""
    out += varint_bytes(value)


def encode_varlong(value: int, out: bytearray) -> None:
    """Append the zig-zag varlong (int64) encoding of ``value`` to ``out``."""
    out += varlong_bytes(value)


# -- decoding ---------------------------------------------------------------------------------------


def _decode_uvarint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError(f"varint longer than {max_bytes} bytes")


def decode_uvarint64(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a 64-bit unsigned base-128 varint (protobuf's, at most 10 bytes) at ``pos``; ``(value, new_pos)``.
    ``IndexError`` when the buffer ends inside it, ``ValueError`` when it is too long."""
    return _decode_uvarint(buf, pos, 10)


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes) at ``pos``; return ``(value, new_pos)``.

    Raises ``IndexError`` when the buffer ends inside the varint, ``ValueError`` when it is too long.
    """
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _decode_uvarint(buf, pos, 5)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varint (int32, at most 5 bytes) at ``pos``; return ``(value, new_pos)``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _decode_uvarint(buf, pos, 5)
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varlong (int64, at most 10 bytes) at ``pos``; return ``(value, new_pos)``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _decode_uvarint(buf, pos, 10)
    return (u >> 1) ^ -(u & 1), pos


# -- sizes ------------------------------------------------------------------------------------------


def size_of_unsigned_varint(value: int) -> int:
    """Number of bytes the unsigned varint encoding of ``value`` takes."""
    if value < 0x80:
        return 1
    return (value.bit_length() + 6) // 7


def size_of_varint(value: int) -> int:
    """Number of bytes the zig-zag varint encoding of ``value`` takes."""
    return size_of_unsigned_varint((value << 1) ^ (value >> 63))


size_of_varlong = size_of_varint
