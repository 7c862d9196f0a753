"""Kafka's ZooKeeper layout: every znode path strom's cluster mode uses and the JSON each one holds.

Kafka counterpart: ``kafka.zk.ZkData`` (``ZkData.scala``, Kafka 2.8–3.x ZooKeeper mode). The paths and the JSON
are Kafka's byte for byte (compact JSON, Kafka's key names, the same ``version`` numbers), so Kafka's own
documentation of the layout describes strom's and tools that read Kafka's znodes read strom's::

  /cluster/id                                   {"version":"1","id":"<22-char base64 uuid>"}
  /controller                                   {"version":1,"brokerid":1,"timestamp":"1700000000000"}  ephemeral
  /controller_epoch                             5                                               (plain integer)
  /brokers/ids/<id>                             BrokerIdZNode v5 (endpoints, listener map, rack, ...)  ephemeral
  /brokers/seqid                                (data unused; its version numbers generated broker ids)
  /brokers/topics/<topic>                       {"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},
                                                 "removing_replicas":{},"topic_id":"<base64 uuid>"}
  /brokers/topics/<topic>/partitions/<p>/state  {"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,
                                                 "isr":[1,2,3]}
  /config/<topics|brokers|users|clients|ips>/<name>   {"version":1,"config":{"k":"v"}}   (<default> for defaults)
  /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<topic>"}   sequential
  /admin/delete_topics/<topic>                  (empty: a delete-topic marker)
  /admin/reassign_partitions                    {"version":1,"partitions":[{"topic":t,"partition":p,"replicas":[..]}]}
  /admin/preferred_replica_election             {"version":1,"partitions":[{"topic":t,"partition":p}]}
  /isr_change_notification/isr_change_<seq>     {"version":1,"partitions":[{"topic":t,"partition":p}]}
  /log_dir_event_notification/log_dir_event_<seq>  {"version":1,"broker":1,"event":1}
  /latest_producer_id_block                     {"version":1,"broker":1,"block_start":"0","block_end":"999"}
  /feature                                      {"version":1,"status":1,"features":{...}}
  /kafka-acl/<ResourceType>/<name>              {"version":1,"acls":[{"principal":..,"permissionType":..,
                                                 "operation":..,"host":..}]}
  /kafka-acl-extended/prefixed/<ResourceType>/<name>   (same JSON; prefixed patterns)
  /kafka-acl-changes/acl_changes_<seq>          "Topic:name"           /kafka-acl-extended-changes/...  JSON

Each ``...ZNode`` class is a namespace of static ``path`` / ``encode`` / ``decode`` functions named as in
Kafka. Decoded values are frozen slotted dataclasses. Malformed bytes raise :class:`ZNodeDecodeError` naming
the znode. Pure functions, no I/O; thread-safe.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from strom.common.errors import KafkaError
from strom.common.structs import TopicPartition

__all__ = [
    "ZNodeDecodeError", "EndPoint", "BrokerRegistration", "LeaderAndIsr", "ReplicaAssignment", "TopicAssignment",
    "ProducerIdsBlock", "AclEntry", "ZkVersion", "ConfigType", "sanitize", "desanitize",
    "uuid_to_kafka_string", "uuid_from_kafka_string",
    "ClusterIdZNode", "ControllerZNode", "ControllerEpochZNode", "BrokersZNode", "BrokerIdsZNode", "BrokerIdZNode",
    "BrokerSequenceIdZNode", "TopicsZNode", "TopicZNode", "TopicPartitionsZNode", "TopicPartitionZNode",
    "TopicPartitionStateZNode", "ConfigZNode", "ConfigEntityTypeZNode", "ConfigEntityZNode",
    "ConfigEntityChangeNotificationZNode", "ConfigEntityChangeNotificationSequenceZNode", "AdminZNode",
    "DeleteTopicsZNode", "DeleteTopicsTopicZNode", "ReassignPartitionsZNode", "PreferredReplicaElectionZNode",
    "IsrChangeNotificationZNode", "IsrChangeNotificationSequenceZNode", "LogDirEventNotificationZNode",
    "LogDirEventNotificationSequenceZNode", "ProducerIdBlockZNode", "FeatureZNode", "AclZNodes",
    "ConsumerPathZNode", "PERSISTENT_ZK_PATHS",
]


class ZNodeDecodeError(KafkaError, ValueError):
    """A znode holds bytes that are not the JSON Kafka writes there."""


class ZkVersion:
    """Kafka's ``ZkVersion``: -1 matches any version in a conditional set; -2 = the znode does not exist."""

    MATCH_ANY_VERSION = -1
    UNKNOWN_VERSION = -2


class ConfigType:
    """Kafka's ``ConfigType``: the entity types under ``/config``."""

    TOPIC = "topics"
    CLIENT = "clients"
    USER = "users"
    BROKER = "brokers"
    IP = "ips"
    CLIENT_METRICS = "client-metrics"  # KIP-714 subscriptions
    ALL = (TOPIC, CLIENT, USER, BROKER, IP, CLIENT_METRICS)


def _json(value: Mapping[str, Any]) -> bytes:
    # Jackson's compact output (no blanks), which is what Kafka writes.
    return json.dumps(value, separators=(",", ":")).encode()


def _parse(path: str, data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ZNodeDecodeError(f"Cannot parse the JSON in znode {path}: {e} ({data[:200]!r})") from None


def _require_object(path: str, data: bytes | None) -> dict[str, Any]:
    js = _parse(path, data)
    if not isinstance(js, dict):
        raise ZNodeDecodeError(f"Znode {path} does not hold a JSON object: {(data or b'')[:200]!r}")
    return js


def _field(path: str, js: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in js:
        raise ZNodeDecodeError(f"Znode {path} lacks the field '{key}': {json.dumps(js)[:200]}")
    value = js[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ZNodeDecodeError(f"Znode {path} field '{key}' has the wrong type: {value!r}")
    return value


def _int_list(path: str, key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ZNodeDecodeError(f"Znode {path} field '{key}' is not a list of integers: {value!r}")
    return tuple(value)


def uuid_to_kafka_string(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_kafka_string(s: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``."""
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (ValueError, TypeError):
        raise ValueError(f"Invalid Kafka uuid {s!r}") from None
    if len(raw) != 16:
        raise ValueError(f"Invalid Kafka uuid {s!r}: {len(raw)} bytes, expected 16")
    return uuid.UUID(bytes=raw)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` for user and client-id names in znode paths (URL-encoding, ``%20`` and
    ``%2A`` for blank and ``*``); ``<default>`` is kept as it is."""
    if name == "<default>":
        return name
    return quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize``."""
    return unquote(name)


# ---------------------------------------------------------------------------------------------- value types


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener of a broker (Kafka's ``kafka.cluster.EndPoint``)."""

    host: str
    port: int
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        """``LISTENER://host:port`` (IPv6 hosts in brackets, as Kafka's ``Utils.formatAddress``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @staticmethod
    def from_connection_string(value: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        """Kafka's ``EndPoint.createEndPoint``: the listener name maps to its security protocol through
        ``listener_security_protocol_map`` (a name without a map entry must itself be a protocol)."""
        name, sep, rest = value.partition("://")
        if not sep or not name:
            raise ValueError(f"Unable to parse {value!r} to a broker endpoint")
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit():
            raise ValueError(f"Unable to parse {value!r} to a broker endpoint")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        protocol = (protocol_map or {}).get(name, name)
        return EndPoint(host, int(port), name, protocol)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker's ``/brokers/ids/<id>`` registration (Kafka's ``BrokerInfo`` + ``Broker``).

    ``broker_epoch`` is the znode's creation zxid (``czxid``), Kafka's broker epoch (KIP-380): a restarted broker
    registers anew and gets a larger one, so the controller can tell it from its previous incarnation. It is -1
    on a registration not read back from ZooKeeper.
    """

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    features: tuple[tuple[str, int, int], ...] = ()  # (name, min_version, max_version), KIP-584
    version: int = 5
    timestamp_ms: int = 0
    broker_epoch: int = -1

    def endpoint(self, listener_name: str) -> EndPoint | None:
        for ep in self.endpoints:
            if ep.listener_name == listener_name:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leader, leader epoch and ISR, with the controller epoch that wrote them and the state
    znode's version (Kafka's ``LeaderAndIsr`` inside ``LeaderIsrAndControllerEpoch``).

    ``zk_version`` is the ``/state`` znode's data version: updates are compare-and-set on it.
    """

    NO_LEADER = -1
    LEADER_DURING_DELETE = -2
    INITIAL_LEADER_EPOCH = 0
    INITIAL_ZK_VERSION = 0

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0

    def new_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """A new leader (or ISR with a leader change): the leader epoch goes up by one (Kafka's
        ``newLeaderAndIsr``)."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), self.controller_epoch, self.zk_version)

    def new_isr(self, isr: Iterable[int]) -> LeaderAndIsr:
        """An ISR change under the same leader keeps the leader epoch (Kafka 2.7+ ``newRecoveringLeaderAndIsr``
        / AlterIsr semantics)."""
        return LeaderAndIsr(self.leader, self.leader_epoch, tuple(isr), self.controller_epoch, self.zk_version)

    def with_controller_epoch(self, controller_epoch: int) -> LeaderAndIsr:
        return LeaderAndIsr(self.leader, self.leader_epoch, self.isr, controller_epoch, self.zk_version)


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's replicas, with the replicas being added and removed by a reassignment (Kafka's
    ``ReplicaAssignment``)."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: the topic id and each partition's replica assignment (Kafka's
    ``TopicIdReplicaAssignment``). ``zk_version`` is the znode's version (for conditional updates)."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment] = field(default_factory=dict)
    zk_version: int = ZkVersion.UNKNOWN_VERSION

    def replicas(self, partition: int) -> tuple[int, ...]:
        a = self.partitions.get(partition)
        return a.replicas if a is not None else ()


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """A block of producer ids owned by one broker (Kafka's ``ProducerIdsBlock``)."""

    PRODUCER_ID_BLOCK_SIZE = 1000

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL in a ``/kafka-acl`` znode (Kafka's ``AclEntry`` JSON: principal, permissionType, operation, host)."""

    principal: str
    permission_type: str  # "Allow" | "Deny"
    operation: str  # "Read", "Write", "All", ...
    host: str = "*"


# ------------------------------------------------------------------------------------------------ znodes


class ClusterZNode:
    PATH = "/cluster"


class ClusterIdZNode:
    """``/cluster/id``: the cluster id every broker of the cluster shares."""

    PATH = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _json({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        js = _require_object(ClusterIdZNode.PATH, data)
        return str(_field(ClusterIdZNode.PATH, js, "id", str))


class ControllerZNode:
    """``/controller`` (ephemeral): the id of the broker that is the controller."""

    PATH = "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int | None = None) -> bytes:
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        return _json({"version": 1, "brokerid": broker_id, "timestamp": str(ts)})

    @staticmethod
    def decode(data: bytes) -> int:
        js = _require_object(ControllerZNode.PATH, data)
        return int(_field(ControllerZNode.PATH, js, "brokerid", int))


class ControllerEpochZNode:
    """``/controller_epoch``: the controller epoch as a plain decimal integer."""

    PATH = "/controller_epoch"
    INITIAL_CONTROLLER_EPOCH = 0
    INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode()

    @staticmethod
    def decode(data: bytes) -> int:
        try:
            return int(data.decode())
        except (UnicodeDecodeError, ValueError):
            raise ZNodeDecodeError(f"Znode {ControllerEpochZNode.PATH} does not hold an integer: {data[:50]!r}") from None


class BrokersZNode:
    PATH = "/brokers"


class BrokerIdsZNode:
    PATH = "/brokers/ids"


class BrokerSequenceIdZNode:
    """``/brokers/seqid``: each set bumps its version, which generates broker ids
    (``broker.id.generation.enable``)."""

    PATH = "/brokers/seqid"


class BrokerIdZNode:
    """``/brokers/ids/<id>`` (ephemeral): a live broker's registration (JSON v5 since Kafka 2.7)."""

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{BrokerIdsZNode.PATH}/{broker_id}"

    @staticmethod
    def encode(broker: BrokerRegistration, timestamp_ms: int | None = None) -> bytes:
        # host/port: the first PLAINTEXT endpoint, for clients older than v2 registrations (Kafka does the same).
        plain = next((ep for ep in broker.endpoints if ep.security_protocol == "PLAINTEXT"), None)
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        js: dict[str, Any] = {
            "version": broker.version,
            "host": plain.host if plain else None,
            "port": plain.port if plain else -1,
            "endpoints": [ep.connection_string for ep in broker.endpoints],
            "jmx_port": broker.jmx_port,
            "timestamp": str(ts),
        }
        if broker.rack is not None and broker.version >= 3:
            js["rack"] = broker.rack
        if broker.version >= 4:
            js["listener_security_protocol_map"] = {ep.listener_name: ep.security_protocol
                                                    for ep in broker.endpoints}
        if broker.version >= 5:
            js["features"] = {name: {"min_version": lo, "max_version": hi} for name, lo, hi in broker.features}
        return _json(js)

    @staticmethod
    def decode(broker_id: int, data: bytes, broker_epoch: int = -1) -> BrokerRegistration:
        path = BrokerIdZNode.path(broker_id)
        js = _require_object(path, data)
        version = int(_field(path, js, "version", int))
        jmx_port = int(js.get("jmx_port", -1))
        if version < 1:
            raise ZNodeDecodeError(f"Unsupported version of broker registration in {path}: {data[:200]!r}")
        try:
            if version == 1:
                endpoints: tuple[EndPoint, ...] = (EndPoint(str(js["host"]), int(js["port"])),)
            else:
                pmap = js.get("listener_security_protocol_map") or {}
                endpoints = tuple(EndPoint.from_connection_string(s, pmap) for s in _field(path, js, "endpoints", list))
        except (KeyError, ValueError, TypeError) as e:
            raise ZNodeDecodeError(f"Bad endpoints in broker registration {path}: {e}") from None
        features_js = js.get("features") or {}
        features = tuple(sorted((name, int(r.get("min_version", 0)), int(r.get("max_version", 0)))
                                for name, r in features_js.items()))
        rack = js.get("rack")
        ts = js.get("timestamp")
        return BrokerRegistration(broker_id, endpoints, str(rack) if rack is not None else None, jmx_port,
                                  features, version, int(ts) if isinstance(ts, str) and ts.isdigit() else 0,
                                  broker_epoch)


class TopicsZNode:
    PATH = "/brokers/topics"


class TopicZNode:
    """``/brokers/topics/<topic>``: the replica assignment (JSON v3 with ``topic_id`` since Kafka 2.8)."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.PATH}/{topic}"

    @staticmethod
    def encode(topic_id: uuid.UUID | None, assignment: Mapping[int, ReplicaAssignment | Sequence[int]]) -> bytes:
        partitions: dict[str, list[int]] = {}
        adding: dict[str, list[int]] = {}
        removing: dict[str, list[int]] = {}
        for p in sorted(assignment):
            a = assignment[p]
            ra = a if isinstance(a, ReplicaAssignment) else ReplicaAssignment(tuple(a))
            partitions[str(p)] = list(ra.replicas)
            if ra.adding_replicas:
                adding[str(p)] = list(ra.adding_replicas)
            if ra.removing_replicas:
                removing[str(p)] = list(ra.removing_replicas)
        js: dict[str, Any] = {"version": 3, "partitions": partitions, "adding_replicas": adding,
                              "removing_replicas": removing}
        if topic_id is not None:
            js["topic_id"] = uuid_to_kafka_string(topic_id)
        return _json(js)

    @staticmethod
    def decode(topic: str, data: bytes | None, zk_version: int = ZkVersion.UNKNOWN_VERSION) -> TopicAssignment:
        path = TopicZNode.path(topic)
        js = _parse(path, data)
        if js is None:
            return TopicAssignment(topic, None, {}, zk_version)
        if not isinstance(js, dict):
            raise ZNodeDecodeError(f"Znode {path} does not hold a JSON object: {data!r}")
        topic_id = None
        if js.get("topic_id"):
            try:
                topic_id = uuid_from_kafka_string(str(js["topic_id"]))
            except ValueError as e:
                raise ZNodeDecodeError(f"Znode {path}: {e}") from None
        adding = js.get("adding_replicas") or {}
        removing = js.get("removing_replicas") or {}
        partitions: dict[int, ReplicaAssignment] = {}
        for p, replicas in (js.get("partitions") or {}).items():
            if not p.isdigit():
                raise ZNodeDecodeError(f"Znode {path} has a bad partition number {p!r}")
            partitions[int(p)] = ReplicaAssignment(
                _int_list(path, f"partitions.{p}", replicas),
                _int_list(path, f"adding_replicas.{p}", adding.get(p, [])),
                _int_list(path, f"removing_replicas.{p}", removing.get(p, [])))
        return TopicAssignment(topic, topic_id, dict(sorted(partitions.items())), zk_version)


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(tp: TopicPartition) -> str:
        return f"{TopicPartitionsZNode.path(tp.topic)}/{tp.partition}"


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader, leader epoch, ISR and the writer's controller
    epoch (Kafka's ``LeaderIsrAndControllerEpoch``, JSON version 1)."""

    @staticmethod
    def path(tp: TopicPartition) -> str:
        return f"{TopicPartitionZNode.path(tp)}/state"

    @staticmethod
    def encode(state: LeaderAndIsr) -> bytes:
        return _json({"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
                      "leader_epoch": state.leader_epoch, "isr": list(state.isr)})

    @staticmethod
    def decode(tp: TopicPartition, data: bytes, zk_version: int) -> LeaderAndIsr:
        path = TopicPartitionStateZNode.path(tp)
        js = _require_object(path, data)
        return LeaderAndIsr(int(_field(path, js, "leader", int)), int(_field(path, js, "leader_epoch", int)),
                            _int_list(path, "isr", _field(path, js, "isr", list)),
                            int(_field(path, js, "controller_epoch", int)), zk_version)


class ConfigZNode:
    PATH = "/config"


class ConfigEntityTypeZNode:
    @staticmethod
    def path(entity_type: str) -> str:
        return f"{ConfigZNode.PATH}/{entity_type}"


class ConfigEntityZNode:
    """``/config/<type>/<name>``: an entity's dynamic config overrides (``<default>`` = the type's default
    entity, e.g. ``/config/brokers/<default>``). User and client names are stored sanitized."""

    DEFAULT = "<default>"

    @staticmethod
    def path(entity_type: str, entity_name: str) -> str:
        if entity_type in (ConfigType.USER, ConfigType.CLIENT):
            entity_name = "/".join(sanitize(part) if part != "clients" else part
                                   for part in entity_name.split("/"))
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{entity_name}"

    @staticmethod
    def encode(config: Mapping[str, str]) -> bytes:
        return _json({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, str]:
        js = _parse(ConfigZNode.PATH, data)
        if not isinstance(js, dict) or not isinstance(js.get("config"), dict):
            return {}
        return {str(k): str(v) for k, v in js["config"].items()}


class ConfigEntityChangeNotificationZNode:
    PATH = "/config/changes"


class ConfigEntityChangeNotificationSequenceZNode:
    """``/config/changes/config_change_<seq>`` (persistent sequential): which entity's config changed, so every
    broker's config-change listener re-reads it (notification JSON version 2)."""

    SEQUENCE_NUMBER_PREFIX = "config_change_"
    CREATE_PATH = f"{ConfigEntityChangeNotificationZNode.PATH}/{SEQUENCE_NUMBER_PREFIX}"

    @staticmethod
    def encode(sanitized_entity_path: str) -> bytes:
        return _json({"version": 2, "entity_path": sanitized_entity_path})

    @staticmethod
    def decode(data: bytes) -> str:
        path = ConfigEntityChangeNotificationZNode.PATH
        js = _require_object(path, data)
        if js.get("version") != 2:
            raise ZNodeDecodeError(f"Unsupported config change notification version in {path}: {data[:200]!r}")
        return str(_field(path, js, "entity_path", str))


class AdminZNode:
    PATH = "/admin"


class DeleteTopicsZNode:
    PATH = "/admin/delete_topics"


class DeleteTopicsTopicZNode:
    """``/admin/delete_topics/<topic>``: a marker asking the controller to delete the topic."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{DeleteTopicsZNode.PATH}/{topic}"


def _partition_list_encode(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]


def _partition_list_decode(path: str, data: bytes | None) -> set[TopicPartition]:
    js = _parse(path, data)
    if js is None:
        return set()
    if not isinstance(js, dict) or not isinstance(js.get("partitions"), list):
        raise ZNodeDecodeError(f"Znode {path} lacks a 'partitions' list: {data!r}")
    try:
        return {TopicPartition(str(p["topic"]), int(p["partition"])) for p in js["partitions"]}
    except (KeyError, TypeError, ValueError):
        raise ZNodeDecodeError(f"Znode {path} has a malformed partition entry: {data!r}") from None


class ReassignPartitionsZNode:
    """``/admin/reassign_partitions``: the legacy (pre-KIP-455) way to ask for a reassignment."""

    PATH = "/admin/reassign_partitions"

    @staticmethod
    def encode(reassignment: Mapping[TopicPartition, Sequence[int]]) -> bytes:
        return _json({"version": 1, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(reassignment[tp])}
            for tp in sorted(reassignment)]})

    @staticmethod
    def decode(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
        path = ReassignPartitionsZNode.PATH
        js = _require_object(path, data)
        out: dict[TopicPartition, tuple[int, ...]] = {}
        try:
            for p in _field(path, js, "partitions", list):
                out[TopicPartition(str(p["topic"]), int(p["partition"]))] = _int_list(path, "replicas", p["replicas"])
        except (KeyError, TypeError, ValueError):
            raise ZNodeDecodeError(f"Znode {path} has a malformed partition entry: {data!r}") from None
        return out


class PreferredReplicaElectionZNode:
    """``/admin/preferred_replica_election``: partitions whose preferred replica should become leader."""

    PATH = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: Iterable[TopicPartition]) -> bytes:
        return _json({"version": 1, "partitions": _partition_list_encode(partitions)})

    @staticmethod
    def decode(data: bytes) -> set[TopicPartition]:
        return _partition_list_decode(PreferredReplicaElectionZNode.PATH, data)


class IsrChangeNotificationZNode:
    PATH = "/isr_change_notification"


class IsrChangeNotificationSequenceZNode:
    """``/isr_change_notification/isr_change_<seq>``: partitions whose ISR a leader changed (pre-AlterIsr
    brokers; the controller then sends UpdateMetadata)."""

    SEQUENCE_NUMBER_PREFIX = "isr_change_"
    CREATE_PATH = f"{IsrChangeNotificationZNode.PATH}/{SEQUENCE_NUMBER_PREFIX}"

    @staticmethod
    def path(sequence_number: str = "") -> str:
        return f"{IsrChangeNotificationSequenceZNode.CREATE_PATH}{sequence_number}"

    @staticmethod
    def encode(partitions: Iterable[TopicPartition]) -> bytes:
        return _json({"version": 1, "partitions": _partition_list_encode(partitions)})

    @staticmethod
    def decode(data: bytes) -> set[TopicPartition]:
        return _partition_list_decode(IsrChangeNotificationZNode.PATH, data)


class LogDirEventNotificationZNode:
    PATH = "/log_dir_event_notification"


class LogDirEventNotificationSequenceZNode:
    """``/log_dir_event_notification/log_dir_event_<seq>``: a broker lost a log directory."""

    SEQUENCE_NUMBER_PREFIX = "log_dir_event_"
    CREATE_PATH = f"{LogDirEventNotificationZNode.PATH}/{SEQUENCE_NUMBER_PREFIX}"
    LOG_DIR_FAILURE_EVENT = 1

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _json({"version": 1, "broker": broker_id, "event": LogDirEventNotificationSequenceZNode.LOG_DIR_FAILURE_EVENT})

    @staticmethod
    def decode(data: bytes) -> int:
        path = LogDirEventNotificationZNode.PATH
        return int(_field(path, _require_object(path, data), "broker", int))


class ProducerIdBlockZNode:
    """``/latest_producer_id_block``: the last producer-id block handed out, cluster-wide."""

    PATH = "/latest_producer_id_block"
    CURRENT_VERSION = 1

    @staticmethod
    def encode(block: ProducerIdsBlock) -> bytes:
        return _json({"version": ProducerIdBlockZNode.CURRENT_VERSION, "broker": block.broker_id,
                      "block_start": str(block.first_producer_id), "block_end": str(block.last_producer_id)})

    @staticmethod
    def decode(data: bytes) -> ProducerIdsBlock:
        path = ProducerIdBlockZNode.PATH
        js = _require_object(path, data)
        try:
            start = int(_field(path, js, "block_start", str))
            end = int(_field(path, js, "block_end", str))
        except ValueError:
            raise ZNodeDecodeError(f"Znode {path} holds a non-numeric block: {data!r}") from None
        return ProducerIdsBlock(int(_field(path, js, "broker", int)), start, end - start + 1)


class FeatureZNode:
    """``/feature``: the cluster's finalized feature versions (KIP-584)."""

    PATH = "/feature"
    STATUS_DISABLED = 0
    STATUS_ENABLED = 1

    @staticmethod
    def encode(status: int, features: Mapping[str, tuple[int, int]]) -> bytes:
        return _json({"version": 1, "status": status, "features": {
            name: {"min_version_level": lo, "max_version_level": hi} for name, (lo, hi) in features.items()}})

    @staticmethod
    def decode(data: bytes) -> tuple[int, dict[str, tuple[int, int]]]:
        path = FeatureZNode.PATH
        js = _require_object(path, data)
        status = int(_field(path, js, "status", int))
        feats = _field(path, js, "features", dict)
        return status, {n: (int(r.get("min_version_level", 0)), int(r.get("max_version_level", 0)))
                        for n, r in feats.items()}


class AclZNodes:
    """ACL storage (Kafka's ``ZkAclStore`` / ``ZkAclChangeStore``): literal patterns under ``/kafka-acl``, other
    pattern types under ``/kafka-acl-extended/<pattern type>``; change events under ``/kafka-acl-changes``
    (``"Topic:name"``) and ``/kafka-acl-extended-changes`` (JSON)."""

    LITERAL_PATH = "/kafka-acl"
    EXTENDED_PATH = "/kafka-acl-extended"
    LITERAL_CHANGES_PATH = "/kafka-acl-changes"
    EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
    CHANGE_SEQUENCE_PREFIX = "acl_changes_"
    # SecurityUtils.resourceTypeName: the znode names of ResourceType values.
    RESOURCE_TYPE_NAMES = {"TOPIC": "Topic", "GROUP": "Group", "CLUSTER": "Cluster",
                           "TRANSACTIONAL_ID": "TransactionalId", "DELEGATION_TOKEN": "DelegationToken",
                           "USER": "User"}

    @staticmethod
    def store_path(pattern_type: str) -> str:
        pt = pattern_type.upper()
        return AclZNodes.LITERAL_PATH if pt == "LITERAL" else f"{AclZNodes.EXTENDED_PATH}/{pt.lower()}"

    @staticmethod
    def path(resource_type: str, resource_name: str, pattern_type: str = "LITERAL") -> str:
        rt = AclZNodes.RESOURCE_TYPE_NAMES.get(resource_type.upper(), resource_type)
        return f"{AclZNodes.store_path(pattern_type)}/{rt}/{resource_name}"

    @staticmethod
    def change_create_path(pattern_type: str = "LITERAL") -> str:
        base = AclZNodes.LITERAL_CHANGES_PATH if pattern_type.upper() == "LITERAL" else AclZNodes.EXTENDED_CHANGES_PATH
        return f"{base}/{AclZNodes.CHANGE_SEQUENCE_PREFIX}"

    @staticmethod
    def encode_change(resource_type: str, resource_name: str, pattern_type: str = "LITERAL") -> bytes:
        if pattern_type.upper() == "LITERAL":
            rt = AclZNodes.RESOURCE_TYPE_NAMES.get(resource_type.upper(), resource_type)
            return f"{rt}:{resource_name}".encode()
        return _json({"version": 1, "resourceType": resource_type.upper(), "name": resource_name,
                      "patternType": pattern_type.upper()})

    @staticmethod
    def encode(acls: Iterable[AclEntry]) -> bytes:
        return _json({"version": 1, "acls": [
            {"principal": a.principal, "permissionType": a.permission_type, "operation": a.operation,
             "host": a.host} for a in acls]})

    @staticmethod
    def decode(data: bytes | None) -> list[AclEntry]:
        js = _parse(AclZNodes.LITERAL_PATH, data)
        if js is None:
            return []
        try:
            return [AclEntry(str(a["principal"]), str(a["permissionType"]), str(a["operation"]), str(a["host"]))
                    for a in js["acls"]]
        except (KeyError, TypeError):
            raise ZNodeDecodeError(f"Malformed ACL znode: {data[:200]!r}") from None


class ConsumerPathZNode:
    """``/consumers``: the old (pre-0.9) consumer's path, created for compatibility."""

    PATH = "/consumers"


# Persistent paths Kafka creates when a broker starts (``ZkData.PersistentZkPaths``).
PERSISTENT_ZK_PATHS: tuple[str, ...] = (
    ConsumerPathZNode.PATH,
    BrokerIdsZNode.PATH,
    TopicsZNode.PATH,
    ConfigEntityChangeNotificationZNode.PATH,
    DeleteTopicsZNode.PATH,
    BrokerSequenceIdZNode.PATH,
    IsrChangeNotificationZNode.PATH,
    ProducerIdBlockZNode.PATH,
    LogDirEventNotificationZNode.PATH,
    *(ConfigEntityTypeZNode.path(t) for t in ConfigType.ALL),
)
