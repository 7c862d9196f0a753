"""Dynamic broker configs: broker settings changed at runtime with AlterConfigs (Kafka's ``DynamicBrokerConfig``).

Two levels, as in Kafka's ZooKeeper mode:

- per broker: the BROKER resource named by the broker id, stored at ``/config/brokers/<id>``;
- cluster-wide default: the BROKER resource named ``""``, stored at ``/config/brokers/<default>``.

A change is written to ZooKeeper with a ``brokers/<id>`` or ``brokers/<default>`` config change notification;
every broker re-reads the entity when it sees it (the broker that took the request applies it at once as well).
A standalone broker keeps both levels in ``<first log dir>/dynamic-broker-configs.json``. Precedence, highest
first: per-broker dynamic, dynamic default, ``server.properties``, Kafka's default; setting one key of a group of
synonyms dynamically (``log.retention.ms``) hides the static ones (``log.retention.hours``), as in Kafka.

What can change (Kafka's dynamic configs that strom has; any other key is refused with Kafka's message
"Cannot update these configs dynamically"):

- the default topic configs, by each topic config's broker key (``log.retention.ms``, ``log.segment.bytes``,
  ``message.max.bytes``, ``min.insync.replicas``, ``unclean.leader.election.enable``, ``compression.type`` ...):
  every log without a topic override of that key takes the new value (Kafka's ``DynamicLogConfig``);
- the log cleaner (``log.cleaner.threads``, ``log.cleaner.io.max.bytes.per.second``, ``log.cleaner.backoff.ms``,
  ``log.cleaner.dedupe.buffer.size``, ``log.cleaner.io.buffer.load.factor``, ``log.cleaner.io.buffer.size``):
  the cleaner threads restart with the new settings, as Kafka's ``LogCleaner.reconfigure`` does;
- replication throttles (``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``;
  ``strom.server.replication_quota``);
- connection limits (``max.connections``, ``max.connections.per.ip``, ``max.connections.per.ip.overrides``,
  ``max.connection.creation.rate``);
- a TLS listener's keystore and truststore, per broker and with the listener prefix only
  (``listener.name.<listener>.ssl.keystore.location`` ...), as in Kafka: the new files are loaded and checked
  before the change is accepted, and connections made afterwards use them. Altering them with unchanged values
  reloads the files (a certificate rotated in place), as Kafka's ``reloadUpdatedFilesWithoutConfigChange``;
- thread pool sizes Kafka resizes (``num.io.threads`` ...): stored and described, with no effect, since strom's
  broker has no such pools (in ``server.properties`` they are accepted and ignored too).

Thread-safety: event loop only (the stores' blocking calls run in an executor).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from strom.common.errors import ConfigError
from strom.common.ssl_factory import keystore_identity
from strom.server.broker_config import BrokerConfig
from strom.server.connection_quotas import parse_max_connections_per_ip_overrides
from strom.storage.fs import atomic_write
from strom.storage.log_cleaner import CleanerConfig
from strom.storage.log_config import BROKER_SYNONYMS, TOPIC_KEY_OF, LogConfig

__all__ = [
    "ALL_DYNAMIC_CONFIGS",
    "CLEANER_CONFIGS",
    "DEFAULT_ENTITY",
    "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG",
    "DynamicBrokerConfig",
    "DynamicConfigStore",
    "FileDynamicConfigStore",
    "LOG_CONFIGS",
    "REPLICATION_QUOTA_CONFIGS",
    "SOCKET_CONFIGS",
    "ZkDynamicConfigStore",
    "is_dynamic",
    "is_sensitive",
    "listener_ssl_config",
    "synonyms_of",
]

log = logging.getLogger("strom.server")

# DescribeConfigs ConfigSource codes (Kafka's ConfigSource).
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5

DEFAULT_ENTITY = ""
"""The resource name of the cluster-wide default (``<default>`` in ZooKeeper)."""

LOG_CONFIGS = frozenset(keys[0] for keys in BROKER_SYNONYMS.values())
"""Each topic config's broker key (Kafka: ``DynamicLogConfig.ReconfigurableConfigs``)."""
CLEANER_CONFIGS = frozenset(k for k in CleanerConfig.KEYS if k != "log.cleaner.enable")
SOCKET_CONFIGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
                            "max.connection.creation.rate"})
REPLICATION_QUOTA_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                       "replica.alter.log.dirs.io.max.bytes.per.second"})
"""Kafka's replication throttles (KIP-73), set per broker by ``reassign-partitions --throttle``, and the throttle of
replica moves between log dirs (KIP-113, ``--replica-alter-log-dirs-throttle``)."""
THREAD_CONFIGS = frozenset({"num.io.threads", "num.network.threads", "num.replica.fetchers",
                            "num.recovery.threads.per.data.dir", "background.threads"})
PRODUCER_STATE_CONFIGS = frozenset({"transaction.partition.verification.enable"})
"""Kafka's ``DynamicProducerStateManagerConfig`` (KIP-890 part 1's verification switch)."""
ALL_DYNAMIC_CONFIGS = (LOG_CONFIGS | CLEANER_CONFIGS | SOCKET_CONFIGS | REPLICATION_QUOTA_CONFIGS | THREAD_CONFIGS
                       | PRODUCER_STATE_CONFIGS)
SSL_RECONFIGURABLE_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates"})
"""Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS``: dynamic per broker, with a listener prefix only."""
_LISTENER_CONFIG = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")


def listener_ssl_config(key: str) -> str | None:
    """The listener name (upper case) of ``listener.name.<l>.<reconfigurable ssl key>``, else None."""
    m = _LISTENER_CONFIG.match(key)
    return m.group(1).upper() if m and m.group(2) in SSL_RECONFIGURABLE_CONFIGS else None


def is_dynamic(key: str) -> bool:
    return key in ALL_DYNAMIC_CONFIGS or listener_ssl_config(key) is not None


def is_sensitive(key: str) -> bool:
    """Kafka's PASSWORD-type configs: described without their value."""
    base = _LISTENER_CONFIG.sub(r"\2", key)
    return base.endswith(".password") or base == "ssl.keystore.key" or base.endswith("sasl.jaas.config")

_POSITIVE_INT_CONFIGS = THREAD_CONFIGS  # Kafka: each pool must keep at least one thread


def _fmt(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# Broker keys BrokerConfig does not hold (read by the log cleaner, or accepted and ignored), with Kafka's defaults.
_EXTRA_DEFAULTS: dict[str, str] = {
    **{key: _fmt(getattr(CleanerConfig(), attr)).replace("inf", "1.7976931348623157E308")
       for key, attr in CleanerConfig.KEYS.items()},
    "num.io.threads": "8", "num.network.threads": "3", "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1", "background.threads": "10",
}
_DEFAULTS: dict[str, str | None] = {}


def synonyms_of(key: str) -> tuple[str, ...]:
    """The broker keys that set the same thing as ``key`` (``log.retention.ms/minutes/hours``), ``key`` first."""
    topic_key = TOPIC_KEY_OF.get(key)
    if topic_key is None:
        return (key,)
    return (key, *(k for k in BROKER_SYNONYMS[topic_key] if k != key))


class DynamicConfigStore(Protocol):
    """Where the dynamic configs of an entity (a broker id, or ``""`` for the default) are kept."""

    def read(self, entity: str) -> dict[str, str]: ...

    def write(self, entity: str, configs: Mapping[str, str]) -> None: ...


class FileDynamicConfigStore:
    """A standalone broker's dynamic configs: ``<data dir>/dynamic-broker-configs.json``. Blocking."""

    FILE_NAME = "dynamic-broker-configs.json"

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / self.FILE_NAME

    def _load(self) -> dict[str, dict[str, str]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            return {str(e): {str(k): str(v) for k, v in c.items()} for e, c in data.get("entities", {}).items()}
        except (ValueError, AttributeError, TypeError) as e:
            raise OSError(f"cannot read dynamic broker configs from {self.path}: {e}") from None

    def read(self, entity: str) -> dict[str, str]:
        return self._load().get(entity, {})

    def write(self, entity: str, configs: Mapping[str, str]) -> None:
        entities = self._load()
        if configs:
            entities[entity] = dict(configs)
        else:
            entities.pop(entity, None)
        atomic_write(str(self.path), json.dumps({"version": 1, "entities": entities}, indent=1, sort_keys=True)
                     .encode())


class ZkDynamicConfigStore:
    """``/config/brokers/<id>`` and ``/config/brokers/<default>``, with a change notification per write. Blocking
    (ZooKeeper round trips)."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    @staticmethod
    def _name(entity: str) -> str:
        return entity or "<default>"

    def read(self, entity: str) -> dict[str, str]:
        return self.zk.get_entity_configs("brokers", self._name(entity))

    def write(self, entity: str, configs: Mapping[str, str]) -> None:
        self.zk.set_or_create_entity_configs("brokers", self._name(entity), configs)
        self.zk.create_config_change_notification(f"brokers/{self._name(entity)}")


Reconfigure = Callable[["DynamicBrokerConfig", frozenset[str]], None]
KeyFilter = Callable[[str], bool]


class DynamicBrokerConfig:
    """The broker's current config: ``server.properties`` with the dynamic levels over it.

    Components register with :meth:`add_reconfigurable` for the keys they follow; an update that changes one of
    them calls the component with this object (``current``, ``log_config``, ``cleaner_config`` already new) and
    the changed keys.
    """

    def __init__(self, static: BrokerConfig, store: DynamicConfigStore | None = None) -> None:
        self.static = static
        self.node_id = static.node_id
        self.store = store
        self.broker_configs: dict[str, str] = {}
        self.default_configs: dict[str, str] = {}
        self.current, self.log_config, self.cleaner_config = self._build(dict(static.originals))
        self._props = dict(static.originals)
        self._reconfigurables: list[tuple[KeyFilter, Reconfigure]] = []
        self._keystores: dict[str, tuple[str, frozenset[tuple[str, str]]]] = {}  # listener -> (DN, SANs) served

    # -- building and validating ----------------------------------------------------------------------------
    def _effective(self, default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
        props = dict(self.static.originals)
        for layer in (default, broker):
            for key, value in layer.items():
                for synonym in synonyms_of(key):
                    props.pop(synonym, None)
                props[key] = value
        return props

    @staticmethod
    def _build(props: dict[str, str]) -> tuple[BrokerConfig, LogConfig, CleanerConfig]:
        """The configs ``props`` make; ConfigError names the first bad value."""
        for key in _POSITIVE_INT_CONFIGS & props.keys():
            try:
                ok = int(props[key]) >= 1
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"Invalid value {props[key]} for configuration {key}: Value must be at least 1")
        config = BrokerConfig(props)
        log_config = LogConfig.from_broker_props(props)
        try:
            cleaner_config = CleanerConfig.from_broker_props(props)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        parse_max_connections_per_ip_overrides(str(config["max.connections.per.ip.overrides"] or ""))
        return config, log_config, cleaner_config

    @staticmethod
    def check_names(props: Iterable[str], per_broker: bool = True) -> None:
        """ConfigError unless every key may be changed at runtime at this level (Kafka's ``validateConfigs``
        messages, in its order)."""
        def refuse(keys: list[str], why: str) -> None:
            if keys:
                raise ConfigError(f"{why}: Set({', '.join(sorted(keys))})")

        keys = list(props)
        refuse([k for k in keys if not is_dynamic(k) and k not in SSL_RECONFIGURABLE_CONFIGS],
               "Cannot update these configs dynamically")
        refuse([k for k in keys if k in SSL_RECONFIGURABLE_CONFIGS],
               "These security configs can be dynamically updated only per-listener using the listener prefix")
        if not per_broker:
            refuse([k for k in keys if listener_ssl_config(k) is not None],
                   "Cannot update these configs at default cluster level, broker id must be specified")

    def validate(self, entity: str, props: Mapping[str, str]) -> None:
        """Whether ``props`` may become the complete dynamic config of ``entity`` (ConfigError if not)."""
        self.check_names(props, per_broker=entity != DEFAULT_ENTITY)
        if entity == DEFAULT_ENTITY:
            config = self._build(self._effective(props, self.broker_configs))[0]
        else:
            config = self._build(self._effective(self.default_configs, props))[0]
        for listener in sorted({n for k in props if (n := listener_ssl_config(k)) is not None}):
            self.check_ssl(config, listener)
            self._check_keystore_compatible(config, listener)

    def remember_keystore(self, listener: str) -> None:
        """The certificate ``listener`` serves now (at start, and after a new keystore is loaded): a later keystore
        must keep its identity (:meth:`_check_keystore_compatible`), even when its file is rewritten in place."""
        try:
            identity = keystore_identity(lambda key: self.current.listener_value(listener, key))
        except OSError:
            return
        if identity is not None:
            self._keystores[listener] = identity

    def _check_keystore_compatible(self, config: BrokerConfig, listener: str) -> None:
        """Kafka's ``SslFactory.CertificateEntries.ensureCompatible``: a new keystore keeps the subject DN (unless
        ``ssl.allow.dn.changes``) and every subject alternative name (unless ``ssl.allow.san.changes``) of the
        certificate the listener serves, so a rotation cannot change who the broker is by mistake."""
        old = self._keystores.get(listener)
        try:
            new = keystore_identity(lambda key: config.listener_value(listener, key))
        except OSError as e:
            raise ConfigError(f"Invalid SSL keystore of listener {listener}: {e}") from None
        if old is None or new is None:
            return

        def allowed(key: str) -> bool:
            return str(config.listener_value(listener, key, False)).strip().lower() == "true"

        if not allowed("ssl.allow.dn.changes") and old[0].lower() != new[0].lower():
            raise ConfigError(f"Keystore DistinguishedName does not match:  existing={{DN={old[0]}}}, "
                              f"new={{DN={new[0]}}}")
        if not allowed("ssl.allow.san.changes") and not old[1] <= new[1]:
            raise ConfigError(f"Keystore SubjectAltNames do not match:  existing={{SAN={_sans(old[1])}}}, "
                              f"new={{SAN={_sans(new[1])}}}")

    @staticmethod
    def check_ssl(config: BrokerConfig, listener: str) -> Any:
        """The TLS context ``config`` gives ``listener`` (ConfigError: not a TLS listener, or its files do not
        load)."""
        from strom.server.security.ssl_factory import server_ssl_context

        if not any(lst.name == listener and lst.uses_ssl for lst in config.listeners):
            raise ConfigError(f"Listener {listener} is not a TLS listener of this broker")
        try:
            return server_ssl_context(config, listener)
        except (OSError, ValueError) as e:
            raise ConfigError(f"Invalid SSL keystore or truststore of listener {listener}: {e}") from None

    def entity_configs(self, entity: str) -> dict[str, str]:
        return dict(self.default_configs if entity == DEFAULT_ENTITY else self.broker_configs)

    # -- updating ---------------------------------------------------------------------------------------------
    def add_reconfigurable(self, keys: Iterable[str] | KeyFilter, reconfigure: Reconfigure) -> None:
        """Call ``reconfigure`` when one of ``keys`` (a set, or a test of a key) changes."""
        self._reconfigurables.append((keys if callable(keys) else frozenset(keys).__contains__, reconfigure))

    def load(self) -> None:
        """Read both levels from the store (at start, before components are built from :attr:`current`)."""
        if self.store is None:
            return
        self.update(DEFAULT_ENTITY, self.store.read(DEFAULT_ENTITY))
        self.update(str(self.node_id), self.store.read(str(self.node_id)))

    def update(self, entity: str, props: Mapping[str, str], reload: Iterable[str] = ()) -> frozenset[str]:
        """Make ``props`` the dynamic config of ``entity`` (``""`` or this broker's id; another id is ignored) and
        reconfigure what follows the keys that changed; returns those keys. Stored values that are not valid
        (written by another version, or by hand) are left out with an error in the log, as Kafka does. Keys in
        ``reload`` count as changed for the components that follow them (files rewritten in place)."""
        if entity not in (DEFAULT_ENTITY, str(self.node_id)):
            return frozenset()
        kept = self._valid_subset(entity, props)
        default = kept if entity == DEFAULT_ENTITY else self.default_configs
        broker = kept if entity != DEFAULT_ENTITY else self.broker_configs
        props_new = self._effective(default, broker)
        changed = frozenset(k for k in props_new.keys() | self._props.keys() if props_new.get(k) != self._props.get(k))
        self.current, self.log_config, self.cleaner_config = self._build(props_new)
        self._props = props_new
        if entity == DEFAULT_ENTITY:
            self.default_configs = dict(kept)
        else:
            self.broker_configs = dict(kept)
        if changed:
            log.info("dynamic broker config%s changed: %s", " default" if entity == DEFAULT_ENTITY else "",
                     ", ".join(f"{k}={props_new.get(k)}" for k in sorted(changed)))
        touched = changed | frozenset(reload)
        for follows, reconfigure in self._reconfigurables:
            mine = frozenset(k for k in touched if follows(k))
            if mine:
                try:
                    reconfigure(self, mine)
                except Exception:
                    log.exception("reconfiguring %s failed", ", ".join(sorted(mine)))
        return changed

    def _valid_subset(self, entity: str, props: Mapping[str, str]) -> dict[str, str]:
        kept = {k: str(v) for k, v in props.items() if is_dynamic(k)
                and (entity != DEFAULT_ENTITY or listener_ssl_config(k) is None)}
        if len(kept) != len(props):
            log.error("non-dynamic configs in the dynamic config of %s will be ignored: %s",
                      entity or "<default>", ", ".join(sorted(set(props) - set(kept))))
        try:
            self.validate(entity, kept)
            return kept
        except ConfigError:
            pass
        good = {}
        for key, value in kept.items():
            try:
                self.validate(entity, {key: value})
                good[key] = value
            except ConfigError as e:
                log.error("dynamic config %s=%s of %s will be ignored: %s", key, value, entity or "<default>", e)
        return good

    # -- describing -------------------------------------------------------------------------------------------
    def describe(self) -> list[tuple[str, str | None, int]]:
        """(name, value, source) of every broker config, current values (DescribeConfigs on this broker)."""
        rows = {n: v for n, v, _d in self.current.describe()}
        for key, default in _EXTRA_DEFAULTS.items():
            rows[key] = self._props.get(key, default)
        for key in self.broker_configs.keys() | self.default_configs.keys():
            rows.setdefault(key, self._props.get(key))  # listener.name.<l>.ssl.* ...
        return [(n, v, self.source(n)) for n, v in sorted(rows.items())]

    @staticmethod
    def default_value(key: str) -> str | None:
        """Kafka's default of a broker key (what a broker without server.properties has)."""
        if not _DEFAULTS:
            _DEFAULTS.update((n, v) for n, v, _d in BrokerConfig({}).describe())
            _DEFAULTS.update(_EXTRA_DEFAULTS)
        return _DEFAULTS.get(key)

    def source(self, key: str) -> int:
        if key in self.broker_configs:
            return DYNAMIC_BROKER_CONFIG
        if key in self.default_configs:
            return DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.static.originals:
            return STATIC_BROKER_CONFIG
        return DEFAULT_CONFIG

    def levels(self, key: str) -> list[tuple[str, str, int]]:
        """(name, value, source) of every level that sets ``key`` or a synonym of it, highest precedence first
        (DescribeConfigs ``synonyms``; the DEFAULT_CONFIG entry is the caller's)."""
        out = []
        for layer, source in ((self.broker_configs, DYNAMIC_BROKER_CONFIG),
                              (self.default_configs, DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.static.originals, STATIC_BROKER_CONFIG)):
            out.extend((k, str(layer[k]), source) for k in synonyms_of(key) if k in layer)
        return out


def _sans(sans: frozenset[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{t}:{v}" for t, v in sorted(sans)) + "]"
