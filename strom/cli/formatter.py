"""How the console consumer prints a record.

Kafka counterpart: ``org.apache.kafka.tools.consumer.DefaultMessageFormatter`` (``kafka.tools.DefaultMessageFormatter``
before 3.7). Properties (``--property``): ``print.timestamp``, ``print.partition``, ``print.offset``,
``print.headers``, ``print.key`` (all false), ``print.value`` (true), ``key.separator`` (tab),
``line.separator`` (newline), ``headers.separator`` (``,``), ``null.literal`` (``null``). Column order and
labels are Kafka's: ``CreateTime:1700000000000<sep>Partition:0<sep>Offset:5<sep>h1:v1<sep>key<sep>value``.

Not thread-safe (one formatter per consumer loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, BinaryIO

__all__ = ["DefaultMessageFormatter", "TIMESTAMP_TYPES"]

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
_KNOWN = {"print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value",
          "key.separator", "line.separator", "headers.separator", "null.literal", "key.deserializer",
          "value.deserializer", "headers.deserializer", "print.leader.epoch"}


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    value = props.get(name)
    return default if value is None else value.strip().lower() == "true"


class DefaultMessageFormatter:
    """Kafka's ``DefaultMessageFormatter``: writes one record as bytes."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        props = dict(props or {})
        unknown = sorted(set(props) - _KNOWN)
        if unknown:
            from strom.cli.errors import CliError

            raise CliError(f"Unknown formatter property '{unknown[0]}' (known: print.key, print.value, "
                           "print.timestamp, print.partition, print.offset, print.headers, key.separator, "
                           "line.separator, headers.separator, null.literal)", 2)
        self.print_timestamp = _flag(props, "print.timestamp", False)
        self.print_partition = _flag(props, "print.partition", False)
        self.print_offset = _flag(props, "print.offset", False)
        self.print_headers = _flag(props, "print.headers", False)
        self.print_key = _flag(props, "print.key", False)
        self.print_value = _flag(props, "print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def _data(self, value: Any) -> bytes:
        if value is None:
            return self.null_literal
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        return str(value).encode()

    def format(self, record: Any) -> bytes:
        """The bytes printed for ``record`` (a ``ConsumerRecord``), line separator included when the value is
        printed (as Kafka does)."""
        out: list[bytes] = []
        columns = []
        if self.print_timestamp:
            name = TIMESTAMP_TYPES.get(record.timestamp_type)
            columns.append(f"{name}:{record.timestamp}".encode() if name is not None else b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{record.partition}".encode())
        if self.print_offset:
            columns.append(f"Offset:{record.offset}".encode())
        if self.print_headers:
            headers = record.headers or ()
            columns.append(self.headers_separator.join(k.encode() + b":" + self._data(v) for k, v in headers)
                           if headers else b"NO_HEADERS")
        if self.print_key:
            columns.append(self._data(record.key))
        if self.print_value:
            columns.append(self._data(record.value))
        out.append(self.key_separator.join(columns))
        if self.print_value:
            out.append(self.line_separator)
        elif columns:
            out.append(self.line_separator)
        return b"".join(out)

    def write_to(self, record: Any, output: BinaryIO) -> None:
        output.write(self.format(record))
