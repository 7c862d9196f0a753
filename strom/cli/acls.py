"""Add, list and remove ACLs (Kafka's kafka-acls.sh, ``AclCommand``), through the admin client.

Examples:
  strom acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice --operation Read \\
      --topic orders --group billing
  strom acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:bob --producer --topic logs- \\
      --resource-pattern-type prefixed
  strom acls --bootstrap-server 127.0.0.1:9092 --list --topic orders
  strom acls --bootstrap-server 127.0.0.1:9092 --list --principal User:alice
  strom acls --bootstrap-server 127.0.0.1:9092 --remove --allow-principal User:alice --operation Read \\
      --topic orders --force
  strom acls --bootstrap-server 127.0.0.1:9093 --command-config admin.properties --list

Without --operation an --add or --remove is for All operations; without --allow-host/--deny-host for every host
(*). --producer gives Write, Describe and Create on the topics (and IdempotentWrite on the cluster), --consumer
Read and Describe on the topics and Read on the group. --list takes the resource pattern type ANY by default
(MATCH lists every ACL that applies to the named resource), --add and --remove LITERAL.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from strom.cli.common import add_connection_options, named_error_message, new_admin, wait
from strom.cli.errors import CliError
from strom.common.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

__all__ = ["add_arguments", "run"]

CLUSTER_NAME = "kafka-cluster"
Op = AclOperation
SUPPORTED_OPS: dict[ResourceType, tuple[AclOperation, ...]] = {
    rt: ops + (Op.ALL,) for rt, ops in SUPPORTED_OPERATIONS.items()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], metavar="<String: topic>", help="topic (repeatable)")
    p.add_argument("--group", action="append", default=[], metavar="<String: group>",
                   help="consumer group (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--transactional-id", action="append", default=[], metavar="<String: transactional id>",
                   help="transactional id (repeatable)")
    p.add_argument("--resource-pattern-type", metavar="<ANY|MATCH|LITERAL|PREFIXED>",
                   help="how the resource names match: LITERAL (default for --add/--remove), PREFIXED, or for "
                        "--list/--remove also ANY (default for --list) and MATCH")
    p.add_argument("--allow-principal", action="append", default=[], metavar="<String: principal>",
                   help="principal (User:name) the ACLs allow (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="<String: principal>",
                   help="principal the ACLs deny (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], metavar="<String: host>",
                   help="host the allow ACLs apply to (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="<String: host>",
                   help="host the deny ACLs apply to (default *)")
    p.add_argument("--operation", action="append", default=[], metavar="<String: operation>",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (repeatable; default All)")
    p.add_argument("--principal", action="append", default=[], metavar="<String: principal>",
                   help="with --list: only the ACLs of this principal")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs (with --topic)")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --topic and --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="remove without asking for confirmation")


def _pattern_type(args: argparse.Namespace, default: PatternType) -> PatternType:
    if not args.resource_pattern_type:
        return default
    try:
        pt = PatternType.parse(args.resource_pattern_type)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if pt is PatternType.UNKNOWN or (args.add and pt in (PatternType.ANY, PatternType.MATCH)):
        raise CliError(f"A '--resource-pattern-type' value of '{pt.name}' is not valid when adding acls.", 2)
    return pt


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    ops = []
    for text in args.operation or ["All"]:
        try:
            op = AclOperation.parse(text)
        except ValueError as e:
            raise CliError(str(e), 2) from None
        if op in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise CliError(f"Invalid operation {text}", 2)
        ops.append(op)
    return ops


def _entries(args: argparse.Namespace, ops: list[AclOperation]) -> list[AccessControlEntry]:
    entries = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                    (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"Invalid principal {principal!r}: expected type:name, e.g. User:alice", 2)
            for host in hosts or [WILDCARD_HOST]:
                entries.extend(AccessControlEntry(principal, host, op, perm) for op in ops)
    return entries


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    """What --add / --remove name: explicit operations on every resource, or the --producer/--consumer sets."""
    pt = _pattern_type(args, PatternType.LITERAL)
    if not args.allow_principal and not args.deny_principal:
        verb = "add" if args.add else "remove"
        raise CliError(f"You must specify one of: --allow-principal, --deny-principal when trying to {verb} ACLs.",
                       2)
    if args.producer or args.consumer:
        if args.operation:
            raise CliError("--operation cannot be used with --producer or --consumer", 2)
        if not args.topic:
            raise CliError("With --producer or --consumer you must specify a --topic", 2)
        if args.consumer and not args.group:
            raise CliError("With --consumer you must specify a --group", 2)
        wanted: list[tuple[tuple[ResourceType, str], list[AclOperation]]] = []
        if args.producer:
            wanted += [((ResourceType.TOPIC, t), [Op.WRITE, Op.DESCRIBE, Op.CREATE]) for t in args.topic]
            wanted += [((ResourceType.TRANSACTIONAL_ID, x), [Op.WRITE, Op.DESCRIBE]) for x in args.transactional_id]
            if args.idempotent:
                wanted.append(((ResourceType.CLUSTER, CLUSTER_NAME), [Op.IDEMPOTENT_WRITE]))
        if args.consumer:
            wanted += [((ResourceType.TOPIC, t), [Op.READ, Op.DESCRIBE]) for t in args.topic]
            wanted += [((ResourceType.GROUP, g), [Op.READ]) for g in args.group]
    else:
        resources = _resources(args)
        if not resources:
            raise CliError("You must specify one of: --topic, --cluster, --group, --transactional-id", 2)
        ops = _operations(args)
        wanted = [(r, ops) for r in resources]
    bindings: list[AclBinding] = []
    for (rt, name), ops in wanted:
        bad = [o.name for o in ops if o not in SUPPORTED_OPS[rt]]
        if bad:
            raise CliError(f"ResourceType {rt.name} only supports operations "
                           f"{','.join(o.name for o in SUPPORTED_OPS[rt])} (not {','.join(bad)})", 2)
        p = pt if rt is not ResourceType.CLUSTER else PatternType.LITERAL
        try:
            pattern = ResourcePattern(rt, name, p)
        except ValueError as e:
            raise CliError(str(e), 2) from None
        bindings.extend(AclBinding(pattern, e) for e in _entries(args, ops))
    return list(dict.fromkeys(bindings))


def _print_grouped(title: str, bindings: list[AclBinding]) -> None:
    grouped: dict[ResourcePattern, list[AclBinding]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, []).append(b)
    for pattern, items in grouped.items():
        print(f"{title} `{pattern}`: ")
        for b in items:
            e = b.entry
            print(f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                  f"permissionType={e.permission_type.name}) ")
        print()


def _list(admin: Any, args: argparse.Namespace) -> int:
    pt = _pattern_type(args, PatternType.ANY)
    resources = _resources(args) or [None]
    principals = args.principal or [None]
    found: list[AclBinding] = []
    for r in resources:
        rf = ResourcePatternFilter() if r is None else ResourcePatternFilter(r[0], r[1], pt)
        if r is None and args.resource_pattern_type:
            rf = ResourcePatternFilter(ResourceType.ANY, None, pt)
        for principal in principals:
            found += wait(admin.describe_acls(AclBindingFilter(rf, AccessControlEntryFilter(principal=principal))))
    _print_grouped("Current ACLs for resource", list(dict.fromkeys(found)))
    return 0


def _confirm(text: str, force: bool) -> bool:
    if force or not sys.stdin.isatty():
        return True
    answer = input(f"{text} (y/n)\n")
    return answer.strip().lower() in ("y", "yes")


def run(args: argparse.Namespace) -> int:
    if not (args.add or args.remove or args.list):
        raise CliError("Command must include exactly one action: --list, --add, --remove.", 2)
    bindings = _bindings(args) if args.add else None
    admin = new_admin(args)
    try:
        if args.list:
            return _list(admin, args)
        if args.add:
            assert bindings is not None
            _print_grouped("Adding ACLs for resource", bindings)
            wait(admin.create_acls(bindings).all())
            current = []
            for pattern in dict.fromkeys(b.pattern for b in bindings):
                current += wait(admin.describe_acls(AclBindingFilter(ResourcePatternFilter(
                    pattern.resource_type, pattern.name, pattern.pattern_type))))
            _print_grouped("Current ACLs for resource", current)
            return 0
        return _remove(admin, args)
    except CliError:
        raise
    except Exception as e:
        if getattr(args, "verbose", False):
            raise
        text = named_error_message(e)
        raise CliError(f"Error while executing ACL command: {text}", 1, plain=True) from None
    finally:
        admin.close(timeout=5)


def _remove(admin: Any, args: argparse.Namespace) -> int:
    pt = _pattern_type(args, PatternType.LITERAL)
    if args.allow_principal or args.deny_principal:
        filters = [AclBindingFilter(ResourcePatternFilter(b.pattern.resource_type, b.pattern.name, pt),
                                    AccessControlEntryFilter(b.entry.principal, b.entry.host, b.entry.operation,
                                                             b.entry.permission_type))
                   for b in _bindings(args)]
    else:  # every ACL of the named resources
        resources = _resources(args)
        if not resources:
            raise CliError("You must specify one of: --topic, --cluster, --group, --transactional-id", 2)
        filters = [AclBindingFilter(ResourcePatternFilter(rt, name, pt)) for rt, name in resources]
    names = ", ".join(sorted({f"{f.pattern.resource_type.name} {f.pattern.name}" for f in filters}))
    if not _confirm(f"Are you sure you want to remove ACLs from {names}?", args.force):
        return 0
    removed = wait(admin.delete_acls(list(dict.fromkeys(filters))).all())
    gone = [b for bindings in removed.values() for b in bindings]
    _print_grouped("Removed ACLs for resource", gone)
    return 0
