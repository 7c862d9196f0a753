"""Serializers/deserializers: Java-identical bytes, None handling, type errors, construction forms."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strom.common.serialization import (
    ByteArraySerializer,
    CallableSerializer,
    DoubleDeserializer,
    DoubleSerializer,
    FloatSerializer,
    IntegerDeserializer,
    IntegerSerializer,
    JsonDeserializer,
    JsonSerializer,
    LongDeserializer,
    LongSerializer,
    SerializationError,
    Serializer,
    ShortSerializer,
    StringDeserializer,
    StringSerializer,
    UUIDDeserializer,
    UUIDSerializer,
    VoidSerializer,
    make_deserializer,
    make_serializer,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("serializer, data, expected", [
    (IntegerSerializer(), 1, b"\x00\x00\x00\x01"),
    (IntegerSerializer(), -1, b"\xff\xff\xff\xff"),
    (IntegerSerializer(), 2**31 - 1, b"\x7f\xff\xff\xff"),
    (LongSerializer(), 258, b"\x00\x00\x00\x00\x00\x00\x01\x02"),
    (LongSerializer(), -2, b"\xff" * 7 + b"\xfe"),
    (ShortSerializer(), 513, b"\x02\x01"),
    (FloatSerializer(), 1.0, b"\x3f\x80\x00\x00"),
    (DoubleSerializer(), -2.0, b"\xc0\x00\x00\x00\x00\x00\x00\x00"),
    (StringSerializer(), "héllo", "héllo".encode()),
    (ByteArraySerializer(), bytearray(b"ab"), b"ab"),
    (UUIDSerializer(), uuid.UUID(int=1), b"00000000-0000-0000-0000-000000000001"),
    (JsonSerializer(), {"a": [1, "é"]}, '{"a":[1,"é"]}'.encode()),
])
def test_java_compatible_bytes(serializer: Serializer, data: Any, expected: bytes) -> None:
    """SPEC §2.7 [ext]: serializers write Java's bytes (IntegerSerializer 4-byte big-endian, UTF-8 strings...)."""
    assert serializer.serialize("t", data) == expected


@pytest.mark.parametrize("serializer", [IntegerSerializer(), LongSerializer(), StringSerializer(),
                                        ByteArraySerializer(), JsonSerializer(), UUIDSerializer(), VoidSerializer()])
def test_none_is_null(serializer: Serializer) -> None:
    """SPEC §2.7 [ext]: null → null."""
    assert serializer.serialize("t", None) is None


@pytest.mark.parametrize("serializer, data", [
    (IntegerSerializer(), "1"), (IntegerSerializer(), True), (IntegerSerializer(), 1.5), (StringSerializer(), b"x"),
    (ByteArraySerializer(), "x"), (UUIDSerializer(), "x"), (VoidSerializer(), 1), (JsonSerializer(), object()),
])
def test_wrong_type_is_type_error(serializer: Serializer, data: Any) -> None:
    """§18 item 14 (serializer side): a type mismatch raises TypeError, Java's ClassCastException, which the
    producer reports as SerializationException naming the configured serializer."""
    with pytest.raises(TypeError):
        serializer.serialize("t", data)


def test_out_of_range_is_serialization_error() -> None:
    """SPEC §2.7: a value that does not fit the Java type is a SerializationError."""
    with pytest.raises(SerializationError, match="does not fit in a Java int"):
        IntegerSerializer().serialize("t", 2**31)


def test_round_trips() -> None:
    """SPEC §2.7: deserializers invert serializers (consumer side)."""
    pairs = [(IntegerSerializer(), IntegerDeserializer(), -7), (LongSerializer(), LongDeserializer(), 2**40),
             (StringSerializer(), StringDeserializer(), "ünï"), (DoubleSerializer(), DoubleDeserializer(), 0.1),
             (JsonSerializer(), JsonDeserializer(), [1, {"x": None}]),
             (UUIDSerializer(), UUIDDeserializer(), uuid.uuid4())]
    for ser, de, value in pairs:
        assert de.deserialize("t", ser.serialize("t", value)) == value
    with pytest.raises(SerializationError, match="is not 4"):
        IntegerDeserializer().deserialize("t", b"\x00")


def test_string_encoding_configurable() -> None:
    """SPEC §2.1 step 5: configure(configs, is_key) — key/value encodings as Kafka's StringSerializer."""
    s = make_serializer(StringSerializer, True, {"key.serializer.encoding": "utf-16-be"})
    assert s.serialize("t", "a") == b"\x00a"
    v = make_serializer(StringSerializer, False, {"key.serializer.encoding": "utf-16-be"})
    assert v.serialize("t", "a") == b"a"
    d = make_deserializer("string", False, {"deserializer.encoding": "latin-1"})
    assert d.deserialize("t", b"\xe9") == "é"


def test_make_serializer_forms() -> None:
    """SPEC §2.1 step 5 / §2.7: serializer from class, path, Java name, instance or callable."""
    assert isinstance(make_serializer("int", True), IntegerSerializer)
    assert isinstance(make_serializer("org.apache.kafka.common.serialization.LongSerializer", True), LongSerializer)
    assert isinstance(make_serializer("strom.common.serialization.JsonSerializer", False), JsonSerializer)
    instance = StringSerializer()
    assert make_serializer(instance, False) is instance
    wrapped = make_serializer(lambda v: v.upper().encode(), False)
    assert isinstance(wrapped, CallableSerializer) and wrapped.serialize("t", "ab") == b"AB"
    assert wrapped.serialize("t", None) is None
    with pytest.raises(SerializationError, match="expected bytes"):
        make_serializer(lambda v: 5, False).serialize("t", "x")
    with pytest.raises(TypeError):
        make_serializer(42, False)
    with pytest.raises(ValueError):
        make_serializer(None, False)
