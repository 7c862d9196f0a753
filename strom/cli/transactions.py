"""List, describe and abort transactions (Kafka's kafka-transactions.sh, ``TransactionsCommand``).

Examples:
  strom transactions --bootstrap-server 127.0.0.1:9092 list
  strom transactions --bootstrap-server 127.0.0.1:9092 describe --transactional-id my-tx
  strom transactions --bootstrap-server 127.0.0.1:9092 describe-producers --topic t --partition 0
  strom transactions --bootstrap-server 127.0.0.1:9092 find-hanging --topic t [--max-transaction-timeout 15]
  strom transactions --bootstrap-server 127.0.0.1:9092 abort --topic t --partition 0 --start-offset 42
  strom transactions --bootstrap-server 127.0.0.1:9092 abort --topic t --partition 0 --producer-id 7 \\
      --producer-epoch 0 --coordinator-epoch 0

The command may also be given as an option (``--list``, ``--describe``, ``--describe-producers``,
``--find-hanging``, ``--abort``). Output is Kafka's tab-separated tables. A *hanging* transaction is one open on
a partition (DescribeProducers) that its coordinator does not list as open, or that has been open longer than
``--max-transaction-timeout`` minutes (default 15, Kafka's ``transaction.max.timeout.ms``); ``abort`` ends one
with an ABORT marker written to the partition.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError
from strom.common.structs import TopicPartition

__all__ = ["add_arguments", "run"]

COMMANDS = ("list", "describe", "describe-producers", "find-hanging", "abort")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("txn_command", nargs="?", choices=COMMANDS, metavar="{" + ",".join(COMMANDS) + "}",
                   help="what to do")
    for c in COMMANDS:
        p.add_argument(f"--{c}", dest=f"opt_{c.replace('-', '_')}", action="store_true", help=f"same as '{c}'")
    p.add_argument("--transactional-id", metavar="<String>", help="describe: the transactional id")
    p.add_argument("--topic", metavar="<String>", help="describe-producers, find-hanging, abort: the topic")
    p.add_argument("--partition", type=int, metavar="<Integer>", help="the partition")
    p.add_argument("--broker-id", type=int, metavar="<Integer>", help="describe-producers: ask this broker")
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="<Integer: minutes>",
                   help="find-hanging: older open transactions count as hanging (default 15)")
    p.add_argument("--start-offset", type=int, metavar="<Long>",
                   help="abort: the first offset of the hanging transaction (finds its producer)")
    p.add_argument("--producer-id", type=int, metavar="<Long>", help="abort: the producer id")
    p.add_argument("--producer-epoch", type=int, metavar="<Short>", help="abort: the producer epoch")
    p.add_argument("--coordinator-epoch", type=int, default=0, metavar="<Integer>", help="abort: coordinator epoch")
    p.add_argument("--timeout", type=int, default=30000, metavar="<Long: ms>", help="timeout (default 30000)")


def _command(args: argparse.Namespace) -> str:
    chosen = ([args.txn_command] if args.txn_command else []) + [c for c in COMMANDS
                                                         if getattr(args, f"opt_{c.replace('-', '_')}")]
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise CliError(f"Command must include exactly one of: {', '.join(COMMANDS)}", 2)
    return chosen[0]


def _table(header: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for r in [header, *rows]:
        print("\t".join(str(v).ljust(w) for v, w in zip(r, widths, strict=False)).rstrip())


def run(args: argparse.Namespace) -> int:
    command = _command(args)
    if command == "describe" and not args.transactional_id:
        raise CliError("describe needs --transactional-id", 2)
    if command in ("describe-producers", "abort") and (args.topic is None or args.partition is None):
        raise CliError(f"{command} needs --topic and --partition", 2)
    if command == "find-hanging" and args.topic is None:
        raise CliError("find-hanging needs --topic", 2)
    if command == "abort" and args.start_offset is None and (args.producer_id is None or
                                                              args.producer_epoch is None):
        raise CliError("abort needs --start-offset, or --producer-id and --producer-epoch", 2)
    admin = new_admin(args)
    try:
        return {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
                "find-hanging": _find_hanging, "abort": _abort}[command](admin, args)
    except CliError:
        raise
    except Exception as e:
        if getattr(args, "verbose", False):
            raise
        raise CliError(f"Transactions command '{command}' failed: {error_message(e)}") from None
    finally:
        admin.close(timeout=5)


def _list(admin: Any, args: argparse.Namespace) -> int:
    listings = wait(admin.list_transactions(timeout_ms=args.timeout), args.timeout / 1000 + 5)
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
           [[t.transactional_id, t.coordinator_id, t.producer_id, t.state] for t in listings])
    return 0


def _describe(admin: Any, args: argparse.Namespace) -> int:
    d = wait(admin.describe_transactions([args.transactional_id], timeout_ms=args.timeout)[args.transactional_id],
             args.timeout / 1000 + 5)
    now = int(time.time() * 1000)
    start = d.transaction_start_time_ms
    parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [[d.coordinator_id, args.transactional_id, d.producer_id, d.producer_epoch, d.state,
             d.transaction_timeout_ms, start if start >= 0 else "None", now - start if start >= 0 else "None",
             parts]])
    return 0


def _producers(admin: Any, args: argparse.Namespace, tps: list[TopicPartition]) -> dict[TopicPartition, list[Any]]:
    result = admin.describe_producers(tps, timeout_ms=args.timeout)
    return {tp: wait(result[tp], args.timeout / 1000 + 5) for tp in tps}


def _describe_producers(admin: Any, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    rows = [[s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
             s.current_transaction_start_offset if s.current_transaction_start_offset >= 0 else "None"]
            for s in _producers(admin, args, [tp])[tp]]
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"], rows)
    return 0


def _find_hanging(admin: Any, args: argparse.Namespace) -> int:
    if args.partition is not None:
        tps = [TopicPartition(args.topic, args.partition)]
    else:
        n = len(wait(admin.describe_topics([args.topic]).all(), args.timeout / 1000 + 5)[args.topic].partitions)
        tps = [TopicPartition(args.topic, p) for p in range(n)]
    open_txns = [(tp, s) for tp, states in _producers(admin, args, tps).items() for s in states
                 if s.current_transaction_start_offset >= 0]
    live = {t.producer_id for t in wait(admin.list_transactions(
        states=["Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"], timeout_ms=args.timeout),
        args.timeout / 1000 + 5)}
    now = int(time.time() * 1000)
    max_ms = args.max_transaction_timeout * 60_000
    rows = [[tp.topic, tp.partition, s.producer_id, s.producer_epoch, s.coordinator_epoch,
             s.current_transaction_start_offset, s.last_timestamp, (now - s.last_timestamp) // 60_000]
            for tp, s in open_txns if s.producer_id not in live or now - s.last_timestamp > max_ms]
    _table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
            "LastTimestamp", "Duration(min)"], rows)
    return 0


def _abort(admin: Any, args: argparse.Namespace) -> int:
    from strom.admin.transactions import AbortTransactionSpec

    tp = TopicPartition(args.topic, args.partition)
    pid, epoch = args.producer_id, args.producer_epoch
    if args.start_offset is not None:
        match = [s for s in _producers(admin, args, [tp])[tp] if s.current_transaction_start_offset ==
                 args.start_offset]
        if not match:
            raise CliError(f"No open transaction starts at offset {args.start_offset} of {args.topic}-"
                           f"{args.partition}")
        # the coordinator epoch of the producer's last marker there: a lower one is refused (Kafka's tool)
        pid, epoch, coordinator_epoch = match[0].producer_id, match[0].producer_epoch, max(match[0].coordinator_epoch, 0)
    else:
        coordinator_epoch = args.coordinator_epoch
    spec = AbortTransactionSpec(tp, pid, epoch, coordinator_epoch)
    wait(admin.abort_transaction(spec, timeout_ms=args.timeout)[tp], args.timeout / 1000 + 5)
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {args.topic}-{args.partition}")
    return 0
