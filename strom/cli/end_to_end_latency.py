"""Measure end-to-end latency: produce one record, wait until a consumer reads it back, repeat (Kafka's
``EndToEndLatency`` tool, kafka-e2e-latency.sh).

Examples:
  strom end-to-end-latency 127.0.0.1:9092 latency-test 10000 all 100
  strom end-to-end-latency 127.0.0.1:9092 latency-test 1000 1 1024 client.properties

Arguments (positional, as Kafka's): broker list, topic, number of messages, producer acks (1 or all: the send
is synchronous), message size in bytes, and optionally a properties file for both clients. A missing topic is
created with one partition. Every 1,000 messages a "<i>\\t<latency ms>" progress line is printed; at the end
Kafka's "Avg latency" and "Percentiles: 50th, 99th, 99.9th" lines (whole milliseconds, as Kafka prints them),
then the same percentiles in microseconds from an HdrHistogram.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from hdrh.histogram import HdrHistogram

from strom.cli.clients import new_consumer, new_producer
from strom.cli.common import check_reachable, error_message, load_config_file
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]

POLL_TIMEOUT_MS = 10_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("broker_list", help="the brokers, host:port[,host:port...]")
    p.add_argument("topic", help="the topic (created with one partition when missing)")
    p.add_argument("num_messages", type=int, help="how many round trips to time")
    p.add_argument("producer_acks", help="1 or all")
    p.add_argument("message_size_bytes", type=int, help="the size of each record's value")
    p.add_argument("properties_file", nargs="?", help="client configs for the producer and the consumer")


def run(args: argparse.Namespace) -> int:
    if args.producer_acks not in ("1", "all"):
        raise CliError("Latency testing requires synchronous acknowledgement. Please use 1 or all", 2)
    if args.num_messages <= 0:
        raise CliError(f"num_messages must be positive, not {args.num_messages}", 2)
    if args.message_size_bytes < 0:
        raise CliError(f"message_size_bytes must not be negative, not {args.message_size_bytes}", 2)
    props: dict[str, Any] = load_config_file(args.properties_file)
    props["bootstrap.servers"] = args.broker_list
    check_reachable(args.broker_list)
    _ensure_topic(props, args.topic)
    consumer = new_consumer({**props, "group.id": f"test-group-{int(time.time() * 1000)}",
                             "enable.auto.commit": "false", "auto.offset.reset": "latest",
                             "key.deserializer": "bytes", "value.deserializer": "bytes", "fetch.max.wait.ms": "0"})
    producer = new_producer({**props, "linger.ms": "0", "acks": args.producer_acks,
                             "key.serializer": "bytes", "value.serializer": "bytes"})
    histogram = HdrHistogram(1, 3_600_000_000, 3)  # µs, 1 µs .. 1 h, 3 significant digits
    latencies_ms: list[int] = []
    total_ns = 0
    try:
        from strom.common.structs import TopicPartition

        partitions = [TopicPartition(args.topic, p.partition) for p in producer.partitions_for(args.topic)]
        consumer.assign(partitions)
        consumer.seek_to_end(partitions)
        for tp in partitions:
            consumer.position(tp)  # resolve the end offsets before the first send
        for i in range(args.num_messages):
            message = os.urandom(args.message_size_bytes)
            begin = time.perf_counter_ns()
            producer.send(args.topic, value=message).get(30)
            records = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            elapsed = time.perf_counter_ns() - begin
            got = [r for r in records]
            if not got:
                raise CliError("poll() timed out before finding a result (timeout: 10000 ms)")
            if got[0].value != message:
                raise CliError(f"The message read {got[0].value!r:.40} did not match the message sent")
            if len(got) > 1:
                raise CliError(f"Only one result was expected during this test. We found [{len(got)}]")
            consumer.commit_sync()
            if i % 1000 == 0:
                print(f"{i}\t{elapsed / 1e6}", flush=True)
            total_ns += elapsed
            latencies_ms.append(elapsed // 1_000_000)
            histogram.record_value(max(1, min(elapsed // 1000, 3_600_000_000)))
    except CliError:
        raise
    except Exception as e:  # noqa: BLE001 - one line
        raise CliError(error_message(e)) from None
    finally:
        try:
            consumer.close(timeout=10)
        finally:
            producer.close(10)
    n = len(latencies_ms)
    latencies_ms.sort()
    print(f"Avg latency: {total_ns / n / 1e6:.4f} ms")
    print(f"Percentiles: 50th = {latencies_ms[int(n * 0.5)]}, 99th = {latencies_ms[int(n * 0.99)]}, "
          f"99.9th = {latencies_ms[int(n * 0.999)]}")
    print(f"Percentiles (µs, HdrHistogram): 50th = {histogram.get_value_at_percentile(50)}, "
          f"99th = {histogram.get_value_at_percentile(99)}, 99.9th = {histogram.get_value_at_percentile(99.9)}, "
          f"max = {histogram.get_max_value()}")
    return 0


def _ensure_topic(props: dict[str, Any], topic: str) -> None:
    from strom.admin import AdminClient, NewTopic
    from strom.admin.config import ADMIN_CONFIG_DEF
    from strom.common.error_codes import TopicAlreadyExistsError
    from strom.common.errors import ConfigError

    try:  # the properties file is for the producer and consumer: keep the keys an admin client knows
        admin = AdminClient({k: v for k, v in props.items() if ADMIN_CONFIG_DEF.canonical_name(k) is not None})
    except ConfigError as e:
        raise CliError(f"Invalid client configuration: {e}", 2) from None
    try:
        names = admin.list_topics().names().result(30)
        if topic not in names:
            print(f"Topic \"{topic}\" does not exist. Will create topic with 1 partition(s) and replication factor "
                  f"= 1", flush=True)
            try:
                admin.create_topics([NewTopic(topic, 1, 1)]).all().result(30)
            except TopicAlreadyExistsError:
                pass
    except CliError:
        raise
    except Exception as e:  # noqa: BLE001 - one line
        raise CliError(error_message(e)) from None
    finally:
        admin.close(5)
