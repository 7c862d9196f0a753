"""Describe and change topic and broker configs (Kafka's kafka-configs.sh, ``ConfigCommand``).

Examples:
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name sanguo --describe
  strom configs --bootstrap-server 127.0.0.1:9092 --topic sanguo --describe --all
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name sanguo --alter \\
      --add-config retention.ms=86400000,cleanup.policy=[compact,delete]
  strom configs --bootstrap-server 127.0.0.1:9092 --topic sanguo --alter --delete-config retention.ms
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-name 1 --describe --all
  strom configs --bootstrap-server 127.0.0.1:9092 --broker-defaults --describe

--describe shows the dynamic (overridden) configs, --all every config:
  Dynamic configs for topic sanguo are:
    retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}
strom brokers read their configs from server.properties: altering a broker config is refused by the broker
(INVALID_REQUEST), as the error line says.
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.common import add_connection_options, error_message, load_config_file, new_admin, wait
from strom.cli.errors import CliError
from strom.common.errors import BrokerResponseError

__all__ = ["add_arguments", "run", "parse_add_config", "format_entry"]

ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "clients", "users", "ips", "client-metrics", "groups")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--describe", action="store_true", help="list configs for the given entity")
    p.add_argument("--alter", action="store_true", help="alter the configuration of the entity")
    p.add_argument("--entity-type", metavar="<String>", help="topics or brokers")
    p.add_argument("--entity-name", metavar="<String>", help="name of the entity (topic name / broker id)")
    p.add_argument("--entity-default", action="store_true", help="the cluster-wide default (brokers only)")
    p.add_argument("--topic", metavar="<String: topic>", help="shorthand for --entity-type topics --entity-name T")
    p.add_argument("--broker", metavar="<String: broker id>",
                   help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true",
                   help="shorthand for --entity-type brokers --entity-default")
    p.add_argument("--all", action="store_true", help="with --describe: all configs, not only the dynamic ones")
    p.add_argument("--add-config", metavar="<String>",
                   help="configs to set: 'k1=v1,k2=[v1,v2,v2],k3=v3' (square brackets group a list value)")
    p.add_argument("--add-config-file", metavar="<String>", help="a properties file of configs to set")
    p.add_argument("--delete-config", metavar="<String>", help="config keys to remove: 'k1,k2'")


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's ``parseConfigsToBeAdded``: split on commas outside ``[...]``; ``[a,b]`` becomes ``a,b``."""
    out: dict[str, str] = {}
    parts: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in (p.strip() for p in parts):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise CliError("Invalid entity config: all configs to be added must be in the format \"key=val\" or "
                           "\"key=[val1,val2]\".", 2)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, entity name or None for all / "" for the default)."""
    shorthands = [(args.topic is not None, "topics", args.topic), (args.broker is not None, "brokers", args.broker),
                  (args.broker_defaults, "brokers", "")]
    given = [(t, n) for used, t, n in shorthands if used]
    if given and (args.entity_type or args.entity_name or args.entity_default):
        raise CliError("Use either --topic/--broker/--broker-defaults or --entity-type/--entity-name", 2)
    if len(given) > 1:
        raise CliError("Only one of --topic, --broker and --broker-defaults may be given", 2)
    if given:
        return given[0]
    if not args.entity_type:
        raise CliError("At least one of --entity-type, --topic, --broker or --broker-defaults must be specified", 2)
    if args.entity_type not in ENTITY_TYPES:
        raise CliError(f"Invalid entity type {args.entity_type}, the entity type must be one of "
                       f"{', '.join(ENTITY_TYPES)}", 2)
    if args.entity_type not in ("topics", "brokers", "users"):
        raise CliError(f"strom supports the entity types topics, brokers and users; {args.entity_type} is not "
                       "implemented", 2)
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CliError("--entity-default may only be used with --entity-type brokers", 2)
        if args.entity_name:
            raise CliError("--entity-name and --entity-default cannot be used together", 2)
        return "brokers", ""
    return args.entity_type, args.entity_name


def _check(args: argparse.Namespace) -> tuple[str, str, str | None]:
    if args.describe == args.alter:
        raise CliError("Command must include exactly one action: --describe, --alter", 2)
    entity_type, name = _entity(args)
    if args.alter:
        if not (args.add_config or args.add_config_file or args.delete_config):
            raise CliError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                           "with --alter", 2)
        if name is None:
            raise CliError(f"An entity name must be specified with --alter of {entity_type}", 2)
    elif args.add_config or args.add_config_file or args.delete_config:
        raise CliError("--add-config, --add-config-file and --delete-config need --alter", 2)
    if entity_type == "brokers" and name:
        try:
            int(name)
        except ValueError:
            raise CliError(f"The entity name for brokers must be a valid integer broker id, but it is: {name}",
                           2) from None
    return "alter" if args.alter else "describe", entity_type, name


def run(args: argparse.Namespace) -> int:
    action, entity_type, name = _check(args)
    scram = _parse_scram_alterations(args, name or "") if entity_type == "users" and action == "alter" else None
    admin = new_admin(args)
    try:
        if entity_type == "users":
            if action == "describe":
                return _describe_users(admin, name)
            assert scram is not None
            wait(admin.alter_user_scram_credentials(scram).all())
            print(f"Completed updating config for user {name}.")
            return 0
        if entity_type == "brokers" and name:
            _check_broker(admin, name)
        if action == "describe":
            return _describe(admin, entity_type, name, args.all)
        return _alter(admin, args, entity_type, name or "")
    except CliError as e:
        raise CliError(f"Error while executing config command: {e}", e.code, plain=True) from None
    except Exception as e:
        if args.verbose:
            raise
        text = f"{e.name}: {error_message(e)}" if isinstance(e, BrokerResponseError) else error_message(e)
        raise CliError(f"Error while executing config command: {text}", 1, plain=True) from None
    finally:
        admin.close(timeout=5)


_SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_scram_alterations(args: argparse.Namespace, user: str) -> list[Any]:
    """``SCRAM-SHA-256=[iterations=8192,password=secret]`` to add (iterations default 4096), ``SCRAM-SHA-512`` to
    delete: Kafka's ``ConfigCommand`` syntax for users."""
    from strom.admin.scram import UserScramCredentialDeletion, UserScramCredentialUpsertion

    to_add = load_config_file(args.add_config_file)
    to_add.update(parse_add_config(args.add_config or ""))
    to_delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    out: list[Any] = []
    for key in [*to_add, *to_delete]:
        if key.upper() not in _SCRAM_KEYS:
            raise CliError(f"Invalid config {key} for users: strom supports {', '.join(_SCRAM_KEYS)} (quotas are "
                           "not implemented)", 2)
    for key, value in to_add.items():
        fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        if "password" not in fields:
            raise CliError(f"Invalid {key} value: expected [iterations=<n>,password=<password>]", 2)
        try:
            iterations = int(fields.get("iterations", "4096"))
        except ValueError:
            raise CliError(f"Invalid {key} value: iterations must be a number", 2) from None
        out.append(UserScramCredentialUpsertion(user, key.upper(), iterations, fields["password"]))
    out += [UserScramCredentialDeletion(user, key.upper()) for key in to_delete]
    return out


def _describe_users(admin: Any, name: str | None) -> int:
    described = wait(admin.describe_user_scram_credentials([name] if name else None))
    for user, infos in sorted(described.items()):
        creds = ",".join(f"{i.mechanism}=iterations={i.iterations}" for i in infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {creds}")
    return 0


def _check_broker(admin: Any, name: str) -> None:
    """A broker id that is not in the cluster would wait for it until the timeout: say so at once."""
    ids = sorted(n.node_id for n in wait(admin.describe_cluster().nodes()))
    if int(name) not in ids:
        raise CliError(f"Broker {name} is not in the cluster (broker ids: {', '.join(map(str, ids))})")


def _resource(entity_type: str, name: str) -> Any:
    from strom.admin import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.TOPIC if entity_type == "topics" else ConfigResourceType.BROKER, name)


def _label(entity_type: str, name: str) -> str:
    if entity_type == "brokers" and name == "":
        return "default config for brokers in the cluster"
    return f"config for {'topic' if entity_type == 'topics' else 'broker'} {name}"


def _header(entity_type: str, name: str, describe_all: bool) -> str:
    if entity_type == "brokers" and name == "":
        return f"{'All' if describe_all else 'Default'} configs for brokers in the cluster are:"
    kind = "topic" if entity_type == "topics" else "broker"
    return f"{'All' if describe_all else 'Dynamic'} configs for {kind} {name} are:"


def format_entry(entry: Any) -> str:
    """Kafka's ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` line."""
    from strom.admin import ConfigSource

    value = "null" if entry.is_sensitive else entry.value
    synonyms = list(entry.synonyms)
    if not synonyms and entry.source != ConfigSource.UNKNOWN:
        synonyms = [entry]  # brokers that send no synonyms: the entry's own source
    text = ", ".join(f"{s.source.name}:{s.name}={'null' if entry.is_sensitive else s.value}" for s in synonyms)
    return f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{text}}}"


def _describe(admin: Any, entity_type: str, name: str | None, describe_all: bool) -> int:
    from strom.admin import ConfigSource

    if name is not None:
        names = [name]
    elif entity_type == "topics":
        names = sorted(wait(admin.list_topics(list_internal=True).names()))
    else:
        nodes = wait(admin.describe_cluster().nodes())
        names = [str(n.node_id) for n in nodes] + [""]
    resources = {n: _resource(entity_type, n) for n in names}
    result = admin.describe_configs(list(resources.values()), include_synonyms=True)
    if entity_type == "topics":
        wanted = ConfigSource.DYNAMIC_TOPIC_CONFIG
    else:
        wanted = ConfigSource.DYNAMIC_BROKER_CONFIG
    for n in names:
        config = wait(result[resources[n]])
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if entity_type == "brokers" and n == "" else wanted
        entries = list(config) if describe_all else [e for e in config if e.source == source]
        print(_header(entity_type, n, describe_all))
        for entry in sorted(entries, key=lambda e: e.name):
            print(format_entry(entry))
    return 0


def _alter(admin: Any, args: argparse.Namespace, entity_type: str, name: str) -> int:
    from strom.admin import AlterConfigOp, AlterConfigOpType, ConfigSource

    to_add = load_config_file(args.add_config_file)
    to_add.update(parse_add_config(args.add_config or ""))
    to_delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    overlap = sorted(set(to_add) & set(to_delete))
    if overlap:
        raise CliError(f"Config(s) {', '.join(overlap)} cannot be both added and deleted")
    resource = _resource(entity_type, name)
    if entity_type == "topics" and to_delete:
        current = wait(admin.describe_configs([resource])[resource])
        dynamic = {e.name for e in current if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
        invalid = [k for k in to_delete if k not in dynamic]
        if invalid:
            raise CliError(f"Invalid config(s): {','.join(invalid)}")
    ops = [AlterConfigOp(k, v, AlterConfigOpType.SET) for k, v in to_add.items()]
    ops += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in to_delete]
    wait(admin.incremental_alter_configs({resource: ops})[resource])
    print(f"Completed updating {_label(entity_type, name)}.")
    return 0
