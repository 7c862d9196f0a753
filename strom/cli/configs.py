"""Describe and change topic and broker configs, broker log levels, users' SCRAM credentials and client quotas (Kafka's
kafka-configs.sh, ``ConfigCommand``).

Examples:
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name sanguo --describe
  strom configs --bootstrap-server 127.0.0.1:9092 --topic sanguo --describe --all
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type topics --entity-name sanguo --alter \\
      --add-config retention.ms=86400000,cleanup.policy=[compact,delete]
  strom configs --bootstrap-server 127.0.0.1:9092 --topic sanguo --alter --delete-config retention.ms
  strom configs --bootstrap-server 127.0.0.1:9092 --entity-type brokers --entity-name 1 --describe --all
  strom configs --bootstrap-server 127.0.0.1:9092 --broker-defaults --describe
  strom configs --bootstrap-server 127.0.0.1:9092 --broker-defaults --alter --add-config log.retention.ms=86400000
  strom configs --bootstrap-server 127.0.0.1:9092 --broker-logger 1 --alter --add-config strom.server=DEBUG
  strom configs --bootstrap-server 127.0.0.1:9092 --alter --add-config 'producer_byte_rate=1048576' \\
      --entity-type clients --entity-name c1
  strom configs --bootstrap-server 127.0.0.1:9092 --alter --add-config 'consumer_byte_rate=2097152' \\
      --entity-type users --entity-name alice --entity-type clients --entity-default
  strom configs --bootstrap-server 127.0.0.1:9092 --describe --entity-type clients

--describe shows the dynamic (overridden) configs, --all every config:
  Dynamic configs for topic sanguo are:
    retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}
Client quotas (users, clients, both; --entity-default for a type's default) are described as Kafka does:
  Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=2097152.0
Broker configs that Kafka can change at runtime (log defaults such as log.retention.ms, message.max.bytes,
unclean.leader.election.enable, the log cleaner's, connection limits) are altered per broker (--broker ID) or
for the whole cluster (--broker-defaults); other keys are refused (INVALID_REQUEST), as the error line says.
"""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.common import (
    add_connection_options,
    error_message,
    load_config_file,
    named_error_message,
    new_admin,
    wait,
)
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "parse_add_config", "format_entry"]

ENTITY_TYPES = ("topics", "brokers", "broker-loggers", "clients", "users", "ips", "client-metrics", "groups")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--zookeeper", metavar="<String: urls>",
                   help="host:port[/chroot] of the cluster's ZooKeeper, for SCRAM credentials of users only "
                        "(as in Kafka 3.x): the brokers' own inter-broker SCRAM user is created this way before "
                        "the brokers start")
    p.add_argument("--describe", action="store_true", help="list configs for the given entity")
    p.add_argument("--alter", action="store_true", help="alter the configuration of the entity")
    p.add_argument("--entity-type", metavar="<String>", action="append", dest="entity_types",
                   help="topics, brokers, users or clients (users and clients may be given together)")
    # --entity-name and --entity-default share a list so that each follows its --entity-type in order.
    p.add_argument("--entity-name", metavar="<String>", action="append", dest="entity_names",
                   help="name of the entity (topic name / broker id / user / client id)")
    p.add_argument("--entity-default", action="append_const", const="", dest="entity_names",
                   help="the default entity of the type before it (brokers, users, clients)")
    p.add_argument("--user", metavar="<String>", help="shorthand for --entity-type users --entity-name U")
    p.add_argument("--client", metavar="<String>", help="shorthand for --entity-type clients --entity-name C")
    p.add_argument("--user-defaults", action="store_true", help="shorthand for --entity-type users --entity-default")
    p.add_argument("--client-defaults", action="store_true",
                   help="shorthand for --entity-type clients --entity-default")
    p.add_argument("--topic", metavar="<String: topic>", help="shorthand for --entity-type topics --entity-name T")
    p.add_argument("--broker", metavar="<String: broker id>",
                   help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true",
                   help="shorthand for --entity-type brokers --entity-default")
    p.add_argument("--broker-logger", metavar="<String: broker id>",
                   help="shorthand for --entity-type broker-loggers --entity-name ID (the broker's log levels)")
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


def _entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """[(entity type, entity name or None for all / "" for the default)]: one entity, or users + clients."""
    shorthands = [(args.topic is not None, "topics", args.topic), (args.broker is not None, "brokers", args.broker),
                  (args.broker_logger is not None, "broker-loggers", args.broker_logger),
                  (args.broker_defaults, "brokers", ""), (args.user is not None, "users", args.user),
                  (args.user_defaults, "users", ""), (args.client is not None, "clients", args.client),
                  (args.client_defaults, "clients", "")]
    given = [(t, n) for used, t, n in shorthands if used]
    types, names = list(args.entity_types or []), list(args.entity_names or [])
    if given and (types or names):
        raise CliError("Use either --topic/--broker/--user/--client (and their -defaults) or "
                       "--entity-type/--entity-name", 2)
    if not given:
        if not types:
            raise CliError("At least one of --entity-type, --topic, --broker or --broker-defaults must be "
                           "specified", 2)
        if len(names) > len(types):
            raise CliError("More entity names specified than entity types", 2)
        given = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    for t, _ in given:
        if t not in ENTITY_TYPES:
            raise CliError(f"Invalid entity type {t}, the entity type must be one of {', '.join(ENTITY_TYPES)}", 2)
        if t not in ("topics", "brokers", "broker-loggers", "users", "clients", "ips", "client-metrics"):
            raise CliError(f"strom supports the entity types topics, brokers, broker-loggers, users, clients, ips "
                           f"and client-metrics; {t} is not implemented", 2)
    kinds = [t for t, _ in given]
    if len(given) > 1 and (sorted(kinds) != ["clients", "users"]):
        raise CliError("Only the entity types users and clients may be combined, each once: "
                       f"{', '.join(kinds)}", 2)
    for t, n in given:
        if n == "" and t in ("topics", "broker-loggers", "client-metrics"):
            raise CliError("--entity-default may only be used with --entity-type brokers, users or clients", 2)
        if n is None and t == "client-metrics":
            raise CliError("An entity name must be specified with --entity-type client-metrics (the name of a "
                           "client metrics subscription)", 2)
    return sorted(given, key=lambda e: e[0] != "users")  # users first, as Kafka's paths are


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, entity name or None for all / "" for the default) of a topic or broker command."""
    return _entities(args)[0]


def _check(args: argparse.Namespace) -> tuple[str, str, str | None]:
    if args.describe == args.alter:
        raise CliError("Command must include exactly one action: --describe, --alter", 2)
    entities = _entities(args)
    entity_type, name = entities[0]
    if len(entities) > 1:
        entity_type = "users+clients"
    if args.alter:
        if not (args.add_config or args.add_config_file or args.delete_config):
            raise CliError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                           "with --alter", 2)
        if any(n is None for _, n in entities):
            raise CliError("An entity name must be specified with --alter of "
                           + " and ".join(t for t, n in entities if n is None), 2)
    elif args.add_config or args.add_config_file or args.delete_config:
        raise CliError("--add-config, --add-config-file and --delete-config need --alter", 2)
    if entity_type in ("brokers", "broker-loggers") and name:
        try:
            int(name)
        except ValueError:
            raise CliError(f"The entity name for {entity_type} must be a valid integer broker id, but it is: "
                           f"{name}", 2) from None
    return "alter" if args.alter else "describe", entity_type, name


def run(args: argparse.Namespace) -> int:
    action, entity_type, name = _check(args)
    entities = _entities(args)
    quota_changes = scram = None
    if entity_type in ("users", "clients", "users+clients", "ips") and action == "alter":
        quota_changes, scram = _parse_user_client_alterations(args, entities)
    if args.zookeeper:
        return _run_on_zookeeper(args, action, entity_type, name, quota_changes, scram)
    admin = new_admin(args)
    try:
        if entity_type in ("users", "clients", "users+clients", "ips"):
            if action == "describe":
                return _describe_quotas(admin, entities)
            if scram:
                wait(admin.alter_user_scram_credentials(scram).all())
            else:
                assert quota_changes is not None
                _alter_quotas(admin, entities, *quota_changes)
            head_type, head_name = entities[0]
            if head_name:
                print(f"Completed updating config for {head_type[:-1]} {head_name}.")
            else:
                print(f"Completed updating default config for {head_type} in the cluster.")
            return 0
        if entity_type in ("brokers", "broker-loggers") and name:
            _check_broker(admin, name)
        if action == "describe":
            return _describe(admin, entity_type, name, args.all)
        return _alter(admin, args, entity_type, name or "")
    except CliError as e:
        raise CliError(f"Error while executing config command: {e}", e.code, plain=True) from None
    except Exception as e:
        if args.verbose:
            raise
        text = named_error_message(e)
        raise CliError(f"Error while executing config command: {text}", 1, plain=True) from None
    finally:
        admin.close(timeout=5)


_SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
_IP_QUOTA_KEYS = ("connection_creation_rate",)
_QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def _parse_user_client_alterations(args: argparse.Namespace, entities: list[tuple[str, str | None]],
                                   ) -> tuple[tuple[dict[str, float], list[str]] | None, list[Any] | None]:
    """Quota changes ({key: value}, [keys to delete]) or SCRAM alterations, with Kafka's ``ConfigCommand`` rules:
    clients take quota configs only, users quota or SCRAM configs but not both at once."""
    to_add = load_config_file(args.add_config_file)
    to_add.update(parse_add_config(args.add_config or ""))
    to_delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    scram_keys = [k for k in [*to_add, *to_delete] if k.upper() in _SCRAM_KEYS]
    unknown_add = [k for k in to_add if k not in _QUOTA_KEYS and k.upper() not in _SCRAM_KEYS]
    unknown_delete = [k for k in to_delete if k not in _QUOTA_KEYS and k.upper() not in _SCRAM_KEYS]
    types = [t for t, _ in entities]
    if types == ["ips"]:
        bad = [k for k in [*to_add, *to_delete] if k not in _IP_QUOTA_KEYS]
        if bad:
            raise CliError("Only connection quota configs can be added or deleted for 'ips' using "
                           f"--bootstrap-server. Unexpected config names: {','.join(bad)}", 2)
    elif "clients" in types:
        if unknown_add or [k for k in to_add if k.upper() in _SCRAM_KEYS]:
            raise CliError("Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected "
                           f"config names: {','.join(k for k in to_add if k not in _QUOTA_KEYS)}", 2)
        if unknown_delete or [k for k in to_delete if k.upper() in _SCRAM_KEYS]:
            raise CliError("Only quota configs can be deleted for 'clients' using --bootstrap-server. Unexpected "
                           f"config names: {','.join(k for k in to_delete if k not in _QUOTA_KEYS)}", 2)
    else:
        if unknown_add:
            raise CliError("Only quota and SCRAM credential configs can be added for 'users' using "
                           f"--bootstrap-server. Unexpected config names: {','.join(unknown_add)}", 2)
        if unknown_delete:
            raise CliError("Only quota and SCRAM credential configs can be deleted for 'users' using "
                           f"--bootstrap-server. Unexpected config names: {','.join(unknown_delete)}", 2)
        if scram_keys:
            if entities[0][1] == "":
                raise CliError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                               "Credentials using --bootstrap-server.", 2)
            if len(scram_keys) != len(to_add) + len(to_delete):
                raise CliError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                               "using --bootstrap-server.", 2)
            return None, _parse_scram_alterations(to_add, to_delete, entities[0][1] or "")
    values: dict[str, float] = {}
    for key, text in to_add.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise CliError(f"Cannot parse quota configuration value for {key}: {text}", 2) from None
    return (values, to_delete), None


def _quota_entity(entities: list[tuple[str, str | None]]) -> Any:
    from strom.admin.client_quotas import ClientQuotaEntity

    return ClientQuotaEntity({_QUOTA_ENTITY_TYPES[t]: (n or None) for t, n in entities})


def _quota_filter(entities: list[tuple[str, str | None]]) -> Any:
    from strom.admin.client_quotas import ClientQuotaFilter, ClientQuotaFilterComponent

    components = []
    for t, n in entities:
        entity_type = _QUOTA_ENTITY_TYPES[t]
        if n is None:
            components.append(ClientQuotaFilterComponent.of_entity_type(entity_type))
        elif n == "":
            components.append(ClientQuotaFilterComponent.of_default_entity(entity_type))
        else:
            components.append(ClientQuotaFilterComponent.of_entity(entity_type, n))
    return ClientQuotaFilter.contains_only(components)


def _alter_quotas(admin: Any, entities: list[tuple[str, str | None]], to_add: dict[str, float],
                  to_delete: list[str]) -> None:
    """Kafka's ``alterQuotaConfigs``: deleting a key the entity does not have is an error."""
    from strom.admin.client_quotas import ClientQuotaAlteration

    entity = _quota_entity(entities)
    current = wait(admin.describe_client_quotas(_quota_filter(entities))).get(entity, {})
    invalid = [k for k in to_delete if k not in current]
    if invalid:
        raise CliError(f"Invalid config(s): {','.join(invalid)}")
    ops = [ClientQuotaAlteration.Op(k, v) for k, v in to_add.items()]
    ops += [ClientQuotaAlteration.Op(k, None) for k in to_delete]
    wait(admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)]).all())


def java_double(value: float) -> str:
    """Java's ``Double.toString``, which Kafka's describe output uses (``1024.0``, ``1.048576E7``)."""
    if value != value or value in (float("inf"), float("-inf")):
        return {True: "NaN"}.get(value != value, "Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    from decimal import Decimal

    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = f"{digits[0]}." + ("".join(map(str, digits[1:])) or "0")
    return f"{'-' if sign else ''}{mantissa}E{exponent + len(digits) - 1}"


def _describe_quotas(admin: Any, entities: list[tuple[str, str | None]]) -> int:
    """Kafka's ``describeClientQuotaAndUserScramCredentialConfigs``: quota lines, then SCRAM lines for users."""
    from strom.common.error_codes import ResourceNotFoundError, UnsupportedVersionError

    types = [t for t, _ in entities]
    names = [n for _, n in entities]
    try:
        described = wait(admin.describe_client_quotas(_quota_filter(entities)))
    except UnsupportedVersionError:
        if "clients" in types or "ips" in types or "" in names:
            raise
        described = {}  # a broker without DescribeClientQuotas: its users' SCRAM credentials still show

    def sort_key(item: tuple[Any, dict[str, float]]) -> tuple[str, str, str]:
        e = item[0].entries()
        return (str(e.get("user", "")), str(e.get("client-id", "")), str(e.get("ip", "")))

    for entity, values in sorted(described.items(), key=sort_key):
        parts = []
        for entity_type, label in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip")):
            if entity_type in entity.entries():
                name = entity.entries()[entity_type]
                parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
        text = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        print(f"Quota configs for {', '.join(parts)} are {text}")
    if types == ["users"] and "" not in names:
        try:
            return _describe_users(admin, names[0])
        except ResourceNotFoundError:  # a user with quotas and no SCRAM credentials
            return 0
    return 0


def _parse_scram_alterations(to_add: dict[str, str], to_delete: list[str], user: str) -> list[Any]:
    """``SCRAM-SHA-256=[iterations=8192,password=secret]`` to add (iterations default 4096), ``SCRAM-SHA-512`` to
    delete: Kafka's ``ConfigCommand`` syntax for users."""
    from strom.admin.scram import UserScramCredentialDeletion, UserScramCredentialUpsertion

    out: list[Any] = []
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


def _run_on_zookeeper(args: argparse.Namespace, action: str, entity_type: str, name: str | None,
                      quota_changes: Any, scram: list[Any] | None) -> int:
    """``--zookeeper``: SCRAM credentials written to (or described from) ZooKeeper directly, Kafka 3.x's one
    remaining ZooKeeper use of kafka-configs.sh (brokers that authenticate to each other with SCRAM need their
    user before any broker runs); the brokers pick changes up through the config change notifications."""
    from strom.admin.scram import UserScramCredentialDeletion
    from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
    from strom.server.security.zk_credentials import ZkCredentialStore
    from strom.server.zk.kafka_zk_client import KafkaZkClient

    if args.bootstrap_server:
        raise CliError("Only one of --bootstrap-server or --zookeeper must be specified", 2)
    if entity_type != "users" or (action == "alter" and not scram) or \
            (action == "alter" and quota_changes is not None and any(quota_changes)):
        raise CliError("--zookeeper only alters or describes SCRAM credentials of users (--entity-type users "
                       "--add-config 'SCRAM-SHA-256=[password=...]'); use --bootstrap-server for everything else",
                       2)
    try:
        zk = KafkaZkClient.connect(args.zookeeper, connection_timeout_ms=15_000)
    except Exception as e:
        raise CliError(f"Cannot connect to ZooKeeper at {args.zookeeper}: {error_message(e)}", 1,
                       plain=True) from None
    try:
        store = ZkCredentialStore(zk)
        if action == "describe":
            for user, mechanisms in sorted(store.describe().items()):
                if name is None or user == name:
                    creds = ",".join(f"{m}=iterations={i}" for m, i in sorted(mechanisms.items()))
                    print(f"SCRAM credential configs for user-principal '{user}' are {creds}")
            return 0
        assert scram is not None and name is not None
        for change in scram:
            if isinstance(change, UserScramCredentialDeletion):
                store.delete(name, change.mechanism)
                continue
            try:
                cred = ScramCredential.generate(SCRAM_MECHANISMS[change.mechanism], change.password,
                                                change.iterations)
            except ValueError as e:
                raise CliError(f"Error while executing config command: {e}", 1, plain=True) from None
            store.upsert(name, change.mechanism, cred)
        print(f"Completed updating config for user {name}.")
        return 0
    finally:
        zk.close()


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

    kind = {"topics": ConfigResourceType.TOPIC, "broker-loggers": ConfigResourceType.BROKER_LOGGER,
            "client-metrics": ConfigResourceType.CLIENT_METRICS}
    return ConfigResource(kind.get(entity_type, ConfigResourceType.BROKER), name)


_KIND = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger", "client-metrics": "client-metric"}


def _label(entity_type: str, name: str) -> str:
    if entity_type == "brokers" and name == "":
        return "default config for brokers in the cluster"
    return f"config for {_KIND[entity_type]} {name}"


def _header(entity_type: str, name: str, describe_all: bool) -> str:
    if entity_type == "brokers" and name == "":
        return f"{'All' if describe_all else 'Default'} configs for brokers in the cluster are:"
    return f"{'All' if describe_all else 'Dynamic'} configs for {_KIND[entity_type]} {name} are:"


def format_entry(entry: Any) -> str:
    """Kafka's ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` line."""

    def shown(value: str | None) -> str:
        return "null" if entry.is_sensitive or value is None else value

    text = ", ".join(f"{s.source.name}:{s.name}={shown(s.value)}" for s in entry.synonyms)
    value = shown(entry.value)
    return f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} synonyms={{{text}}}"


def _describe(admin: Any, entity_type: str, name: str | None, describe_all: bool) -> int:
    from strom.admin import ConfigSource

    if name is not None:
        names = [name]
    elif entity_type == "topics":
        names = sorted(wait(admin.list_topics(list_internal=True).names()))
    else:
        nodes = wait(admin.describe_cluster().nodes())
        names = [str(n.node_id) for n in nodes] + ([""] if entity_type == "brokers" else [])
    resources = {n: _resource(entity_type, n) for n in names}
    result = admin.describe_configs(list(resources.values()), include_synonyms=True)
    if entity_type == "topics":
        wanted = ConfigSource.DYNAMIC_TOPIC_CONFIG
    elif entity_type == "client-metrics":
        wanted = ConfigSource.DYNAMIC_CLIENT_METRICS_CONFIG
    else:
        wanted = ConfigSource.DYNAMIC_BROKER_CONFIG
    for n in names:
        config = wait(result[resources[n]])
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if entity_type == "brokers" and n == "" else wanted
        every = describe_all or entity_type == "broker-loggers"  # a logger's level is always its own, as Kafka lists
        entries = list(config) if every else [e for e in config if e.source == source]
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
    if entity_type in ("topics", "brokers", "client-metrics") and to_delete:  # Kafka's: only set keys can go
        current = wait(admin.describe_configs([resource])[resource])
        source = (ConfigSource.DYNAMIC_TOPIC_CONFIG if entity_type == "topics" else
                  ConfigSource.DYNAMIC_CLIENT_METRICS_CONFIG if entity_type == "client-metrics" else
                  ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if name == "" else ConfigSource.DYNAMIC_BROKER_CONFIG)
        dynamic = {e.name for e in current if e.source == source}
        invalid = [k for k in to_delete if k not in dynamic]
        if invalid:
            raise CliError(f"Invalid config(s): {','.join(invalid)}")
    ops = [AlterConfigOp(k, v, AlterConfigOpType.SET) for k, v in to_add.items()]
    ops += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in to_delete]
    wait(admin.incremental_alter_configs({resource: ops})[resource])
    print(f"Completed updating {_label(entity_type, name)}.")
    return 0
