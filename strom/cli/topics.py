"""Create, list, describe, alter and delete topics (Kafka's kafka-topics.sh, ``TopicCommand``).

Examples:
  strom topics --bootstrap-server 127.0.0.1:9092 --list
  strom topics --bootstrap-server 127.0.0.1:9092 --topic sanguo --create --partitions 1 --replication-factor 1
  strom topics --bootstrap-server 127.0.0.1:9092 --topic sanguo --describe
  strom topics --bootstrap-server 127.0.0.1:9092 --topic sanguo --alter --partitions 3
  strom topics --bootstrap-server 127.0.0.1:9092 --topic sanguo --delete
  strom topics --bootstrap-server 127.0.0.1:9092 --create --topic logs --config retention.ms=3600000 --if-not-exists
  strom topics --bootstrap-server 127.0.0.1:9092 --describe --exclude-internal        # every topic

--describe prints Kafka's layout, one line per topic and one per partition:
  Topic: sanguo<TAB>TopicId: <id><TAB>PartitionCount: 1<TAB>ReplicationFactor: 1<TAB>Configs: <overrides>
  <TAB>Topic: sanguo<TAB>Partition: 0<TAB>Leader: 1<TAB>Replicas: 1<TAB>Isr: 1
The partition filters (--under-replicated-partitions, --under-min-isr-partitions, --at-min-isr-partitions,
--unavailable-partitions) print only the matching partition lines, without topic lines; given together, a
partition matching any of them is printed. --topics-with-overrides prints only the topic lines of topics with
config overrides.
--topic is a regular expression for --list, --describe, --alter and --delete. The partition count can only
grow; topic configs are changed with 'strom configs'.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, parse_key_values, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "format_topic_line", "format_partition_line"]

ACTIONS = ("list", "describe", "create", "alter", "delete")
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help={
            "list": "list all available topics",
            "describe": "list details for the given topics (all topics without --topic)",
            "create": "create a new topic",
            "alter": "change the number of partitions of a topic",
            "delete": "delete a topic",
        }[action])
    p.add_argument("--topic", metavar="<String: topic>",
                   help="the topic to create, alter, describe or delete (a regular expression except for --create)")
    p.add_argument("--partitions", type=int, metavar="<Integer: # of partitions>",
                   help="number of partitions of the topic being created or altered (only increases)")
    p.add_argument("--replication-factor", type=int, metavar="<Integer: replication factor>",
                   help="replication factor of each partition of the topic being created")
    p.add_argument("--replica-assignment", metavar="<String: broker_id_for_part1_replica1:...,...>",
                   help="manual partition-to-broker assignments of the topic being created")
    p.add_argument("--config", action="extend", nargs="+", metavar="<String: name=value>",
                   help="a topic configuration override for the topic being created (repeatable)")
    p.add_argument("--if-exists", action="store_true", help="with --alter/--describe/--delete: only if it exists")
    p.add_argument("--if-not-exists", action="store_true", help="with --create: only if it does not exist yet")
    p.add_argument("--exclude-internal", action="store_true", help="exclude internal topics from --list/--describe")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="with --describe: only topics that have config overrides")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than the replica set")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions whose leader is missing or not a live broker")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is smaller than min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="with --describe: only partitions whose ISR is exactly min.insync.replicas")


def _check_args(args: argparse.Namespace) -> str:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise CliError("Command must include exactly one action: --list, --describe, --create, --alter or --delete",
                       2)
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise CliError('Missing required argument "[topic]"', 2)
    if action == "alter" and args.partitions is None:
        if args.config:
            raise CliError("Option \"[config]\" can't be used with option \"[alter]\": "
                           "change topic configs with 'strom configs --alter'", 2)
        raise CliError('Missing required argument "[partitions]"', 2)
    invalid = {
        "partitions": ("list", "describe", "delete"),
        "replication_factor": ("list", "describe", "alter", "delete"),
        "replica_assignment": ("list", "describe", "delete"),
        "config": ("list", "describe", "alter", "delete"),
        "if_not_exists": ("list", "describe", "alter", "delete"),
        "if_exists": ("list", "create"),
    }
    for opt, actions in invalid.items():
        value = getattr(args, opt)
        if value not in (None, False) and action in actions:
            raise CliError(f"Option \"[{opt.replace('_', '-')}]\" can't be used with option \"[{action}]\"", 2)
    if args.replica_assignment and (args.partitions is not None or args.replication_factor is not None) \
            and action == "create":
        raise CliError("Option \"[replica-assignment]\" can't be used with options \"[partitions]\" and "
                       "\"[replication-factor]\"", 2)
    return action


def run(args: argparse.Namespace) -> int:
    action = _check_args(args)
    admin = new_admin(args)
    try:
        return int({"list": _list, "describe": _describe, "create": _create, "alter": _alter,
                    "delete": _delete}[action](admin, args) or 0)
    except CliError as e:
        raise CliError(f"Error while executing topic command : {e}", e.code, plain=True) from None
    except Exception as e:
        if args.verbose:
            raise
        raise CliError(f"Error while executing topic command : {error_message(e)}", 1, plain=True) from None
    finally:
        admin.close(timeout=5)


# ---------------------------------------------------------------------------------------------- helpers

def _matches(pattern: str | None, name: str) -> bool:
    if pattern is None:
        return True
    try:
        return re.fullmatch(pattern, name) is not None
    except re.error:
        return pattern == name


def _topics(admin: Any, args: argparse.Namespace) -> list[str]:
    names = wait(admin.list_topics(list_internal=not args.exclude_internal).names())
    return sorted(n for n in names if _matches(args.topic, n))


def _ensure_topic_exists(found: list[str], args: argparse.Namespace) -> bool:
    """Kafka's ``ensureTopicExists``: an empty match is an error unless --if-exists."""
    if not found and args.topic is not None and not args.if_exists:
        raise CliError(f"Topic '{args.topic}' does not exist as expected")
    return bool(found)


def _parse_assignment(text: str) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            ids = [int(b) for b in part.split(":")]
        except ValueError:
            raise CliError(f"Invalid --replica-assignment '{text}': expected broker ids like 1:2,2:3", 2) from None
        if len(set(ids)) != len(ids):
            raise CliError(f"Partition replica lists may not contain duplicate entries: {part}", 2)
        out[i] = ids
    return out


# ----------------------------------------------------------------------------------------------- actions

def _list(admin: Any, args: argparse.Namespace) -> int:
    for name in _topics(admin, args):
        print(name)
    return 0


def _create(admin: Any, args: argparse.Namespace) -> int:
    from strom.admin import NewTopic
    from strom.common.error_codes import TopicAlreadyExistsError

    topic = args.topic
    if args.partitions is not None and args.partitions < 1:
        raise CliError("The partitions must be greater than 0")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise CliError("The replication factor must be greater than 0")
    try:
        configs = parse_key_values(args.config, "--config")
    except CliError:
        raise CliError('Invalid topic config: all configs to be added must be in the format "key=val".') from None
    if "." in topic or "_" in topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    assignment = _parse_assignment(args.replica_assignment) if args.replica_assignment else None
    new = NewTopic(topic, args.partitions, args.replication_factor, assignment, configs)
    try:
        wait(admin.create_topics([new])[topic])
    except TopicAlreadyExistsError:
        if args.if_not_exists:
            return 0
        raise
    print(f"Created topic {topic}.")
    return 0


def _alter(admin: Any, args: argparse.Namespace) -> int:
    found = _topics(admin, args)
    if not _ensure_topic_exists(found, args):
        return 0
    for name in found:
        if name in INTERNAL_TOPICS:
            raise CliError(f"The number of partitions for the internal topic {name} cannot be changed.")
    result = admin.create_partitions({name: args.partitions for name in found})
    for name in found:
        wait(result[name])
    return 0


def _delete(admin: Any, args: argparse.Namespace) -> int:
    found = _topics(admin, args)
    if not _ensure_topic_exists(found, args):
        return 0
    for name in found:
        if name in INTERNAL_TOPICS:
            raise CliError(f"Topic {name} is a kafka internal topic and is not allowed to be marked for deletion.")
    result = admin.delete_topics(found)
    for name in found:
        wait(result[name])
    return 0


def format_topic_line(description: Any, config: Any) -> str:
    """Kafka's ``TopicDescription.printDescription`` line."""
    from strom.admin import topic_id_string

    configs = ",".join(f"{e.name}={e.value}" for e in (config.entries if config is not None else ())
                       if not e.is_default)
    parts = [f"Topic: {description.name}"]
    if description.topic_id is not None:
        parts.append(f"TopicId: {topic_id_string(description.topic_id)}")
    rf = len(description.partitions[0].replicas) if description.partitions else 0
    parts += [f"PartitionCount: {len(description.partitions)}", f"ReplicationFactor: {rf}", f"Configs: {configs}"]
    return "\t".join(parts)


def format_partition_line(topic: str, info: Any) -> str:
    """Kafka's ``PartitionDescription.printDescription`` line (leading tab)."""
    leader = str(info.leader.node_id) if info.leader is not None else "none"
    replicas = ",".join(str(n.node_id) for n in info.replicas)
    isr = ",".join(str(n.node_id) for n in info.isr)
    return f"\tTopic: {topic}\tPartition: {info.partition}\tLeader: {leader}\tReplicas: {replicas}\tIsr: {isr}"


def _min_isr(config: Any) -> int | None:
    entry = next((e for e in (config.entries if config is not None else ()) if e.name == "min.insync.replicas"),
                 None)
    try:
        return int(entry.value) if entry is not None and entry.value is not None else None
    except ValueError:
        return None


def _partition_wanted(args: argparse.Namespace, info: Any, min_isr: int | None, live: set[int]) -> bool:
    """Kafka's ``DescribeOptions.shouldPrintTopicPartition``: no filter prints all; filters are or-ed."""
    filters = (args.under_replicated_partitions, args.unavailable_partitions, args.under_min_isr_partitions,
               args.at_min_isr_partitions)
    if not any(filters):
        return True
    has_leader = info.leader is not None
    return bool(
        (args.under_replicated_partitions and len(info.replicas) - len(info.isr) > 0)
        or (args.unavailable_partitions and (not has_leader or info.leader.node_id not in live))
        or (args.under_min_isr_partitions and (not has_leader or (min_isr is not None and len(info.isr) < min_isr)))
        or (args.at_min_isr_partitions and min_isr is not None and len(info.isr) == min_isr))


def _describe(admin: Any, args: argparse.Namespace) -> int:
    from strom.admin import ConfigResource, ConfigResourceType

    found = _topics(admin, args)
    if not _ensure_topic_exists(found, args):
        return 0
    descriptions = admin.describe_topics(found)
    resources = {n: ConfigResource(ConfigResourceType.TOPIC, n) for n in found}
    configs = admin.describe_configs(list(resources.values()))
    live = {n.node_id for n in wait(admin.describe_cluster().nodes())}
    # Kafka's DescribeOptions: topic lines unless a partition filter is given; partition lines unless
    # --topics-with-overrides.
    describe_topic_lines = not (args.under_replicated_partitions or args.unavailable_partitions
                                or args.under_min_isr_partitions or args.at_min_isr_partitions)
    describe_partitions = not args.topics_with_overrides
    out = sys.stdout
    for name in found:
        description = wait(descriptions[name])
        config = wait(configs[resources[name]])
        if describe_topic_lines and description.partitions:
            has_overrides = any(not e.is_default for e in config.entries)
            if not args.topics_with_overrides or has_overrides:
                out.write(format_topic_line(description, config) + "\n")
        if describe_partitions:
            min_isr = _min_isr(config)
            for info in description.partitions:
                if _partition_wanted(args, info, min_isr, live):
                    out.write(format_partition_line(name, info) + "\n")
    return 0
