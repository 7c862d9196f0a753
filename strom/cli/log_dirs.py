"""Describe the brokers' log directories (Kafka's kafka-log-dirs.sh, ``LogDirsCommand``).

Examples:
  strom log-dirs --bootstrap-server 127.0.0.1:9092 --describe
  strom log-dirs --bootstrap-server 127.0.0.1:9092 --describe --broker-list 1,2 --topic-list orders,clicks

Prints Kafka's two lines and then one JSON document: per broker, per log directory, the error (the Java class
name of Kafka's exception, or null) and each partition's size in bytes, offset lag (how far its log end is behind
the high watermark) and whether it is a future replica. Without --broker-list every live broker is asked.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "format_as_json"]

_JAVA_ERRORS = {"KafkaStorageError": "org.apache.kafka.common.errors.KafkaStorageException",
                "ClusterAuthorizationFailedError": "org.apache.kafka.common.errors.ClusterAuthorizationException"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--describe", action="store_true", help="REQUIRED: describe the specified log directories")
    p.add_argument("--broker-list", metavar="<String: Broker list>",
                   help="the brokers to query, e.g. 1,2 (default: every live broker)")
    p.add_argument("--topic-list", metavar="<String: Topic list>",
                   help="only these topics' partitions, e.g. t1,t2 (default: every topic)")


def _ids(text: str | None, what: str) -> list[str]:
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    if text is not None and not items:
        raise CliError(f"--{what} needs a comma-separated list", 2)
    return items


def format_as_json(descriptions: dict[int, dict[str, Any]], topics: set[str]) -> str:
    """Kafka's ``LogDirsCommand.formatAsJson``."""
    brokers = []
    for broker, dirs in sorted(descriptions.items()):
        log_dirs = []
        for log_dir, d in dirs.items():
            error = None if d.error is None else _JAVA_ERRORS.get(type(d.error).__name__, type(d.error).__name__)
            partitions = [{"partition": f"{tp.topic}-{tp.partition}", "size": r.size, "offsetLag": r.offset_lag,
                           "isFuture": r.is_future}
                          for tp, r in sorted(d.replica_infos.items()) if not topics or tp.topic in topics]
            log_dirs.append({"logDir": log_dir, "error": error, "partitions": partitions})
        brokers.append({"broker": broker, "logDirs": log_dirs})
    return json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":"))


def run(args: argparse.Namespace) -> int:
    if not args.describe:
        raise CliError("Command must include exactly one action: --describe", 2)
    asked = _ids(args.broker_list, "broker-list")
    try:
        brokers = sorted({int(b) for b in asked})
    except ValueError:
        raise CliError(f"Invalid --broker-list '{args.broker_list}': expected broker ids such as 1,2", 2) from None
    topics = set(_ids(args.topic_list, "topic-list"))
    admin = new_admin(args)
    try:
        live = sorted(n.node_id for n in wait(admin.describe_cluster().nodes()))
        missing = [b for b in brokers if b not in live]
        if missing:
            raise CliError(f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                           f"Current existent brokers: {','.join(map(str, live))}")
        query = brokers or live
        print("Querying brokers for log directories information")
        descriptions = wait(admin.describe_log_dirs(query).all())
        print(f"Received log directory information from brokers {','.join(map(str, query))}")
        print(format_as_json(descriptions, topics))
        return 0
    except CliError:
        raise
    except Exception as e:
        if args.verbose:
            raise
        raise CliError(f"Describing the log directories failed: {error_message(e)}") from None
    finally:
        admin.close(timeout=5)
