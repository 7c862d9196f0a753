"""Serializers and deserializers shared by the producer and the consumer.

Kafka counterpart: ``org.apache.kafka.common.serialization`` (``Serializer``, ``Deserializer``,
``StringSerializer`` ...). The binary formats are Java's: ``IntegerSerializer`` writes 4 bytes big-endian
(two's complement), ``LongSerializer`` 8, ``ShortSerializer`` 2, ``FloatSerializer``/``DoubleSerializer`` IEEE-754
big-endian, ``StringSerializer`` UTF-8 (encoding configurable with ``key.serializer.encoding`` /
``value.serializer.encoding`` / ``serializer.encoding``), ``UUIDSerializer`` the UUID's string form. ``None``
always maps to ``None`` (a null key/value on the wire).

A serializer given the wrong Python type raises :class:`TypeError` (Java's ``ClassCastException``, which the
producer turns into a ``SerializationError`` naming the configured class); other encoding failures raise
:class:`SerializationError`.

:func:`make_serializer` / :func:`make_deserializer` accept a class, an instance, a dotted class path (Java class
names of the Kafka serializers are understood), a short alias (``"string"``, ``"int"`` ...) or a plain callable
``f(data) -> bytes`` (kafka-python style).

Thread-safety: the built-in (de)serializers are stateless after ``configure`` and thread-safe.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from strom.common.errors import KafkaError

__all__ = [
    "SerializationError",
    "Serializer",
    "Deserializer",
    "ByteArraySerializer",
    "ByteArrayDeserializer",
    "StringSerializer",
    "StringDeserializer",
    "IntegerSerializer",
    "IntegerDeserializer",
    "LongSerializer",
    "LongDeserializer",
    "ShortSerializer",
    "ShortDeserializer",
    "FloatSerializer",
    "FloatDeserializer",
    "DoubleSerializer",
    "DoubleDeserializer",
    "UUIDSerializer",
    "UUIDDeserializer",
    "JsonSerializer",
    "JsonDeserializer",
    "VoidSerializer",
    "VoidDeserializer",
    "CallableSerializer",
    "CallableDeserializer",
    "make_serializer",
    "make_deserializer",
]

Headers = Any  # a header collection; serializers here ignore it


class SerializationError(KafkaError):
    """Serializing or deserializing failed (Kafka's ``SerializationException``; not retriable)."""


@runtime_checkable
class Serializer(Protocol):
    """Turns a key or value into bytes (Kafka's ``Serializer``).

    Optional methods, called when present: ``configure(configs: Mapping[str, Any], is_key: bool)`` once after
    construction, ``close()`` when the client closes.
    """

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        """Bytes for ``data`` (``None`` → ``None``)."""


@runtime_checkable
class Deserializer(Protocol):
    """Turns bytes back into a key or value (Kafka's ``Deserializer``)."""

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> Any:
        """The object for ``data`` (``None`` → ``None``)."""


class _Base:
    __slots__ = ()

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        """Nothing to configure."""

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


def _type_error(data: Any, serializer: object) -> TypeError:
    return TypeError(f"{type(serializer).__name__} cannot serialize a value of type {type(data).__name__}")


class ByteArraySerializer(_Base):
    """``bytes``/``bytearray``/``memoryview`` passed through (Java's ``ByteArraySerializer``)."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None or type(data) is bytes:
            return data
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        raise _type_error(data, self)


class ByteArrayDeserializer(_Base):
    __slots__ = ()

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> bytes | None:
        return None if data is None else bytes(data)


def _encoding(configs: Mapping[str, Any], is_key: bool) -> str | None:
    name = "key.serializer.encoding" if is_key else "value.serializer.encoding"
    value = configs.get(name, configs.get("serializer.encoding"))
    return str(value) if value is not None else None


def _decoding(configs: Mapping[str, Any], is_key: bool) -> str | None:
    name = "key.deserializer.encoding" if is_key else "value.deserializer.encoding"
    value = configs.get(name, configs.get("deserializer.encoding"))
    return str(value) if value is not None else None


class StringSerializer(_Base):
    """``str`` → UTF-8 (or the configured encoding) (Java's ``StringSerializer``)."""

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        self.encoding = _encoding(configs, is_key) or self.encoding

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None:
            return None
        if not isinstance(data, str):
            raise _type_error(data, self)
        try:
            return data.encode(self.encoding)
        except (UnicodeError, LookupError) as e:
            raise SerializationError(f"Error when serializing string to byte[] due to unsupported encoding "
                                     f"{self.encoding}") from e


class StringDeserializer(_Base):
    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def configure(self, configs: Mapping[str, Any], is_key: bool) -> None:
        self.encoding = _decoding(configs, is_key) or self.encoding

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> str | None:
        if data is None:
            return None
        try:
            return bytes(data).decode(self.encoding)
        except (UnicodeError, LookupError) as e:
            raise SerializationError(f"Error when deserializing byte[] to string due to unsupported encoding "
                                     f"{self.encoding}") from e


class _StructSerializer(_Base):
    __slots__ = ()
    _struct: struct.Struct
    _types: tuple[type, ...] = (int,)
    _java_name = ""

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None:
            return None
        if isinstance(data, bool) or not isinstance(data, self._types):
            raise _type_error(data, self)
        try:
            return self._struct.pack(data)
        except (struct.error, OverflowError) as e:
            raise SerializationError(f"{data!r} does not fit in a Java {self._java_name}") from e


class _StructDeserializer(_Base):
    __slots__ = ()
    _struct: struct.Struct
    _java_name = ""

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> Any:
        if data is None:
            return None
        if len(data) != self._struct.size:
            raise SerializationError(f"Size of data received by {type(self).__name__} is not {self._struct.size}")
        return self._struct.unpack(data)[0]


class IntegerSerializer(_StructSerializer):
    """``int`` → 4 bytes big-endian two's complement (Java's ``IntegerSerializer``)."""

    __slots__ = ()
    _struct = struct.Struct(">i")
    _java_name = "int"


class IntegerDeserializer(_StructDeserializer):
    __slots__ = ()
    _struct = struct.Struct(">i")


class LongSerializer(_StructSerializer):
    """``int`` → 8 bytes big-endian (Java's ``LongSerializer``)."""

    __slots__ = ()
    _struct = struct.Struct(">q")
    _java_name = "long"


class LongDeserializer(_StructDeserializer):
    __slots__ = ()
    _struct = struct.Struct(">q")


class ShortSerializer(_StructSerializer):
    """``int`` → 2 bytes big-endian (Java's ``ShortSerializer``)."""

    __slots__ = ()
    _struct = struct.Struct(">h")
    _java_name = "short"


class ShortDeserializer(_StructDeserializer):
    __slots__ = ()
    _struct = struct.Struct(">h")


class FloatSerializer(_StructSerializer):
    """``float`` → 4-byte IEEE-754 big-endian (Java's ``FloatSerializer``)."""

    __slots__ = ()
    _struct = struct.Struct(">f")
    _types = (int, float)
    _java_name = "float"


class FloatDeserializer(_StructDeserializer):
    __slots__ = ()
    _struct = struct.Struct(">f")


class DoubleSerializer(_StructSerializer):
    """``float`` → 8-byte IEEE-754 big-endian (Java's ``DoubleSerializer``)."""

    __slots__ = ()
    _struct = struct.Struct(">d")
    _types = (int, float)
    _java_name = "double"


class DoubleDeserializer(_StructDeserializer):
    __slots__ = ()
    _struct = struct.Struct(">d")


class UUIDSerializer(_Base):
    """``uuid.UUID`` → its 36-character string in UTF-8 (Java's ``UUIDSerializer``)."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None:
            return None
        if not isinstance(data, uuid.UUID):
            raise _type_error(data, self)
        return str(data).encode("utf-8")


class UUIDDeserializer(_Base):
    __slots__ = ()

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> uuid.UUID | None:
        if data is None:
            return None
        try:
            return uuid.UUID(bytes(data).decode("utf-8"))
        except ValueError as e:
            raise SerializationError("Error parsing data into UUID") from e


class JsonSerializer(_Base):
    """Any JSON-encodable object → compact UTF-8 JSON."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None:
            return None
        try:
            return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise TypeError(f"JsonSerializer cannot serialize a value of type {type(data).__name__}: {e}") from e


class JsonDeserializer(_Base):
    __slots__ = ()

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> Any:
        if data is None:
            return None
        try:
            return json.loads(bytes(data).decode("utf-8"))
        except ValueError as e:
            raise SerializationError(f"Error deserializing JSON: {e}") from e


class VoidSerializer(_Base):
    """Only ``None`` is accepted (Java's ``VoidSerializer``)."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> None:
        if data is not None:
            raise _type_error(data, self)
        return None


class VoidDeserializer(_Base):
    __slots__ = ()

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> None:
        if data is not None:
            raise SerializationError("Data should be null for a VoidDeserializer.")
        return None


class CallableSerializer(_Base):
    """Adapts ``f(data) -> bytes`` (or ``f(topic, data)`` when ``with_topic``) to :class:`Serializer`."""

    __slots__ = ("fn", "with_topic")

    def __init__(self, fn: Callable[..., bytes | None], with_topic: bool = False) -> None:
        self.fn = fn
        self.with_topic = with_topic

    def serialize(self, topic: str, data: Any, headers: Headers = None) -> bytes | None:
        if data is None:
            return None
        out = self.fn(topic, data) if self.with_topic else self.fn(data)
        if out is not None and not isinstance(out, bytes):
            if isinstance(out, (bytearray, memoryview)):
                return bytes(out)
            raise SerializationError(f"serializer {self.fn!r} returned {type(out).__name__}, expected bytes")
        return out

    def __repr__(self) -> str:
        return f"CallableSerializer({self.fn!r})"


class CallableDeserializer(_Base):
    """Adapts ``f(data_bytes) -> object`` to :class:`Deserializer`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[bytes], Any]) -> None:
        self.fn = fn

    def deserialize(self, topic: str, data: bytes | None, headers: Headers = None) -> Any:
        return None if data is None else self.fn(data)


_SERIALIZER_ALIASES: dict[str, type] = {
    "bytes": ByteArraySerializer, "bytearray": ByteArraySerializer, "str": StringSerializer,
    "string": StringSerializer, "int": IntegerSerializer, "integer": IntegerSerializer, "long": LongSerializer,
    "short": ShortSerializer, "float": FloatSerializer, "double": DoubleSerializer, "json": JsonSerializer,
    "uuid": UUIDSerializer, "void": VoidSerializer,
}
_DESERIALIZER_ALIASES: dict[str, type] = {
    "bytes": ByteArrayDeserializer, "bytearray": ByteArrayDeserializer, "str": StringDeserializer,
    "string": StringDeserializer, "int": IntegerDeserializer, "integer": IntegerDeserializer,
    "long": LongDeserializer, "short": ShortDeserializer, "float": FloatDeserializer, "double": DoubleDeserializer,
    "json": JsonDeserializer, "uuid": UUIDDeserializer, "void": VoidDeserializer,
}


def _make(spec: Any, is_key: bool, configs: Mapping[str, Any] | None, method: str,
          aliases: Mapping[str, type], wrap: Callable[[Any], Any]) -> Any:
    from strom.config.config_def import resolve_class

    if spec is None:
        raise ValueError("a (de)serializer is required")
    if isinstance(spec, str):
        spec = aliases.get(spec.strip().lower()) or resolve_class(spec.strip())
    if isinstance(spec, type):
        instance = spec()
        configure = getattr(instance, "configure", None)
        if callable(configure):
            configure(dict(configs or {}), is_key)
        if not callable(getattr(instance, method, None)):
            raise TypeError(f"{spec.__name__} has no {method}() method")
        return instance
    if callable(getattr(spec, method, None)):
        return spec
    if callable(spec):
        return wrap(spec)
    raise TypeError(f"cannot use {spec!r} as a {'de' if method == 'deserialize' else ''}serializer")


def make_serializer(spec: Any, is_key: bool, configs: Mapping[str, Any] | None = None) -> Serializer:
    """Build a :class:`Serializer` from a class (instantiated, then ``configure(configs, is_key)``), a dotted
    path or alias, an instance with ``serialize`` (used as is) or a plain callable."""
    return _make(spec, is_key, configs, "serialize", _SERIALIZER_ALIASES, CallableSerializer)


def make_deserializer(spec: Any, is_key: bool, configs: Mapping[str, Any] | None = None) -> Deserializer:
    """Like :func:`make_serializer` for deserializers."""
    return _make(spec, is_key, configs, "deserialize", _DESERIALIZER_ALIASES, CallableDeserializer)

