"""Read lines from standard input and send each as a record (Kafka's kafka-console-producer.sh,
``ConsoleProducer`` with its ``LineMessageReader``).

Examples:
  strom console-producer --bootstrap-server 127.0.0.1:9092 --topic sanguo
  printf 'k1:v1\\nk2:v2\\n' | strom console-producer --bootstrap-server 127.0.0.1:9092 --topic sanguo \\
      --property parse.key=true --property key.separator=:
  strom console-producer --bootstrap-server 127.0.0.1:9092 --topic sanguo --compression-codec lz4 \\
      --request-required-acks 1 --producer-property linger.ms=5

Reader properties (--property): parse.key (false), key.separator (tab), ignore.error (false), null.marker,
parse.headers (false), headers.delimiter (tab), headers.separator (','), headers.key.separator (':').
End of input (Ctrl-D) or Ctrl-C sends what is buffered and exits.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from strom.cli.clients import check_topic, merge_option, new_producer
from strom.cli.common import add_connection_options, client_properties, error_message, parse_key_values
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "LineReader"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--producer.config", "--command-config"))
    p.add_argument("--topic", required=True, metavar="<String: topic>", help="REQUIRED: the topic to produce to")
    p.add_argument("--property", action="extend", nargs="+", metavar="<String: prop>",
                   help="a reader property such as parse.key=true or key.separator=: (repeatable)")
    p.add_argument("--producer-property", action="extend", nargs="+", metavar="<String: producer_prop>",
                   help="a producer config key=value (repeatable)")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="[String: compression-codec]",
                   help="none, gzip, snappy, lz4 or zstd; gzip if given without a value")
    p.add_argument("--request-required-acks", metavar="<String: request required acks>",
                   help="acks of the produce requests: -1/all, 0 or 1 (default: -1)")
    p.add_argument("--sync", action="store_true", help="send each record synchronously")
    p.add_argument("--batch-size", type=int, metavar="<Integer: size>", help="batch.size (default: 16384)")
    p.add_argument("--timeout", type=int, metavar="<Integer: timeout_ms>",
                   help="linger.ms: how long records may wait for a batch (default: 1000)")
    p.add_argument("--message-send-max-retries", type=int, metavar="<Integer>", help="retries (default: 3)")
    p.add_argument("--retry-backoff-ms", type=int, metavar="<Long>", help="retry.backoff.ms (default: 100)")
    p.add_argument("--request-timeout-ms", type=int, metavar="<Integer>", help="request.timeout.ms (default: 1500)")
    p.add_argument("--max-block-ms", type=int, metavar="<Long>", help="max.block.ms (default: 60000)")
    p.add_argument("--max-memory-bytes", type=int, metavar="<Long>", help="buffer.memory (default: 33554432)")
    p.add_argument("--metadata-expiry-ms", type=int, metavar="<Long>", help="metadata.max.age.ms (default: 300000)")


def producer_properties(args: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = client_properties(args, parse_key_values(args.producer_property, "--producer-property"))
    props.setdefault("client.id", "console-producer")
    codec = args.compression_codec
    if codec is not None and codec not in CODECS:
        raise CliError(f"Invalid --compression-codec '{codec}': expected one of {', '.join(CODECS)}", 2)
    merge_option(props, "compression.type", codec, "none")
    merge_option(props, "acks", args.request_required_acks, "-1")
    merge_option(props, "linger.ms", args.timeout, 1000)
    merge_option(props, "batch.size", args.batch_size, 16384)
    merge_option(props, "retries", args.message_send_max_retries, 3)
    merge_option(props, "retry.backoff.ms", args.retry_backoff_ms, 100)
    merge_option(props, "request.timeout.ms", args.request_timeout_ms, 1500)
    merge_option(props, "max.block.ms", args.max_block_ms, 60000)
    merge_option(props, "buffer.memory", args.max_memory_bytes, None)
    merge_option(props, "metadata.max.age.ms", args.metadata_expiry_ms, None)
    props["key.serializer"] = "bytes"
    props["value.serializer"] = "bytes"
    return props


class LineReader:
    """Kafka's ``LineMessageReader``: one line → ``(key, value, headers)`` per the reader properties."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key = flag("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.ignore_error = flag("ignore.error")
        self.parse_headers = flag("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        if not self.key_separator:
            raise CliError("key.separator must not be empty", 2)
        self.line_number = 0

    def _nullable(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def parse(self, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        self.line_number += 1
        headers: list[tuple[str, bytes | None]] = []
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise CliError(f"No headers delimiter found on line number {self.line_number}: '{line}'")
                head, rest = "", line
            for item in (h for h in head.split(self.headers_separator) if h):
                k, ksep, v = item.partition(self.headers_key_separator)
                if not ksep and not self.ignore_error:
                    raise CliError(f"No header key separator found in pair '{item}' on line number "
                                   f"{self.line_number}")
                headers.append((k, self._nullable(v) if ksep else None))
            line = rest
        if not self.parse_key:
            return None, self._nullable(line), headers
        key, sep, value = line.partition(self.key_separator)
        if not sep:
            if self.ignore_error:
                return None, self._nullable(line), headers
            raise CliError(f"No key separator found on line number {self.line_number}: '{line}'")
        return self._nullable(key), self._nullable(value), headers


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    reader = LineReader(parse_key_values(args.property, "--property"))
    props = producer_properties(args)
    check_topic(args, args.topic)
    producer = new_producer(props)
    failed = threading.Event()
    reported: set[str] = set()
    lock = threading.Lock()
    topic = args.topic

    def report(key: bytes | None, size: int, exception: BaseException) -> None:
        message = (f"Error when sending message to topic {topic} with key: "
                   f"{'null' if key is None else f'{len(key)} bytes'}, value: {size} bytes with error: "
                   f"{error_message(exception)}")
        with lock:
            first = message not in reported
            reported.add(message)
        if first:
            print(message, file=sys.stderr, flush=True)
        failed.set()

    previous = signal.signal(signal.SIGTERM, _interrupt)
    interactive = sys.stdin.isatty()
    try:
        while not failed.is_set():
            if interactive:
                sys.stdout.write(">")
                sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                break
            key, value, headers = reader.parse(line[:-1] if line.endswith("\n") else line)
            size = len(value or b"")

            def on_done(_metadata: Any, exception: BaseException | None, key: bytes | None = key,
                        size: int = size) -> None:
                if exception is not None:
                    report(key, size, exception)

            future = producer.send(topic, value=value, key=key, headers=headers or None, callback=on_done)
            if args.sync:
                future.exception()  # wait; a failure is reported by the callback
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            producer.close()
        except Exception as e:  # noqa: BLE001 - one line
            print(f"Error closing the producer: {error_message(e)}", file=sys.stderr)
            failed.set()
    if interactive:
        sys.stdout.write("\n")
    return 1 if failed.is_set() else 0
