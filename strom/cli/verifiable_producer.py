"""Produce sequential integers and report every acknowledgement as a JSON line (Kafka's VerifiableProducer, the
producer of Kafka's system tests, kafka-verifiable-producer.sh).

Examples:
  strom verifiable-producer --bootstrap-server 127.0.0.1:9092 --topic t --max-messages 1000
  strom verifiable-producer --bootstrap-server 127.0.0.1:9092 --topic t --throughput 100 --acks all \\
      --value-prefix 7 --repeating-keys 10

Values are "0", "1", ... (or "<prefix>.0", ...); keys are null, or "0".."N-1" repeating with --repeating-keys.
Lines, one JSON object each, as Kafka's tool writes them: startup_complete; producer_send_success (key, value,
topic, partition, offset) or producer_send_error (exception, message, topic, key, value) per record;
shutdown_complete; tool_data (sent, acked, target_throughput, avg_throughput). --max-messages -1 produces until
SIGTERM / Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from strom.cli.clients import new_producer
from strom.cli.common import add_connection_options, client_properties
from strom.cli.errors import CliError
from strom.cli.perf_stats import ThroughputThrottler

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--producer.config", "--command-config"))
    p.add_argument("--broker-list", dest="broker_list", help=argparse.SUPPRESS)  # Kafka's older name
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    p.add_argument("--max-messages", type=int, default=-1, help="how many records (-1: until stopped)")
    p.add_argument("--throughput", type=int, default=-1, help="records per second at most (-1: no limit)")
    p.add_argument("--acks", default="-1", help="acks (default -1 = all)")
    p.add_argument("--message-create-time", type=int, default=-1, help="the records' timestamp (default: now)")
    p.add_argument("--value-prefix", type=int, help="values become '<prefix>.<n>'")
    p.add_argument("--repeating-keys", type=int, help="keys '0'..'N-1', repeating")


class _Events:
    """JSON lines on stdout, one writer at a time (callbacks run on the producer's I/O thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0

    def emit(self, name: str, **fields: Any) -> None:
        line = json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields})
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    if args.broker_list and not args.bootstrap_server:
        args.bootstrap_server = args.broker_list
    if args.acks not in ("-1", "0", "1", "all"):
        raise CliError(f"Invalid --acks '{args.acks}': expected -1, 0, 1 or all", 2)
    if args.repeating_keys is not None and args.repeating_keys <= 0:
        raise CliError("--repeating-keys must be positive", 2)
    props = client_properties(args)
    props.update({"acks": args.acks, "key.serializer": "str", "value.serializer": "str"})
    producer = new_producer(props)
    events = _Events()
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    events.emit("startup_complete")
    throttler = ThroughputThrottler(args.throughput, time.time() * 1000)
    start = time.time()
    sent = 0
    try:
        while (args.max_messages < 0 or sent < args.max_messages) and not stop.is_set():
            value = f"{args.value_prefix}.{sent}" if args.value_prefix is not None else str(sent)
            key = str(sent % args.repeating_keys) if args.repeating_keys else None

            def callback(metadata: Any, exc: BaseException | None, key: str | None = key, value: str = value) -> None:
                if exc is None:
                    events.acked += 1
                    events.emit("producer_send_success", key=key, value=value, topic=metadata.topic,
                                partition=metadata.partition, offset=metadata.offset)
                else:
                    events.emit("producer_send_error", exception=type(exc).__name__, message=str(exc),
                                topic=args.topic, key=key, value=value)

            timestamp = args.message_create_time if args.message_create_time >= 0 else None
            try:
                producer.send(args.topic, value=value, key=key, timestamp=timestamp, callback=callback)
            except Exception as e:  # noqa: BLE001 - reported as Kafka's tool does, then go on
                events.emit("producer_send_error", exception=type(e).__name__, message=str(e), topic=args.topic,
                            key=key, value=value)
            sent += 1
            if throttler.should_throttle(sent, time.time() * 1000):
                throttler.throttle()
    finally:
        producer.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = max(time.time() - start, 1e-9)
    events.emit("shutdown_complete")
    events.emit("tool_data", sent=sent, acked=events.acked, target_throughput=args.throughput,
                avg_throughput=sent / elapsed)
    return 0
