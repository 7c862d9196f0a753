"""Transaction coordinator state: the states, one transactional id's metadata, its ``__transaction_state`` records.

Kafka counterpart: ``TransactionState``, ``TransactionMetadata``, ``TransactionLog`` (record serde: key
``version INT16 = 0`` + ``TransactionLogKey``, value ``version INT16 = 0`` + ``TransactionLogValue``; a null value
is a tombstone for an expired id) and ``TransactionConfig``. Pure data, no I/O.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

from strom.common.errors import ProtocolError
from strom.common.structs import TopicPartition
from strom.protocol.messages.transaction_log import TransactionLogKey, TransactionLogValue

__all__ = ["TransactionState", "TransactionMetadata", "TransactionConfig", "TRANSACTION_STATE_TOPIC_NAME", "MAX_EPOCH",
           "NO_PRODUCER_EPOCH",
           "txn_key", "txn_value", "read_txn_key", "read_txn_value"]

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
_VERSION = struct.Struct(">h")
MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch that would pass it takes a new producer id
NO_PRODUCER_EPOCH = -1  # RecordBatch.NO_PRODUCER_EPOCH: no epoch yet, or none remembered


class TransactionState(enum.IntEnum):
    """Kafka's states, with the byte each is written as."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1

    def copy(self, **changes: Any) -> TransactionMetadata:
        out = TransactionMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.txn_timeout_ms,
                                  self.state, set(self.partitions), self.txn_start_ms, self.txn_last_update_ms,
                                  self.last_producer_id, self.last_producer_epoch)
        for k, v in changes.items():
            setattr(out, k, v)
        return out

    def apply(self, other: TransactionMetadata) -> None:
        for name in ("producer_id", "producer_epoch", "txn_timeout_ms", "state", "partitions", "txn_start_ms",
                     "txn_last_update_ms", "last_producer_id", "last_producer_epoch"):
            setattr(self, name, getattr(other, name))


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104_857_600
    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    transactional_id_expiration_ms: int = 604_800_000

    @classmethod
    def from_broker_config(cls, config: Any) -> TransactionConfig:
        d = cls()

        def get(key: str, default: int) -> int:
            try:
                value = config[key]
            except KeyError:
                return default
            return default if value is None else int(value)

        return cls(
            num_partitions=get("transaction.state.log.num.partitions", d.num_partitions),
            replication_factor=get("transaction.state.log.replication.factor", d.replication_factor),
            min_isr=get("transaction.state.log.min.isr", d.min_isr),
            segment_bytes=get("transaction.state.log.segment.bytes", d.segment_bytes),
            max_timeout_ms=get("transaction.max.timeout.ms", d.max_timeout_ms),
            abort_timed_out_interval_ms=get("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                            d.abort_timed_out_interval_ms),
            remove_expired_interval_ms=get("transaction.remove.expired.transaction.cleanup.interval.ms",
                                           d.remove_expired_interval_ms),
            transactional_id_expiration_ms=get("transactional.id.expiration.ms", d.transactional_id_expiration_ms),
        )


def txn_key(transactional_id: str) -> bytes:
    return _VERSION.pack(0) + TransactionLogKey(transactional_id=transactional_id).encode(0)


def txn_value(m: TransactionMetadata) -> bytes:
    topics: dict[str, list[int]] = {}
    for tp in sorted(m.partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    value = TransactionLogValue(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch, transaction_timeout_ms=m.txn_timeout_ms,
        transaction_status=int(m.state),
        transaction_partitions=[TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                for t, ps in topics.items()],
        transaction_last_update_timestamp_ms=m.txn_last_update_ms,
        transaction_start_timestamp_ms=m.txn_start_ms)
    return _VERSION.pack(0) + value.encode(0)


def read_txn_key(data: bytes | memoryview) -> str | None:
    """The transactional id of a record key; None for key versions this broker does not know."""
    view = memoryview(data)
    if len(view) < 2:
        raise ProtocolError("transaction log key shorter than its version prefix")
    if _VERSION.unpack_from(view, 0)[0] != 0:
        return None
    return str(TransactionLogKey.decode(view[2:], 0).transactional_id)


def read_txn_value(transactional_id: str, data: bytes | memoryview) -> TransactionMetadata:
    view = memoryview(data)
    if len(view) < 2:
        raise ProtocolError("transaction log value shorter than its version prefix")
    version = _VERSION.unpack_from(view, 0)[0]
    v = TransactionLogValue.decode(view[2:], min(version, TransactionLogValue.VALID_VERSIONS[1]))
    try:
        state = TransactionState(v.transaction_status)
    except ValueError:
        raise ProtocolError(f"unknown transaction state {v.transaction_status}") from None
    parts = {TopicPartition(p.topic, i) for p in (v.transaction_partitions or []) for i in p.partition_ids}
    return TransactionMetadata(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state,
                               parts, v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)
