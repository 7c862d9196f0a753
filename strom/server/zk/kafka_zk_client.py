"""A blocking client for Kafka's znodes over kazoo (Kafka's ``kafka.zk.KafkaZkClient`` + ``ZooKeeperClient``).

The broker calls it from worker threads: every method blocks until ZooKeeper answered. A request made while
the connection is down is retried until the client is connected again, for at most
``zookeeper.connection.timeout.ms``; after that it raises :class:`ZooKeeperClientTimeoutError`. A session that
expires is replaced by a new one automatically (kazoo reconnects); the handlers registered with
:meth:`KafkaZkClient.register_state_change_handler` then run once, on their own thread, to re-create what
belonged to the old session (the broker's ephemeral ``/brokers/ids/<id>``), as Kafka's
``StateChangeHandler.afterInitializingSession`` does.

Watches (:meth:`watch_children`, :meth:`watch_data`) and session listeners call back on kazoo's callback thread:
callbacks must be quick and must not block on ZooKeeper; hand the event to your own thread or event loop
(``loop.call_soon_threadsafe``).

Writes a controller makes can be fenced with ``expected_controller_epoch_zk_version``: the write and a check of
``/controller_epoch``'s version go in one ZooKeeper transaction, and a controller that was replaced gets
:class:`ControllerMovedError` instead of overwriting its successor's state (Kafka's ``MultiOp`` with
``CheckOp(ControllerEpochZNode.path, expectedControllerEpochZkVersion)``).

Thread-safe: one instance is shared by all of a broker's threads.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from strom.common.structs import TopicPartition
from strom.server.zk.errors import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    ProducerIdsExhaustedError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkVersionConflictError,
    ZooKeeperClientError,
    ZooKeeperClientTimeoutError,
)
from strom.server.zk.znodes import (
    PERSISTENT_ZK_PATHS,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerRegistration,
    BrokerSequenceIdZNode,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityTypeZNode,
    ConfigEntityZNode,
    ConfigType,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    DeleteTopicsZNode,
    IsrChangeNotificationSequenceZNode,
    LeaderAndIsr,
    LogDirEventNotificationSequenceZNode,
    LogDirEventNotificationZNode,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ProducerIdsBlock,
    ReassignPartitionsZNode,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicsZNode,
    TopicZNode,
    ZkVersion,
    ZNodeDecodeError,
)

__all__ = ["KafkaZkClient", "ZkSessionState", "WatchHandle", "parse_connect_string"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_LONG_MAX = 2**63 - 1


def _same_state(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    """Equal but for the znode version (Kafka's ``checkLeaderAndIsrZkData``)."""
    return (a.leader, a.leader_epoch, a.isr, a.controller_epoch) == (b.leader, b.leader_epoch, b.isr,
                                                                     b.controller_epoch)


class ZkSessionState:
    """What session listeners are told (kazoo's states): connected; suspended = connection lost, the session
    may still be alive; lost = the session expired (its ephemeral znodes are gone) or the client closed."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


def parse_connect_string(connect_string: str) -> tuple[str, str]:
    """Split ``h1:p1,h2:p2/chroot`` into the host list and the chroot (``""`` when none), as ZooKeeper does."""
    s = connect_string.strip()
    if not s:
        raise ZooKeeperClientError("zookeeper.connect is empty")
    slash = s.find("/")
    hosts, chroot = (s, "") if slash < 0 else (s[:slash], s[slash:].rstrip("/"))
    if not hosts or any(not h.strip() for h in hosts.split(",")):
        raise ZooKeeperClientError(f"Invalid zookeeper.connect {connect_string!r}: expected host:port[,host:port...][/chroot]")
    for h in hosts.split(","):
        _, colon, port = h.strip().rpartition(":")
        if colon and not port.isdigit():
            raise ZooKeeperClientError(f"Invalid zookeeper.connect {connect_string!r}: bad port in {h.strip()!r}")
    if "//" in chroot:
        raise ZooKeeperClientError(f"Invalid zookeeper.connect {connect_string!r}: bad chroot {chroot!r}")
    return hosts, chroot


@dataclass(frozen=True, slots=True)
class _StateChangeHandler:
    name: str
    after_initializing_session: Callable[[], None]
    before_initializing_session: Callable[[], None] | None


class WatchHandle:
    """A data or children watch set by :class:`KafkaZkClient`; :meth:`cancel` stops further callbacks."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class KafkaZkClient:
    """Kafka's znodes, read and written with Kafka's semantics (Kafka's ``KafkaZkClient``). Thread-safe.

    Build one with :meth:`connect`; :meth:`close` ends the session (its ephemeral znodes vanish at once).
    """

    def __init__(self, zk: KazooClient, connect_string: str, session_timeout_ms: int,
                 connection_timeout_ms: int) -> None:
        self._zk = zk
        self.connect_string = connect_string
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self._lock = threading.Lock()
        self._producer_id_lock = threading.Lock()
        self._handlers: dict[str, _StateChangeHandler] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._session_lost = False
        self._closed = False
        zk.add_listener(self._on_state)

    # ------------------------------------------------------------------------------------------ lifecycle

    @classmethod
    def connect(cls, connect_string: str, session_timeout_ms: int = 18000,
                connection_timeout_ms: int | None = None) -> KafkaZkClient:
        """Connect to ``h:p[,h:p...][/chroot]`` (``zookeeper.connect``), creating the chroot path when it is
        missing, as Kafka's ``KafkaServer.initZkClient`` does. Kafka's defaults:
        ``zookeeper.session.timeout.ms`` 18000, ``zookeeper.connection.timeout.ms`` = the session timeout.

        Raises :class:`ZooKeeperClientTimeoutError` ("Timed out waiting for connection to zookeeper at X after
        N ms") when no server answers in time.
        """
        conn_ms = session_timeout_ms if connection_timeout_ms is None else connection_timeout_ms
        hosts, chroot = parse_connect_string(connect_string)
        deadline = time.monotonic() + conn_ms / 1000
        if chroot:
            # A client inside a missing chroot cannot create it: make it from the root first.
            root = cls._start_kazoo(hosts, connect_string, session_timeout_ms, conn_ms, deadline)
            try:
                root.ensure_path(chroot)
            except KazooException as e:
                raise ZooKeeperClientError(f"Cannot create the chroot {chroot} on {hosts}: {e!r}") from None
            finally:
                root.stop()
                root.close()
        zk = cls._start_kazoo(hosts + chroot, connect_string, session_timeout_ms, conn_ms, deadline)
        return cls(zk, connect_string, session_timeout_ms, conn_ms)

    @staticmethod
    def _start_kazoo(hosts: str, connect_string: str, session_timeout_ms: int, conn_ms: int,
                     deadline: float) -> KazooClient:
        zk = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=1.5, max_delay=1.0),
                         logger=logging.getLogger("strom.server.zk.kazoo"))
        try:
            zk.start(timeout=max(0.001, deadline - time.monotonic()))
        except KazooTimeoutError:
            zk.stop()
            zk.close()
            raise ZooKeeperClientTimeoutError(
                f"Timed out waiting for connection to zookeeper at {connect_string} after {conn_ms} ms") from None
        return zk

    def close(self) -> None:
        """End the session (Kafka's ``KafkaZkClient.close``): the ephemeral znodes of this client go away now,
        not after the session timeout. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._zk.stop()
        finally:
            self._zk.close()

    def __enter__(self) -> KafkaZkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session id (changes after an expiry)."""
        client_id = self._zk.client_id
        return int(client_id[0]) if client_id else 0

    def _owned(self, stat: ZnodeStat) -> bool:
        """The znode is an ephemeral of this client's current session."""
        return stat.ephemeralOwner != 0 and stat.ephemeralOwner == self.session_id

    @property
    def connected(self) -> bool:
        return bool(self._zk.connected)

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client, for tests and for requests this class does not wrap."""
        return self._zk

    # --------------------------------------------------------------------------------- requests and retry

    def _retry(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one ZooKeeper request, retrying while disconnected for up to the connection timeout (Kafka's
        ``retryRequestsUntilConnected``)."""
        if self._closed:
            raise ZooKeeperClientError("The ZooKeeper client is closed")
        retry = KazooRetry(max_tries=-1, delay=0.02, backoff=1.5, max_delay=0.5,
                           deadline=self.connection_timeout_ms / 1000, ignore_expire=True)
        try:
            return retry(func, *args, **kwargs)
        except RetryFailedError:
            raise ZooKeeperClientTimeoutError(
                f"Timed out waiting for connection to zookeeper at {self.connect_string} after "
                f"{self.connection_timeout_ms} ms") from None

    def _multi_with_check(self, expected_controller_epoch_zk_version: int | None,
                          add_ops: Callable[[Any], None]) -> list[Any]:
        """A transaction of ``add_ops``'s operations, preceded by a check of ``/controller_epoch``'s version
        when one is expected. Returns the results of ``add_ops``'s operations; raises
        :class:`ControllerMovedError` when the check failed."""

        def run() -> list[Any]:
            t = self._zk.transaction()
            if expected_controller_epoch_zk_version is not None:
                t.check(ControllerEpochZNode.PATH, expected_controller_epoch_zk_version)
            add_ops(t)
            return list(t.commit())

        results = self._retry(run)
        if expected_controller_epoch_zk_version is not None:
            check = results.pop(0)
            if isinstance(check, (BadVersionError, NoNodeError)):
                raise ControllerMovedError(
                    f"Controller moved to another broker: /controller_epoch is no longer at version "
                    f"{expected_controller_epoch_zk_version}")
        return results

    @staticmethod
    def _first_error(results: Sequence[Any]) -> Exception | None:
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                return r
        return None

    def get_data_and_version(self, path: str) -> tuple[bytes | None, int]:
        """A znode's data and data version; ``(None, ZkVersion.UNKNOWN_VERSION)`` when it does not exist
        (Kafka's ``getDataAndVersion``)."""
        try:
            data, stat = self._retry(self._zk.get, path)
        except NoNodeError:
            return None, ZkVersion.UNKNOWN_VERSION
        return data, stat.version

    def get_children(self, path: str) -> list[str]:
        """A znode's children, sorted; ``[]`` when it does not exist (Kafka's ``getChildren``)."""
        try:
            return sorted(self._retry(self._zk.get_children, path))
        except NoNodeError:
            return []

    def path_exists(self, path: str) -> bool:
        return self._retry(self._zk.exists, path) is not None

    def make_sure_persistent_path_exists(self, path: str) -> None:
        """Create ``path`` and its parents when missing (Kafka's ``makeSurePersistentPathExists``)."""
        self._retry(self._zk.ensure_path, path)

    def delete_path(self, path: str, expected_version: int = ZkVersion.MATCH_ANY_VERSION,
                    recursive: bool = False) -> bool:
        """Delete a znode (and its subtree with ``recursive``); False when it did not exist
        (Kafka's ``deletePath`` / ``deleteRecursive``)."""
        try:
            self._retry(self._zk.delete, path, version=expected_version, recursive=recursive)
        except NoNodeError:
            return False
        except BadVersionError:
            raise ZkVersionConflictError(f"Cannot delete {path}: its version is not {expected_version}") from None
        except NotEmptyError:
            raise ZooKeeperClientError(f"Cannot delete {path}: it has children") from None
        return True

    def create_top_level_paths(self) -> None:
        """The persistent paths a broker expects (Kafka's ``createTopLevelPaths``: /brokers/ids,
        /brokers/topics, /config/changes, /config/<type>, /admin/delete_topics, /isr_change_notification, ...)."""
        for path in PERSISTENT_ZK_PATHS:
            self.make_sure_persistent_path_exists(path)

    # ------------------------------------------------------------------------------------------- brokers

    def register_broker(self, broker: BrokerRegistration, wait_for_stale_ms: int = 0) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; return the broker epoch (the znode's czxid) (Kafka's
        ``registerBroker``).

        When another session holds the id, wait up to ``wait_for_stale_ms`` for it to go (the previous run of a
        broker that was killed keeps its znode until its session expires), then raise
        :class:`BrokerIdAlreadyRegisteredError`. A create whose reply was lost and that did succeed is
        recognised by the znode's owner being this session.
        """
        path = BrokerIdZNode.path(broker.broker_id)
        self.make_sure_persistent_path_exists(BrokerIdsZNode.PATH)
        deadline = time.monotonic() + wait_for_stale_ms / 1000
        while True:
            try:
                _, stat = self._retry(self._zk.create, path, BrokerIdZNode.encode(broker), ephemeral=True,
                                      include_data=True)
                log.info("Registered broker %d at path %s with epoch %d", broker.broker_id, path, stat.czxid)
                return int(stat.czxid)
            except NodeExistsError:
                pass
            gone = threading.Event()

            def watcher(_event: Any, gone: threading.Event = gone) -> None:
                gone.set()

            try:
                _, stat = self._retry(self._zk.get, path, watch=watcher)
            except NoNodeError:
                continue
            if self._owned(stat):
                return int(stat.czxid)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdAlreadyRegisteredError(
                    f"Broker id {broker.broker_id} is already registered at {path} by another ZooKeeper session "
                    f"(0x{stat.ephemeralOwner:x}): is another broker running with broker.id={broker.broker_id}?")
            gone.wait(remaining)

    def update_broker_info(self, broker: BrokerRegistration) -> None:
        """Rewrite this broker's registration in place (Kafka's ``updateBrokerInfo``)."""
        try:
            self._retry(self._zk.set, BrokerIdZNode.path(broker.broker_id), BrokerIdZNode.encode(broker))
        except NoNodeError:
            raise ZkNoNodeError(f"Broker {broker.broker_id} is not registered") from None

    def get_all_broker_ids(self) -> list[int]:
        """Ids of the live brokers, sorted (Kafka's ``getSortedBrokerList``)."""
        return sorted(int(c) for c in self.get_children(BrokerIdsZNode.PATH) if c.isdigit())

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        """One live broker's registration with its epoch, or None (Kafka's ``getBroker``)."""
        try:
            data, stat = self._retry(self._zk.get, BrokerIdZNode.path(broker_id))
        except NoNodeError:
            return None
        return BrokerIdZNode.decode(broker_id, data, int(stat.czxid))

    def get_all_brokers(self) -> list[BrokerRegistration]:
        """Every live broker's registration, by id (Kafka's ``getAllBrokersInCluster`` /
        ``getAllBrokerAndEpochsInCluster``: ``broker_epoch`` is set)."""
        out = []
        for broker_id in self.get_all_broker_ids():
            b = self.get_broker(broker_id)
            if b is not None:  # it may have gone between the listing and the read
                out.append(b)
        return out

    def generate_broker_sequence_id(self) -> int:
        """A new number from ``/brokers/seqid``'s version (Kafka's ``generateBrokerSequenceId``, used with
        ``reserved.broker.max.id`` to generate broker ids)."""
        self.make_sure_persistent_path_exists(BrokerSequenceIdZNode.PATH)
        stat = self._retry(self._zk.set, BrokerSequenceIdZNode.PATH, b"", version=-1)
        return int(stat.version)

    # ---------------------------------------------------------------------------------------- controller

    def register_controller_and_increment_controller_epoch(self, broker_id: int) -> tuple[int, int] | None:
        """Try to become controller: atomically create the ephemeral ``/controller`` and bump
        ``/controller_epoch`` with compare-and-set (created with epoch 0 when absent). Returns
        ``(new_epoch, epoch_zk_version)`` or None when another broker holds ``/controller`` or bumped the epoch
        first (Kafka's ``registerControllerAndIncrementControllerEpoch``)."""
        epoch_and_version = self.get_controller_epoch()
        if epoch_and_version is None:
            try:
                self._retry(self._zk.create, ControllerEpochZNode.PATH,
                            ControllerEpochZNode.encode(ControllerEpochZNode.INITIAL_CONTROLLER_EPOCH))
            except NodeExistsError:
                pass
            epoch_and_version = self.get_controller_epoch()
            if epoch_and_version is None:
                return None
        epoch, version = epoch_and_version
        new_epoch = epoch + 1

        def ops(t: Any) -> None:
            t.create(ControllerZNode.PATH, ControllerZNode.encode(broker_id), ephemeral=True)
            t.set_data(ControllerEpochZNode.PATH, ControllerEpochZNode.encode(new_epoch), version=version)

        results = self._multi_with_check(None, ops)
        error = self._first_error(results)
        if error is None:
            stat = results[1]
            log.info("Broker %d became controller with epoch %d", broker_id, new_epoch)
            return new_epoch, int(stat.version)
        if isinstance(error, NodeExistsError):
            # Our own create may have succeeded before a connection loss made us retry: then we own /controller.
            try:
                data, stat = self._retry(self._zk.get, ControllerZNode.PATH)
            except NoNodeError:
                return None
            if self._owned(stat) and ControllerZNode.decode(data) == broker_id:
                return self.get_controller_epoch()
            return None
        if isinstance(error, (BadVersionError, NoNodeError)):
            return None
        raise ZooKeeperClientError(f"Controller registration of broker {broker_id} failed: {error!r}")

    def register_controller(self, broker_id: int) -> int | None:
        """Try to become controller; the new controller epoch, or None when another broker is controller. The
        epoch's znode version (for fenced writes) is :meth:`get_controller_epoch`'s second value."""
        result = self.register_controller_and_increment_controller_epoch(broker_id)
        return None if result is None else result[0]

    def get_controller_id(self) -> int | None:
        """The controller's broker id, or None when there is none (Kafka's ``getControllerId``)."""
        data, _ = self.get_data_and_version(ControllerZNode.PATH)
        return None if data is None else ControllerZNode.decode(data)

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """``(controller epoch, its znode version)`` or None before any controller (Kafka's
        ``getControllerEpoch``)."""
        data, version = self.get_data_and_version(ControllerEpochZNode.PATH)
        return None if data is None else (ControllerEpochZNode.decode(data), version)

    def delete_controller(self, expected_controller_epoch_zk_version: int | None = None) -> None:
        """Resign: delete ``/controller`` (fenced by the epoch version when given) (Kafka's
        ``deleteController``)."""
        def ops(t: Any) -> None:
            t.delete(ControllerZNode.PATH)

        results = self._multi_with_check(expected_controller_epoch_zk_version, ops)
        error = self._first_error(results)
        if error is not None and not isinstance(error, NoNodeError):
            raise ZooKeeperClientError(f"Cannot delete {ControllerZNode.PATH}: {error!r}")

    # -------------------------------------------------------------------------------------------- topics

    def create_topic_assignment(self, topic: str, topic_id: uuid.UUID | None,
                                assignment: Mapping[int, ReplicaAssignment | Sequence[int]],
                                expected_controller_epoch_zk_version: int | None = None) -> int:
        """Create ``/brokers/topics/<topic>``; its version (0). :class:`ZkNodeExistsError` when the topic exists
        (Kafka's ``createTopicAssignment``)."""
        self.make_sure_persistent_path_exists(TopicsZNode.PATH)

        def ops(t: Any) -> None:
            t.create(TopicZNode.path(topic), TopicZNode.encode(topic_id, assignment))

        error = self._first_error(self._multi_with_check(expected_controller_epoch_zk_version, ops))
        if isinstance(error, NodeExistsError):
            raise ZkNodeExistsError(f"Topic '{topic}' already exists.")
        if error is not None:
            raise ZooKeeperClientError(f"Cannot create {TopicZNode.path(topic)}: {error!r}")
        return 0

    def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        """The topic's id, replica assignment and znode version, or None (Kafka's
        ``getReplicaAssignmentAndTopicIdForTopics``)."""
        data, version = self.get_data_and_version(TopicZNode.path(topic))
        if version == ZkVersion.UNKNOWN_VERSION:
            return None
        return TopicZNode.decode(topic, data, version)

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Many topics' assignments in one round of pipelined reads; missing topics are left out (Kafka's
        ``getReplicaAssignmentAndTopicIdForTopics``, what a new controller loads first)."""
        names = list(topics)
        pending = [(t, self._zk.get_async(TopicZNode.path(t))) for t in names]
        out: dict[str, TopicAssignment] = {}
        for topic, result in pending:
            try:
                data, stat = result.get(timeout=self.connection_timeout_ms / 1000)
            except NoNodeError:
                continue
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
                again = self.get_topic_assignment(topic)  # this one again, with the retry
                if again is not None:
                    out[topic] = again
                continue
            out[topic] = TopicZNode.decode(topic, data, stat.version)
        return out

    def set_topic_assignment(self, topic: str, topic_id: uuid.UUID | None,
                             assignment: Mapping[int, ReplicaAssignment | Sequence[int]],
                             expected_version: int = ZkVersion.MATCH_ANY_VERSION,
                             expected_controller_epoch_zk_version: int | None = None) -> int:
        """Overwrite ``/brokers/topics/<topic>`` if its version is ``expected_version``; the new version
        (Kafka's ``setTopicAssignment``). :class:`ZkVersionConflictError` / :class:`ZkNoNodeError` otherwise."""
        path = TopicZNode.path(topic)

        def ops(t: Any) -> None:
            t.set_data(path, TopicZNode.encode(topic_id, assignment), version=expected_version)

        results = self._multi_with_check(expected_controller_epoch_zk_version, ops)
        error = self._first_error(results)
        if isinstance(error, BadVersionError):
            raise ZkVersionConflictError(f"{path} is no longer at version {expected_version}")
        if isinstance(error, NoNodeError):
            raise ZkNoNodeError(f"Topic '{topic}' does not exist ({path})")
        if error is not None:
            raise ZooKeeperClientError(f"Cannot set {path}: {error!r}")
        return int(results[0].version)

    def get_all_topics(self) -> list[str]:
        """Every topic name, sorted (Kafka's ``getAllTopicsInCluster``)."""
        return self.get_children(TopicsZNode.PATH)

    def topic_exists(self, topic: str) -> bool:
        return self.path_exists(TopicZNode.path(topic))

    def get_topic_partitions(self, topic: str) -> list[int]:
        """Partition numbers that have a ``partitions/<p>`` znode, sorted (Kafka's ``getTopicPartitions``)."""
        return sorted(int(p) for p in self.get_children(TopicPartitionsZNode.path(topic)) if p.isdigit())

    def delete_topic_znode(self, topic: str, expected_controller_epoch_zk_version: int | None = None) -> None:
        """Delete ``/brokers/topics/<topic>`` and its partition states (the controller's last step of a topic
        deletion; Kafka's ``deleteTopicZNode``)."""
        topic_path = TopicZNode.path(topic)
        partitions_path = TopicPartitionsZNode.path(topic)
        partitions = self.get_children(partitions_path)
        states = {p: self.get_children(f"{partitions_path}/{p}") for p in partitions}

        def ops(t: Any) -> None:  # children first: one transaction removes the whole subtree
            for p, children in states.items():
                for child in children:
                    t.delete(f"{partitions_path}/{p}/{child}")
                t.delete(f"{partitions_path}/{p}")
            if partitions or self.path_exists(partitions_path):
                t.delete(partitions_path)
            t.delete(topic_path)

        error = self._first_error(self._multi_with_check(expected_controller_epoch_zk_version, ops))
        if isinstance(error, NoNodeError) and not self.path_exists(topic_path):
            return
        if error is not None:
            raise ZooKeeperClientError(f"Cannot delete {topic_path}: {error!r}")

    # ----------------------------------------------------------------------------------- partition state

    def create_partition_state(self, tp: TopicPartition, state: LeaderAndIsr,
                               expected_controller_epoch_zk_version: int | None = None) -> int:
        """Create ``.../partitions/<p>/state`` (and ``partitions/<p>``); its version (0). :class:`ZkNodeExistsError`
        when it exists (Kafka's ``createTopicPartitionStatesRaw``)."""
        self.make_sure_persistent_path_exists(TopicPartitionsZNode.path(tp.topic))
        partition_path = TopicPartitionStateZNode.path(tp).rsplit("/", 1)[0]
        try:
            self._retry(self._zk.create, partition_path, b"")
        except NodeExistsError:
            pass

        def ops(t: Any) -> None:
            t.create(TopicPartitionStateZNode.path(tp), TopicPartitionStateZNode.encode(state))

        error = self._first_error(self._multi_with_check(expected_controller_epoch_zk_version, ops))
        if isinstance(error, NodeExistsError):
            current = self.get_partition_state(tp)
            if current is not None and current.zk_version == 0 and _same_state(current, state):
                return 0  # our own create, retried after a connection loss
            raise ZkNodeExistsError(f"Partition state of {tp} already exists")
        if error is not None:
            raise ZooKeeperClientError(f"Cannot create {TopicPartitionStateZNode.path(tp)}: {error!r}")
        return 0

    def get_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Leader, leader epoch, ISR, controller epoch and zkVersion of one partition, or None (Kafka's
        ``getTopicPartitionState``)."""
        data, version = self.get_data_and_version(TopicPartitionStateZNode.path(tp))
        if not data:
            return None
        return TopicPartitionStateZNode.decode(tp, data, version)

    def get_partition_states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr]:
        """Many partition states in one round of pipelined reads; missing ones are left out (Kafka's
        ``getTopicPartitionStates``)."""
        tps = list(partitions)
        pending = [(tp, self._zk.get_async(TopicPartitionStateZNode.path(tp))) for tp in tps]
        out: dict[TopicPartition, LeaderAndIsr] = {}
        for tp, result in pending:
            try:
                data, stat = result.get(timeout=self.connection_timeout_ms / 1000)
            except NoNodeError:
                continue
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
                state = self.get_partition_state(tp)  # this one again, with the retry
                if state is not None:
                    out[tp] = state
                continue
            if data:
                out[tp] = TopicPartitionStateZNode.decode(tp, data, stat.version)
        return out

    def update_leader_and_isr(self, tp: TopicPartition, state: LeaderAndIsr, expected_zk_version: int,
                              expected_controller_epoch_zk_version: int | None = None) -> tuple[bool, int]:
        """Write ``state`` if the state znode is still at ``expected_zk_version``: ``(True, new_version)``, or
        ``(False, ZkVersion.UNKNOWN_VERSION)`` when someone else wrote it first (Kafka's
        ``conditionalUpdatePath`` with the partition-state checker: a retried write that had in fact been
        applied is recognised by the znode holding exactly ``state``)."""
        path = TopicPartitionStateZNode.path(tp)
        data = TopicPartitionStateZNode.encode(state)

        def ops(t: Any) -> None:
            t.set_data(path, data, version=expected_zk_version)

        results = self._multi_with_check(expected_controller_epoch_zk_version, ops)
        error = self._first_error(results)
        if error is None:
            return True, int(results[0].version)
        if isinstance(error, BadVersionError):
            current = self.get_partition_state(tp)
            if current is not None and _same_state(current, state):
                return True, current.zk_version
            return False, ZkVersion.UNKNOWN_VERSION
        if isinstance(error, NoNodeError):
            return False, ZkVersion.UNKNOWN_VERSION
        raise ZooKeeperClientError(f"Cannot update {path}: {error!r}")

    def _pipelined(self, items: Sequence[T], expected_controller_epoch_zk_version: int | None,
                   add_ops: Callable[[Any, T], None]) -> list[list[Any] | None]:
        """One transaction per item, all sent before any answer is awaited (one round trip for the lot instead of
        one each); an item whose transaction hit a connection problem gets None (the caller redoes it with the
        retrying single-item path). Check results are stripped; a failed check raises ControllerMovedError."""
        if self._closed:
            raise ZooKeeperClientError("The ZooKeeper client is closed")
        pending = []
        for item in items:
            t = self._zk.transaction()
            if expected_controller_epoch_zk_version is not None:
                t.check(ControllerEpochZNode.PATH, expected_controller_epoch_zk_version)
            add_ops(t, item)
            pending.append(t.commit_async())
        out: list[list[Any] | None] = []
        moved = False
        for result in pending:
            try:
                results = list(result.get(timeout=self.connection_timeout_ms / 1000))
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
                out.append(None)
                continue
            if expected_controller_epoch_zk_version is not None:
                if isinstance(results.pop(0), (BadVersionError, NoNodeError)):
                    moved = True
            out.append(results)
        if moved:
            raise ControllerMovedError(
                f"Controller moved to another broker: /controller_epoch is no longer at version "
                f"{expected_controller_epoch_zk_version}")
        return out

    def create_partition_states(self, states: Mapping[TopicPartition, LeaderAndIsr],
                                expected_controller_epoch_zk_version: int | None = None,
                                ) -> dict[TopicPartition, Exception | None]:
        """Create many partition state znodes in one pipelined round (Kafka's ``createTopicPartitionStatesRaw``
        for a new topic): ``None`` for each created one, else the error (:class:`ZkNodeExistsError`, ...)."""
        tps = list(states)
        for topic in {tp.topic for tp in tps}:
            self.make_sure_persistent_path_exists(TopicPartitionsZNode.path(topic))

        def add(t: Any, tp: TopicPartition) -> None:
            partition_path = TopicPartitionStateZNode.path(tp).rsplit("/", 1)[0]
            t.create(partition_path, b"")
            t.create(TopicPartitionStateZNode.path(tp), TopicPartitionStateZNode.encode(states[tp]))

        out: dict[TopicPartition, Exception | None] = {}
        for tp, results in zip(tps, self._pipelined(tps, expected_controller_epoch_zk_version, add), strict=True):
            error = None if results is None else self._first_error(results)
            if results is None or (isinstance(error, NodeExistsError) and not self.path_exists(
                    TopicPartitionStateZNode.path(tp))):
                try:  # redo on its own: the partition znode may exist without a state
                    self.create_partition_state(tp, states[tp], expected_controller_epoch_zk_version)
                    out[tp] = None
                except ZooKeeperClientError as e:
                    if isinstance(e, ControllerMovedError):
                        raise
                    out[tp] = e
            elif error is None:
                out[tp] = None
            elif isinstance(error, NodeExistsError):
                out[tp] = ZkNodeExistsError(f"Partition state of {tp} already exists")
            else:
                out[tp] = ZooKeeperClientError(f"Cannot create {TopicPartitionStateZNode.path(tp)}: {error!r}")
        return out

    def update_leader_and_isrs(self, states: Mapping[TopicPartition, LeaderAndIsr],
                               expected_controller_epoch_zk_version: int | None = None,
                               ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Conditionally write many partition states in one pipelined round; each state's ``zk_version`` is the
        version it expects to replace. Returns, per partition, the written state with its new ``zk_version``, or
        None when someone else wrote first (re-read and retry it) (Kafka's ``updateLeaderAndIsr``: finished
        partitions and partitions to retry). :class:`ControllerMovedError` when fenced."""
        tps = list(states)

        def add(t: Any, tp: TopicPartition) -> None:
            t.set_data(TopicPartitionStateZNode.path(tp), TopicPartitionStateZNode.encode(states[tp]),
                       version=states[tp].zk_version)

        out: dict[TopicPartition, LeaderAndIsr | None] = {}
        for tp, results in zip(tps, self._pipelined(tps, expected_controller_epoch_zk_version, add), strict=True):
            state = states[tp]
            if results is not None and self._first_error(results) is None:
                ok, version = True, int(results[0].version)
            elif results is not None and not isinstance(self._first_error(results), BadVersionError):
                ok, version = False, ZkVersion.UNKNOWN_VERSION
            else:  # connection trouble, or a conflict that may be our own earlier write: the careful path
                ok, version = self.update_leader_and_isr(tp, state, state.zk_version,
                                                         expected_controller_epoch_zk_version)
            out[tp] = LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                                   version) if ok else None
        return out

    def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> None:
        """Tell the controller a leader changed some ISRs (``/isr_change_notification/isr_change_<seq>``;
        Kafka's ``propagateIsrChanges``, the pre-AlterIsr path)."""
        self._retry(self._zk.create, IsrChangeNotificationSequenceZNode.CREATE_PATH,
                    IsrChangeNotificationSequenceZNode.encode(partitions), sequence=True, makepath=True)

    def propagate_log_dir_event(self, broker_id: int) -> None:
        """Tell the controller this broker lost a log dir (``/log_dir_event_notification/log_dir_event_<seq>``;
        Kafka's ``propagateLogDirEvent``)."""
        self._retry(self._zk.create, LogDirEventNotificationSequenceZNode.CREATE_PATH,
                    LogDirEventNotificationSequenceZNode.encode(broker_id), sequence=True, makepath=True)

    def get_and_delete_log_dir_event_notifications(self) -> list[int]:
        """The brokers named by the pending log dir event notifications, which are deleted (the controller's
        ``processLogDirEventNotification``); an unreadable notification is deleted and skipped."""
        brokers = []
        for name in sorted(self.get_children(LogDirEventNotificationZNode.PATH)):
            path = f"{LogDirEventNotificationZNode.PATH}/{name}"
            data, _ = self.get_data_and_version(path)
            if data is not None:
                try:
                    brokers.append(LogDirEventNotificationSequenceZNode.decode(data))
                except ZNodeDecodeError as e:
                    log.warning("ignoring log dir event notification %s: %s", path, e)
            self.delete_path(path)
        return brokers

    # ------------------------------------------------------------------------------------------- configs

    def get_entity_configs(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """An entity's dynamic config overrides, ``{}`` when none (Kafka's ``getEntityConfigs``)."""
        data, _ = self.get_data_and_version(ConfigEntityZNode.path(entity_type, entity_name))
        return ConfigEntityZNode.decode(data)

    def set_or_create_entity_configs(self, entity_type: str, entity_name: str, configs: Mapping[str, str]) -> None:
        """Write an entity's overrides, creating the znode when absent (Kafka's ``setOrCreateEntityConfigs``)."""
        path = ConfigEntityZNode.path(entity_type, entity_name)
        data = ConfigEntityZNode.encode(configs)
        try:
            self._retry(self._zk.set, path, data)
        except NoNodeError:
            try:
                self._retry(self._zk.create, path, data, makepath=True)
            except NodeExistsError:
                self._retry(self._zk.set, path, data)

    def get_all_entities_with_config(self, entity_type: str) -> list[str]:
        """Names with a ``/config/<type>/<name>`` znode (Kafka's ``getAllEntitiesWithConfig``)."""
        return self.get_children(ConfigEntityTypeZNode.path(entity_type))

    def create_config_change_notification(self, sanitized_entity_path: str) -> str:
        """Create ``/config/changes/config_change_<seq>`` naming ``topics/<t>``, ``brokers/<id>`` or
        ``users/<u>``; the created path (Kafka's ``createConfigChangeNotification``)."""
        return str(self._retry(self._zk.create, ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH,
                               ConfigEntityChangeNotificationSequenceZNode.encode(sanitized_entity_path),
                               sequence=True, makepath=True))

    def get_topic_config(self, topic: str) -> dict[str, str]:
        """A topic's config overrides (``/config/topics/<topic>``)."""
        return self.get_entity_configs(ConfigType.TOPIC, topic)

    def set_topic_config(self, topic: str, configs: Mapping[str, str], notify: bool = True) -> None:
        """Write a topic's overrides and, with ``notify``, the change notification every broker watches
        (Kafka's ``AdminZkClient.changeTopicConfig``)."""
        self.set_or_create_entity_configs(ConfigType.TOPIC, topic, configs)
        if notify:
            self.create_config_change_notification(f"{ConfigType.TOPIC}/{topic}")

    # ------------------------------------------------------------------------------------ admin requests

    def create_delete_topic_path(self, topic: str) -> None:
        """Mark a topic for deletion (``/admin/delete_topics/<topic>``; Kafka's ``createDeleteTopicPath``);
        marking it twice is fine."""
        try:
            self._retry(self._zk.create, DeleteTopicsTopicZNode.path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def get_topic_deletions(self) -> list[str]:
        """Topics marked for deletion (Kafka's ``getTopicDeletions``)."""
        return self.get_children(DeleteTopicsZNode.PATH)

    def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return self.path_exists(DeleteTopicsTopicZNode.path(topic))

    def delete_topic_deletions(self, topics: Iterable[str],
                               expected_controller_epoch_zk_version: int | None = None) -> None:
        """Remove deletion markers once the topics are gone (Kafka's ``deleteTopicDeletions``)."""
        for topic in topics:
            def ops(t: Any, topic: str = topic) -> None:
                t.delete(DeleteTopicsTopicZNode.path(topic))

            error = self._first_error(self._multi_with_check(expected_controller_epoch_zk_version, ops))
            if error is not None and not isinstance(error, NoNodeError):
                raise ZooKeeperClientError(f"Cannot delete {DeleteTopicsTopicZNode.path(topic)}: {error!r}")

    def get_partition_reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """The legacy ``/admin/reassign_partitions`` request, ``{}`` when none (Kafka's
        ``getPartitionReassignment``)."""
        data, _ = self.get_data_and_version(ReassignPartitionsZNode.PATH)
        return ReassignPartitionsZNode.decode(data) if data else {}

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        """Partitions in ``/admin/preferred_replica_election`` (Kafka's ``getPreferredReplicaElection``)."""
        data, _ = self.get_data_and_version(PreferredReplicaElectionZNode.PATH)
        return PreferredReplicaElectionZNode.decode(data) if data else set()

    def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        """Ask for a preferred-leader election; :class:`ZkNodeExistsError` while one is in progress (Kafka's
        ``createPreferredReplicaElection``)."""
        try:
            self._retry(self._zk.create, PreferredReplicaElectionZNode.PATH,
                        PreferredReplicaElectionZNode.encode(partitions), makepath=True)
        except NodeExistsError:
            raise ZkNodeExistsError("A preferred replica election is already in progress") from None

    # --------------------------------------------------------------------------- cluster id, producer ids

    def get_cluster_id(self) -> str | None:
        data, _ = self.get_data_and_version(ClusterIdZNode.PATH)
        return None if data is None else ClusterIdZNode.decode(data)

    def get_or_create_cluster_id(self, proposed_cluster_id: str | None = None) -> str:
        """The cluster id, created from ``proposed_cluster_id`` (default: a new random Kafka uuid) when the
        cluster has none yet (Kafka's ``getOrGenerateClusterId``); concurrent brokers agree on one."""
        existing = self.get_cluster_id()
        if existing is not None:
            return existing
        proposed = proposed_cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self._retry(self._zk.create, ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed), makepath=True)
            return proposed
        except NodeExistsError:
            cluster_id = self.get_cluster_id()
            if cluster_id is None:
                raise ZooKeeperClientError("The cluster id znode vanished while it was being created") from None
            return cluster_id

    def allocate_producer_id_block(self, broker_id: int,
                                   size: int = ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE) -> ProducerIdsBlock:
        """Claim the next block of ``size`` producer ids for ``broker_id`` with a compare-and-set on
        ``/latest_producer_id_block``, retrying when another broker wins the race, so no two brokers ever get
        overlapping ids (Kafka's ``ZkProducerIdManager.getNewProducerIdBlock``). Broker ids are unique in a
        cluster (the registration enforces it), so block owners never collide."""
        if size <= 0:
            raise ValueError(f"Producer id block size must be positive, got {size}")
        self.make_sure_persistent_path_exists(ProducerIdBlockZNode.PATH)
        # One allocation at a time per client: the read-back below tells "our write landed before a connection
        # loss" from "another writer won" by the bytes, and two threads of one broker would write equal bytes.
        with self._producer_id_lock:
            return self._allocate_producer_id_block(broker_id, size)

    def _allocate_producer_id_block(self, broker_id: int, size: int) -> ProducerIdsBlock:
        while True:
            data, version = self.get_data_and_version(ProducerIdBlockZNode.PATH)
            if data:
                current = ProducerIdBlockZNode.decode(data)
                if current.last_producer_id > _LONG_MAX - size:
                    raise ProducerIdsExhaustedError("Have exhausted all producerIds.")
                block = ProducerIdsBlock(broker_id, current.next_block_first_id, size)
            else:
                block = ProducerIdsBlock(broker_id, 0, size)
            encoded = ProducerIdBlockZNode.encode(block)
            try:
                self._retry(self._zk.set, ProducerIdBlockZNode.PATH, encoded, version=version)
                return block
            except BadVersionError:
                # Lost the race, or our own write landed before a connection loss: tell the two apart.
                now, _ = self.get_data_and_version(ProducerIdBlockZNode.PATH)
                if now == encoded:
                    return block
            except NoNodeError:
                self.make_sure_persistent_path_exists(ProducerIdBlockZNode.PATH)

    # ------------------------------------------------------------------------------ watches and sessions

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(sorted children)`` now and after every change of ``path``'s children, across
        reconnects and new sessions (kazoo's ``ChildrenWatch``; Kafka's ``ZNodeChildChangeHandler``). The path
        is created when missing. Runs on kazoo's callback thread: marshal to your own."""
        handle = WatchHandle(path)
        self.make_sure_persistent_path_exists(path)

        def on_children(children: list[str]) -> bool | None:
            if handle.cancelled or self._closed:
                return False
            try:
                callback(sorted(children))
            except Exception:
                log.exception("Children watch callback for %s failed", path)
            return None

        ChildrenWatch(self._zk, path, on_children)
        return handle

    def watch_data(self, path: str, callback: Callable[[bytes | None, int], None]) -> WatchHandle:
        """Call ``callback(data, version)`` now and whenever ``path`` is created, changed or deleted
        (``(None, ZkVersion.UNKNOWN_VERSION)`` while it does not exist) (kazoo's ``DataWatch``; Kafka's
        ``ZNodeChangeHandler``). Runs on kazoo's callback thread: marshal to your own."""
        handle = WatchHandle(path)

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if handle.cancelled or self._closed:
                return False
            try:
                callback(data if stat is not None else None,
                         int(stat.version) if stat is not None else ZkVersion.UNKNOWN_VERSION)
            except Exception:
                log.exception("Data watch callback for %s failed", path)
            return None

        DataWatch(self._zk, path, on_data)
        return handle

    def add_session_state_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(ZkSessionState.X)`` on every connection state change (on kazoo's thread; quick)."""
        with self._lock:
            self._listeners.append(listener)

    def register_state_change_handler(self, name: str, after_initializing_session: Callable[[], None],
                                      before_initializing_session: Callable[[], None] | None = None) -> None:
        """After a session expired and a new one is established, run ``before_initializing_session`` then
        ``after_initializing_session`` on a fresh thread (re-register the broker, re-elect the controller);
        replaces a handler of the same name (Kafka's ``registerStateChangeHandler``)."""
        with self._lock:
            self._handlers[name] = _StateChangeHandler(name, after_initializing_session, before_initializing_session)

    def unregister_state_change_handler(self, name: str) -> None:
        with self._lock:
            self._handlers.pop(name, None)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: no blocking calls here.
        with self._lock:
            listeners = list(self._listeners)
            if state == KazooState.LOST:
                self._session_lost = True
            reinit = state == KazooState.CONNECTED and self._session_lost and not self._closed
            if reinit:
                self._session_lost = False
            handlers = list(self._handlers.values()) if reinit else []
        for listener in listeners:
            try:
                listener(str(state))
            except Exception:
                log.exception("ZooKeeper session listener failed")
        if reinit:
            log.info("New ZooKeeper session 0x%x established after an expiry", self.session_id)
            threading.Thread(target=self._reinitialize, args=(handlers,), name="zk-session-reinit",
                             daemon=True).start()

    def _reinitialize(self, handlers: list[_StateChangeHandler]) -> None:
        for h in handlers:
            if h.before_initializing_session is not None:
                try:
                    h.before_initializing_session()
                except Exception:
                    log.exception("State change handler %s (before session init) failed", h.name)
        for h in handlers:
            try:
                h.after_initializing_session()
            except Exception:
                log.exception("State change handler %s (after session init) failed", h.name)
