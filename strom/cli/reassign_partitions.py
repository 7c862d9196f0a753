"""Move partition replicas between brokers (Kafka's kafka-reassign-partitions.sh, ``ReassignPartitionsCommand``).

Examples:
  strom reassign-partitions --bootstrap-server 127.0.0.1:9092 --generate \\
      --topics-to-move-json-file topics.json --broker-list 1,2,3
  strom reassign-partitions --bootstrap-server 127.0.0.1:9092 --execute --reassignment-json-file plan.json
  strom reassign-partitions --bootstrap-server 127.0.0.1:9092 --verify --reassignment-json-file plan.json
  strom reassign-partitions --bootstrap-server 127.0.0.1:9092 --list
  strom reassign-partitions --bootstrap-server 127.0.0.1:9092 --cancel --reassignment-json-file plan.json

Files are Kafka's JSON: topics to move {"version":1,"topics":[{"topic":"sanguo"}]}; a reassignment
{"version":1,"partitions":[{"topic":"sanguo","partition":0,"replicas":[2,3,1]}]}, with "log_dirs" naming for each
replica "any" or an absolute log dir of its broker to move it to (KIP-113: the replica is copied there in the
background; --verify reports those moves too). --generate
prints the current and a proposed assignment; --execute prints the current one (to roll back with) and starts
the moves; --verify says per partition whether its move is complete (exit 1 while any is in progress); --cancel
stops moves in progress (partitions go back to their original replicas).

--throttle N (with --execute) holds the moves to N bytes/sec, as Kafka's tool does it (KIP-73): the topics'
leader.replication.throttled.replicas name the current replicas, follower.replication.throttled.replicas the new
ones, and every broker involved gets leader.replication.throttled.rate and follower.replication.throttled.rate =
N; --verify removes them all once every move is complete (unless --preserve-throttles).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "parse_reassignment_json"]

ACTIONS = ("generate", "execute", "verify", "list", "cancel")
TIMEOUT_MS = 30_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, config_flags=("--command-config",))
    for a in ACTIONS:
        p.add_argument(f"--{a}", action="store_true", help=f"{a} (one action per command)")
    p.add_argument("--reassignment-json-file", metavar="<String: manual assignment json file path>",
                   help="the partitions and their new replicas (--execute, --verify, --cancel)")
    p.add_argument("--topics-to-move-json-file", metavar="<String: topics to reassign json file path>",
                   help="the topics whose partitions --generate proposes to move")
    p.add_argument("--broker-list", metavar="<String: brokerlist>",
                   help='the brokers --generate may place replicas on, e.g. "1,2,3"')
    p.add_argument("--disable-rack-aware", action="store_true", help="accepted for compatibility")
    p.add_argument("--throttle", type=int, default=-1, metavar="<Long: throttle>",
                   help="with --execute: the replication rate (bytes/sec) of the moving replicas; --verify removes "
                        "the throttle once every move is complete")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="<Long: replicaAlterLogDirsThrottle>",
                   help="with --execute: the rate (bytes/sec) of replica moves between the log dirs of a broker; "
                        "--verify removes it once every move is complete")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify: leave the throttles in place")


def _read(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"Cannot read {path}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{path} is not valid JSON: {e}") from None


def parse_reassignment_json(doc: Any) -> dict[Any, list[int]]:
    """Kafka's ``parsePartitionReassignmentData``: partition -> replicas, refusing duplicates and bad entries."""
    from strom.common.structs import TopicPartition

    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list) or not doc["partitions"]:
        raise CliError('Partition reassignment data must have a non-empty "partitions" list')
    out: dict[TopicPartition, list[int]] = {}
    for e in doc["partitions"]:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and isinstance(e.get("replicas"), list) and all(isinstance(r, int) for r in e["replicas"])):
            raise CliError(f"Invalid partition reassignment entry {json.dumps(e)}: expected "
                           '{"topic": <string>, "partition": <integer>, "replicas": [<integers>]}')
        if not e["replicas"] or len(set(e["replicas"])) != len(e["replicas"]):
            raise CliError(f"Partition replica lists may not contain duplicate entries or be empty: "
                           f"{e['topic']}-{e['partition']} {e['replicas']}")
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(e["replicas"]) or any(
                not isinstance(d, str) or (d != "any" and not d.startswith("/")) for d in dirs)):
            raise CliError(f"{e['topic']}-{e['partition']}: \"log_dirs\" must give each replica \"any\" or an "
                           f"absolute path: {json.dumps(dirs)}")
        tp = TopicPartition(e["topic"], e["partition"])
        if tp in out:
            raise CliError(f"Duplicate partition in the reassignment data: {tp}")
        out[tp] = list(e["replicas"])
    return out


def parse_log_dirs(doc: Any) -> dict[Any, str]:
    """The replicas a reassignment sends to a named log dir: ``TopicPartitionReplica`` -> absolute path (after
    :func:`parse_reassignment_json` has checked the file)."""
    from strom.admin import TopicPartitionReplica

    return {TopicPartitionReplica(e["topic"], e["partition"], broker): d for e in doc["partitions"]
            for broker, d in zip(e["replicas"], e.get("log_dirs") or ["any"] * len(e["replicas"]), strict=True)
            if d != "any"}


def _plan_json(assignment: dict[Any, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": r, "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(assignment.items())]}, separators=(",", ":"))


def _current(admin: Any, topics: set[str]) -> dict[Any, list[int]]:
    from strom.common.structs import TopicPartition

    described = admin.describe_topics(sorted(topics))
    out = {}
    for t in sorted(topics):
        try:
            desc = wait(described[t])
        except Exception as e:
            raise CliError(f"Topic {t} not found: {error_message(e)}") from None
        for p in desc.partitions:
            out[TopicPartition(t, p.partition)] = [n.node_id for n in p.replicas]
    return out


def run(args: argparse.Namespace) -> int:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise CliError("Command must include exactly one action: --generate, --execute, --verify, --list or "
                       "--cancel", 2)
    if not (args.bootstrap_server or args.command_config):
        raise CliError("Missing required option(s): --bootstrap-server", 2)
    action = chosen[0]
    if action in ("execute", "verify", "cancel") and not args.reassignment_json_file:
        raise CliError(f"Missing required option(s): --reassignment-json-file (with --{action})", 2)
    if action == "generate" and not (args.topics_to_move_json_file and args.broker_list):
        raise CliError("--generate needs --topics-to-move-json-file and --broker-list", 2)
    if args.throttle >= 0 and action != "execute":
        raise CliError("--throttle is only valid with --execute", 2)
    if args.replica_alter_log_dirs_throttle >= 0 and action != "execute":
        raise CliError("--replica-alter-log-dirs-throttle is only valid with --execute", 2)
    if args.preserve_throttles and action != "verify":
        raise CliError("--preserve-throttles is only valid with --verify", 2)
    doc = _read(args.reassignment_json_file) if args.reassignment_json_file else None
    plan = parse_reassignment_json(doc) if doc is not None else {}
    args.log_dir_moves = parse_log_dirs(doc) if doc is not None else {}
    admin = new_admin(args)
    try:
        return {"generate": _generate, "execute": _execute, "verify": _verify, "list": _list,
                "cancel": _cancel}[action](admin, args, plan)
    except CliError:
        raise
    except Exception as e:
        if getattr(args, "verbose", False):
            raise
        raise CliError(f"Error while making request: {error_message(e)}") from None
    finally:
        admin.close(timeout=5)


def _generate(admin: Any, args: argparse.Namespace, _plan: dict[Any, list[int]]) -> int:
    from strom.server.admin_manager import assign_replicas
    from strom.server.metadata_cache import BrokerInfo

    doc = _read(args.topics_to_move_json_file)
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list) or not doc["topics"] or not all(
            isinstance(t, dict) and isinstance(t.get("topic"), str) for t in doc["topics"]):
        raise CliError('Topics to move must be {"version":1,"topics":[{"topic":"<name>"}, ...]}')
    try:
        brokers = [int(b) for b in str(args.broker_list).split(",") if b.strip()]
    except ValueError:
        raise CliError(f"Invalid --broker-list '{args.broker_list}': expected comma-separated broker ids") from None
    if len(set(brokers)) != len(brokers) or not brokers:
        raise CliError(f"Invalid --broker-list '{args.broker_list}': duplicate or no broker ids")
    current = _current(admin, {t["topic"] for t in doc["topics"]})
    proposed: dict[Any, list[int]] = {}
    for topic in sorted({tp.topic for tp in current}):
        parts = sorted(tp for tp in current if tp.topic == topic)
        rf = len(current[parts[0]])
        try:
            lists = assign_replicas([BrokerInfo(b, {}) for b in brokers], len(parts), rf)
        except Exception as e:
            raise CliError(error_message(e)) from None
        proposed.update(zip(parts, lists, strict=True))
    print("Current partition replica assignment")
    print(_plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_plan_json(proposed))
    return 0


LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def _alter_all(admin: Any, changes: dict[Any, list[Any]]) -> None:
    results = admin.incremental_alter_configs(changes)
    for resource in changes:
        wait(results[resource])


def _set_throttles(admin: Any, plan: dict[Any, list[int]], current: dict[Any, list[int]], rate: int) -> None:
    """Kafka's ``modifyTopicThrottles`` + ``modifyInterBrokerThrottle``."""
    from strom.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    changes: dict[Any, list[Any]] = {}
    for topic in sorted({tp.topic for tp in plan}):
        moving = sorted(tp for tp in plan if tp.topic == topic)
        leaders = [f"{tp.partition}:{r}" for tp in moving for r in current[tp]]
        followers = [f"{tp.partition}:{r}" for tp in moving for r in plan[tp] if r not in current[tp]]
        changes[ConfigResource(ConfigResourceType.TOPIC, topic)] = [
            AlterConfigOp(LEADER_REPLICAS, ",".join(leaders)), AlterConfigOp(FOLLOWER_REPLICAS, ",".join(followers))]
    for broker in sorted({b for tp in plan for b in (*plan[tp], *current[tp])}):
        changes[ConfigResource(ConfigResourceType.BROKER, str(broker))] = [
            AlterConfigOp(LEADER_RATE, str(rate)), AlterConfigOp(FOLLOWER_RATE, str(rate))]
    _alter_all(admin, changes)


def _set_log_dir_throttle(admin: Any, moves: dict[Any, str], rate: int) -> None:
    """Kafka's ``modifyLogDirThrottle``: the brokers with a replica to move between their log dirs."""
    from strom.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    _alter_all(admin, {ConfigResource(ConfigResourceType.BROKER, str(b)): [AlterConfigOp(LOG_DIR_RATE, str(rate))]
                       for b in sorted({r.broker_id for r in moves})})


def _clear_throttles(admin: Any, topics: set[str]) -> None:
    """Kafka's ``clearAllThrottles``: the rates on every broker, the throttled replicas of the moved topics."""
    from strom.admin import AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType

    brokers = sorted(n.node_id for n in wait(admin.describe_cluster().nodes()))
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    _alter_all(admin, {ConfigResource(ConfigResourceType.BROKER, str(b)): [
        AlterConfigOp(LEADER_RATE, None, AlterConfigOpType.DELETE),
        AlterConfigOp(FOLLOWER_RATE, None, AlterConfigOpType.DELETE),
        AlterConfigOp(LOG_DIR_RATE, None, AlterConfigOpType.DELETE)] for b in brokers})
    for topic in sorted(topics):
        print(f"Clearing topic-level throttles on topic {topic}")
    _alter_all(admin, {ConfigResource(ConfigResourceType.TOPIC, t): [
        AlterConfigOp(LEADER_REPLICAS, None, AlterConfigOpType.DELETE),
        AlterConfigOp(FOLLOWER_REPLICAS, None, AlterConfigOpType.DELETE)] for t in sorted(topics)})


def _execute(admin: Any, args: argparse.Namespace, plan: dict[Any, list[int]]) -> int:
    current = _current(admin, {tp.topic for tp in plan})
    missing = [str(tp) for tp in plan if tp not in current]
    if missing:
        raise CliError(f"Partitions not found: {', '.join(missing)}")
    print("Current partition replica assignment")
    print()
    print(_plan_json({tp: current[tp] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        _set_throttles(admin, plan, current, args.throttle)
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    if args.replica_alter_log_dirs_throttle >= 0:
        _set_log_dir_throttle(admin, args.log_dir_moves, args.replica_alter_log_dirs_throttle)
        print(f"The replica-alter-dir throttle limit was set to {args.replica_alter_log_dirs_throttle} B/s")
    # partitions whose replicas stay the same are left out (only their log dirs may move)
    moving = {tp: r for tp, r in plan.items() if r != current[tp]} if args.log_dir_moves else plan
    results = admin.alter_partition_reassignments(moving, timeout_ms=TIMEOUT_MS) if moving else {}
    failed = []
    for tp in sorted(moving):
        try:
            wait(results[tp])
        except Exception as e:
            failed.append(f"{tp}: {error_message(e)}")
    if failed:
        raise CliError("Error reassigning partition(s):\n" + "\n".join(failed))
    if moving:
        print(f"Successfully started partition reassignment(s) for {','.join(str(tp) for tp in sorted(moving))}")
    if args.log_dir_moves:
        _move_log_dirs(admin, args.log_dir_moves)
    return 0


def _replica_name(r: Any) -> str:
    return f"{r.topic}-{r.partition}-{r.broker_id}"


def _move_log_dirs(admin: Any, moves: dict[Any, str]) -> None:
    """AlterReplicaLogDirs for the replicas the file sends to a named dir; a replica its broker does not have yet
    (REPLICA_NOT_AVAILABLE) is placed there when the reassignment creates it."""
    from strom.common.error_codes import ReplicaNotAvailableError

    results = admin.alter_replica_log_dirs(moves, timeout_ms=TIMEOUT_MS).values()
    failed = []
    for replica in sorted(moves):
        try:
            wait(results[replica])
        except ReplicaNotAvailableError:
            pass
        except Exception as e:
            failed.append(f"{_replica_name(replica)}: {error_message(e)}")
    if failed:
        raise CliError("Error moving replica(s) between log dirs:\n" + "\n".join(failed))
    print(f"Successfully started log directory move(s) for: {','.join(_replica_name(r) for r in sorted(moves))}")


def _verify(admin: Any, args: argparse.Namespace, plan: dict[Any, list[int]]) -> int:
    ongoing = wait(admin.list_partition_reassignments(list(plan), timeout_ms=TIMEOUT_MS))
    current = _current(admin, {tp.topic for tp in plan})
    print("Status of partition reassignment:")
    pending = 0
    for tp, replicas in sorted(plan.items()):
        if tp in ongoing:
            pending += 1
            print(f"Reassignment of partition {tp} is still in progress.")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {tp} is completed.")
        else:
            pending += 1
            print(f"There is no active reassignment of partition {tp}, but replica set is "
                  f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, replicas))}.")
    if args.log_dir_moves:
        pending += _verify_log_dirs(admin, args.log_dir_moves)
    if not pending and not args.preserve_throttles:
        _clear_throttles(admin, {tp.topic for tp in plan})
    return 1 if pending else 0


def _verify_log_dirs(admin: Any, moves: dict[Any, str]) -> int:
    """Print each log dir move's state; how many are not done."""
    from strom.common.structs import TopicPartition

    described = admin.describe_log_dirs(sorted({r.broker_id for r in moves}), timeout_ms=TIMEOUT_MS).values()
    print("Status of log directory movement:")
    pending = 0
    for replica, target in sorted(moves.items()):
        tp = TopicPartition(replica.topic, replica.partition)
        dirs = wait(described[replica.broker_id])
        where = {d: desc.replica_infos[tp].is_future for d, desc in dirs.items() if tp in desc.replica_infos}
        if where == {target: False}:
            print(f"Reassignment of replica {_replica_name(replica)} is completed.")
        elif where.get(target) is True:
            pending += 1
            print(f"Reassignment of replica {_replica_name(replica)} is still in progress.")
        else:
            pending += 1
            print(f"Replica {_replica_name(replica)} is not being moved to {target} (it is in "
                  f"{', '.join(sorted(where)) or 'no log dir'}).")
    return pending


def _list(admin: Any, _args: argparse.Namespace, _plan: dict[Any, list[int]]) -> int:
    ongoing = wait(admin.list_partition_reassignments(timeout_ms=TIMEOUT_MS))
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, r in sorted(ongoing.items()):
        print(f"{tp}: replicas: {','.join(map(str, r.replicas))}. adding: {','.join(map(str, r.adding_replicas))}. "
              f"removing: {','.join(map(str, r.removing_replicas))}.")
    return 0


def _cancel(admin: Any, _args: argparse.Namespace, plan: dict[Any, list[int]]) -> int:
    results = admin.alter_partition_reassignments(dict.fromkeys(plan), timeout_ms=TIMEOUT_MS)
    done, failed = [], []
    for tp in sorted(plan):
        try:
            wait(results[tp])
            done.append(str(tp))
        except Exception as e:
            failed.append(f"{tp}: {error_message(e)}")
    if done:
        print(f"Successfully cancelled partition reassignment(s) for: {','.join(done)}")
    if failed:
        raise CliError("Error cancelling partition reassignment(s):\n" + "\n".join(failed))
    return 0
