"""Producer-side serializers: re-exports of :mod:`strom.common.serialization` (shared with the consumer).

Kafka counterpart: ``org.apache.kafka.common.serialization.*Serializer``. Thread-safe.
"""

from __future__ import annotations

from strom.common.serialization import (
    ByteArraySerializer,
    CallableSerializer,
    DoubleSerializer,
    FloatSerializer,
    IntegerSerializer,
    JsonSerializer,
    LongSerializer,
    SerializationError,
    Serializer,
    ShortSerializer,
    StringSerializer,
    UUIDSerializer,
    VoidSerializer,
    make_serializer,
)

__all__ = [
    "Serializer",
    "SerializationError",
    "ByteArraySerializer",
    "StringSerializer",
    "IntegerSerializer",
    "LongSerializer",
    "ShortSerializer",
    "FloatSerializer",
    "DoubleSerializer",
    "UUIDSerializer",
    "JsonSerializer",
    "VoidSerializer",
    "CallableSerializer",
    "make_serializer",
]
