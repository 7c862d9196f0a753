"""Measure producer throughput and latency (Kafka's kafka-producer-perf-test.sh, ``ProducerPerformance``).

Examples:
  strom producer-perf-test --topic perf --num-records 100000 --record-size 100 --throughput -1 \\
      --producer-props bootstrap.servers=127.0.0.1:9092
  strom producer-perf-test --bootstrap-server 127.0.0.1:9092 --topic perf --num-records 50000 \\
      --record-size 1024 --throughput 10000 --producer-props acks=1 linger.ms=5 compression.type=lz4
  strom producer-perf-test --topic perf --num-records 1000 --payload-file words.txt --throughput -1 \\
      --producer.config producer.properties

Every 5 seconds a window line, and at the end Kafka's summary:
  100000 records sent, 52000.1 records/sec (4.96 MB/sec), 3.1 ms avg latency, 25.0 ms max latency.
  100000 records sent, 51975.051975 records/sec (4.96 MB/sec), 3.05 ms avg latency, 25.00 ms max latency,
  2 ms 50th, 7 ms 95th, 12 ms 99th, 20 ms 99.9th.   (one line)
On a terminal a live progress bar is drawn on stderr. --throughput -1 means no throttling.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from strom.cli.clients import check_topic, new_producer
from strom.cli.common import error_message, load_config_file, parse_key_values
from strom.cli.errors import CliError
from strom.cli.perf_stats import ProgressBar, Stats, ThroughputThrottler, print_metrics, snapshot_metrics

__all__ = ["add_arguments", "run", "random_payload", "read_payloads"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True, metavar="TOPIC", help="REQUIRED: the topic to produce to")
    p.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS",
                   help="REQUIRED: number of messages to produce")
    p.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                   help="message size in bytes (exactly one of --record-size and --payload-file)")
    p.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                   help="file of payloads, split by --payload-delimiter; each record is a random one of them")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="delimiter of --payload-file (default: \\n)")
    p.add_argument("--throughput", required=True, type=float, metavar="THROUGHPUT",
                   help="REQUIRED: maximum messages/sec (-1: no limit)")
    p.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="producer configs, e.g. bootstrap.servers=127.0.0.1:9092 acks=1 (override --producer.config)")
    p.add_argument("--producer.config", "--command-config", dest="command_config", metavar="CONFIG-FILE",
                   help="producer config properties file")
    p.add_argument("--bootstrap-server", metavar="<String: server to connect to>",
                   help="the Kafka server(s) to connect to (instead of bootstrap.servers in --producer-props)")
    p.add_argument("--print-metrics", action="store_true", help="print the producer's metrics at the end")
    p.add_argument("--transactional-id", metavar="TRANSACTIONAL-ID",
                   help="produce in transactions with this transactional.id (also: transactional.id in the props)")
    p.add_argument("--transaction-duration-ms", type=int, metavar="TRANSACTION-DURATION",
                   help="commit a transaction when it has been open this long (default 3000 with transactions)")


def random_payload(size: int, rng: random.Random | None = None) -> bytes:
    """Kafka's random payload: uppercase letters A-Z."""
    rng = rng or random.Random()
    return bytes(rng.randrange(26) + 65 for _ in range(size))


def read_payloads(path: str, delimiter: str) -> list[bytes]:
    """Kafka's ``readPayloadFile``: split by the delimiter (``\\n`` escapes understood), drop empty entries."""
    delimiter = delimiter.encode().decode("unicode_escape")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"Cannot read payload file {path}: {e.strerror or e}", 2) from None
    payloads = [p.encode() for p in text.split(delimiter) if p]
    if not payloads:
        raise CliError(f"File {path} contains no payloads", 2)
    print(f"Reading payloads from: {Path(path).resolve()}")
    print(f"Number of messages read: {len(payloads)}")
    return payloads


def _props(args: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = load_config_file(args.command_config)
    props.update(parse_key_values(args.producer_props, "--producer-props"))
    if args.bootstrap_server:
        props["bootstrap.servers"] = args.bootstrap_server
    if not props.get("bootstrap.servers"):
        raise CliError("Either --producer-props or --producer.config must be specified (with bootstrap.servers), "
                       "or --bootstrap-server", 2)
    props["key.serializer"] = "bytes"
    props["value.serializer"] = "bytes"
    props.setdefault("client.id", "perf-producer-client")
    if args.transactional_id:
        props["transactional.id"] = args.transactional_id
    return props


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    if (args.record_size is None) == (args.payload_file is None):
        raise CliError("Exactly one of --record-size or --payload-file must be specified", 2)
    if args.num_records < 0:
        raise CliError("--num-records must not be negative", 2)
    if args.record_size is not None and args.record_size < 0:
        raise CliError("--record-size must not be negative", 2)
    props = _props(args)
    args.bootstrap_server = props["bootstrap.servers"]
    check_topic(args, args.topic)
    payloads = read_payloads(args.payload_file, args.payload_delimiter) if args.payload_file else None
    fixed = random_payload(args.record_size) if args.record_size is not None else None
    rng = random.Random()
    transactional = bool(props.get("transactional.id")) or args.transaction_duration_ms is not None
    if transactional and not props.get("transactional.id"):
        props["transactional.id"] = f"performance-producer-{random.randrange(1 << 62)}"  # Kafka's default
    duration_ms = args.transaction_duration_ms if args.transaction_duration_ms is not None else 3000
    if transactional and duration_ms <= 0:
        raise CliError("--transaction-duration-ms must be positive", 2)
    producer = new_producer(props)
    if transactional:
        try:
            producer.init_transactions()
        except Exception as e:
            producer.close(0)
            raise CliError(f"init_transactions failed: {error_message(e)}") from None
    stats = Stats(args.num_records)
    progress = ProgressBar(args.num_records)
    stats.before_print = progress.clear
    throttler = ThroughputThrottler(args.throughput, stats.start)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    failures: list[BaseException] = []

    def on_error(_m: Any, e: BaseException | None) -> None:
        if e is not None and not failures:
            failures.append(e)

    sent = 0
    txn_start: float | None = None
    try:
        for i in range(args.num_records):
            if failures:
                break
            if transactional and txn_start is None:
                producer.begin_transaction()
                txn_start = time.monotonic()
            payload = fixed if payloads is None else payloads[rng.randrange(len(payloads))]
            assert payload is not None
            send_start = stats._clock()
            callback = stats.next_completion(send_start, len(payload))

            def both(m: Any, e: BaseException | None, cb: Any = callback) -> None:
                cb(m, e)
                on_error(m, e)

            producer.send(args.topic, value=payload, callback=both)
            sent = i + 1
            progress.update(sent)
            if throttler.should_throttle(i, send_start):
                throttler.throttle()
            if txn_start is not None and (time.monotonic() - txn_start) * 1000 >= duration_ms:
                producer.commit_transaction()
                txn_start = None
        if txn_start is not None and not failures:
            producer.commit_transaction()
            txn_start = None
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress.clear()
        try:
            producer.close()
        except Exception as e:  # noqa: BLE001 - one line
            failures.append(e)
    stats.print_total()
    if args.print_metrics:
        print_metrics(snapshot_metrics(producer.metrics()))  # after close: every record acknowledged
    if failures:
        print(f"Error: sending failed: {error_message(failures[0])}", file=sys.stderr)
        return 1
    return 0


