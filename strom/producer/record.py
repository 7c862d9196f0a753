"""What the user sends and what the producer reports back.

Kafka counterparts: ``ProducerRecord``, ``RecordMetadata``, ``common.header.internals.RecordHeaders`` /
``RecordHeader``.

Thread-safety: :class:`ProducerRecord` and :class:`RecordMetadata` are immutable; :class:`RecordHeaders` is
mutable until :meth:`RecordHeaders.set_read_only` (the producer calls it after partitioning, SPEC §18 item 16)
and is not thread-safe while mutable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from strom.common.errors import IllegalStateError
from strom.common.structs import TopicPartition

__all__ = [
    "Header",
    "RecordHeaders",
    "ProducerRecord",
    "RecordMetadata",
    "NO_TIMESTAMP",
    "UNKNOWN_PARTITION",
]

NO_TIMESTAMP = -1
"""Kafka's ``RecordBatch.NO_TIMESTAMP``."""
UNKNOWN_PARTITION = -1
"""Kafka's ``RecordMetadata.UNKNOWN_PARTITION``."""


class Header(NamedTuple):
    """One record header: a string key and a bytes (or null) value (Kafka's ``RecordHeader``)."""

    key: str
    value: bytes | None


def checked_header(key: Any, value: Any) -> Header:
    """A header from a key and a value as the producer takes them (value: bytes, str encoded UTF-8, a
    bytearray or memoryview copied, or None); TypeError otherwise."""
    if not isinstance(key, str):
        raise TypeError(f"header key must be a str, not {type(key).__name__}")
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    elif value is not None and not isinstance(value, bytes):
        raise TypeError(f"header value must be bytes or None, not {type(value).__name__}")
    return Header(key, value)


class RecordHeaders:
    """An ordered multi-map of headers (Kafka's ``RecordHeaders``); duplicated keys are allowed.

    Values may be given as ``str`` (encoded UTF-8 for convenience), ``bytes`` or ``None``.
    """

    __slots__ = ("_headers", "_read_only")

    def __init__(self, headers: Any = None) -> None:
        self._read_only = False
        self._headers: list[Header] = []
        if headers is None:
            return
        if isinstance(headers, RecordHeaders):
            self._headers = list(headers._headers)
        elif isinstance(headers, Mapping):
            self._headers = [checked_header(k, v) for k, v in headers.items()]
        else:
            self._headers = [checked_header(k, v) for k, v in headers]

    def _check_writable(self) -> None:
        if self._read_only:
            raise IllegalStateError("RecordHeaders has been closed.")

    def add(self, key: str, value: bytes | str | None) -> RecordHeaders:
        """Append a header; returns ``self``. Fails once read-only."""
        self._check_writable()
        self._headers.append(checked_header(key, value))
        return self

    def remove(self, key: str) -> RecordHeaders:
        """Remove every header with ``key``; returns ``self``. Fails once read-only."""
        self._check_writable()
        self._headers = [h for h in self._headers if h.key != key]
        return self

    def last_header(self, key: str) -> Header | None:
        for h in reversed(self._headers):
            if h.key == key:
                return h
        return None

    def headers(self, key: str) -> list[Header]:
        return [h for h in self._headers if h.key == key]

    def set_read_only(self) -> None:
        self._read_only = True

    @property
    def is_read_only(self) -> bool:
        return self._read_only

    def to_array(self) -> tuple[Header, ...]:
        """The headers as a tuple of ``(key, value)`` pairs (what the record builder takes)."""
        return tuple(self._headers)

    def __iter__(self) -> Iterator[Header]:
        return iter(list(self._headers))

    def __len__(self) -> int:
        return len(self._headers)

    def __bool__(self) -> bool:
        return bool(self._headers)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordHeaders):
            return self._headers == other._headers
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._headers))

    def __repr__(self) -> str:
        return f"RecordHeaders(headers={self._headers!r}, isReadOnly={self._read_only})"


@dataclass(frozen=True, slots=True, eq=True)
class ProducerRecord:
    """A key/value pair to send to a topic, optionally to a given partition and with a timestamp.

    Kafka's ``ProducerRecord`` (arguments reordered Python-style: ``topic, value`` first). Validation as in Java:
    the topic must be a non-empty string, ``partition`` and ``timestamp`` non-negative or ``None`` (raising
    :class:`ValueError`, Java's ``IllegalArgumentException``). ``headers`` accepts a :class:`RecordHeaders`,
    a mapping or an iterable of ``(key, value)`` pairs and is always stored as :class:`RecordHeaders`.
    """

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp: int | None = None
    headers: RecordHeaders = field(default_factory=RecordHeaders, compare=True)

    def __post_init__(self) -> None:
        if self.topic is None:
            raise ValueError("Topic cannot be null.")
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"Invalid topic: {self.topic!r}. Topic should be a non-empty string.")
        if self.timestamp is not None and (
            not isinstance(self.timestamp, int) or isinstance(self.timestamp, bool) or self.timestamp < 0
        ):
            raise ValueError(
                f"Invalid timestamp: {self.timestamp}. Timestamp should always be non-negative or null."
            )
        if self.partition is not None and (
            not isinstance(self.partition, int) or isinstance(self.partition, bool) or self.partition < 0
        ):
            raise ValueError(
                f"Invalid partition: {self.partition}. Partition number should always be non-negative or null."
            )
        if not isinstance(self.headers, RecordHeaders):
            object.__setattr__(self, "headers", RecordHeaders(self.headers))

    def __repr__(self) -> str:
        return (
            f"ProducerRecord(topic={self.topic}, partition={self.partition}, headers={self.headers!r}, "
            f"key={self.key!r}, value={self.value!r}, timestamp={self.timestamp})"
        )


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was written (Kafka's ``RecordMetadata``).

    ``offset`` is -1 when unknown (acks=0 or an error); ``timestamp`` is the log-append time when the topic
    uses it, else the record's create time (-1 if none); sizes are -1 for a null key/value.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def has_offset(self) -> bool:
        return self.offset != -1

    def has_timestamp(self) -> bool:
        return self.timestamp != NO_TIMESTAMP

    @classmethod
    def unknown(cls, tp: TopicPartition) -> RecordMetadata:
        """The placeholder Kafka hands to interceptors when a send failed: -1 everywhere but the partition."""
        return cls(tp.topic, tp.partition, -1, NO_TIMESTAMP, -1, -1)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.offset}"
