"""Control batches: building transaction markers (ABORT / COMMIT).

Layout: a v2 batch with attributes transactional (0x10) + control (0x20), baseSequence -1 and one record
whose key is ``version INT16 = 0, type INT16`` and whose value is ``version INT16 = 0, coordinatorEpoch
INT32``. Reading is in ``strom.record.batch`` (``RecordBatch.control_record_type`` / ``end_txn_marker``,
``parse_control_record_key``, ``parse_end_txn_marker_value``).

Kafka counterpart: ``MemoryRecords.withEndTransactionMarker``, ``EndTransactionMarker``,
``ControlRecordType``. Pure functions, thread-safe.
"""

from __future__ import annotations

import struct

from strom.record.batch import ControlRecordType, parse_control_record_key, parse_end_txn_marker_value
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType

__all__ = [
    "build_control_batch",
    "ControlRecordType",
    "parse_control_record_key",
    "parse_end_txn_marker_value",
]

_HH = struct.Struct(">hh")
_HI = struct.Struct(">hi")


def build_control_batch(
    control_type: ControlRecordType | int,
    coordinator_epoch: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction-marker batch (Kafka's ``MemoryRecords.withEndTransactionMarker``).

    Transactional + control attributes, no sequence, one record whose key is ``(version 0, type)`` and
    whose value is ``(version 0, coordinator_epoch)``.
    """
    builder = MemoryRecordsBuilder(
        CompressionType.NONE,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(timestamp, _HH.pack(0, int(control_type)), _HI.pack(0, coordinator_epoch))
    return builder.build()
