"""Base classes of the generated message classes (``strom/protocol/messages/``) and their field schema.

Kafka counterpart: ``org.apache.kafka.common.protocol.Message`` / ``ApiMessage``.

Each generated class carries its per-version codecs as class attributes ``_ENC`` / ``_DEC``
(``{version: function}``); the functions are straight-line code produced by ``tools/codegen``:

* ``_ENC[v](obj, out: bytearray) -> None`` appends the body;
* ``_DEC[v](buf: memoryview, pos: int) -> (obj, new_pos)``.

Instances are plain mutable objects: not thread-safe; hand them between threads, do not share them.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar, NamedTuple

from strom.common.errors import ProtocolError

__all__ = ["UNSET", "FieldInfo", "ProtocolStruct", "ProtocolMessage", "versions_contain"]

_I16 = struct.Struct(">h")

# Upper bound used for open-ended version ranges ("3+").
MAX_VERSION = 0x7FFF


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Default of mutable keyword arguments (lists, structs, dicts): "use the schema default"."""


class FieldInfo(NamedTuple):
    """One field of a generated class, as declared in the JSON schema.

    Version ranges are ``(lo, hi)`` tuples (``hi == 0x7FFF`` for "N+") or ``None`` for "none".
    ``flexible_versions`` is ``None`` when the field follows its message, else a range or ``()``
    for an explicit "none" (only ``RequestHeader.ClientId``).
    """

    name: str  # Python attribute name
    json_name: str
    type: str  # JSON type string: "int32", "string", "[]int32", "[]TopicData", "EpochEndOffset", ...
    versions: tuple[int, int] | None
    nullable_versions: tuple[int, int] | None
    tagged_versions: tuple[int, int] | None
    tag: int | None
    default: Any  # immutable default value; None for null / arrays / structs (see ``default_factory``)
    struct: type | None  # element / field struct class for struct-typed fields
    flexible_versions: tuple[int, int] | tuple[()] | None = None


def versions_contain(rng: tuple[int, int] | tuple[()] | None, version: int) -> bool:
    return bool(rng) and rng[0] <= version <= rng[1]  # type: ignore[index]


class ProtocolStruct:
    """A structure of a message (also the base of top-level messages): ``__repr__`` and field-wise ``__eq__``."""

    __slots__ = ()

    NAME: ClassVar[str] = ""
    FIELDS: ClassVar[tuple[FieldInfo, ...]] = ()
    FLEXIBLE_VERSIONS_MIN: ClassVar[int | None] = None
    _ENC: ClassVar[dict[int, Any]] = {}
    _DEC: ClassVar[dict[int, Any]] = {}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self.__slots__:
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = []
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "unknown_tagged_fields" and not value:
                continue
            if isinstance(value, memoryview):
                value = f"<{value.nbytes} bytes>"
                parts.append(f"{name}={value}")
            else:
                parts.append(f"{name}={value!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """Field values as a dict (nested structs converted recursively), for logging and tests."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, ProtocolStruct):
                value = value.to_dict()
            elif isinstance(value, list):
                value = [v.to_dict() if isinstance(v, ProtocolStruct) else v for v in value]
            out[name] = value
        return out

    # -------------------------------------------------------------------------------- codecs

    def encode(self, version: int) -> bytes:
        """The body (no header, no size prefix) in ``version``."""
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_into(self, out: Any, version: int) -> None:
        """Appends the body to ``out`` (a ``bytearray`` or a ``primitives.Writer``)."""
        fn = self._ENC.get(version)
        if fn is None:
            raise _unsupported(type(self), version)
        buf = out if isinstance(out, bytearray) else out.buf
        try:
            fn(self, buf)
        except ProtocolError:
            raise
        except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as e:
            raise ProtocolError(f"cannot encode {type(self).__qualname__} v{version}: {e}") from e

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Any:
        """Decodes a body; raises ``ProtocolError`` on truncated or invalid data. Trailing bytes are ignored."""
        fn = cls._DEC.get(version)
        if fn is None:
            raise _unsupported(cls, version)
        buf = data if isinstance(data, memoryview) else memoryview(data)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        try:
            obj, _ = fn(buf, 0)
        except ProtocolError as e:
            raise ProtocolError(f"cannot decode {cls.__qualname__} v{version}: {e}") from None
        except (struct.error, IndexError, ValueError, OverflowError, MemoryError) as e:
            raise ProtocolError(f"cannot decode {cls.__qualname__} v{version}: {e}") from None
        return obj

    @classmethod
    def decode_from(cls, reader: Any, version: int) -> Any:
        """Decodes at ``reader.pos`` of a ``primitives.Reader`` and advances it."""
        fn = cls._DEC.get(version)
        if fn is None:
            raise _unsupported(cls, version)
        try:
            obj, reader.pos = fn(reader.buf, reader.pos)
        except ProtocolError as e:
            raise ProtocolError(f"cannot decode {cls.__qualname__} v{version}: {e}") from None
        except (struct.error, IndexError, ValueError, OverflowError, MemoryError) as e:
            raise ProtocolError(f"cannot decode {cls.__qualname__} v{version}: {e}") from None
        return obj


class ProtocolMessage(ProtocolStruct):
    """A top-level message (request, response, header or stand-alone data type)."""

    __slots__ = ()

    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    LATEST_VERSION_UNSTABLE: ClassVar[bool] = False

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        fmin = cls.FLEXIBLE_VERSIONS_MIN
        return fmin is not None and version >= fmin

    def encode_versioned(self, version: int) -> bytes:
        """INT16 ``version`` + body: how ``records/`` data types are stored (``__consumer_offsets`` keys and
        values, ``__transaction_state``, consumer-protocol subscription/assignment bytes)."""
        out = bytearray(_I16.pack(version))
        self.encode_into(out, version)
        return bytes(out)

    @classmethod
    def decode_versioned(cls, data: bytes | bytearray | memoryview) -> tuple[int, Any]:
        """Inverse of ``encode_versioned`` -> ``(version, obj)``. A version above the highest known one is
        decoded as the highest (Kafka's consumer protocol does the same; newer fields are appended)."""
        if len(data) < 2:
            raise ProtocolError(f"cannot decode {cls.__qualname__}: missing INT16 version")
        version = _I16.unpack_from(data, 0)[0]
        lo, hi = cls.VALID_VERSIONS
        if version < lo:
            raise _unsupported(cls, version)
        use = min(version, hi)
        view = data if isinstance(data, memoryview) else memoryview(data)
        return version, cls.decode(view[2:], use)


def _unsupported(cls: type, version: int) -> ProtocolError:
    valid = getattr(cls, "VALID_VERSIONS", None)
    return ProtocolError(f"{cls.__qualname__} has no version {version} (valid versions: {valid})")
