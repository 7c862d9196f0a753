"""Client metrics subscriptions, KIP-714 (Kafka 3.7's kafka-client-metrics.sh, ``ClientMetricsCommand``).

Examples:
  strom client-metrics --bootstrap-server 127.0.0.1:9092 --alter --name producers \\
      --metrics org.apache.kafka.producer. --interval 10000 --match client_software_name=confluent.*
  strom client-metrics --bootstrap-server 127.0.0.1:9092 --alter --generate-name --metrics '*'
  strom client-metrics --bootstrap-server 127.0.0.1:9092 --describe --name producers
  strom client-metrics --bootstrap-server 127.0.0.1:9092 --delete --name producers

A subscription is a ``client-metrics`` config resource (``strom configs --entity-type client-metrics`` shows the same
thing): ``--alter`` sets the given keys and keeps the others, ``--delete`` removes the subscription. Listing every
subscription (``--list``, ``--describe`` without ``--name``) needs the ListClientMetricsResources API, which strom
does not have: name the subscription.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from strom.cli.common import add_connection_options, named_error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]

_KEYS = ("metrics", "interval.ms", "match")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    actions = p.add_mutually_exclusive_group()
    actions.add_argument("--alter", action="store_true", help="set a subscription's metrics, interval or match")
    actions.add_argument("--delete", action="store_true", help="remove a subscription")
    actions.add_argument("--describe", action="store_true", help="show a subscription")
    actions.add_argument("--list", action="store_true", help="list the subscriptions (not supported by strom)")
    p.add_argument("--name", help="the subscription's name")
    p.add_argument("--generate-name", action="store_true", help="--alter a new subscription with a random name")
    p.add_argument("--metrics", help="comma-separated metric name prefixes, or * for all")
    p.add_argument("--interval", type=int, metavar="MS", help="push interval in milliseconds (100 to 3600000)")
    p.add_argument("--match", help="comma-separated selectors key=regex (client_id, client_software_name, "
                                   "client_software_version, client_source_address, client_source_port, "
                                   "client_instance_id)")


def _check(args: argparse.Namespace) -> None:
    if not (args.alter or args.delete or args.describe or args.list):
        raise CliError("Command must include exactly one action: --alter, --delete, --describe or --list", 2)
    if args.list or (args.describe and not args.name):
        raise CliError("Listing client metrics subscriptions needs the ListClientMetricsResources API, which strom "
                       "does not have: use --describe --name <subscription>", 2)
    if args.generate_name and not args.alter:
        raise CliError("--generate-name goes with --alter", 2)
    if args.generate_name and args.name:
        raise CliError("Use either --name or --generate-name", 2)
    if not args.name and not args.generate_name:
        raise CliError("--name (or, with --alter, --generate-name) is required", 2)
    settings = args.metrics is not None or args.interval is not None or args.match is not None
    if settings and not args.alter:
        raise CliError("--metrics, --interval and --match go with --alter", 2)
    if args.alter and not settings:
        raise CliError("--alter needs at least one of --metrics, --interval or --match", 2)


def run(args: argparse.Namespace) -> int:
    from strom.admin import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType

    _check(args)
    name = str(uuid.uuid4()) if args.generate_name else args.name
    resource = ConfigResource(ConfigResourceType.CLIENT_METRICS, name)
    admin = new_admin(args)
    try:
        if args.describe:
            config: Any = wait(admin.describe_configs([resource])[resource])
            print(f"Client metrics configs for {name} are:")
            for entry in sorted(config, key=lambda e: e.name):
                print(f"  {entry.name}={entry.value}")
            return 0
        if args.delete:
            ops = [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in _KEYS]
        else:
            given = {"metrics": args.metrics, "match": args.match,
                     "interval.ms": None if args.interval is None else str(args.interval)}
            ops = [AlterConfigOp(k, ",".join(v.strip() for v in value.split(",")), AlterConfigOpType.SET)
                   for k, value in given.items() if value is not None]
        wait(admin.incremental_alter_configs({resource: ops})[resource])
        print(f"{'Deleted' if args.delete else 'Altered'} client metrics config for {name}.")
        return 0
    except CliError:
        raise
    except Exception as e:  # noqa: BLE001 - one line
        if args.verbose:
            raise
        text = named_error_message(e)
        raise CliError(f"Error while executing client metrics command: {text}", 1, plain=True) from None
    finally:
        admin.close(timeout=5)
