"""Elect partition leaders: preferred replicas back in charge, or unclean elections (Kafka's
kafka-leader-election.sh, ``LeaderElectionCommand``).

Examples:
  strom leader-election --bootstrap-server 127.0.0.1:9092 --election-type preferred --all-topic-partitions
  strom leader-election --bootstrap-server 127.0.0.1:9092 --election-type preferred --topic sanguo --partition 0
  strom leader-election --bootstrap-server 127.0.0.1:9092 --election-type unclean --path-to-json-file e.json

The JSON file lists partitions: {"partitions": [{"topic": "sanguo", "partition": 0}, ...]}.
"preferred" elects the first replica when it is alive and in sync and does not lead already; "unclean" elects
a leader only for partitions without one, from any live replica (records acknowledged by the lost leader may be
lost). One and only one of --topic, --all-topic-partitions, --path-to-json-file is required. The output is
Kafka's: "Successfully completed leader election (PREFERRED) for partitions sanguo-0", "Valid replica already
elected for partitions ...", and one "Error completing leader election ..." line per failed partition (exit 1).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "parse_election_json"]

TIMEOUT_MS = 30_000  # Kafka's tool: 30 s for the whole election


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--admin.config", "--command-config"))
    p.add_argument("--election-type", metavar="<[PREFERRED,UNCLEAN]: election type>",
                   help="REQUIRED: 'preferred' (only if the leader is not the preferred replica) or 'unclean' "
                        "(only partitions without a leader)")
    p.add_argument("--topic", metavar="<String: topic name>",
                   help="the topic of the partition to elect a leader for (needs --partition)")
    p.add_argument("--partition", type=int, metavar="<Integer: partition id>",
                   help="the partition to elect a leader for (REQUIRED with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="every eligible partition of the cluster")
    p.add_argument("--path-to-json-file", metavar="<String: Path to JSON file>",
                   help='the partitions, as {"partitions": [{"topic": "foo", "partition": 1}, ...]}')


def parse_election_json(text: str) -> list[Any]:
    """Kafka's ``parseReplicaElectionData``: the partitions of the JSON document (duplicates refused)."""
    from strom.common.structs import TopicPartition

    try:
        doc = json.loads(text) if text.strip() else None
    except json.JSONDecodeError as e:
        raise CliError(f"Replica election data is not valid JSON: {e}") from None
    if not doc:
        raise CliError("Replica election data is empty")
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise CliError('Replica election data is missing "partitions" field')
    out: list[TopicPartition] = []
    for entry in doc["partitions"] if isinstance(doc["partitions"], list) else [None]:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or not isinstance(entry.get("partition"), int) or isinstance(entry.get("partition"), bool):
            raise CliError(f'Invalid replica election entry {json.dumps(entry)}: expected {{"topic": <string>, '
                           '"partition": <integer>}')
        out.append(TopicPartition(entry["topic"], entry["partition"]))
    duplicates = sorted({str(tp) for tp in out if out.count(tp) > 1})
    if duplicates:
        raise CliError(f"Replica election data contains duplicate partitions: {','.join(duplicates)}")
    return out


def _check_args(args: argparse.Namespace) -> str:
    missing = [flag for flag, value in (("--bootstrap-server", args.bootstrap_server or args.command_config),
                                        ("--election-type", args.election_type)) if not value]
    if missing:
        raise CliError(f"Missing required option(s): {', '.join(missing)}", 2)
    election_type = args.election_type.upper()
    if election_type not in ("PREFERRED", "UNCLEAN"):
        raise CliError(f"Invalid --election-type '{args.election_type}': expected preferred or unclean", 2)
    chosen = sum(bool(x) for x in (args.topic, args.all_topic_partitions, args.path_to_json_file))
    if chosen != 1:
        raise CliError("One and only one of the following options is required: --topic, --all-topic-partitions, "
                       "--path-to-json-file", 2)
    if args.topic and args.partition is None:
        raise CliError("Missing required option(s): --partition", 2)
    if args.partition is not None and not args.topic:
        raise CliError("Option --partition is only allowed if --topic is used", 2)
    return election_type


def run(args: argparse.Namespace) -> int:
    from strom.common.structs import TopicPartition

    election_type = _check_args(args)
    partitions: list[TopicPartition] | None = None
    if args.path_to_json_file:
        try:
            text = Path(args.path_to_json_file).read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"Cannot read {args.path_to_json_file}: {e.strerror or e}") from None
        partitions = parse_election_json(text)
    elif args.topic:
        partitions = [TopicPartition(args.topic, args.partition)]
    admin = new_admin(args)
    try:
        try:
            results = wait(admin.elect_leaders(election_type, partitions, timeout_ms=TIMEOUT_MS).partitions())
        except CliError:
            raise
        except Exception as e:
            if args.verbose:
                raise
            raise CliError(f"Error while making request: {error_message(e)}") from None
    finally:
        admin.close(timeout=5)
    return _report(election_type, results)


def _report(election_type: str, results: dict[Any, Any]) -> int:
    from strom.common.error_codes import ErrorCode

    succeeded = sorted(tp for tp, e in results.items() if e is None)
    noop = sorted(tp for tp, e in results.items() if e is not None and e.errno == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted(((tp, e) for tp, e in results.items()
                     if e is not None and e.errno != ErrorCode.ELECTION_NOT_NEEDED), key=lambda x: x[0])
    if succeeded:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              f"{', '.join(map(str, succeeded))}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(map(str, noop))}")
    for tp, e in failed:
        print(f"Error completing leader election ({election_type}) for partition: {tp}: {type(e).__name__}: "
              f"{error_message(e)}")
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0
