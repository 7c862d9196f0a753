"""Measure consumer throughput (Kafka's kafka-consumer-perf-test.sh, ``ConsumerPerformance``).

Examples:
  strom consumer-perf-test --bootstrap-server 127.0.0.1:9092 --topic perf --messages 100000
  strom consumer-perf-test --bootstrap-server 127.0.0.1:9092 --topic perf --messages 50000 --group g \\
      --show-detailed-stats --reporting-interval 1000 --timeout 20000

Output (Kafka's columns):
  start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
  fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
  2024-05-01 10:00:00:000, 2024-05-01 10:00:02:500, 9.5367, 3.8147, 100000, 40000.0000, 310, 2190, 4.3547, ...
It stops after --messages records, or when no record arrives for --timeout ms (with a warning). On a terminal a
live progress bar is drawn on stderr.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import time
from datetime import datetime
from typing import Any

from strom.cli.clients import check_topic, new_consumer
from strom.cli.common import add_connection_options, client_properties, error_message, parse_key_values
from strom.cli.errors import CliError
from strom.cli.perf_stats import ProgressBar, print_metrics, snapshot_metrics

__all__ = ["add_arguments", "run", "java_date_format", "summary_line"]

MB = 1024.0 * 1024.0
HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--consumer.config", "--command-config"))
    p.add_argument("--topic", required=True, metavar="<String: topic>", help="REQUIRED: the topic to consume from")
    p.add_argument("--messages", required=True, type=int, metavar="<Long: count>",
                   help="REQUIRED: the number of messages to consume")
    p.add_argument("--group", metavar="<String: gid>", help="the group id (default: perf-consumer-NNNNN)")
    p.add_argument("--from-latest", action="store_true",
                   help="start from the latest offset when the group has no committed offset")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="<Integer: size>",
                   help="max.partition.fetch.bytes (default: 1048576)")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="<Integer: size>",
                   help="receive.buffer.bytes (default: 2097152)")
    p.add_argument("--consumer-property", action="extend", nargs="+", metavar="<String: consumer_prop>",
                   help="a consumer config key=value (repeatable)")
    p.add_argument("--timeout", type=int, default=10000, metavar="<Long: milliseconds>",
                   help="the longest wait between two returned records (default: 10000)")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="print a stats line every --reporting-interval")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="<Integer: interval_ms>",
                   help="interval of the detailed stats (default: 5000)")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="<String: date format>",
                   help="Java SimpleDateFormat of the times (default: yyyy-MM-dd HH:mm:ss:SSS)")
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.add_argument("--print-metrics", action="store_true", help="print the consumer's metrics at the end")


_MS = "\ue000"  # placeholder for milliseconds (strftime has no such directive)
_TOKENS = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"),
           ("SSS", _MS), ("a", "%p"), ("EEE", "%a"), ("Z", "%z")]


def java_date_format(pattern: str, ms: int) -> str:
    """Format epoch ``ms`` (local time) with the common tokens of a Java ``SimpleDateFormat`` pattern."""
    out = pattern.replace("%", "%%")
    for token, repl in _TOKENS:
        out = re.sub(rf"(?<![A-Za-z]){token}(?![A-Za-z])", repl, out)
    text = datetime.fromtimestamp(ms / 1000).astimezone().strftime(out)
    return text.replace(_MS, f"{ms % 1000:03d}")


def summary_line(start_ms: int, end_ms: int, total_bytes: int, total_messages: int, join_ms: int,
                 date_format: str) -> str:
    """Kafka's final line: ``%s, %s, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f``."""
    elapsed_s = max(1, end_ms - start_ms) / 1000.0
    fetch_ms = max(1, end_ms - start_ms - join_ms)
    mb = total_bytes / MB
    return (f"{java_date_format(date_format, start_ms)}, {java_date_format(date_format, end_ms)}, {mb:.4f}, "
            f"{mb / elapsed_s:.4f}, {total_messages}, {total_messages / elapsed_s:.4f}, {join_ms}, "
            f"{end_ms - start_ms - join_ms}, {mb / (fetch_ms / 1000.0):.4f}, "
            f"{total_messages / (fetch_ms / 1000.0):.4f}")


class _JoinTimer:
    """A rebalance listener measuring how long joining the group took (Kafka's ``joinTimeMs``)."""

    def __init__(self) -> None:
        self.join_start = time.time()
        self.join_ms = 0

    def on_partitions_revoked(self, partitions: Any) -> None:
        self.join_start = time.time()

    def on_partitions_assigned(self, partitions: Any) -> None:
        self.join_ms += int((time.time() - self.join_start) * 1000)

    def on_partitions_lost(self, partitions: Any) -> None:
        self.on_partitions_revoked(partitions)


def _props(args: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = client_properties(args, parse_key_values(args.consumer_property, "--consumer-property"))
    props["group.id"] = args.group or props.get("group.id") or f"perf-consumer-{random.randrange(100000)}"
    props.setdefault("max.partition.fetch.bytes", str(args.fetch_size))
    props.setdefault("receive.buffer.bytes", str(args.socket_buffer_size))
    props["auto.offset.reset"] = "latest" if args.from_latest else "earliest"
    props.setdefault("check.crcs", "false")
    props["key.deserializer"] = "bytes"
    props["value.deserializer"] = "bytes"
    return props


def _stop(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    if args.messages < 0:
        raise CliError("--messages must not be negative", 2)
    props = _props(args)
    check_topic(args, args.topic)
    consumer = new_consumer(props)
    if not args.hide_header:
        prefix = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
        print(f"{prefix}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{HEADER_TAIL}", flush=True)
    listener = _JoinTimer()
    progress = ProgressBar(args.messages, "messages")
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    messages = total_bytes = 0
    start_ms = int(time.time() * 1000)
    timed_out = False
    try:
        consumer.subscribe([args.topic], listener=listener)
        last_consumed = last_report = time.time()
        last_messages = last_bytes = 0
        while messages < args.messages:
            records = consumer.poll(timeout_ms=100)
            now = time.time()
            if records.is_empty():
                if (now - last_consumed) * 1000 > args.timeout:
                    timed_out = True
                    break
                continue
            last_consumed = now
            for record in records:
                messages += 1
                total_bytes += max(0, record.serialized_key_size) + max(0, record.serialized_value_size)
                if messages >= args.messages:
                    break
            progress.update(messages)
            if args.show_detailed_stats and (now - last_report) * 1000 >= args.reporting_interval:
                progress.clear()
                print(_detail(args, last_report, now, messages, total_bytes, last_messages, last_bytes, listener),
                      flush=True)
                last_report, last_messages, last_bytes = now, messages, total_bytes
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        progress.clear()
        end_ms = int(time.time() * 1000)
        try:
            metrics = snapshot_metrics(consumer.metrics()) if args.print_metrics else None
            consumer.close(timeout=10)
        except Exception as e:  # noqa: BLE001 - one line
            print(f"Error closing the consumer: {error_message(e)}", file=sys.stderr)
            metrics = None
    if timed_out:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.")
    if not args.show_detailed_stats:
        print(summary_line(start_ms, end_ms, total_bytes, messages, listener.join_ms, args.date_format))
    if metrics:
        print_metrics(metrics)
    return 0


def _detail(args: argparse.Namespace, last_s: float, now_s: float, messages: int, total_bytes: int,
            last_messages: int, last_bytes: int, listener: _JoinTimer) -> str:
    """Kafka's ``printConsumerProgress`` line for the last interval."""
    elapsed_ms = max(1.0, (now_s - last_s) * 1000)
    mb = total_bytes / MB
    mb_rate = (total_bytes - last_bytes) / MB * 1000.0 / elapsed_ms
    msg_rate = (messages - last_messages) * 1000.0 / elapsed_ms
    fetch_ms = max(1.0, elapsed_ms - listener.join_ms)
    return (f"{java_date_format(args.date_format, int(now_s * 1000))}, 0, {mb:.4f}, {mb_rate:.4f}, {messages}, "
            f"{msg_rate:.4f}, {listener.join_ms}, {int(fetch_ms)}, "
            f"{(total_bytes - last_bytes) / MB / (fetch_ms / 1000.0):.4f}, "
            f"{(messages - last_messages) / (fetch_ms / 1000.0):.4f}")
