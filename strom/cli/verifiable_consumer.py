"""Consume as a group member and report what happened as JSON lines (Kafka's VerifiableConsumer, the consumer of
Kafka's system tests, kafka-verifiable-consumer.sh).

Examples:
  strom verifiable-consumer --bootstrap-server 127.0.0.1:9092 --topic t --group-id g --max-messages 1000
  strom verifiable-consumer --bootstrap-server 127.0.0.1:9092 --topic t --group-id g --enable-autocommit --verbose

Lines, one JSON object each, as Kafka's tool writes them: startup_complete; partitions_assigned and
partitions_revoked (partitions); records_consumed after each poll (count, and per partition count, minOffset,
maxOffset); record_data per record with --verbose (key, value, topic, partition, offset; debug logging goes to
stderr as for every strom command); offsets_committed after
each synchronous commit when auto-commit is off (offsets, success, error); shutdown_complete. It stops after
--max-messages records (-1: until SIGTERM / Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from strom.cli.clients import new_consumer
from strom.cli.common import add_connection_options, client_properties, error_message
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--consumer.config", "--command-config"))
    p.add_argument("--broker-list", dest="broker_list", help=argparse.SUPPRESS)  # Kafka's older name
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to consume")
    p.add_argument("--group-id", required=True, help="REQUIRED: the consumer group")
    p.add_argument("--group-instance-id", help="static membership id")
    p.add_argument("--max-messages", type=int, default=-1, help="stop after this many records (-1: never)")
    p.add_argument("--session-timeout", type=int, default=30_000, help="session.timeout.ms (default 30000)")
    p.add_argument("--enable-autocommit", action="store_true", help="auto-commit instead of a commit per poll")
    p.add_argument("--reset-policy", default="earliest", choices=("earliest", "latest", "none"),
                   help="auto.offset.reset (default earliest)")
    p.add_argument("--assignment-strategy", help="partition.assignment.strategy (a class name)")


def _emit(name: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}) + "\n")
    sys.stdout.flush()


def _partitions(tps: Any) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(tps, key=lambda t: (t.topic, t.partition))]


class _Listener:
    def on_partitions_revoked(self, partitions: Any) -> None:
        _emit("partitions_revoked", partitions=_partitions(partitions))

    def on_partitions_assigned(self, partitions: Any) -> None:
        _emit("partitions_assigned", partitions=_partitions(partitions))


def run(args: argparse.Namespace) -> int:
    from strom.common.structs import OffsetAndMetadata

    if args.broker_list and not args.bootstrap_server:
        args.bootstrap_server = args.broker_list
    props = client_properties(args)
    props.update({"group.id": args.group_id, "enable.auto.commit": str(args.enable_autocommit).lower(),
                  "auto.offset.reset": args.reset_policy, "session.timeout.ms": str(args.session_timeout),
                  "key.deserializer": "str", "value.deserializer": "str"})
    if args.group_instance_id:
        props["group.instance.id"] = args.group_instance_id
    if args.assignment_strategy:
        props["partition.assignment.strategy"] = args.assignment_strategy
    consumer = new_consumer(props)
    stopping = []
    previous = {sig: signal.signal(sig, lambda *_: (stopping.append(True), consumer.wakeup()))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    consumed = 0
    verbose = getattr(args, "verbose", False)  # strom's --verbose (debug logs on stderr) is Kafka's --verbose too
    try:
        consumer.subscribe([args.topic], listener=_Listener())
        _emit("startup_complete")
        while not stopping and (args.max_messages < 0 or consumed < args.max_messages):
            try:
                records = consumer.poll(0.1)
            except Exception as e:  # noqa: BLE001 - wakeup on a signal ends the loop; anything else is an error
                if stopping:
                    break
                raise CliError(error_message(e)) from None
            if records.is_empty():
                continue
            summary: dict[Any, list[int]] = {}
            taken = []
            for record in records:
                if 0 <= args.max_messages <= consumed:
                    break
                consumed += 1
                taken.append(record)
                entry = summary.setdefault(record.topic_partition, [0, record.offset, record.offset])
                entry[0] += 1
                entry[1] = min(entry[1], record.offset)
                entry[2] = max(entry[2], record.offset)
                if verbose:
                    _emit("record_data", key=record.key, value=record.value, topic=record.topic,
                          partition=record.partition, offset=record.offset)
            _emit("records_consumed", count=len(taken), partitions=[
                {"topic": tp.topic, "partition": tp.partition, "count": c, "minOffset": lo, "maxOffset": hi}
                for tp, (c, lo, hi) in sorted(summary.items(), key=lambda kv: (kv[0].topic, kv[0].partition))])
            if not args.enable_autocommit:
                offsets = {tp: OffsetAndMetadata(hi + 1) for tp, (_c, _lo, hi) in summary.items()}
                committed = [{"topic": tp.topic, "partition": tp.partition, "offset": om.offset}
                             for tp, om in sorted(offsets.items(), key=lambda kv: (kv[0].topic, kv[0].partition))]
                try:
                    consumer.commit_sync(offsets)
                    _emit("offsets_committed", offsets=committed, success=True)
                except Exception as e:  # noqa: BLE001 - reported, as Kafka's tool does
                    _emit("offsets_committed", offsets=committed, success=False, error=error_message(e))
    finally:
        try:
            consumer.close(timeout=10)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    _emit("shutdown_complete")
    return 0
