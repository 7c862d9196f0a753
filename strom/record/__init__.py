"""Record layer: RecordBatch v2 read/write, legacy v0/v1 read, compression, CRC-32C, varints.

Import from here or from ``strom.record.records`` (same names). No I/O: bytes in, objects out.
"""

from strom.record.records import (
    AnyBatch,
    CompressionType,
    ControlRecordType,
    Header,
    LegacyRecordBatch,
    MemoryRecords,
    MemoryRecordsBuilder,
    Record,
    RecordBatch,
    TimestampType,
    build_control_batch,
    parse_control_record_key,
    parse_end_txn_marker_value,
    record_size,
    record_size_upper_bound,
    split_into_builders,
    split_records,
    upper_bound_size,
)

__all__ = [
    "AnyBatch",
    "CompressionType",
    "ControlRecordType",
    "Header",
    "LegacyRecordBatch",
    "MemoryRecords",
    "MemoryRecordsBuilder",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_control_batch",
    "parse_control_record_key",
    "parse_end_txn_marker_value",
    "record_size",
    "record_size_upper_bound",
    "split_into_builders",
    "split_records",
    "upper_bound_size",
]
