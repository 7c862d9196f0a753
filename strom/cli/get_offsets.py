"""Print partition offsets (Kafka's kafka-get-offsets.sh, ``GetOffsetShell``): one ``topic:partition:offset`` line
per partition, sorted.

Examples:
  strom get-offsets --bootstrap-server 127.0.0.1:9092
  strom get-offsets --bootstrap-server 127.0.0.1:9092 --topic 'clicks.*' --time earliest
  strom get-offsets --bootstrap-server 127.0.0.1:9092 --topic-partitions 'orders:0-2,audit' --time 1700000000000

--time is latest (-1, the default), earliest (-2), max-timestamp (-3) or a timestamp in ms (the first offset
whose timestamp is at or after it). --topic is a regular expression; --topic-partitions takes Kafka's
``topic``, ``topic:1``, ``topic:0-3``, ``topic:2-`` and ``topic:-3`` forms, comma-separated (ranges are
half-open, as in Kafka). Internal topics are listed unless --exclude-internal-topics. A partition without an
answer for that time prints an empty offset, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "parse_topic_partitions"]

_TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--topic", metavar="<String: topic>", help="a regular expression of topics (default: all)")
    p.add_argument("--partitions", metavar="<String: partition ids>",
                   help="comma-separated partition ids (default: all)")
    p.add_argument("--topic-partitions", metavar="<String: topic1:1,topic2:0-3,...>",
                   help="topics and partitions in Kafka's syntax; not with --topic or --partitions")
    p.add_argument("--time", default="-1", metavar="<String: timestamp/-1(latest)/-2(earliest)/-3(max timestamp)>",
                   help="which offset: latest (default), earliest, max-timestamp or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")


def _time(value: str) -> int:
    if value in _TIMES:
        return _TIMES[value]
    try:
        t = int(value)
    except ValueError:
        raise CliError(f"Malformed time argument {value}. Please use -1 or latest / -2 or earliest / "
                       f"-3 or max-timestamp, or a specified long format timestamp", 2) from None
    if t < -3:
        raise CliError(f"Malformed time argument {value}: a timestamp cannot be negative", 2)
    return t


def parse_topic_partitions(spec: str) -> list[tuple[re.Pattern[str], Any]]:
    """Kafka's ``--topic-partitions``: comma-separated ``topic``, ``topic:N``, ``topic:A-B``, ``topic:A-`` or
    ``topic:-B`` entries (the topic a regular expression, ranges half-open) as ``[(pattern, filter)]``; the
    filter is ``None`` (all partitions) or a ``range``. Bad syntax raises :class:`CliError` (exit 2)."""
    out: list[tuple[re.Pattern[str], Any]] = []
    for item in spec.split(","):
        m = re.fullmatch(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?", item)
        if not m or not m.group(1):
            raise CliError(f"Invalid --topic-partitions entry '{item}': expected topic, topic:N, topic:A-B, "
                           f"topic:A- or topic:-B", 2)
        topic, single, low, high = m.groups()
        if single:
            partitions: Any = range(int(single), int(single) + 1)
        elif low or high:
            partitions = range(int(low) if low else 0, int(high) if high else 2**31)
        else:
            partitions = None
        out.append((_compile(topic), partitions))
    return out


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise CliError(f"Invalid topic pattern '{pattern}': {e}", 2) from None


def run(args: argparse.Namespace) -> int:
    from strom.admin import OffsetSpec
    from strom.common.structs import TopicPartition

    if args.topic_partitions and (args.topic or args.partitions):
        raise CliError("--topic-partitions cannot be used with --topic or --partitions", 2)
    timestamp = _time(args.time)
    if args.topic_partitions:
        filters = parse_topic_partitions(args.topic_partitions)
    else:
        ids: Any = None
        if args.partitions:
            try:
                ids = {int(x) for x in args.partitions.split(",")}
            except ValueError:
                raise CliError(f"Invalid --partitions '{args.partitions}': expected comma-separated ids", 2) \
                    from None
        filters = [(_compile(args.topic or ".*"), ids)]
    admin = new_admin(args)
    try:
        try:
            names = wait(admin.list_topics(list_internal=not args.exclude_internal_topics).names())
            chosen = sorted(n for n in names if any(p.fullmatch(n) for p, _ in filters))
            described = wait(admin.describe_topics(chosen).all()) if chosen else {}
            tps = []
            for name in chosen:
                for info in described[name].partitions:
                    if any(p.fullmatch(name) and (f is None or info.partition in f) for p, f in filters):
                        tps.append(TopicPartition(name, info.partition))
            if not tps:
                raise CliError("Could not match any topic-partitions with the specified filters")
            futures = admin.list_offsets({tp: OffsetSpec(timestamp) for tp in tps}).values()
        except CliError:
            raise
        except Exception as e:  # noqa: BLE001 - one line
            raise CliError(error_message(e)) from None
        for tp in sorted(tps, key=lambda t: (t.topic, t.partition)):
            try:
                offset = futures[tp].result(60).offset
                text = "" if offset is None or offset < 0 else str(offset)
            except Exception:  # noqa: BLE001 - Kafka prints an empty offset for a partition without one
                text = ""
            print(f"{tp.topic}:{tp.partition}:{text}")
    finally:
        admin.close(timeout=5)
    return 0
