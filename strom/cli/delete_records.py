"""Delete records before an offset (Kafka's kafka-delete-records.sh, ``DeleteRecordsCommand``).

Examples:
  strom delete-records --bootstrap-server 127.0.0.1:9092 --offset-json-file delete.json

The JSON file is Kafka's:
  {"partitions": [{"topic": "orders", "partition": 0, "offset": 100}], "version": 1}
(offset -1 means the high watermark: delete everything). Each partition's log start offset moves to the given
offset; the result per partition is printed as Kafka prints it ("partition: orders-0\\tlow_watermark: 100" or
"partition: orders-0\\terror: ..."), and the command exits 1 when any partition failed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "parse_offset_json"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--offset-json-file", required=True, metavar="<String: Offset json file path>",
                   help='REQUIRED: {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}')


def parse_offset_json(text: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from Kafka's offset JSON; a clear :class:`CliError` (exit 2) otherwise."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CliError(f"The offset JSON is not valid JSON: {e}", 2) from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError('The offset JSON must have a non-empty "partitions" list', 2)
    out: dict[tuple[str, int], int] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise CliError(f"Invalid partition entry {entry!r}: expected an object", 2)
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic or type(partition) is not int or type(offset) is not int:
            raise CliError(f"Invalid partition entry {json.dumps(entry)}: topic (string), partition and offset "
                           f"(integers) are required", 2)
        if (topic, partition) in out:
            raise CliError(f"Offset json file contains duplicate topic partitions: {topic}-{partition}", 2)
        if offset < -1:
            raise CliError(f"Invalid offset {offset} for {topic}-{partition}: use -1 or an offset >= 0", 2)
        out[(topic, partition)] = offset
    return out


def run(args: argparse.Namespace) -> int:
    from strom.common.structs import TopicPartition

    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"Cannot read {args.offset_json_file}: {e.strerror or e}", 2) from None
    wanted = {TopicPartition(t, p): o for (t, p), o in parse_offset_json(text).items()}
    admin = new_admin(args)
    failed = False
    try:
        print("Executing records delete operation")
        try:
            futures: Any = admin.delete_records(wanted).values()
        except Exception as e:  # noqa: BLE001 - one line
            raise CliError(error_message(e)) from None
        print("Records delete operation completed:")
        for tp in sorted(wanted, key=lambda t: (t.topic, t.partition)):
            try:
                low = futures[tp].result(60).low_watermark
                print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {low}")
            except Exception as e:  # noqa: BLE001 - reported per partition, as Kafka does
                failed = True
                print(f"partition: {tp.topic}-{tp.partition}\terror: {error_message(e)}")
    finally:
        admin.close(timeout=5)
    return 1 if failed else 0
