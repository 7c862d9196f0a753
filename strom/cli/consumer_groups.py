"""List, describe, reset and delete consumer groups (Kafka's kafka-consumer-groups.sh, ``ConsumerGroupCommand``).

Examples:
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --list
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --list --state
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group g1
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group g1 --members
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --all-groups --state
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group g1 --topic sanguo --to-earliest
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group g1 --all-topics \\
      --shift-by -2 --execute
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group g1 --topic sanguo:0,1 \\
      --to-datetime 2024-01-01T00:00:00.000 --execute
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --delete --group g1
  strom consumer-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group g1 --topic sanguo

--describe prints Kafka's table: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
CLIENT-ID ("-" where there is no value). --reset-offsets only shows the new offsets (a dry run) unless
--execute is given, and only for groups without active members.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "format_offsets_table"]

MISSING = "-"
RESET_SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "to_current", "to_offset", "shift_by",
                   "from_file")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="list all consumer groups")
    actions.add_argument("--describe", action="store_true", help="describe consumer groups: offsets and lag")
    actions.add_argument("--delete", action="store_true", help="delete consumer groups (they must be empty)")
    actions.add_argument("--reset-offsets", action="store_true", help="reset a group's committed offsets")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete a group's committed offsets of --topic (not while it consumes the topic)")
    p.add_argument("--group", action="append", metavar="<String: consumer group>", help="the group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--members", action="store_true", help="with --describe: the members of the group")
    p.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    p.add_argument("--state", nargs="?", const="", metavar="[String: state]",
                   help="with --describe: the group's state; with --list: show states, or only groups in STATE")
    p.add_argument("--timeout", type=int, default=5000, metavar="<Long: timeout (ms)>",
                   help="timeout of some operations, e.g. describing a group (default: 5000)")
    p.add_argument("--topic", action="append", metavar="<String: topic>",
                   help="with --reset-offsets or --delete-offsets: topic or topic:p1,p2 (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="with --reset-offsets: every topic of the group")
    p.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    p.add_argument("--to-current", action="store_true", help="reset to the current (committed) offset")
    p.add_argument("--to-offset", type=int, metavar="<Long: offset>", help="reset to this offset")
    p.add_argument("--shift-by", type=int, metavar="<Long: number-of-offsets>",
                   help="shift the current offset by N (may be negative)")
    p.add_argument("--to-datetime", metavar="<String: datetime>",
                   help="reset to the first offset at or after 'YYYY-MM-DDTHH:mm:SS.sss' (optional zone, e.g. Z)")
    p.add_argument("--by-duration", metavar="<String: duration>",
                   help="reset to the offsets of this long ago, 'PnDTnHnMnS'")
    p.add_argument("--from-file", metavar="<String: path to CSV file>",
                   help="reset to the offsets of a CSV file (topic,partition,offset; with several groups "
                        "group,topic,partition,offset), as --export writes it")
    p.add_argument("--export", action="store_true",
                   help="with --reset-offsets: print the new offsets as CSV (for --from-file) instead of the table")
    p.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="with --reset-offsets: really change the offsets")


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in ("list", "describe", "delete", "reset_offsets", "delete_offsets") if getattr(args, a)]
    if len(chosen) != 1:
        raise CliError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                       "--delete-offsets", 2)
    action = chosen[0]
    if action in ("describe", "delete", "reset_offsets") and not args.group and not args.all_groups:
        raise CliError(f"Option [{action.replace('_', '-')}] takes one of these options: [all-groups], [group]", 2)
    if args.group and args.all_groups:
        raise CliError("Option [all-groups] can't be used with option [group]", 2)
    if action == "delete_offsets":
        if not args.group or len(args.group) != 1 or not args.topic:
            raise CliError("Option [delete-offsets] takes the following options: [group], [topic]", 2)
        if args.all_topics or args.execute or args.dry_run:
            raise CliError("Options --all-topics, --dry-run and --execute need --reset-offsets", 2)
    elif action == "reset_offsets":
        scenarios = [s for s in RESET_SCENARIOS if getattr(args, s) not in (None, False)]
        if len(scenarios) != 1:
            raise CliError("Option [reset-offsets] takes exactly one of these options: [to-datetime], "
                           "[by-duration], [to-earliest], [to-latest], [to-current], [to-offset], [shift-by], "
                           "[from-file]", 2)
        if args.from_file is not None:
            if args.topic or args.all_topics:
                raise CliError("Option [from-file] takes its partitions from the file: drop --topic / --all-topics",
                               2)
        elif bool(args.topic) == bool(args.all_topics):
            raise CliError("Option [reset-offsets] takes exactly one of these options: [all-topics], [topic]"
                           if args.topic else "One of the reset scopes should be defined: --all-topics, --topic.", 2)
        if args.dry_run and args.execute:
            raise CliError("Option [dry-run] can't be used with option [execute]", 2)
    elif args.execute or args.dry_run or args.topic or args.all_topics or args.export:
        raise CliError("Options --all-topics, --dry-run, --execute and --export need --reset-offsets; --topic "
                       "needs --reset-offsets or --delete-offsets", 2)
    if args.members and args.offsets:
        raise CliError("Option [members] can't be used with option [offsets]", 2)
    return action


def run(args: argparse.Namespace) -> int:
    action = _action(args)
    admin = new_admin(args)
    try:
        if action == "list":
            return _list(admin, args)
        groups = _groups(admin, args)
        if action == "describe":
            return _describe(admin, args, groups)
        if action == "delete":
            return _delete(admin, groups)
        if action == "delete_offsets":
            return _delete_offsets(admin, args, groups[0])
        from strom.cli.consumer_groups_reset import reset_offsets

        return reset_offsets(admin, args, groups)
    except CliError:
        raise
    except Exception as e:
        if args.verbose:
            raise
        raise CliError(f"Executing consumer group command failed due to {error_message(e)}") from None
    finally:
        admin.close(timeout=5)


def _groups(admin: Any, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in wait(admin.list_consumer_groups().all())]
    return list(dict.fromkeys(args.group))


def _row(fmt_widths: list[int], values: list[Any]) -> str:
    """Java's ``%-Ns`` columns joined by one space; the last column unpadded."""
    cells = [f"{str(v):<{w}}" for v, w in zip(values[:-1], fmt_widths, strict=False)]
    return " ".join(cells + [str(values[-1])])


# ------------------------------------------------------------------------------------------------- list

def _list(admin: Any, args: argparse.Namespace) -> int:
    from strom.admin import ConsumerGroupState

    states = None
    if args.state:
        states = []
        for name in args.state.split(","):
            state = ConsumerGroupState.parse(name.strip())
            if state == ConsumerGroupState.UNKNOWN:
                valid = ", ".join(s.value for s in ConsumerGroupState if s != ConsumerGroupState.UNKNOWN)
                raise CliError(f"Invalid state list '{args.state}'. Valid states are: {valid}", 2)
            states.append(state)
    listings = wait(admin.list_consumer_groups(states=states).all())
    if args.state is None:
        for g in listings:
            print(g.group_id)
        return 0
    width = max([15] + [len(g.group_id) for g in listings])
    print(_row([width], ["GROUP", "STATE"]))
    for g in listings:
        print(_row([width], [g.group_id, g.state.value if g.state else "Unknown"]))
    return 0


# ---------------------------------------------------------------------------------------------- delete

def _delete(admin: Any, groups: list[str]) -> int:
    result = admin.delete_consumer_groups(groups)
    ok, failed = [], {}
    for g in groups:
        try:
            wait(result[g])
            ok.append(g)
        except Exception as e:  # noqa: BLE001 - reported per group
            failed[g] = e
    if failed:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for g, e in failed.items():
            print(f"* Group '{g}' could not be deleted due to: {type(e).__name__}: {error_message(e)}",
                  file=sys.stderr)
    if ok:
        names = "', '".join(ok)
        print(f"Deletion of requested consumer groups ('{names}') was successful.")
    return 1 if failed else 0


def _delete_offsets(admin: Any, args: argparse.Namespace, group: str) -> int:
    """Kafka's ``ConsumerGroupCommand.deleteOffsets``: a summary line, then one row per partition."""
    from strom.cli.consumer_groups_reset import topic_partitions
    from strom.common.error_codes import GroupSubscribedToTopicError

    partitions = topic_partitions(admin, args.topic)
    result = admin.delete_consumer_group_offsets(group, partitions)
    errors: dict[Any, BaseException | None] = {}
    for tp in partitions:
        try:
            wait(result[tp])
            errors[tp] = None
        except Exception as e:  # noqa: BLE001 - reported per partition
            errors[tp] = e
    failures = [e for e in errors.values() if e is not None]
    topics = ", ".join(dict.fromkeys(tp.topic for tp in partitions))
    if not failures:
        print(f"Request succeed for deleting offsets with topic {topics} group {group}")
    elif len(failures) == len(errors) and len({type(e) for e in failures}) == 1 and not isinstance(
            failures[0], GroupSubscribedToTopicError):
        raise CliError(f"Deleting offsets of group '{group}' failed: {error_message(failures[0])}")
    else:
        print("Error: Encounter some partition level error, see the follow-up details:", file=sys.stderr)
    print("\n" + _row([30, 15], ["TOPIC", "PARTITION", "STATUS"]))
    for tp in sorted(errors):
        e = errors[tp]
        print(_row([30, 15], [tp.topic, tp.partition, "Successful" if e is None else f"Error: {error_message(e)}"]))
    return 1 if failures else 0


# -------------------------------------------------------------------------------------------- describe

def _should_print(group: str, state: Any, rows: int) -> bool:
    """Kafka's ``shouldPrintMemberState``: warnings on stderr; False when there is nothing to show."""
    from strom.admin import ConsumerGroupState as S

    if state == S.DEAD:
        print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
        return False
    if state == S.EMPTY:
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.ASSIGNING, S.RECONCILING):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


def _describe(admin: Any, args: argparse.Namespace, groups: list[str]) -> int:
    from strom.admin import ConsumerGroupState

    timeout = args.timeout
    descriptions = admin.describe_consumer_groups(groups, timeout_ms=timeout)
    missing = 0
    for group in groups:
        description = wait(descriptions[group])
        if description.state == ConsumerGroupState.DEAD:
            missing += 1
        if args.state is not None:
            _print_state(description)
        elif args.members:
            _print_members(description, args.verbose)
        else:
            rows = collect_offsets(admin, description, timeout)
            if _should_print(group, description.state, len(rows)):
                print(format_offsets_table(rows))
    return 1 if missing else 0


def collect_offsets(admin: Any, description: Any, timeout_ms: int) -> list[list[Any]]:
    """Kafka's ``collectGroupOffsets``: assigned partitions (members with most partitions first), then partitions
    with a committed offset and no member; values ``-`` when unknown."""
    from strom.admin import OffsetSpec

    group = description.group_id
    committed = wait(admin.list_consumer_group_offsets(group, timeout_ms=timeout_ms)
                     .partitions_to_offset_and_metadata())
    members = sorted((m for m in description.members if m.assignment.topic_partitions),
                     key=lambda m: -len(m.assignment.topic_partitions))
    assigned = [(tp, m) for m in members for tp in sorted(m.assignment.topic_partitions)]
    seen = {tp for tp, _m in assigned}
    unassigned = [(tp, None) for tp in sorted(committed) if tp not in seen]
    partitions = [tp for tp, _m in assigned + unassigned]
    ends: dict[Any, Any] = {}
    if partitions:
        result = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions}, timeout_ms=timeout_ms)
        for tp in partitions:
            try:
                ends[tp] = wait(result[tp]).offset
            except Exception:  # noqa: BLE001 - shown as "-"
                ends[tp] = None
    rows = []
    for tp, member in assigned + unassigned:
        c = committed.get(tp)
        current = c.offset if c is not None else None
        end = ends.get(tp)
        lag = end - current if end is not None and current is not None else None
        rows.append([group, tp.topic, tp.partition, MISSING if current is None else current,
                     MISSING if end is None else end, MISSING if lag is None else lag,
                     member.consumer_id if member else MISSING, member.host if member else MISSING,
                     member.client_id if member else MISSING])
    return rows


def format_offsets_table(rows: list[list[Any]]) -> str:
    """Kafka's describe table (a leading empty line, then header and rows)."""
    group_w = max([15] + [len(str(r[0])) for r in rows])
    topic_w = max([15] + [len(str(r[1])) for r in rows])
    consumer_w = max([15] + [len(str(r[6])) for r in rows])
    host_w = max([15] + [len(str(r[7])) for r in rows])
    widths = [group_w, topic_w, 10, 15, 15, 15, consumer_w, host_w]
    lines = ["", _row(widths, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                               "CONSUMER-ID", "HOST", "CLIENT-ID"])]
    lines += [_row(widths, r) for r in rows]
    return "\n".join(lines)


def _print_members(description: Any, verbose: bool) -> None:
    """Kafka's ``printMembers``: GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS [ASSIGNMENT]."""
    group = description.group_id
    if not _should_print(group, description.state, len(description.members)):
        return
    with_instance = any(m.group_instance_id for m in description.members)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for m in description.members:
        row: list[Any] = [group, m.consumer_id] + ([m.group_instance_id or MISSING] if with_instance else []) + \
            [m.host, m.client_id, len(m.assignment.topic_partitions)]
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(m.assignment.topic_partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or MISSING)
        rows.append(row)
    minimum = [17 if h == "GROUP-INSTANCE-ID" else 15 for h in header]
    widths = [max([w] + [len(str(r[i])) for r in rows]) for i, w in enumerate(minimum)]

    def line(values: list[Any]) -> str:
        cells = [f"{str(v):<{w}}" for v, w in zip(values, widths, strict=False)]
        return " ".join(cells + [str(v) for v in values[len(widths):]]).rstrip()

    print()
    print(line(header + (["ASSIGNMENT"] if verbose else [])))
    for r in rows:
        print(line(r))


def _print_state(description: Any) -> None:
    group = description.group_id
    if not _should_print(group, description.state, 1):
        return
    c = description.coordinator
    coordinator = f"{c.host}:{c.port}  ({c.node_id})" if c is not None else MISSING
    widths = [max(25, len(group)), max(25, len(coordinator)), 20, 15]
    print()
    print(_row(widths, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]))
    print(_row(widths, [group, coordinator, description.partition_assignor or "", description.state.value,
                        len(description.members)]))
