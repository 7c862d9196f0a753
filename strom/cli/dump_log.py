"""Print the contents of log segments and indexes (Kafka's kafka-dump-log.sh, ``DumpLogSegments``).

Examples:
  strom dump-log --files strom-data/orders-0/00000000000000000000.log
  strom dump-log --files strom-data/orders-0/00000000000000000000.log --print-data-log
  strom dump-log --files strom-data/orders-0/00000000000000000000.index,strom-data/orders-0/00000000000000000000.timeindex

  strom dump-log --files strom-data/__consumer_offsets-0/00000000000000000000.log --offsets-decoder
  strom dump-log --files strom-data/__transaction_state-0/00000000000000000000.log --transaction-log-decoder

Files are read directly (no broker needed) and never changed. For a .log segment, one line per batch in Kafka's
format (baseOffset, lastOffset, count, producer fields, position, CreateTime/LogAppendTime, size, magic,
compresscodec, crc, isvalid); with --deep-iteration or --print-data-log one "| offset: ..." line per record, with
its key and payload when --print-data-log (a record without a key prints no key, one without a value no payload, as
Kafka's tool). A transaction marker prints "endTxnMarker: COMMIT coordinatorEpoch: N" instead. --offsets-decoder
prints the records of __consumer_offsets as Kafka 3.x does (offset_commit::group=...,partition=... offset=...;
group_metadata::group=... with the group's protocol, generation and each member's assignment), and
--transaction-log-decoder those of __transaction_state (transaction_metadata::transactionalId=...
producerId:...,producerEpoch:...,state=...,partitions=[...],...); a tombstone prints <DELETE>, a record the
decoder cannot read "key: Error at offset N, skipping. <why>" (as Kafka 4's tool). Both imply --print-data-log. For .index and .timeindex files, one line per entry. A batch that fails its CRC is reported as
isvalid: false; a torn tail is reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
from collections.abc import Callable
from typing import Any

from strom.cli.errors import CliError
from strom.common.structs import TopicPartition

__all__ = ["add_arguments", "run", "dump_log_segment", "dump_index", "dump_time_index", "parse_plain",
           "parse_offsets", "parse_transaction_log"]

_LEN = struct.Struct(">qi")  # baseOffset INT64, batchLength INT32 (the log overhead of every batch)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", required=True, metavar="<String: file1, file2, ...>",
                   help="REQUIRED: comma-separated .log, .index or .timeindex files")
    p.add_argument("--print-data-log", action="store_true", help="print each record's key and payload")
    p.add_argument("--deep-iteration", action="store_true", help="print each record (without its data)")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="<Integer: size>",
                   help="read at most this many bytes of a .log file")
    decoders = p.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="decode the records as those of the __consumer_offsets topic")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="decode the records as those of the __transaction_state topic")


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise CliError(f"{path}: the file name must be the segment's base offset (e.g. "
                       f"00000000000000000000.log)", 2) from None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


Parser = Callable[[bytes | None, bytes | None], tuple[str | None, str | None]]
"""A record's key and value as printed (``None``: the field is left out)."""


def parse_plain(key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """Kafka's default (``StringDecoder``): UTF-8 text; no key or no value, no field."""
    return (None if key is None else _text(key)), (None if value is None else _text(value))


def _hex(data: bytes | None) -> str:
    return data.hex().upper().lstrip("0") if data else ""  # (Kafka prints the bytes as one big number)


def _required_key(key: bytes | None, decoder: str) -> bytes:
    if key is None:
        raise ValueError(f"Failed to decode message using {decoder} decoder (message had a missing key)")
    return key


def _unknown_key(key: bytes) -> str:
    """A coordinator record whose key version this tool does not know (Kafka's ``UnknownKey``)."""
    return f"unknown::version={int.from_bytes(key[:2], 'big', signed=True)}"


def parse_offsets(key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """A ``__consumer_offsets`` record as Kafka 3.x's ``GroupMetadataManager.formatRecordKeyAndValue``."""
    from strom.consumer.internals.consumer_protocol import deserialize_assignment
    from strom.server.coordinator.records import OffsetKey, read_group_value, read_key, read_offset_value

    parsed = read_key(_required_key(key, "offset topic"))
    if parsed is None:
        return _unknown_key(key), None
    if isinstance(parsed, OffsetKey):
        key_text = f"offset_commit::group={parsed.group},partition={TopicPartition(parsed.topic, parsed.partition)}"
        if value is None:
            return key_text, "<DELETE>"
        offset = read_offset_value(value)
        return key_text, (f"offset={offset.offset}" if not offset.metadata
                          else f"offset={offset.offset},metadata={offset.metadata}")
    key_text = f"group_metadata::group={parsed.group}"
    if value is None:
        return key_text, "<DELETE>"
    group = read_group_value(value)
    protocol_type = group.protocol_type or ""
    members = []
    for member in group.members:
        if protocol_type == "consumer":
            assignment = deserialize_assignment(member.assignment)
            partitions = "[" + ", ".join(map(str, assignment.partitions)) + "]"
            user_data = _hex(assignment.user_data)
            members.append(f"{member.member_id}={partitions}" + (f":{user_data}" if user_data else ""))
        else:
            members.append(f"{member.member_id}={_hex(member.assignment)}")
    return key_text, json.dumps({"protocolType": protocol_type, "protocol": group.protocol,
                                 "generationId": group.generation,
                                 "assignment": "{" + ",".join(members) + "}"}, separators=(",", ":"))


def parse_transaction_log(key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """A ``__transaction_state`` record as Kafka 3.x's ``TransactionLog.formatRecordKeyAndValue``."""
    from strom.server.coordinator.transaction_metadata import read_txn_key, read_txn_value

    transactional_id = read_txn_key(_required_key(key, "transaction log"))
    if transactional_id is None:
        return _unknown_key(key), None
    key_text = f"transaction_metadata::transactionalId={transactional_id}"
    if value is None:
        return key_text, "<DELETE>"
    m = read_txn_value(transactional_id, value)
    partitions = ",".join(map(str, sorted(m.partitions)))
    return key_text, (f"producerId:{m.producer_id},producerEpoch:{m.producer_epoch},state={m.state.display},"
                      f"partitions=[{partitions}],txnLastUpdateTimestamp={m.txn_last_update_ms},"
                      f"txnTimeoutMs={m.txn_timeout_ms}")


def _control(key: bytes | None, value: bytes | None) -> str:
    """Kafka's line for a control record: an end-transaction marker, or its type."""
    kind = int.from_bytes(key[2:4], "big", signed=True) if key is not None and len(key) >= 4 else -1
    if kind in (0, 1) and value is not None and len(value) >= 6:
        epoch = int.from_bytes(value[2:6], "big", signed=True)
        return f" endTxnMarker: {'COMMIT' if kind == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
    return f" controlType: UNKNOWN({kind})"


def dump_log_segment(path: str, data: bytes, print_data: bool, deep: bool,
                     parser: Parser = parse_plain) -> list[str]:
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
                if batch.is_control:
                    line += _control(record.key, record.value)
                elif print_data:
                    try:
                        key, payload = parser(record.key, record.value)
                    except Exception as e:  # (a record the decoder cannot read: said, and the dump goes on)
                        key, payload = f"Error at offset {record.offset}, skipping. {e}", None
                    if key is not None:
                        line += f" key: {key}"
                    if payload is not None:
                        line += f" payload: {payload}"
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
            parser = (parse_offsets if args.offsets_decoder else
                      parse_transaction_log if args.transaction_log_decoder else parse_plain)
            lines = dump_log_segment(path, data, args.print_data_log or parser is not parse_plain,
                                     args.deep_iteration, parser)
        elif path.endswith(".timeindex"):
            lines = dump_time_index(path, data)
        else:
            lines = dump_index(path, data)
        for line in lines:
            print(line)
    return 0
