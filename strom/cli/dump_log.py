"""Print the contents of log segments and indexes (Kafka's kafka-dump-log.sh, ``DumpLogSegments``).

Examples:
  strom dump-log --files strom-data/orders-0/00000000000000000000.log
  strom dump-log --files strom-data/orders-0/00000000000000000000.log --print-data-log
  strom dump-log --files strom-data/orders-0/00000000000000000000.index,strom-data/orders-0/00000000000000000000.timeindex

Files are read directly (no broker needed) and never changed. For a .log segment, one line per batch in Kafka's
format (baseOffset, lastOffset, count, producer fields, position, CreateTime/LogAppendTime, size, magic,
compresscodec, crc, isvalid); with --deep-iteration or --print-data-log one "| offset: ..." line per record, with
its key and payload when --print-data-log. For .index and .timeindex files, one line per entry. A batch that
fails its CRC is reported as isvalid: false; a torn tail is reported, not raised.
"""

from __future__ import annotations

import argparse
import os
import struct
from typing import Any

from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "dump_log_segment", "dump_index", "dump_time_index"]

_LEN = struct.Struct(">qi")  # baseOffset INT64, batchLength INT32 (the log overhead of every batch)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", required=True, metavar="<String: file1, file2, ...>",
                   help="REQUIRED: comma-separated .log, .index or .timeindex files")
    p.add_argument("--print-data-log", action="store_true", help="print each record's key and payload")
    p.add_argument("--deep-iteration", action="store_true", help="print each record (without its data)")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="<Integer: size>",
                   help="read at most this many bytes of a .log file")


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise CliError(f"{path}: the file name must be the segment's base offset (e.g. "
                       f"00000000000000000000.log)", 2) from None


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="replace")


def dump_log_segment(path: str, data: bytes, print_data: bool, deep: bool) -> list[str]:
    """Kafka's ``dumpLog`` lines for the segment bytes ``data``."""
    from strom.record.batch import RecordBatch

    lines = [f"Log starting offset: {_base_offset(path)}"]
    pos = 0
    while pos + _LEN.size <= len(data):
        _offset, length = _LEN.unpack_from(data, pos)
        size = length + _LEN.size
        if length <= 0 or pos + size > len(data):
            lines.append(f"Found {len(data) - pos} invalid bytes at the end of {os.path.basename(path)} "
                         f"(a torn batch at position {pos})")
            return lines
        batch = RecordBatch(data, pos)
        reason = batch.invalid_reason()
        time_type = "LogAppendTime" if int(batch.timestamp_type) == 1 else "CreateTime"
        lines.append(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
            f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} producerId: "
            f"{batch.producer_id} producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: "
            f"{batch.partition_leader_epoch} isTransactional: {str(batch.is_transactional).lower()} isControl: "
            f"{str(batch.is_control).lower()} position: {pos} {time_type}: {batch.max_timestamp} size: {size} "
            f"magic: {batch.magic} compresscodec: {batch.compression_type.name.lower()} crc: {batch.crc} "
            f"isvalid: {str(reason is None).lower()}")
        if (print_data or deep) and reason is None:
            for record in batch.records():
                line = (f"| offset: {record.offset} {time_type}: {record.timestamp} keySize: "
                        f"{-1 if record.key is None else len(record.key)} valueSize: "
                        f"{-1 if record.value is None else len(record.value)}")
                if batch.is_transactional or batch.producer_id >= 0:
                    line += f" sequence: {batch.base_sequence + record.offset - batch.base_offset}"
                line += f" headerKeys: [{','.join(h[0] for h in record.headers)}]"
                if print_data:
                    line += f" key: {_text(record.key)} payload: {_text(record.value)}"
                lines.append(line)
        pos += size
    if pos < len(data):
        lines.append(f"Found {len(data) - pos} invalid bytes at the end of {os.path.basename(path)}")
    return lines


def dump_index(path: str, data: bytes) -> list[str]:
    base = _base_offset(path)
    lines = []
    for i in range(0, len(data) - len(data) % 8, 8):
        relative, position = struct.unpack_from(">ii", data, i)
        lines.append(f"offset: {base + relative} position: {position}")
    if len(data) % 8:
        lines.append(f"Found {len(data) % 8} trailing bytes that are not a whole index entry")
    return lines


def dump_time_index(path: str, data: bytes) -> list[str]:
    base = _base_offset(path)
    lines = []
    for i in range(0, len(data) - len(data) % 12, 12):
        timestamp, relative = struct.unpack_from(">qi", data, i)
        lines.append(f"timestamp: {timestamp} offset: {base + relative}")
    if len(data) % 12:
        lines.append(f"Found {len(data) % 12} trailing bytes that are not a whole time index entry")
    return lines


def run(args: argparse.Namespace) -> int:
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    if not files:
        raise CliError("--files names no file", 2)
    for path in files:
        if not path.endswith((".log", ".index", ".timeindex")):
            raise CliError(f"{path}: not a .log, .index or .timeindex file", 2)
    for path in files:
        try:
            with open(path, "rb") as f:
                data: Any = f.read(args.max_bytes if path.endswith(".log") else -1)
        except OSError as e:
            raise CliError(f"Cannot read {path}: {e.strerror or e}") from None
        print(f"Dumping {path}")
        if path.endswith(".log"):
            lines = dump_log_segment(path, data, args.print_data_log, args.deep_iteration)
        elif path.endswith(".timeindex"):
            lines = dump_time_index(path, data)
        else:
            lines = dump_index(path, data)
        for line in lines:
            print(line)
    return 0
