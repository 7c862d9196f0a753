"""``strom consumer-groups --reset-offsets``: compute new committed offsets and (with --execute) store them.

Kafka counterpart: ``ConsumerGroupCommand.resetOffsets`` / ``prepareOffsetsToReset`` / ``checkOffsetsRange``:
only groups in state Empty or Dead can be reset; the scope is ``--all-topics`` (the partitions the group has
committed offsets for) or ``--topic t`` / ``--topic t:0,1``; new offsets are clamped to
[earliest, latest] of each partition with a warning; the result is Kafka's table
``GROUP TOPIC PARTITION NEW-OFFSET``, or with ``--export`` Kafka's CSV (``topic,partition,offset`` for one group,
``group,topic,partition,offset`` for several), which ``--from-file`` reads back (the partitions of each group from
the file; a group the file does not name is an error). Without ``--execute`` nothing is changed (a dry run).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any

from strom.cli.common import wait
from strom.cli.errors import CliError

__all__ = ["reset_offsets", "parse_datetime", "parse_duration", "format_reset_table", "topic_partitions",
           "export_csv", "parse_reset_plan"]

_DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
                       re.IGNORECASE)


def parse_datetime(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+hh:mm``); local time without one → epoch ms."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            parsed = datetime.strptime(value, fmt)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # local time, as Kafka's default time zone
        return int(parsed.timestamp() * 1000)
    raise CliError(f"Error parsing datetime '{text}': expected the format 'YYYY-MM-DDTHH:mm:SS.sss' "
                   "(optionally followed by a time zone such as Z or +02:00)", 2)


def parse_duration(text: str) -> int:
    """ISO-8601 ``PnDTnHnMnS`` → milliseconds."""
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groupdict().values()):
        raise CliError(f"Error parsing duration '{text}': expected the format 'PnDTnHnMnS', e.g. PT1H30M", 2)
    d, h, mi, s = (float(m.group(k) or 0) for k in ("d", "h", "m", "s"))
    return int((((d * 24 + h) * 60 + mi) * 60 + s) * 1000)


def format_reset_table(rows: list[tuple[str, str, int, int]]) -> str:
    """Kafka's ``printOffsetsToReset``: ``%-30s %-30s %-10s %-15s`` after an empty line."""
    fmt = "{:<30} {:<30} {:<10} {:<15}"
    lines = ["", fmt.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    lines += [fmt.format(g, t, p, o) for g, t, p, o in rows]
    return "\n".join(line.rstrip() for line in lines)


def export_csv(rows: list[tuple[str, str, int, int]], single_group: bool) -> str:
    """Kafka's ``exportOffsetsToCsv``: one line per partition, the group first when several were asked."""
    return "".join((f"{t},{p},{o}\n" if single_group else f"{g},{t},{p},{o}\n") for g, t, p, o in rows)


def parse_reset_plan(text: str, groups: list[str]) -> dict[str, dict[Any, int]]:
    """Kafka's ``parseResetPlan``: ``topic,partition,offset`` lines for the one group asked, else
    ``group,topic,partition,offset``; a one-line error naming the bad line."""
    from strom.common.structs import TopicPartition

    plan: dict[str, dict[TopicPartition, int]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) == 3 and len(groups) == 1:
                group, (topic, partition, offset) = groups[0], fields
            elif len(fields) == 4:
                group, topic, partition, offset = fields
            else:
                raise ValueError
            if not topic:
                raise ValueError
            plan.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            expected = "topic,partition,offset" if len(groups) == 1 else "group,topic,partition,offset"
            raise CliError(f"Error parsing the reset plan, line {n}: '{line}' (expected {expected})", 2) from None
    return plan


def _read_plan(path: str, groups: list[str]) -> dict[str, dict[Any, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_reset_plan(f.read(), groups)
    except OSError as e:
        raise CliError(f"Cannot read the reset plan {path}: {e.strerror or e}", 2) from None


def topic_partitions(admin: Any, specs: list[str]) -> list[Any]:
    """The partitions ``--topic`` names (``topic`` = all of its partitions, ``topic:p1,p2`` = those), sorted;
    a one-line error for a malformed spec or a topic that does not exist."""
    from strom.common.structs import TopicPartition

    out: list[TopicPartition] = []
    whole: list[str] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not sep:
            whole.append(topic)
            continue
        try:
            out += [TopicPartition(topic, int(p)) for p in parts.split(",") if p.strip()]
        except ValueError:
            raise CliError(f"Invalid --topic '{spec}': expected topic or topic:p1,p2", 2) from None
    if whole:
        descriptions = admin.describe_topics(whole)
        for topic in whole:
            try:
                description = wait(descriptions[topic])
            except Exception:  # noqa: BLE001 - one line below
                raise CliError(f"Topic '{topic}' does not exist") from None
            out += [TopicPartition(topic, p.partition) for p in description.partitions]
    return sorted(set(out))


def _offsets(admin: Any, partitions: list[Any], spec: Any) -> dict[Any, int]:
    result = admin.list_offsets(dict.fromkeys(partitions, spec))
    out = {}
    for tp in partitions:
        try:
            out[tp] = wait(result[tp]).offset
        except Exception as e:  # noqa: BLE001 - one line
            from strom.cli.common import error_message

            raise CliError(f"Error getting the offsets of {tp}: {error_message(e)}") from None
    return out


def _prepare(admin: Any, args: argparse.Namespace, partitions: list[Any], committed: dict[Any, Any],
             planned: dict[Any, int] | None = None) -> dict[Any, int]:
    from strom.admin import OffsetSpec

    earliest = _offsets(admin, partitions, OffsetSpec.earliest())
    latest = _offsets(admin, partitions, OffsetSpec.latest())
    if planned is not None:
        return _check_range(dict(planned), earliest, latest)
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_datetime is not None or args.by_duration is not None:
        ts = parse_datetime(args.to_datetime) if args.to_datetime is not None else \
            int(time.time() * 1000) - parse_duration(args.by_duration)
        found = _offsets(admin, partitions, OffsetSpec.for_timestamp(max(0, ts)))
        return {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
    wanted: dict[Any, int] = {}
    for tp in partitions:
        current = committed.get(tp)
        if args.to_current:
            wanted[tp] = current.offset if current is not None else latest[tp]
        elif args.to_offset is not None:
            wanted[tp] = args.to_offset
        else:  # shift-by
            if current is None:
                raise CliError(f"Expected a valid current offset for topic partition: {tp}")
            wanted[tp] = current.offset + args.shift_by
    return _check_range(wanted, earliest, latest)


def _check_range(wanted: dict[Any, int], earliest: dict[Any, int], latest: dict[Any, int]) -> dict[Any, int]:
    for tp, offset in wanted.items():  # Kafka's checkOffsetsRange
        if offset > latest[tp]:
            print(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {tp}. Value will "
                  f"be set to {latest[tp]}", file=sys.stderr)
            wanted[tp] = latest[tp]
        elif offset < earliest[tp]:
            print(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {tp}. Value will "
                  f"be set to {earliest[tp]}", file=sys.stderr)
            wanted[tp] = earliest[tp]
    return wanted


def reset_offsets(admin: Any, args: argparse.Namespace, groups: list[str]) -> int:
    from strom.admin import ConsumerGroupState

    plan = _read_plan(args.from_file, groups) if args.from_file is not None else None
    dry_run = args.dry_run or not args.execute
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset "
              "rather than doing a dry run. You should add the --dry-run option explicitly if you are scripting "
              "this command and want to keep the current default behavior without prompting.", file=sys.stderr)
    descriptions = admin.describe_consumer_groups(groups, timeout_ms=args.timeout)
    rows: list[tuple[str, str, int, int]] = []
    failed = False
    for group in groups:
        state = wait(descriptions[group]).state
        if state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
            print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                  f"is {state.value}.", file=sys.stderr)
            failed = True
            continue
        committed = {tp: o for tp, o in wait(admin.list_consumer_group_offsets(group)
                                             .partitions_to_offset_and_metadata()).items() if o is not None}
        planned = None
        if plan is not None:
            planned = plan.get(group)
            if planned is None:
                print(f"Error: No reset plan for group {group} found", file=sys.stderr)
                failed = True
                continue
            partitions = sorted(planned)
        else:
            partitions = sorted(committed) if args.all_topics else topic_partitions(admin, args.topic)
        if not partitions:
            continue
        new = _prepare(admin, args, partitions, committed, planned)
        if not dry_run:
            result = admin.alter_consumer_group_offsets(group, new)
            for tp in new:
                wait(result[tp])
        rows += [(group, tp.topic, tp.partition, offset) for tp, offset in sorted(new.items())]
    if args.export:
        print(export_csv(rows, single_group=len(groups) == 1 and not args.all_groups))
    elif rows:
        print(format_reset_table(rows))
    return 1 if failed else 0
