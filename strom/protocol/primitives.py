"""Primitive wire types of the Kafka protocol: fast functional readers/writers plus ``Reader``/``Writer``.

Wire layout (big-endian; see ``kafka-protocol/protocol-guide.txt`` PART 2, supplement A)::

    INT8/16/32/64, UINT16, UNSIGNED_INT32, FLOAT64   fixed width, two's complement / IEEE 754
    BOOLEAN                                          1 byte, non-zero = true
    UUID                                             16 bytes (msb then lsb)
    UNSIGNED_VARINT / VARINT / VARLONG               7 bits per byte, LSB group first (zig-zag for signed)
    STRING / NULLABLE_STRING                         INT16 length (-1 = null) + UTF-8
    COMPACT_(NULLABLE_)STRING                        UNSIGNED_VARINT length+1 (0 = null) + UTF-8
    BYTES / NULLABLE_BYTES / RECORDS                 INT32 length (-1 = null) + raw bytes
    COMPACT_(NULLABLE_)BYTES / COMPACT_RECORDS       UNSIGNED_VARINT length+1 (0 = null) + raw bytes
    ARRAY / COMPACT_ARRAY                            INT32 count (-1 = null) / UNSIGNED_VARINT count+1 (0 = null)
    TAGGED_FIELDS                                    UNSIGNED_VARINT n, then n x (UVARINT tag, UVARINT size, bytes)

Kafka counterpart: ``org.apache.kafka.common.protocol.types.Type``, ``ByteUtils``, ``Readable``/``Writable``.

The generated message codecs call the module-level ``read_*(buf, pos) -> (value, new_pos)`` and
``write_*(out: bytearray, value)`` functions directly (no per-call object), which is the fastest shape in
CPython. ``buf`` is a ``memoryview`` (or ``bytes``); every reader checks bounds and raises
``ProtocolError`` (the generated ``decode`` additionally turns ``struct.error``/``IndexError`` from fixed-width
reads into ``ProtocolError``). ``Reader``/``Writer`` wrap the same functions for hand-written code.
Not thread-safe (plain values; share nothing).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from strom.common.errors import ProtocolError
from strom.protocol.send import SendBuilder, TransferableRecords

__all__ = [
    "Reader",
    "Writer",
    "ZERO_UUID",
    "read_uvarint",
    "read_varint",
    "read_varlong",
    "write_uvarint",
    "write_varint",
    "write_varlong",
    "uvarint_size",
]

ZERO_UUID = uuid.UUID(int=0)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_BOOL = struct.Struct(">?")
_UUID16 = struct.Struct(">16s")

_new_uuid = object.__new__
_set = object.__setattr__
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def _truncated(what: str, need: int, have: int) -> ProtocolError:
    return ProtocolError(f"truncated data reading {what}: need {need} bytes, {have} left")


# ---------------------------------------------------------------------------------------------- varints


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """UNSIGNED_VARINT (at most 5 bytes, 32 bits)."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        while True:
            pos += 1
            b = buf[pos]
            result |= (b & 0x7F) << shift
            if b < 0x80:
                if result > 0xFFFFFFFF:
                    raise ProtocolError("unsigned varint does not fit in 32 bits")
                return result, pos + 1
            shift += 7
            if shift > 28:
                raise ProtocolError("unsigned varint is longer than 5 bytes")
    except IndexError:
        raise ProtocolError("truncated data reading an unsigned varint") from None


def _read_uvarlong(buf: Any, pos: int) -> tuple[int, int]:
    try:
        result = 0
        shift = 0
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if shift > 63:
                raise ProtocolError("varlong is longer than 10 bytes")
    except IndexError:
        raise ProtocolError("truncated data reading a varlong") from None


def read_varint(buf: Any, pos: int) -> tuple[int, int]:
    """VARINT: zig-zag signed 32-bit."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: Any, pos: int) -> tuple[int, int]:
    """VARLONG: zig-zag signed 64-bit."""
    v, pos = _read_uvarlong(buf, pos)
    if v > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError("varlong does not fit in 64 bits")
    return (v >> 1) ^ -(v & 1), pos


_UVARINT_1 = [bytes([i]) for i in range(128)]


def uvarint_bytes(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _UVARINT_1[n]
    if n < 0 or n > 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_uvarint(out: bytearray, n: int) -> None:
    if 0 <= n < 0x80:
        out.append(n)
    else:
        if n < 0 or n > 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {n}")
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)


def write_varint(out: bytearray, n: int) -> None:
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise ValueError(f"varint out of range: {n}")
    write_uvarint(out, ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, n: int) -> None:
    if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of range: {n}")
    out += uvarint_bytes(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


# ---------------------------------------------------------------------------------------------- fixed width


def _fixed_reader(s: struct.Struct, what: str):
    unpack_from = s.unpack_from
    size = s.size

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise _truncated(what, size, max(0, len(buf) - pos)) from None

    read.__name__ = "read_" + what
    return read


read_int8 = _fixed_reader(_I8, "int8")
read_int16 = _fixed_reader(_I16, "int16")
read_uint16 = _fixed_reader(_U16, "uint16")
read_int32 = _fixed_reader(_I32, "int32")
read_uint32 = _fixed_reader(_U32, "uint32")
read_int64 = _fixed_reader(_I64, "int64")
read_float64 = _fixed_reader(_F64, "float64")
read_bool = _fixed_reader(_BOOL, "bool")


def uuid_from_bytes(b: bytes) -> uuid.UUID:
    """A ``uuid.UUID`` from 16 bytes, without ``UUID.__init__``'s argument parsing (hot path)."""
    if b == b"\x00" * 16:
        return ZERO_UUID
    u = _new_uuid(uuid.UUID)
    _set(u, "int", int.from_bytes(b, "big"))
    _set(u, "is_safe", _SAFE_UNKNOWN)
    return u


def read_uuid(buf: Any, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise _truncated("uuid", 16, len(buf) - pos)
    return uuid_from_bytes(bytes(buf[pos:end])), end


def write_int8(out: bytearray, v: int) -> None:
    out += _I8.pack(v)


def write_int16(out: bytearray, v: int) -> None:
    out += _I16.pack(v)


def write_uint16(out: bytearray, v: int) -> None:
    out += _U16.pack(v)


def write_int32(out: bytearray, v: int) -> None:
    out += _I32.pack(v)


def write_uint32(out: bytearray, v: int) -> None:
    out += _U32.pack(v)


def write_int64(out: bytearray, v: int) -> None:
    out += _I64.pack(v)


def write_float64(out: bytearray, v: float) -> None:
    out += _F64.pack(v)


def write_bool(out: bytearray, v: bool) -> None:
    out.append(1 if v else 0)


def write_uuid(out: bytearray, v: uuid.UUID) -> None:
    out += v.bytes


# ---------------------------------------------------------------------------------------------- strings


def _slice(buf: Any, pos: int, n: int, what: str) -> tuple[Any, int]:
    end = pos + n
    if end > len(buf):
        raise _truncated(what, n, len(buf) - pos)
    return buf[pos:end], end


def _utf8(raw: Any) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"invalid UTF-8 in string: {e}") from None


def read_string(buf: Any, pos: int) -> tuple[str, int]:
    """STRING: INT16 length, must not be negative."""
    try:
        n = _I16.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("string length", 2, len(buf) - pos) from None
    if n < 0:
        raise ProtocolError(f"non-nullable string has length {n}")
    raw, pos = _slice(buf, pos + 2, n, "string")
    return _utf8(raw), pos


def read_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    try:
        n = _I16.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("string length", 2, len(buf) - pos) from None
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid nullable string length {n}")
        return None, pos + 2
    raw, pos = _slice(buf, pos + 2, n, "string")
    return _utf8(raw), pos


def read_compact_string(buf: Any, pos: int) -> tuple[str, int]:
    n = buf[pos] if pos < len(buf) else 0x80
    if 0 < n < 0x80:  # fast path: one-byte length, enough data, valid UTF-8
        end = pos + n
        if end <= len(buf):
            try:
                return str(buf[pos + 1:end], "utf-8"), end
            except UnicodeDecodeError:
                pass
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolError("non-nullable compact string is null")
    raw, pos = _slice(buf, pos, n - 1, "compact string")
    return _utf8(raw), pos


def read_compact_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    n = buf[pos] if pos < len(buf) else 0x80
    if n == 0:
        return None, pos + 1
    if n < 0x80:
        end = pos + n
        if end <= len(buf):
            try:
                return str(buf[pos + 1:end], "utf-8"), end
            except UnicodeDecodeError:
                pass
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, pos = _slice(buf, pos, n - 1, "compact string")
    return _utf8(raw), pos


def write_string(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string too long for INT16 length: {len(b)} bytes")
    out += _I16.pack(len(b))
    out += b


def write_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
    else:
        write_string(out, s)


def write_compact_string(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


def write_compact_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
    else:
        write_compact_string(out, s)


# ---------------------------------------------------------------------------------------------- bytes, records


def read_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    try:
        n = _I32.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("bytes length", 4, len(buf) - pos) from None
    if n < 0:
        raise ProtocolError(f"non-nullable bytes has length {n}")
    raw, pos = _slice(buf, pos + 4, n, "bytes")
    return bytes(raw), pos


def read_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    try:
        n = _I32.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("bytes length", 4, len(buf) - pos) from None
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid nullable bytes length {n}")
        return None, pos + 4
    raw, pos = _slice(buf, pos + 4, n, "bytes")
    return bytes(raw), pos


def read_compact_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolError("non-nullable compact bytes is null")
    raw, pos = _slice(buf, pos, n - 1, "compact bytes")
    return bytes(raw), pos


def read_compact_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, pos = _slice(buf, pos, n - 1, "compact bytes")
    return bytes(raw), pos


def read_records(buf: Any, pos: int) -> tuple[memoryview | None, int]:
    """RECORDS: like NULLABLE_BYTES, but returns a zero-copy memoryview slice."""
    try:
        n = _I32.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("records length", 4, len(buf) - pos) from None
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid records length {n}")
        return None, pos + 4
    raw, pos = _slice(buf, pos + 4, n, "records")
    return (raw if isinstance(raw, memoryview) else memoryview(raw)), pos


def read_compact_records(buf: Any, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, pos = _slice(buf, pos, n - 1, "compact records")
    return (raw if isinstance(raw, memoryview) else memoryview(raw)), pos


def write_bytes(out: bytearray, b: Any) -> None:
    out += _I32.pack(len(b))
    out += b


def write_nullable_bytes(out: bytearray, b: Any) -> None:
    if b is None:
        out += b"\xff\xff\xff\xff"
    else:
        out += _I32.pack(len(b))
        out += b


def write_compact_bytes(out: bytearray, b: Any) -> None:
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    out += b


def write_compact_nullable_bytes(out: bytearray, b: Any) -> None:
    if b is None:
        out.append(0)
    else:
        write_compact_bytes(out, b)


def _nbytes(b: Any) -> int:
    return b.nbytes if isinstance(b, memoryview) else len(b)


def write_records(out: bytearray, b: Any) -> None:
    if b is None:
        out += b"\xff\xff\xff\xff"
    elif isinstance(b, TransferableRecords):
        out += _I32.pack(b.size)
        _add_transferable(out, b)
    else:
        out += _I32.pack(_nbytes(b))
        out += b


def write_compact_records(out: bytearray, b: Any) -> None:
    if b is None:
        out.append(0)
    elif isinstance(b, TransferableRecords):
        write_uvarint(out, b.size + 1)
        _add_transferable(out, b)
    else:
        write_uvarint(out, _nbytes(b) + 1)
        out += b


def _add_transferable(out: bytearray, b: TransferableRecords) -> None:
    """A records field held as a file region: only a :class:`SendBuilder` knows how to place it."""
    if not isinstance(out, SendBuilder):
        raise ProtocolError("records held outside memory (a file region) can only be encoded into a SendBuilder")
    out.add_transferable(b)


# ---------------------------------------------------------------------------------------------- arrays


def read_array_length(buf: Any, pos: int) -> tuple[int, int]:
    """ARRAY count; -1 means null. Rejects counts that cannot fit in the remaining bytes."""
    try:
        n = _I32.unpack_from(buf, pos)[0]
    except struct.error:
        raise _truncated("array length", 4, len(buf) - pos) from None
    pos += 4
    if n < -1:
        raise ProtocolError(f"invalid array length {n}")
    if n > len(buf) - pos:
        raise ProtocolError(f"array length {n} exceeds the {len(buf) - pos} remaining bytes")
    return n, pos


def read_compact_array_length(buf: Any, pos: int) -> tuple[int, int]:
    """COMPACT_ARRAY count; -1 means null."""
    n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > len(buf) - pos:
        raise ProtocolError(f"array length {n} exceeds the {len(buf) - pos} remaining bytes")
    return n, pos


def read_fixed_array(buf: Any, pos: int, n: int, code: str, size: int) -> tuple[list[Any], int]:
    """``n`` fixed-width big-endian elements (``code`` is a struct code such as ``"i"``)."""
    end = pos + n * size
    if end > len(buf):
        raise _truncated("array", n * size, len(buf) - pos)
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), end


def write_fixed_array_body(out: bytearray, values: list[Any], code: str) -> None:
    out += struct.pack(f">{len(values)}{code}", *values)


def write_array_length(out: bytearray, n: int) -> None:
    out += _I32.pack(n)


def write_compact_array_length(out: bytearray, n: int) -> None:
    """``n`` elements (pass -1 for null)."""
    write_uvarint(out, n + 1)


# ---------------------------------------------------------------------------------------------- tagged fields


def read_tagged_fields(buf: Any, pos: int) -> tuple[dict[int, bytes], int]:
    """A TAGGED_FIELDS section as ``{tag: raw value bytes}``."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return {}, pos
    fields: dict[int, bytes] = {}
    last = -1
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        if tag <= last:
            raise ProtocolError(f"tagged fields out of order or repeated: tag {tag} after {last}")
        last = tag
        size, pos = read_uvarint(buf, pos)
        raw, pos = _slice(buf, pos, size, "tagged field")
        fields[tag] = bytes(raw)
    return fields, pos


def write_tagged_fields(out: bytearray, fields: dict[int, Any] | None) -> None:
    """Writes ``{tag: raw bytes}`` in increasing tag order (an empty section is one 0x00 byte)."""
    if not fields:
        out.append(0)
        return
    write_uvarint(out, len(fields))
    for tag in sorted(fields):
        raw = fields[tag]
        write_uvarint(out, tag)
        write_uvarint(out, _nbytes(raw))
        out += raw


def write_tagged_section(out: bytearray, known: list[tuple[int, Any]], unknown: dict[int, Any] | None) -> None:
    """Known tagged values (``(tag, encoded bytes)`` in tag order) merged with unknown raw ones."""
    if unknown:
        merged = dict(unknown)
        merged.update(known)
        write_tagged_fields(out, merged)
        return
    write_uvarint(out, len(known))
    for tag, raw in known:
        write_uvarint(out, tag)
        write_uvarint(out, len(raw))
        out += raw


# ---------------------------------------------------------------------------------------------- Reader / Writer


class Reader:
    """Bounds-checked cursor over a ``memoryview`` (Kafka's ``ByteBufferAccessor`` for reading).

    Every method raises ``ProtocolError`` on truncated or invalid data. Not thread-safe.
    """

    __slots__ = ("buf", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        mv = data if isinstance(data, memoryview) else memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self.buf = mv
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _take(self, fn: Any) -> Any:
        value, self.pos = fn(self.buf, self.pos)
        return value

    def int8(self) -> int:
        return self._take(read_int8)

    def int16(self) -> int:
        return self._take(read_int16)

    def uint16(self) -> int:
        return self._take(read_uint16)

    def int32(self) -> int:
        return self._take(read_int32)

    def uint32(self) -> int:
        return self._take(read_uint32)

    def int64(self) -> int:
        return self._take(read_int64)

    def float64(self) -> float:
        return self._take(read_float64)

    def boolean(self) -> bool:
        return self._take(read_bool)

    def uuid(self) -> uuid.UUID:
        return self._take(read_uuid)

    def uvarint(self) -> int:
        return self._take(read_uvarint)

    def varint(self) -> int:
        return self._take(read_varint)

    def varlong(self) -> int:
        return self._take(read_varlong)

    def string(self) -> str:
        return self._take(read_string)

    def nullable_string(self) -> str | None:
        return self._take(read_nullable_string)

    def compact_string(self) -> str:
        return self._take(read_compact_string)

    def compact_nullable_string(self) -> str | None:
        return self._take(read_compact_nullable_string)

    def bytes_(self) -> bytes:
        return self._take(read_bytes)

    def nullable_bytes(self) -> bytes | None:
        return self._take(read_nullable_bytes)

    def compact_bytes(self) -> bytes:
        return self._take(read_compact_bytes)

    def compact_nullable_bytes(self) -> bytes | None:
        return self._take(read_compact_nullable_bytes)

    def records(self) -> memoryview | None:
        return self._take(read_records)

    def compact_records(self) -> memoryview | None:
        return self._take(read_compact_records)

    def array_length(self) -> int:
        return self._take(read_array_length)

    def compact_array_length(self) -> int:
        return self._take(read_compact_array_length)

    def tagged_fields(self) -> dict[int, bytes]:
        return self._take(read_tagged_fields)

    def raw(self, n: int) -> memoryview:
        if n < 0:
            raise ProtocolError(f"negative length {n}")
        value, self.pos = _slice(self.buf, self.pos, n, "raw bytes")
        return value


class Writer:
    """Appends wire types to a ``bytearray`` (``.buf``). Not thread-safe."""

    __slots__ = ("buf",)

    def __init__(self, buf: bytearray | None = None) -> None:
        self.buf = bytearray() if buf is None else buf

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def __len__(self) -> int:
        return len(self.buf)

    def int8(self, v: int) -> Writer:
        self.buf += _I8.pack(v)
        return self

    def int16(self, v: int) -> Writer:
        self.buf += _I16.pack(v)
        return self

    def uint16(self, v: int) -> Writer:
        self.buf += _U16.pack(v)
        return self

    def int32(self, v: int) -> Writer:
        self.buf += _I32.pack(v)
        return self

    def uint32(self, v: int) -> Writer:
        self.buf += _U32.pack(v)
        return self

    def int64(self, v: int) -> Writer:
        self.buf += _I64.pack(v)
        return self

    def float64(self, v: float) -> Writer:
        self.buf += _F64.pack(v)
        return self

    def boolean(self, v: bool) -> Writer:
        self.buf.append(1 if v else 0)
        return self

    def uuid(self, v: uuid.UUID) -> Writer:
        self.buf += v.bytes
        return self

    def uvarint(self, v: int) -> Writer:
        write_uvarint(self.buf, v)
        return self

    def varint(self, v: int) -> Writer:
        write_varint(self.buf, v)
        return self

    def varlong(self, v: int) -> Writer:
        write_varlong(self.buf, v)
        return self

    def string(self, v: str) -> Writer:
        write_string(self.buf, v)
        return self

    def nullable_string(self, v: str | None) -> Writer:
        write_nullable_string(self.buf, v)
        return self

    def compact_string(self, v: str) -> Writer:
        write_compact_string(self.buf, v)
        return self

    def compact_nullable_string(self, v: str | None) -> Writer:
        write_compact_nullable_string(self.buf, v)
        return self

    def bytes_(self, v: Any) -> Writer:
        write_bytes(self.buf, v)
        return self

    def nullable_bytes(self, v: Any) -> Writer:
        write_nullable_bytes(self.buf, v)
        return self

    def compact_bytes(self, v: Any) -> Writer:
        write_compact_bytes(self.buf, v)
        return self

    def compact_nullable_bytes(self, v: Any) -> Writer:
        write_compact_nullable_bytes(self.buf, v)
        return self

    def records(self, v: Any) -> Writer:
        write_records(self.buf, v)
        return self

    def compact_records(self, v: Any) -> Writer:
        write_compact_records(self.buf, v)
        return self

    def array_length(self, n: int) -> Writer:
        write_array_length(self.buf, n)
        return self

    def compact_array_length(self, n: int) -> Writer:
        write_compact_array_length(self.buf, n)
        return self

    def tagged_fields(self, fields: dict[int, Any] | None) -> Writer:
        write_tagged_fields(self.buf, fields)
        return self

    def raw(self, b: Any) -> Writer:
        self.buf += b
        return self
