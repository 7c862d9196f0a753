"""The ``strom`` command: one entry point, one module per sub-command (Kafka's ``bin/*.sh`` tools).

``strom topics`` is ``kafka-topics.sh``, ``strom console-producer`` is ``kafka-console-producer.sh`` and so on:
the flags are Kafka's. Every command prints one clear line on stderr and exits non-zero on bad input (a bad
flag exits 2); ``--verbose`` shows tracebacks and debug logging.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from strom.cli.errors import CliError

__all__ = ["main", "CliError", "COMMANDS", "StromArgumentParser"]

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("strom.cli.broker", "start a broker, in the foreground or with -daemon (kafka-server-start.sh)"),
    "broker-stop": ("strom.cli.broker_stop", "stop brokers started with -daemon (kafka-server-stop.sh)"),
    "pipeline": ("strom.cli.pipeline", "run the Spark clickstream demo pipeline (make demo)"),
    "topics": ("strom.cli.topics", "create, list, describe, alter and delete topics (kafka-topics.sh)"),
    "console-producer": ("strom.cli.console_producer",
                         "write lines from stdin to a topic (kafka-console-producer.sh)"),
    "console-consumer": ("strom.cli.console_consumer",
                         "print a topic's records to stdout (kafka-console-consumer.sh)"),
    "consumer-groups": ("strom.cli.consumer_groups",
                        "list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)"),
    "transactions": ("strom.cli.transactions", "list, describe and abort transactions (kafka-transactions.sh)"),
    "configs": ("strom.cli.configs", "describe and alter topic and broker configs (kafka-configs.sh)"),
    "acls": ("strom.cli.acls", "add, list and remove ACLs (kafka-acls.sh)"),
    "client-metrics": ("strom.cli.client_metrics",
                       "set, describe and delete client metrics subscriptions, KIP-714 (kafka-client-metrics.sh)"),
    "reassign-partitions": ("strom.cli.reassign_partitions",
                            "move partition replicas between brokers (kafka-reassign-partitions.sh)"),
    "leader-election": ("strom.cli.leader_election",
                        "elect preferred or unclean partition leaders (kafka-leader-election.sh)"),
    "producer-perf-test": ("strom.cli.producer_perf", "producer throughput/latency test "
                                                      "(kafka-producer-perf-test.sh)"),
    "consumer-perf-test": ("strom.cli.consumer_perf", "consumer throughput test (kafka-consumer-perf-test.sh)"),
    "cluster": ("strom.cli.cluster", "start or stop a local ZooKeeper + N-broker cluster in one command"),
    "zookeeper-server-start": ("strom.cli.zookeeper_server_start",
                               "start a ZooKeeper server for cluster mode (zookeeper-server-start.sh)"),
    "zookeeper-server-stop": ("strom.cli.zookeeper_server_stop",
                              "stop the ZooKeeper servers strom started (zookeeper-server-stop.sh)"),
    "zookeeper-shell": ("strom.cli.zookeeper_shell", "ZooKeeper's command-line client (zookeeper-shell.sh)"),
    "get-offsets": ("strom.cli.get_offsets", "print partition offsets by time (kafka-get-offsets.sh)"),
    "delete-records": ("strom.cli.delete_records", "delete records before an offset (kafka-delete-records.sh)"),
    "verifiable-producer": ("strom.cli.verifiable_producer", "produce sequential values and report each "
                                                              "acknowledgement as JSON (kafka-verifiable-producer.sh)"),
    "verifiable-consumer": ("strom.cli.verifiable_consumer", "consume as a group member and report "
                                                              "assignments, records and commits as JSON "
                                                              "(kafka-verifiable-consumer.sh)"),
    "dump-log": ("strom.cli.dump_log", "print log segments and indexes (kafka-dump-log.sh)"),
    "broker-api-versions": ("strom.cli.broker_api_versions",
                            "print the API versions each broker supports (kafka-broker-api-versions.sh)"),
    "log-dirs": ("strom.cli.log_dirs", "describe the brokers' log directories and partition sizes (kafka-log-dirs.sh)"),
    "end-to-end-latency": ("strom.cli.end_to_end_latency", "produce-then-consume round-trip latency with "
                                                            "p50/p99/p99.9 (kafka-e2e-latency.sh)"),
    "ui": ("strom.cli.ui", "the web console: brokers, topics, messages, consumer groups and lag, rate charts"),
}


class StromArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``Error: <problem> (see 'strom topics --help')`` and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"Error: {message} (see '{self.prog} --help')\n")


def _chosen_command(argv: Sequence[str]) -> str | None:
    for token in argv:
        if token in COMMANDS:
            return token
        if not token.startswith("-"):
            return None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (all of them when ``command`` is ``"*"``), so one
    command's imports never slow down or break another."""
    parser = StromArgumentParser(
        prog="strom",
        description="strom: a Kafka-compatible broker and tools in Python.",
        epilog="Run 'strom COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=StromArgumentParser)
    for name, (module, help_text) in COMMANDS.items():
        if command not in (name, "*"):
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or "").replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks and debug logging")
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _configure_logging(verbose: bool) -> None:
    """Client commands log nothing unless ``--verbose`` (the broker configures its own logging)."""
    root = logging.getLogger()
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
                            stream=sys.stderr)
    else:
        root.addHandler(logging.NullHandler())
        root.setLevel(logging.CRITICAL + 1)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _chosen_command(argv)
    parser = build_parser(command)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        prog = f"strom {command}" if command else "strom"
        print(f"Error: unrecognized arguments: {' '.join(unknown)} (see '{prog} --help')", file=sys.stderr)
        return 2
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    if args.command != "broker":
        _configure_logging(args.verbose)
    try:
        return int(args._run(args) or 0)
    except CliError as e:
        if args.verbose:
            raise
        print(str(e) if e.plain else f"Error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `strom topics --list | head -1`
        from strom.cli.common import silence_stdout

        silence_stdout()
        return 0
    except Exception as e:  # one line, no traceback, unless --verbose
        if args.verbose:
            raise
        from strom.cli.common import error_message

        print(f"Error: {type(e).__name__}: {error_message(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
