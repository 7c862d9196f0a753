"""Re-splitting records into smaller batches (the producer's answer to MESSAGE_TOO_LARGE).

Every output batch is an ordinary v2 batch (see ``strom.record.builder``) whose offset deltas restart at 0;
records keep their order, timestamps, keys, values and headers. Sizes follow ``MemoryRecordsBuilder``'s
``write_limit`` logic (estimated for compressed batches), and a batch always takes at least one record.

Kafka counterpart: the re-batching loop in ``ProducerBatch.split``. Pure functions, thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from strom.record.batch import Header, Record
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType

__all__ = ["split_into_builders", "split_records"]


def split_into_builders(
    records: Iterable[Record | tuple[int, bytes | None, bytes | None, Sequence[Header]]],
    max_batch_bytes: int,
    compression_type: CompressionType | int = CompressionType.NONE,
    **builder_kwargs: object,
) -> list[MemoryRecordsBuilder]:
    """Re-pack records (in order) into open builders of at most ``max_batch_bytes`` each (estimated).

    Items are ``Record``s (offset ignored, timestamp/key/value/headers kept) or ``(timestamp, key, value,
    headers)`` tuples. Every builder gets at least one record, so one record larger than the limit gets
    a builder of its own (Kafka's ``ProducerBatch.split``). Builders are returned unclosed so the caller
    can still ``set_producer_state`` (sequence numbers are assigned when a batch is drained).
    ``builder_kwargs`` go to every ``MemoryRecordsBuilder`` (``write_limit`` is ``max_batch_bytes``).
    """
    builders: list[MemoryRecordsBuilder] = []
    current: MemoryRecordsBuilder | None = None
    for rec in records:
        if isinstance(rec, Record):
            ts, key, value, headers = rec.timestamp, rec.key, rec.value, rec.headers
        else:
            ts, key, value, headers = rec
        if current is None or not current.has_room_for(ts, key, value, headers):
            current = MemoryRecordsBuilder(compression_type, write_limit=max_batch_bytes, **builder_kwargs)  # type: ignore[arg-type]
            builders.append(current)
        current.append(ts, key, value, headers)
    return builders


def split_records(
    records: Iterable[Record | tuple[int, bytes | None, bytes | None, Sequence[Header]]],
    max_batch_bytes: int,
    compression_type: CompressionType | int = CompressionType.NONE,
    **builder_kwargs: object,
) -> list[bytes]:
    """Like :func:`split_into_builders` but returns the built batches (records in order, offset deltas
    restarting at 0 in each; ``RecordBatch(b).records_count`` tells how many records each holds)."""
    return [
        b.build() for b in split_into_builders(records, max_batch_bytes, compression_type, **builder_kwargs)
    ]
