"""The outcome of one append to a log.

Kafka counterpart: ``LogAppendInfo`` (the fields a ProduceResponse needs). Immutable value, thread-safe.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

__all__ = ["LogAppendInfo"]


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """Offsets and timestamps assigned to an appended set of batches.

    ``log_append_time`` is the broker time written into the batches for ``LogAppendTime`` topics, else -1.
    ``offset_of_max_timestamp`` is batch-granular for CreateTime (the last offset of the first batch carrying
    the largest maxTimestamp; records are not decoded) and the first offset for LogAppendTime.
    ``flushed``: when the append reached ``flush.messages`` and the log flushes in the background (a
    :class:`~strom.storage.log_flusher.LogFlusher`), the future that completes once these records are fsynced;
    None when nothing is pending (no flush due, or it ran inline).
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_records: int
    valid_bytes: int
    num_batches: int = 1
    flushed: Future[None] | None = field(default=None, compare=False)
