"""Print the records of a topic to standard output (Kafka's kafka-console-consumer.sh, ``ConsoleConsumer``).

Examples:
  strom console-consumer --bootstrap-server 127.0.0.1:9092 --topic sanguo --from-beginning
  strom console-consumer --bootstrap-server 127.0.0.1:9092 --topic sanguo --group g1 --max-messages 10
  strom console-consumer --bootstrap-server 127.0.0.1:9092 --topic sanguo --partition 0 --offset 42
  strom console-consumer --bootstrap-server 127.0.0.1:9092 --topic sanguo --from-beginning \\
      --property print.key=true --property print.timestamp=true --property print.partition=true \\
      --property print.offset=true --timeout-ms 5000
  strom console-consumer --bootstrap-server 127.0.0.1:9092 --include 'logs-.*' --from-beginning

Without --group a throw-away group console-consumer-NNNNN is used (no commits). Ctrl-C stops cleanly; the
count is printed on stderr as Kafka prints it: "Processed a total of N messages".
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import time
from typing import Any

from strom.cli.clients import check_topic, new_consumer
from strom.cli.common import (
    add_connection_options,
    client_properties,
    error_message,
    parse_key_values,
    silence_stdout,
)
from strom.cli.errors import CliError
from strom.cli.formatter import DefaultMessageFormatter

__all__ = ["add_arguments", "run", "consumer_properties"]

POLL_MS = 200


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--consumer.config", "--command-config"))
    p.add_argument("--topic", metavar="<String: topic>", help="the topic to consume from")
    p.add_argument("--include", "--whitelist", dest="include", metavar="<String: Java regex (String)>",
                   help="a regular expression of the topics to consume (instead of --topic)")
    p.add_argument("--group", metavar="<String: consumer group id>", help="the consumer group id of the consumer")
    p.add_argument("--from-beginning", action="store_true",
                   help="start from the earliest message when the consumer has no committed offset")
    p.add_argument("--partition", type=int, metavar="<Integer: partition>",
                   help="consume only this partition (from the end unless --offset or --from-beginning)")
    p.add_argument("--offset", metavar="<String: consume offset>",
                   help="with --partition: 'earliest', 'latest' (default) or an offset")
    p.add_argument("--max-messages", type=int, metavar="<Integer: num_messages>",
                   help="exit after consuming this many messages")
    p.add_argument("--timeout-ms", type=int, metavar="<Integer: timeout_ms>",
                   help="exit when no message arrives for this many milliseconds")
    p.add_argument("--property", action="extend", nargs="+", metavar="<String: prop>",
                   help="formatter properties: print.key=true, print.timestamp=true, print.partition=true, "
                        "print.offset=true, print.headers=true, print.value=false, key.separator=..., ... "
                        "(repeat the flag or list several after it)")
    p.add_argument("--consumer-property", action="extend", nargs="+", metavar="<String: consumer_prop>",
                   help="a consumer config key=value (repeatable)")
    p.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                   help="read_committed hides aborted transactional records (default read_uncommitted)")
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="skip a message that cannot be processed instead of stopping")


def _check_args(args: argparse.Namespace) -> None:
    if (args.topic is None) == (args.include is None):
        raise CliError("Exactly one of include/topic is required.", 2)
    if args.partition is not None and args.topic is None:
        raise CliError("The topic is required when partition is specified.", 2)
    if args.partition is not None and args.group is not None:
        raise CliError("Options group and partition cannot be specified together.", 2)
    if args.offset is not None and args.partition is None:
        raise CliError("The partition is required when offset is specified.", 2)
    if args.offset is not None and args.from_beginning:
        raise CliError("Options from-beginning and offset cannot be specified together.", 2)
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            if int(args.offset) < 0:
                raise ValueError
        except ValueError:
            raise CliError(f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', "
                           "'latest', or a non-negative long.", 2) from None
    if args.max_messages is not None and args.max_messages < 0:
        raise CliError("--max-messages must not be negative", 2)


def consumer_properties(args: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = client_properties(args, parse_key_values(args.consumer_property, "--consumer-property"))
    if "auto.offset.reset" in props and args.from_beginning:
        raise CliError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset="
                       f"{props['auto.offset.reset']}'", 2)
    props.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    if args.group is not None:
        if props.get("group.id", args.group) != args.group:
            raise CliError(f"The group ids provided in different places (directly using '--group': "
                           f"{args.group}, inside consumer config: {props['group.id']}) do not match.", 2)
        props["group.id"] = args.group
    elif args.partition is not None:
        props.pop("group.id", None)  # assigned partitions: no group
    elif "group.id" not in props:
        # A throw-away group: do not fill the coordinator with offsets nobody will use again (Kafka does this).
        props["group.id"] = f"console-consumer-{random.randrange(100000)}"
        props.setdefault("enable.auto.commit", "false")
    if args.isolation_level:
        props["isolation.level"] = args.isolation_level
    if args.max_messages and "max.poll.records" not in props:
        props["max.poll.records"] = str(min(500, args.max_messages))
    props["key.deserializer"] = "bytes"
    props["value.deserializer"] = "bytes"
    return props


def _start(consumer: Any, args: argparse.Namespace) -> None:
    from strom.common.structs import TopicPartition

    if args.partition is None:
        consumer.subscribe(re.compile(args.include) if args.include else [args.topic])
        return
    tp = TopicPartition(args.topic, args.partition)
    consumer.assign([tp])
    offset = args.offset or ("earliest" if args.from_beginning else "latest")
    if offset == "earliest":
        consumer.seek_to_beginning([tp])
    elif offset == "latest":
        consumer.seek_to_end([tp])
    else:
        consumer.seek(tp, int(offset))


class _Stop:
    def __init__(self, consumer: Any) -> None:
        self.requested = False
        self.consumer = consumer

    def __call__(self, _signum: int, _frame: Any) -> None:
        self.requested = True
        self.consumer.wakeup()


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    formatter = DefaultMessageFormatter(parse_key_values(args.property, "--property"))
    props = consumer_properties(args)
    if args.include:
        try:
            re.compile(args.include)
        except re.error as e:
            raise CliError(f"Invalid --include pattern '{args.include}': {e}", 2) from None
    else:
        check_topic(args, args.topic, args.partition)
    consumer = new_consumer(props)
    stop = _Stop(consumer)
    handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    count = 0
    code = 0
    try:
        count, code = _consume(consumer, args, formatter, stop)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        try:
            consumer.close(timeout=10)
        except Exception as e:  # noqa: BLE001 - one line
            print(f"Error closing the consumer: {error_message(e)}", file=sys.stderr)
        print(f"Processed a total of {count} messages", file=sys.stderr, flush=True)
    return code


def _consume(consumer: Any, args: argparse.Namespace, formatter: DefaultMessageFormatter, stop: _Stop,
             ) -> tuple[int, int]:
    from strom.consumer.errors import WakeupError

    out = sys.stdout.buffer
    limit = args.max_messages
    count = 0
    last_record = time.monotonic()
    try:
        _start(consumer, args)
        while not stop.requested and (limit is None or count < limit):
            records = consumer.poll(timeout_ms=POLL_MS)
            if records.is_empty():
                if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
                continue
            last_record = time.monotonic()
            rewind: dict[Any, int] = {}
            for record in records:
                if limit is not None and count >= limit:
                    tp = record.topic_partition
                    rewind.setdefault(tp, record.offset)  # unprinted: do not count them as consumed
                    continue
                try:
                    formatter.write_to(record, out)
                except (TypeError, ValueError) as e:
                    if not args.skip_message_on_error:
                        raise CliError(f"Error processing message: {e}") from None
                    continue
                count += 1
            out.flush()
            for tp, offset in rewind.items():
                consumer.seek(tp, offset)
    except WakeupError:
        pass
    except CliError:
        raise
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        silence_stdout()
        return count, 0
    except Exception as e:
        if getattr(args, "verbose", False):
            raise
        print(f"Error processing message, terminating consumer process: {error_message(e)}", file=sys.stderr)
        return count, 1
    return count, 0
