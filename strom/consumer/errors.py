"""Consumer-side exceptions.

Kafka counterparts: ``CommitFailedException``, ``RetriableCommitFailedException``, ``NoOffsetForPartitionException``, ``WakeupException``,
``RebalanceInProgressException`` (client side), ``RecordDeserializationException``,
``InvalidOffsetException``, ``ConcurrentModificationException``. ``RebalanceInProgressError`` (a commit while
the group rebalances: call ``poll`` and retry) is the broker error class for ``REBALANCE_IN_PROGRESS``, as in
Kafka.
Broker error codes (``OFFSET_OUT_OF_RANGE`` ...) are the generated classes in ``strom.common.error_codes``;
the consumer raises :class:`~strom.common.error_codes.OffsetOutOfRangeError` with an
``offset_out_of_range_partitions`` attribute ({TopicPartition: offset}) like Kafka's
``OffsetOutOfRangeException``. Plain exception classes; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.common.error_codes import OffsetOutOfRangeError, RebalanceInProgressError
from strom.common.errors import IllegalStateError, InterruptError, KafkaError
from strom.common.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "CommitFailedError",
    "RetriableCommitFailedError",
    "NoOffsetForPartitionError",
    "WakeupError",
    "RebalanceInProgressError",
    "RecordDeserializationError",
    "ConcurrentModificationError",
    "CorruptRecordError",
    "LogTruncationError",
    "offset_out_of_range",
]


class RetriableCommitFailedError(KafkaError):
    """An async commit failed with a retriable error (Kafka's ``RetriableCommitFailedException``)."""

    retriable = True


class CommitFailedError(KafkaError):
    """The commit cannot complete because the group rebalanced and the partitions were handed to another
    member (Kafka's ``CommitFailedException``; not retriable)."""

    DEFAULT_MESSAGE = (
        "Commit cannot be completed since the group has already rebalanced and assigned the partitions to "
        "another member. This means that the time between subsequent calls to poll() was longer than the "
        "configured max.poll.interval.ms, which typically implies that the poll loop is spending too much "
        "time message processing. You can address this either by increasing max.poll.interval.ms or by "
        "reducing the maximum size of batches returned in poll() with max.poll.records."
    )

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.DEFAULT_MESSAGE)


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and ``auto.offset.reset=none`` (Kafka's ``NoOffsetForPartitionException``)."""

    def __init__(self, partitions: set[TopicPartition] | TopicPartition) -> None:
        self.partitions = {partitions} if isinstance(partitions, TopicPartition) else set(partitions)
        shown = ", ".join(sorted(str(tp) for tp in self.partitions))
        super().__init__(f"Undefined offset with no reset policy for partitions: [{shown}]")


class WakeupError(InterruptError):
    """``wakeup()`` interrupted a blocking consumer call (Kafka's ``WakeupException``)."""


class ConcurrentModificationError(IllegalStateError):
    """Two threads used one consumer at once (Kafka's ``ConcurrentModificationException``)."""


class CorruptRecordError(KafkaError):
    """A fetched batch failed its CRC or could not be parsed (Kafka's ``CorruptRecordException`` raised as a
    ``KafkaException`` from ``poll``). The position stays at the bad batch."""

    def __init__(self, tp: TopicPartition, offset: int, reason: str) -> None:
        self.partition = tp
        self.offset = offset
        super().__init__(f"Received exception when fetching the next record from {tp}. If needed, please seek "
                         f"past the record to continue consumption. ({reason}; offset {offset})")


class RecordDeserializationError(KafkaError):
    """A key or value could not be deserialized (Kafka's ``RecordDeserializationException``); ``partition``
    and ``offset`` name the record, and the position stays at it so the caller may ``seek`` past."""

    def __init__(self, tp: TopicPartition, offset: int, message: str, cause: BaseException | None = None) -> None:
        self.partition = tp
        self.offset = offset
        self.cause = cause
        super().__init__(message)


def offset_out_of_range(offsets: Mapping[TopicPartition, int]) -> OffsetOutOfRangeError:
    """Kafka's ``OffsetOutOfRangeException(message, offsetOutOfRangePartitions)``."""
    shown = ", ".join(f"{tp}={off}" for tp, off in sorted(offsets.items()))
    err = OffsetOutOfRangeError(f"Fetch position is out of range for partitions {{{shown}}} and no "
                                f"auto.offset.reset policy is configured")
    err.offset_out_of_range_partitions = dict(offsets)  # type: ignore[attr-defined]
    return err


class LogTruncationError(OffsetOutOfRangeError):
    """The log was truncated below the consumer's position after a leader change (KIP-320; Kafka's
    ``LogTruncationException``), found by position validation with ``auto.offset.reset=none``. The records the
    consumer read from ``divergent_offsets[tp].offset`` on no longer exist on the leader (an unclean leader
    election): ``seek`` to the divergent offset to read what the leader has there, or elsewhere.
    ``offset_out_of_range_partitions`` holds the positions that were checked."""

    def __init__(self, message: str, fetch_offsets: Mapping[TopicPartition, int],
                 divergent_offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        super().__init__(message)
        self.offset_out_of_range_partitions = dict(fetch_offsets)
        self.divergent_offsets = dict(divergent_offsets)
