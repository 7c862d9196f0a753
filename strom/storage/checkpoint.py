"""Per-log-dir checkpoint files mapping partitions to offsets, in Kafka's text format.

Kafka counterpart: ``OffsetCheckpointFile`` (over ``CheckpointFile``). Format::

    0                      <- version
    2                      <- number of entries
    my-topic 0 1234        <- topic partition offset
    other.topic 3 0

Writes are atomic (temp file + fsync + rename + fsync of the directory). Reading a missing file gives an empty
map; anything malformed raises :class:`CorruptCheckpointError` naming the file and line.
Thread-safe: one lock per instance serialises writes and reads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from strom.common.error_codes import KafkaStorageError
from strom.common.structs import TopicPartition
from strom.storage.fs import atomic_write

__all__ = ["OffsetCheckpointFile", "CorruptCheckpointError", "CHECKPOINT_VERSION"]

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file exists but cannot be parsed."""


class OffsetCheckpointFile:
    """``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and friends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        for tp, offset in sorted(offsets.items()):
            if not tp.topic or any(c.isspace() for c in tp.topic):
                raise ValueError(f"topic name {tp.topic!r} cannot be checkpointed")
            lines.append(f"{tp.topic} {tp.partition} {offset}")
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            atomic_write(self.path, data)

    def read(self) -> dict[TopicPartition, int]:
        with self._lock:
            try:
                with open(self.path, encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                return {}
            except UnicodeDecodeError as e:
                raise CorruptCheckpointError(f"checkpoint file {self.path} is not UTF-8 text: {e}") from None
        return self._parse(text)

    def _parse(self, text: str) -> dict[TopicPartition, int]:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()

        def fail(line_no: int, why: str) -> CorruptCheckpointError:
            line = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
            return CorruptCheckpointError(
                f"malformed checkpoint file {self.path}, line {line_no} {line!r}: {why}"
            )

        if len(lines) < 2:
            raise fail(len(lines) + 1, "missing version or entry count")
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise fail(1, f"unsupported version (expected {CHECKPOINT_VERSION})")
        try:
            count = int(lines[1].strip())
        except ValueError:
            raise fail(2, "entry count is not an integer") from None
        if count < 0 or len(lines) - 2 != count:
            raise fail(2, f"expected {count} entries, found {len(lines) - 2}")
        out: dict[TopicPartition, int] = {}
        for n, line in enumerate(lines[2:], start=3):
            parts = line.split()
            if len(parts) != 3:
                raise fail(n, "expected 'topic partition offset'")
            try:
                tp = TopicPartition(parts[0], int(parts[1]))
                out[tp] = int(parts[2])
            except ValueError:
                raise fail(n, "partition and offset must be integers") from None
        return out

    def delete(self) -> None:
        with self._lock:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
